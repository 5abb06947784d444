#!/usr/bin/env bash
# Formats and lints every Swift file with swift-format (it ships with the toolchain: `swift
# format`), using the configuration in .swift-format.
#
#   Tools/format.sh          format in place, then lint
#   Tools/format.sh --check  lint only: exits non-zero, naming file and line, when a file is not
#                            formatted (the test command runs this)
set -euo pipefail
cd "$(dirname "$0")/.."
paths=(Package.swift Sources Tests Tools)
if [[ "${1:-}" != "--check" ]]; then
    swift format format --in-place --parallel --recursive "${paths[@]}"
fi
swift format lint --strict --parallel --recursive "${paths[@]}"
