#!/usr/bin/env bash
# Runs ledger-bench: builds it in release mode, generates the shared workloads when missing
# (Tools/gen_workload.py, the shared reference generator), prints the table and writes bench-results/results.json.
#   Tools/bench.sh                      # 100,000 and 1,000,000 events, 3 runs each
#   Tools/bench.sh --sizes 100000 --runs 5
set -euo pipefail
cd "$(dirname "$0")/.."
Tools/ensure-dependencies.sh
sizes=100000,1000000
for ((i = 1; i <= $#; i++)); do [ "${!i}" = "--sizes" ] && { j=$((i + 1)); sizes=${!j}; }; done
mkdir -p bench-results
generator=Tools/gen_workload.py   # a copy of ../shared/bench/gen_workload.py (WorkloadTests pins its SHA-256)
reference=../shared/bench/gen_workload.py
if [ -f "$reference" ] && ! cmp -s "$generator" "$reference"; then
  echo "$generator differs from $reference: copy the reference again (and update WorkloadTests.referenceSHA256)" >&2
  exit 1
fi
for n in ${sizes//,/ }; do
  if [ ! -s "bench-results/workload-$n.jsonl" ]; then
    echo "generating the $n-event workload..." >&2
    python3 "$generator" -n "$n" -o "bench-results/workload-$n.jsonl"
  fi
done
swift build -c release --product ledger-bench >&2
# The focused-replay figure times the CLI itself, found beside ledger-bench.
swift build -c release --product purchase-ledger >&2
exec "$(swift build -c release --show-bin-path)/ledger-bench" run --workloads bench-results --sizes "$sizes" --out bench-results/results.json "$@"
