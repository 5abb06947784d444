#!/usr/bin/env bash
# The long reliability runs (the test suite runs short ones): writers killed with SIGKILL at
# random moments, single-bit flips in stored event data, fuzzed input to every decoder, and
# `purchase-ledger ship` killed at random moments while shipping into a PostgreSQL it starts.
#   Tools/reliability.sh                       # 200 kills, 500 flips, 1,000,000 fuzz inputs, 50 ship kills
#   KILLS=20 FLIPS=50 FUZZ=100000 SHIP_KILLS=10 Tools/reliability.sh
set -euo pipefail
cd "$(dirname "$0")/.."
Tools/ensure-dependencies.sh --with-postgres
mkdir -p bench-results
[ -s bench-results/workload-100000.jsonl ] || python3 Tools/gen_workload.py -n 100000 -o bench-results/workload-100000.jsonl
swift build -c release --product ledger-bench >&2
swift build -c release --product purchase-ledger >&2
bench="$(swift build -c release --show-bin-path)/ledger-bench"
"$bench" crash --kills "${KILLS:-200}"
"$bench" flips --trials "${FLIPS:-500}" --workload bench-results/workload-100000.jsonl
"$bench" fuzz --inputs "${FUZZ:-1000000}"
"$bench" fleet-crash --kills "${SHIP_KILLS:-50}" --workload bench-results/workload-100000.jsonl --binary "$(swift build -c release --show-bin-path)/purchase-ledger"
