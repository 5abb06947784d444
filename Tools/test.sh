#!/usr/bin/env bash
# The README's test command (and CI's): installs what is missing, builds, runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
Tools/ensure-dependencies.sh --with-chromium --with-postgres
# Formatting and lint first: a file that is not formatted fails here, before the long build.
Tools/format.sh --check
# The CLI and reliability tests run the built binaries, so build them first.
swift build --product purchase-ledger
swift build --product ledger-bench
swift build --product readme-snippets
swift build --product docs-snippets
# The Apple-only StoreKit layer, type-checked for every platform branch against stand-in SDK modules.
Tools/storekit-check.sh
swift test "$@"
