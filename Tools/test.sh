#!/usr/bin/env bash
# The README's test command (and CI's): installs what is missing, builds, runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
Tools/ensure-dependencies.sh --with-chromium
# The CLI tests run the built binary, so build it first.
swift build --product purchase-ledger
swift test "$@"
