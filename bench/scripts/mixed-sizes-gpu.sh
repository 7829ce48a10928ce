#!/usr/bin/env bash
# The GPU evidence of mixed-size placement, one part per call (each well inside ten minutes):
#   bash bench/scripts/mixed-sizes-gpu.sh alloc OUT   # Gallatin harness, mixed test before/after, alloc tests
#   bash bench/scripts/mixed-sizes-gpu.sh checks OUT  # selftest, parity, stress, mixed test, walks, soak before/after
#   bash bench/scripts/mixed-sizes-gpu.sh final OUT   # every alloc test with Gallatin, soak after/before again
# Expects target/release/alignmalloc (this build), target/before/alignmalloc (the same build with
# the earlier placement: every request 32 x its largest lane) and a Gallatin checkout in .gallatin/.
# Every command's output goes to OUT/<step>.log and its JSON to OUT/<step>.json; a failing
# command is recorded (exit code in OUT/status) and the script goes on.
set -uo pipefail
part="$1"
out="$2"
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="/usr/local/cuda/bin:$PATH"
am="${AM:-target/release/alignmalloc}"
before="${BEFORE:-target/before/alignmalloc}"
step() {
  local name="$1" limit="$2"
  shift 2
  echo "== $name: $*" | tee -a "$out/status"
  local started=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "   $name: exit $rc in $((SECONDS - started)) s" | tee -a "$out/status"
  tail -n 12 "$out/$name.log"
}
nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv | tee "$out/card.csv"
case "$part" in
  alloc)
    step gallatin-build 300 env GALLATIN_DIR=.gallatin bash bench/gallatin/build.sh
    step mixed-8-before 200 "$before" alloc --tests mixed --arena-gib 8 --repeats 3 --json "$out/mixed-8-before.json"
    step mixed-8 200 "$am" alloc --tests mixed --arena-gib 8 --repeats 3 --json "$out/mixed-8.json"
    step mixed-default-before 200 "$before" alloc --tests mixed --repeats 3 --json "$out/mixed-default-before.json"
    step mixed-default 200 "$am" alloc --tests mixed --repeats 3 --json "$out/mixed-default.json"
    step alloc 300 "$am" alloc --tests floor,singular,random,scaling --repeats 5 --json "$out/alloc.json"
    ;;
  checks)
    step selftest 120 "$am" selftest --json "$out/selftest.json"
    step layout-parity 120 "$am" layout-parity
    step mailbox-stress 120 "$am" mailbox-stress --threads 16384 --rounds 64 --seed 7 --json "$out/mailbox-stress.json"
    step mixed-8 120 "$am" alloc --tests mixed --arena-gib 8 --repeats 3 --json "$out/mixed-8.json"
    step mixed-default 120 "$am" alloc --tests mixed --repeats 3 --json "$out/mixed-default.json"
    step walk-vertex 120 "$am" walk --rmat 20 --order vertex --json "$out/walk-vertex.json"
    step walk-degree 120 "$am" walk --rmat 20 --order degree --json "$out/walk-degree.json"
    step soak-before 150 "$before" soak --objects 30000000 --json "$out/soak-before.json"
    step soak 150 "$am" soak --objects 30000000 --json "$out/soak.json"
    ;;
  final)
    step gallatin-build 300 env GALLATIN_DIR=.gallatin bash bench/gallatin/build.sh
    step alloc 300 "$am" alloc --tests floor,singular,random,scaling,mixed --repeats 5 --json "$out/alloc.json"
    step soak-2 150 "$am" soak --objects 30000000 --json "$out/soak-2.json"
    step soak-before-2 150 "$before" soak --objects 30000000 --json "$out/soak-before-2.json"
    ;;
  *)
    echo "usage: $0 alloc|checks|final OUT" >&2
    exit 2
    ;;
esac
