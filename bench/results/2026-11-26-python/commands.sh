#!/usr/bin/env bash
# The device runs of this folder (`commands.sh train` made h100/, `commands.sh oversub` and
# `commands.sh chain` h100-oversub/), from the repository root on a GPU machine without Rust, after
# `pip wheel --no-deps ./python -w wheels` on a machine with it (the wheel carries the native
# library). Each step's output goes to results/NAME.log (the command line first, then its JSON
# line; train's JSON also beside it), and each step's exit status to results/status.txt.
set -o pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib
X=results; mkdir -p $X
nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv > $X/card.csv
rm -rf /tmp/site; python3 -m pip install --no-deps --no-index --target /tmp/site wheels/alignmalloc-*.whl; echo "install rc=$?" >> $X/status.txt
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
oversub|chain)
# Data of 99 GiB on the 80 GB card (1.25x), in 125 GiB of host memory. Each run's log holds its
# command line, its JSON line and (alignmalloc) the report at exit.
free -g > $X/host-memory.txt
run() { local name=$1; shift; (echo "\$ python3 python/bench/oversub.py $*"; timeout 400 python3 python/bench/oversub.py "$@") > $X/$name.log 2>&1; echo "$name rc=$?" >> $X/status.txt; }
if [ "$1" = oversub ]; then
  (echo '$ python3 python/bench/link.py'; python3 python/bench/link.py) > $X/link.log 2>&1; echo "link rc=$?" >> $X/status.txt
  for i in 1 2; do
    run fill-sum-managed-$i --allocator managed --workload fill-sum
    run fill-sum-tiered-$i --allocator alignmalloc --workload fill-sum
  done
  run fill-sum-tiered-uncounted --allocator alignmalloc --workload fill-sum --no-counters
  run fill-sum-migrate --allocator alignmalloc --workload fill-sum --placement migrate
else
  run chain-managed --allocator managed --workload chain
  run chain-tiered --allocator alignmalloc --workload chain
  run chain-tiered-uncounted --allocator alignmalloc --workload chain --no-counters
  run chain-tiered-features-first --allocator alignmalloc --workload chain --layout features-first
fi
;;
*) echo "usage: $0 train|oversub|chain" >&2; exit 2 ;;
esac
