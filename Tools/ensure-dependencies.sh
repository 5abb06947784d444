#!/usr/bin/env bash
# Installs what purchase-ledger needs to build when it is missing: liblz4-dev, libsqlite3-dev,
# pkg-config (Debian/Ubuntu); with --with-postgres, Debian's PostgreSQL server, which the fleet
# store's tests start in a temporary folder. Prints the exact command when it cannot install them itself.
set -euo pipefail

missing=()
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
pkg-config --exists liblz4 2>/dev/null || missing+=(liblz4-dev)
{ pkg-config --exists sqlite3 2>/dev/null || [ -f /usr/include/sqlite3.h ]; } || missing+=(libsqlite3-dev)
# The workload generator (Tools/gen_workload.py) the tests and benchmarks run.
command -v python3 >/dev/null 2>&1 || missing+=(python3)
# --with-chromium: headless Chromium, which the HTML report test renders pages with.
for option in "$@"; do
  case "$option" in
    --with-chromium) command -v chromium >/dev/null 2>&1 || missing+=(chromium) ;;
    --with-postgres)
      ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
      # The TLS tests make their own certificate authority and server certificate.
      command -v openssl >/dev/null 2>&1 || missing+=(openssl) ;;
  esac
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "purchase-ledger needs: ${missing[*]}" >&2
if ! command -v apt-get >/dev/null 2>&1; then
  echo "Install them with your package manager (Homebrew: brew install lz4 sqlite pkg-config)." >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo"; else
  echo "Run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} ..." >&2
$sudo apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
