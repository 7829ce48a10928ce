#!/usr/bin/env bash
# The soak before and after the mixed-size placement, at the caches' largest bound on an 80 GB
# card's default arena (half of it) and with a half-of-free arena and a 16 GiB bound: 5e7
# objects each, reports in r.tgz ($OUT). AM / BEFORE name the two builds.
set -o pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
R=/tmp/r; mkdir -p $R; AM=${AM:-target/release/alignmalloc}; BEFORE=${BEFORE:-target/before/alignmalloc}
nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv | tee $R/gpu.txt
run() { # name, env..., then binary
  local name=$1; shift
  env "$@" soak -v --objects 50000000 --json $R/$name.json > $R/$name.log 2>&1; echo "rc=$?" >> $R/$name.log
  grep -a "soak on\|device caches  \|host requests\|alloc_failures\|rc=" $R/$name.log | sed "s/^/$name: /"
}
for w in before after; do bin=$AM; [ $w = before ] && bin=$BEFORE
  run half-$w ALIGNMALLOC_DEVICE_CACHE_BYTES=10558111744 timeout 100 $bin
done
for w in before after; do bin=$AM; [ $w = before ] && bin=$BEFORE
  run bigarena-$w ALIGNMALLOC_ARENA_FRACTION=0.5 ALIGNMALLOC_DEVICE_CACHE_BYTES=17179869184 timeout 100 $bin
done
tar czf $OUT/r.tgz -C $R .
