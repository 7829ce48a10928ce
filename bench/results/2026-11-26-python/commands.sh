#!/usr/bin/env bash
# The device runs of this folder (`commands.sh train` made h100/, `commands.sh oversub`
# h100-oversub/), from the repository root on a GPU machine without Rust, after
# `pip wheel --no-deps ./python -w wheels` on a machine with it (the wheel carries the native
# library). Each step's output goes to results/NAME.log (the command line first), its JSON
# beside it, and each step's exit status to results/status.txt.
set -o pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib
X=results; mkdir -p $X
nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv > $X/card.csv
python3 -m pip install --no-deps --no-index --target /tmp/site wheels/alignmalloc-*.whl; echo "install rc=$?" >> $X/status.txt
export PYTHONPATH=/tmp/site
# The baseline: a pluggable allocator calling cudaMallocManaged and cudaFree per tensor.
cc -shared -fPIC -O2 python/bench/plain_managed.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart -o python/bench/plain_managed.so; echo "cc rc=$?" >> $X/status.txt
case "$1" in
train)
(echo '$ python3 -m pytest -q -rs python/tests'; timeout 200 python3 -m pytest -q -rs python/tests) > $X/pytest.log 2>&1; echo "pytest rc=$?" >> $X/status.txt
# Three rounds, the allocators in turn (one process each: PyTorch takes one allocator per process).
for i in 1 2 3; do for a in torch alignmalloc managed; do
  (echo "\$ python3 python/bench/train.py --allocator $a --json train-$a-$i.json"; timeout 120 python3 python/bench/train.py --allocator $a --json $X/train-$a-$i.json) > $X/train-$a-$i.log 2>&1; echo "train $a $i rc=$?" >> $X/status.txt
done; done
;;
oversub)
# A 99 GiB tensor on the 80 GB card (1.25x), in 125 GiB of host memory.
free -g > $X/host-memory.txt
run() { local name=$1; shift; (echo "\$ python3 python/bench/oversub.py $* --json $name.json"; timeout 150 python3 python/bench/oversub.py "$@" --json $X/$name.json) > $X/$name.log 2>&1; echo "$name rc=$?" >> $X/status.txt; }
run managed --allocator managed --gib 99
run alignmalloc --allocator alignmalloc --gib 99
run alignmalloc-prefetch --allocator alignmalloc --gib 99 --prefetch
;;
*) echo "usage: $0 train|oversub" >&2; exit 2 ;;
esac
