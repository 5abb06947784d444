#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs `purchase-ledger demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
Tools/ensure-dependencies.sh
swift build --product purchase-ledger >&2
exec "$(swift build --show-bin-path)/purchase-ledger" demo "$@"
