#!/usr/bin/env bash
# Build the wrap test programs with nvcc's defaults (static CUDA runtime; small_allocs also with
# -cudart shared) and run each REPEATS times (default 3) plain, wrapped without counters
# (`wrapped-nc`: the timing comparison) and wrapped with CUPTI's counters (`wrapped`: the
# report), plus once with --no-pool (allocations left with the driver: CUPTI's count of the
# unwrapped program). Result lines must match the plain run's; `time` lines go to summary.tsv.
# With HOLDER=path/to/cupti-holder.so (and CUPTI_HOLDER_LIB), one more wrapped run of
# small_allocs while that stand-in profiler holds CUPTI (`held`).
#   bash wrap/programs/run.sh OUT_DIR [ALIGNMALLOC]
set -euo pipefail
out="$1"
am="${2:-target/release/alignmalloc}"
here="$(dirname "$0")"
repeats="${REPEATS:-3}"
mkdir -p "$out/bin"
for p in small_allocs host_then_gpu linked_lists pipeline prefetch_advise beyond_arena host_threads; do
  nvcc -O2 -std=c++17 -arch=native "$here/$p.cu" -o "$out/bin/$p"
done
nvcc -O2 -std=c++17 -arch=native -cudart shared "$here/small_allocs.cu" -o "$out/bin/small_allocs_shared"
printf 'program\tmode\trun\tresult_same\t%s\n' "times" > "$out/summary.tsv"
run_one() { # name mode run wrap-args...
  local name="$1" mode="$2" run="$3"; shift 3
  local bin="$out/bin/${name}" log="$out/$name.$mode.$run"
  if [ "$mode" = plain ]; then
    "$bin" > "$log.out" 2> "$log.err"
  else
    "$am" wrap --report "$log.json" "$@" -- "$bin" > "$log.out" 2> "$log.err"
  fi
  grep -v '^time' "$log.out" > "$log.result" || true
  local same=yes
  cmp -s "$log.result" "$out/$name.plain.1.result" || same=no
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$mode" "$run" "$same" "$(grep '^time' "$log.out" | cut -d' ' -f2- || true)" >> "$out/summary.tsv"
}
for name in small_allocs small_allocs_shared host_then_gpu linked_lists pipeline prefetch_advise beyond_arena host_threads; do
  extra=()
  [ "$name" = beyond_arena ] && extra=(--max-arena-bytes 512M)
  for r in $(seq 1 "$repeats"); do run_one "$name" plain "$r"; done
  for r in $(seq 1 "$repeats"); do run_one "$name" wrapped-nc "$r" --no-counters "${extra[@]}"; done
  for r in $(seq 1 "$repeats"); do run_one "$name" wrapped "$r" "${extra[@]}"; done
  run_one "$name" no-pool 1 --no-pool
done
if [ -n "${HOLDER:-}" ]; then
  CUDA_INJECTION64_PATH="$HOLDER" run_one small_allocs held 1
fi
cat "$out/summary.tsv"
