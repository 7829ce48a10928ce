#!/bin/bash
# The device checks after the shared records became one definition: selftest, mailbox stress,
# layout parity, the CUDA examples and the C ABI's GPU programs.
set -o pipefail
R=$OUT/r; mkdir -p $R
A=target/diag/am; P=$PWD/target/diag/prefix
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/card.csv
$A selftest --json $R/selftest.json > $R/selftest.log 2>&1; echo "selftest rc=$?" | tee -a $R/status.txt
$A mailbox-stress > $R/mailbox-stress.log 2>&1; echo "mailbox-stress rc=$?" | tee -a $R/status.txt
$A layout-parity --json $R/layout-parity.json > $R/layout-parity.log 2>&1; echo "layout-parity rc=$?" | tee -a $R/status.txt
for ex in minimal divergent growing_lists plain_container several_devices; do
  nvcc -arch=native -std=c++17 device/examples/$ex.cu -I$P/include -L$P/lib -lalignmalloc -Xlinker -rpath=$P/lib -o /tmp/$ex > $R/build-$ex.log 2>&1 || { echo "$ex build failed" | tee -a $R/status.txt; continue; }
  echo "== $ex" >> $R/examples.log
  /tmp/$ex >> $R/examples.log 2>&1; echo "$ex rc=$?" | tee -a $R/status.txt
done
for prog in bind_race second_frees; do
  nvcc -arch=native -std=c++17 runtime/capi/tests/$prog.cu -I$P/include -L$P/lib -lalignmalloc -Xlinker -rpath=$P/lib -o /tmp/$prog > $R/build-$prog.log 2>&1 || { echo "$prog build failed" | tee -a $R/status.txt; continue; }
done
/tmp/bind_race 8 25 50 > $R/bind_race.log 2>&1; echo "bind_race rc=$?" | tee -a $R/status.txt
/tmp/second_frees 65536 16 > $R/second_frees.log 2>&1; echo "second_frees rc=$?" | tee -a $R/status.txt
tail -3 $R/selftest.log $R/mailbox-stress.log $R/layout-parity.log
