#!/usr/bin/env bash
# The device runs of this folder: `commands.sh rmat20`, `commands.sh rmat22` (its last step is an
# R-MAT 20 run with a hot-object threshold), `commands.sh rmat24`, `commands.sh access` and
# `commands.sh alloc` and `commands.sh check` (the final build), each one call, from the
# repository root after `cargo build --release -p bench`. Each step's output goes to results/NAME.log
# (the command line first), its JSON beside it, and its exit status and seconds to
# results/status.txt (rc=124: stopped by its time limit).
set -o pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib
X=results; mkdir -p $X
nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv > $X/card.csv
step() { local name=$1; shift; local t0=$(date +%s); echo "\$ $*" > $X/$name.log; timeout ${TMO:-120} "$@" >> $X/$name.log 2>&1; local rc=$?; echo "$name rc=$rc $(( $(date +%s)-t0 ))s" | tee -a $X/status.txt; return $rc; }
N=target/release/alignmalloc
B=managed-csr-host-mapped,managed-csr-prefetch-fit
case "$1" in
rmat20)
TMO=60 step rmat20-whole $N -v walk --rmat 20 --repeats 3 --json $X/rmat20-whole.json
for m in 2x:0.084 1.5x:0.11; do x=${m%%:*}; g=${m##*:}
TMO=60 step rmat20-$x-tiered $N -v walk --rmat 20 --repeats 3 --gpu-memory-gib $g --placement tiered --systems alignmalloc,$B --json $X/rmat20-$x-tiered.json
TMO=60 step rmat20-$x-host-mapped $N -v walk --rmat 20 --repeats 3 --gpu-memory-gib $g --placement host-mapped --systems alignmalloc --json $X/rmat20-$x-host-mapped.json
done
TMO=100 step rmat20-2x-read-mostly $N -v walk --rmat 20 --repeats 1 --gpu-memory-gib 0.084 --systems managed-csr-read-mostly --json $X/rmat20-2x-read-mostly.json
TMO=100 step rmat20-2x-managed $N -v walk --rmat 20 --repeats 1 --gpu-memory-gib 0.084 --systems managed-csr --json $X/rmat20-2x-managed.json
;;
rmat22)
TMO=120 step rmat22-2x-tiered $N -v walk --rmat 22 --repeats 3 --gpu-memory-gib 0.33 --placement tiered --systems alignmalloc,$B --json $X/rmat22-2x-tiered.json
TMO=120 step rmat22-1.5x-tiered $N -v walk --rmat 22 --repeats 3 --gpu-memory-gib 0.44 --placement tiered --systems alignmalloc,$B --json $X/rmat22-1.5x-tiered.json
TMO=90 step rmat22-2x-host-mapped $N -v walk --rmat 22 --repeats 3 --gpu-memory-gib 0.33 --placement host-mapped --systems alignmalloc --json $X/rmat22-2x-host-mapped.json
TMO=45 step rmat20-2x-tiered-hot1k $N -v walk --rmat 20 --repeats 3 --gpu-memory-gib 0.084 --placement tiered --hot-object-bytes 1024 --systems alignmalloc,managed-csr-prefetch-fit --json $X/rmat20-2x-tiered-hot1k.json
;;
rmat24)
TMO=540 step rmat24-2x-tiered $N -v walk --rmat 24 --repeats 3 --gpu-memory-gib 1.4 --placement tiered --systems alignmalloc,$B --json $X/rmat24-2x-tiered.json
;;
alloc)
TMO=120 step alloc-scaling-whole $N -v alloc --tests scaling --repeats 1 --json $X/alloc-scaling-whole.json
TMO=120 step alloc-scaling-2x-migrate $N -v alloc --tests scaling --repeats 1 --gpu-memory-gib 1 --json $X/alloc-scaling-2x-migrate.json
TMO=120 step alloc-scaling-2x-tiered $N -v alloc --tests scaling --repeats 1 --gpu-memory-gib 1 --placement tiered --json $X/alloc-scaling-2x-tiered.json
;;
check)
TMO=60 step rmat20-2x-tiered $N -v walk --rmat 20 --repeats 3 --gpu-memory-gib 0.084 --placement tiered --systems alignmalloc,managed-csr-prefetch-fit --json $X/rmat20-2x-tiered.json
TMO=120 step access-small-2x-tiered $N -v access --random-kib 1024 --large-kib 8192 --repeats 1 --gpu-memory-gib 0.5 --placement tiered --json $X/access-small-2x-tiered.json
TMO=60 step access-small-whole $N -v access --random-kib 64 --large-kib 1024 --repeats 1 --json $X/access-small-whole.json
;;
access)
TMO=200 step access-2x-migrate $N -v access --random-kib 2048 --large-kib 16384 --repeats 2 --gpu-memory-gib 1 --json $X/access-2x-migrate.json
TMO=150 step access-2x-tiered $N -v access --random-kib 2048 --large-kib 16384 --repeats 2 --gpu-memory-gib 1 --placement tiered --json $X/access-2x-tiered.json
;;
*) echo "usage: $0 rmat20|rmat22|rmat24|access|alloc|check" >&2; exit 2 ;;
esac
