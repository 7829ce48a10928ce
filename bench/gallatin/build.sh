#!/usr/bin/env bash
# Builds the Gallatin system of `alignmalloc alloc` (bench/gallatin/harness.cu) against a checkout
# of Gallatin (github.com/saltsystemslab/gallatin, BSD-3-Clause), which this repository does not
# contain: clone it anywhere (the ignored folder .gallatin/ is meant for it) and name it in
# GALLATIN_DIR. Writes target/gallatin/libalignmalloc_gallatin.so, where `alignmalloc alloc`
# looks for it (ALIGNMALLOC_GALLATIN_LIB names another place).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${GALLATIN_DIR:?set GALLATIN_DIR to a checkout of Gallatin (its include/ folder is used)}"
if [ ! -e "$GALLATIN_DIR/include/gallatin/allocators/global_allocator.cuh" ]; then
  echo "GALLATIN_DIR=$GALLATIN_DIR has no include/gallatin/allocators/global_allocator.cuh" >&2
  exit 1
fi
nvcc="${NVCC:-nvcc}"
mkdir -p target/gallatin
"$nvcc" -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -w \
  -I"$GALLATIN_DIR/include" -I device/kernels bench/gallatin/harness.cu -o target/gallatin/libalignmalloc_gallatin.so
echo "built target/gallatin/libalignmalloc_gallatin.so"
