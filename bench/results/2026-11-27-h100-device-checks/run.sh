#!/bin/bash
# The device checks of the current build, one call: selftest, mailbox stress, layout parity, the
# default soak, a walk, the CUDA examples and the C ABI's GPU programs. Expects target/diag/am
# (`cargo build --release -p bench`, stripped) and target/diag/prefix
# (`bash runtime/capi/install.sh --prefix target/diag/prefix --prebuilt target/release`); writes
# to $OUT/r. Each step's exit status goes to status.txt.
set -o pipefail
R=$OUT/r; mkdir -p $R
A=target/diag/am; P=$PWD/target/diag/prefix
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/card.csv
step() { local name=$1; shift; "$@" > $R/$name.log 2>&1; echo "$name rc=$?" | tee -a $R/status.txt; }
step selftest $A selftest --json $R/selftest.json
step mailbox-stress $A mailbox-stress
step layout-parity $A layout-parity --json $R/layout-parity.json
step soak $A soak --json $R/soak.json
step walk $A walk --rmat 20 --verify --json $R/walk.json
for ex in minimal divergent growing_lists plain_container several_devices; do
  nvcc -arch=native -std=c++17 device/examples/$ex.cu -I$P/include -L$P/lib -lalignmalloc -Xlinker -rpath=$P/lib -o /tmp/$ex > $R/build-$ex.log 2>&1 || { echo "$ex build failed" | tee -a $R/status.txt; continue; }
  echo "== $ex" >> $R/examples.log
  /tmp/$ex >> $R/examples.log 2>&1; echo "$ex rc=$?" | tee -a $R/status.txt
done
for prog in bind_race second_frees; do
  nvcc -arch=native -std=c++17 runtime/capi/tests/$prog.cu -I$P/include -L$P/lib -lalignmalloc -Xlinker -rpath=$P/lib -o /tmp/$prog > $R/build-$prog.log 2>&1 || echo "$prog build failed" | tee -a $R/status.txt
done
step bind_race /tmp/bind_race 8 25 50
step second_frees /tmp/second_frees 65536 16
tail -n 4 $R/selftest.log $R/mailbox-stress.log $R/layout-parity.log $R/soak.log $R/walk.log
