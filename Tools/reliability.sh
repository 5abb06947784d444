#!/usr/bin/env bash
# The long reliability runs (the test suite runs short ones): writers killed with SIGKILL at
# random moments, single-bit flips in stored event data, fuzzed input to every decoder.
#   Tools/reliability.sh                       # 200 kills, 500 flips, 1,000,000 fuzz inputs
#   KILLS=20 FLIPS=50 FUZZ=100000 Tools/reliability.sh
set -euo pipefail
cd "$(dirname "$0")/.."
Tools/ensure-dependencies.sh
mkdir -p bench-results
[ -s bench-results/workload-100000.jsonl ] || python3 ../shared/bench/gen_workload.py -n 100000 -o bench-results/workload-100000.jsonl
swift build -c release --product ledger-bench >&2
bench="$(swift build -c release --show-bin-path)/ledger-bench"
"$bench" crash --kills "${KILLS:-200}"
"$bench" flips --trials "${FLIPS:-500}" --workload bench-results/workload-100000.jsonl
"$bench" fuzz --inputs "${FUZZ:-1000000}"
