#!/bin/bash
# The device checks of the current build, one call: selftest, mailbox stress, the default soak,
# the default soak under compute-sanitizer's synccheck, the small objects beside Gallatin, the CUDA
# examples, the C ABI's second frees and bind race, a verified walk and the layout's parity with
# the translator. Expects target/diag/am (`cargo build --release -p bench`, stripped),
# target/diag/prefix (`bash runtime/capi/install.sh --prefix target/diag/prefix --prebuilt
# target/release` after `cargo build --release -p alignmalloc-capi`) and Gallatin's harness in
# target/gallatin (bench/gallatin/build.sh), and the CUDA toolkit's compute-sanitizer; writes to
# $OUT/r. Each step's exit status and seconds go to status.txt.
set -o pipefail
R=$OUT/r; mkdir -p $R
A=target/diag/am; P=$PWD/target/diag/prefix
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib
export PATH=$PATH:/usr/local/cuda/bin
export ALIGNMALLOC_GALLATIN_LIB=$PWD/target/gallatin/libalignmalloc_gallatin.so
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $R/card.csv
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s); timeout $limit "$@" > $R/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s) - t0 ))s" | tee -a $R/status.txt; }
# The nvcc builds run while the GPU steps do.
( for ex in divergent growing_lists plain_container; do
    nvcc -arch=native -std=c++17 device/examples/$ex.cu -I$P/include -L$P/lib -lalignmalloc -Xlinker -rpath=$P/lib -o /tmp/$ex > $R/build-$ex.log 2>&1 &
  done
  for t in runtime/capi/tests/second_frees runtime/capi/tests/bind_race device/examples/minimal; do
    name=$(basename $t)
    nvcc -arch=native -std=c++17 $t.cu -I$P/include -L$P/lib -lalignmalloc -Xlinker -rpath=$P/lib -o /tmp/$name > $R/build-$name.log 2>&1 &
  done
  wait ) &
BUILDS=$!
step selftest 90 $A selftest --json $R/selftest.json
step mailbox-stress 60 $A mailbox-stress
step soak 150 $A soak --json $R/soak.json
step soak-synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 1 --print-limit 40 $A soak
step alloc 150 $A -v alloc --tests floor,singular,random,scaling,mixed --systems alignmalloc,gallatin --repeats 5 --json $R/alloc.json
wait $BUILDS
for ex in minimal divergent growing_lists plain_container; do
  echo "== $ex" >> $R/examples.log
  step $ex 60 bash -c "/tmp/$ex >> $R/examples.log 2>&1"
done
step second_frees 60 /tmp/second_frees 65536 16
step bind_race 60 /tmp/bind_race 8 25 50
step walk 90 $A walk --rmat 20 --verify --json $R/walk.json
step layout-parity 60 $A layout-parity --json $R/layout-parity.json
cat $R/status.txt
