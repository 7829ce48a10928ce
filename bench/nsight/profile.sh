#!/usr/bin/env bash
# Profile any command under Nsight Systems with unified-memory fault tracing, export the report
# to SQLite, and summarise faults and migrations by cause.
#
#   bench/nsight/profile.sh OUT_PREFIX COMMAND [ARGS...]
#
# Writes OUT_PREFIX.nsys-rep, OUT_PREFIX.sqlite and OUT_PREFIX-summary.json, and prints the
# summary table. Example:
#   bench/nsight/profile.sh /tmp/walk16 target/release/alignmalloc walk --rmat 16
# Set NSYS to the nsys binary if it is not on PATH.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 OUT_PREFIX COMMAND [ARGS...]" >&2
  exit 2
fi
prefix=$1
shift

nsys=${NSYS:-nsys}
if ! command -v "$nsys" > /dev/null; then
  echo "error: '$nsys' not found. Install Nsight Systems (it ships with the CUDA toolkit under" >&2
  echo "  /usr/local/cuda/bin or /opt/nvidia/nsight-systems/*/bin) and put it on PATH, or set NSYS." >&2
  echo "  Without nsys, use the runtime's CUPTI counters instead (docs/profiling.md)." >&2
  exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# CUDA tracing is what records unified-memory events; the fault options add one row per fault
# group. They slow the run: profile to see causes, not to time.
"$nsys" profile \
  --trace=cuda \
  --cuda-um-gpu-page-faults=true \
  --cuda-um-cpu-page-faults=true \
  --force-overwrite=true \
  --output "$prefix" \
  "$@"
"$nsys" export --type sqlite --force-overwrite=true --output "$prefix.sqlite" "$prefix.nsys-rep"
python3 "$here/summarise.py" "$prefix.sqlite" --json "$prefix-summary.json"
