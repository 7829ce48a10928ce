#!/usr/bin/env bash
# Issue-34 item 11 on the GPU: the soak sized from the card (default command), the old 16 GiB
# cache bound refused where it is over half the arena, before/after the placement change at one
# 8 GiB bound, the seeds and shapes that misjudged second frees, selftest quiet. Writes r.tgz to $OUT.
set -o pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
R=/tmp/r; mkdir -p $R; AM=target/release/alignmalloc; BEFORE=target/before/alignmalloc
nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv | tee $R/gpu.txt
echo "== the issue's command: a 16 GiB cache bound" | tee -a $R/refused.log
ALIGNMALLOC_DEVICE_CACHE_BYTES=17179869184 $AM soak --objects 200000000 2>&1 | tail -3 | tee -a $R/refused.log
echo "== soak, default command (caches sized from the arena)"
timeout 240 $AM soak --json $R/soak-default.json > $R/soak-default.log 2>&1; echo "rc=$?" >> $R/soak-default.log; tail -5 $R/soak-default.log
for w in before after; do bin=$AM; [ $w = before ] && bin=$BEFORE
  ALIGNMALLOC_DEVICE_CACHE_BYTES=8589934592 timeout 90 $bin soak --objects 200000000 --json $R/soak-8g-$w.json > $R/soak-8g-$w.log 2>&1; echo "rc=$?" >> $R/soak-8g-$w.log; tail -3 $R/soak-8g-$w.log
done
timeout 70 $AM soak --objects 200000000 --seed 4242 --json $R/soak-seed4242.json > $R/soak-seed4242.log 2>&1; echo "rc=$?" >> $R/soak-seed4242.log; tail -3 $R/soak-seed4242.log
timeout 70 $AM soak --objects 200000000 --threads 32768 --slots 3 --json $R/soak-32768x3.json > $R/soak-32768x3.log 2>&1; echo "rc=$?" >> $R/soak-32768x3.log; tail -3 $R/soak-32768x3.log
timeout 60 $AM selftest --json $R/selftest.json > $R/selftest.log 2> $R/selftest.err; echo "rc=$? WARN=$(grep -c WARN $R/selftest.err) ESC=$(grep -c $'\x1b' $R/selftest.err)" | tee -a $R/selftest.log
tar czf $OUT/r.tgz -C $R .
