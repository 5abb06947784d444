#!/usr/bin/env bash
# A throwaway fleet store on this machine, to try `ship`, `report`, `verify --against` and `forget`
# on PostgreSQL: starts Debian's PostgreSQL in a new temporary folder, listening on 127.0.0.1
# only; makes an owner (no superuser) and its database; migrates it with the CLI; makes the
# shipping, reporting and Apple roles with docs/fleet.md's two blocks, as written there (the first as an
# administrator, the second as the owner); prints the URLs. For trying it, never for production:
# the passwords are the docs' examples.
#
#   Tools/fleet-up.sh              # start one; prints its URLs and the command that stops it
#   eval "$(Tools/fleet-up.sh)"    # the same, and sets FLEET_OWNER, FLEET_SHIP, FLEET_REPORT,
#                                  # FLEET_APPLE, FLEET_INGEST and FLEET_FOLDER, which the commands in README.md and docs/ use
#   Tools/fleet-up.sh stop FOLDER  # stop it and delete its folder
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
bin="$(ls -d /usr/lib/postgresql/*/bin 2> /dev/null | sort -V | tail -1)"
as_postgres=()
[ "$(id -u)" -eq 0 ] && as_postgres=(runuser -u postgres --)

if [ "${1:-}" = "stop" ]; then
  folder="${2:?usage: Tools/fleet-up.sh stop FOLDER}"
  [ -f "$folder/data/PG_VERSION" ] || { echo "fleet-up: $folder holds no fleet store made by fleet-up.sh" >&2; exit 2; }
  "${as_postgres[@]}" "$bin/pg_ctl" -D "$folder/data" -m fast -w stop > /dev/null
  rm -rf "$folder"
  echo "fleet-up: stopped, and $folder deleted"
  exit 0
fi

Tools/ensure-dependencies.sh --with-postgres
bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
# The CLI: PURCHASE_LEDGER_BIN when given (the tests give theirs), else this package's debug build.
cli="${PURCHASE_LEDGER_BIN:-}"
if [ -z "$cli" ]; then
  cli="$(swift build --show-bin-path)/purchase-ledger"
  [ -x "$cli" ] || swift build --product purchase-ledger >&2
fi
folder="$(mktemp -d /tmp/purchase-ledger-fleet.XXXXXX)"
chmod 700 "$folder"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# The superuser's password is random and never printed: it signs in on the folder's socket only.
python3 -c 'import secrets; print(secrets.token_hex(16))' > "$folder/superuser-password"
[ ${#as_postgres[@]} -gt 0 ] && chown -R postgres:postgres "$folder"
"${as_postgres[@]}" "$bin/initdb" -D "$folder/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
  --pwfile="$folder/superuser-password" -E UTF8 --locale=C > "$folder/initdb.log"
"${as_postgres[@]}" "$bin/pg_ctl" -D "$folder/data" -l "$folder/server.log" -w \
  -o "-p $port -k $folder -c listen_addresses=127.0.0.1" start > /dev/null
psql() { "${as_postgres[@]}" "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$folder" -p "$port" "$@"; }
# A block of docs/fleet.md, as written there.
documented() { python3 - "$1" << 'PY'
import re, sys
docs = open("docs/fleet.md", encoding="utf-8").read()
print(re.search(r"<!-- %s -->\n```sql\n(.*?)\n```" % re.escape(sys.argv[1]), docs, re.S).group(1))
PY
}
psql -U postgres -d postgres -c "CREATE ROLE fleet_owner LOGIN PASSWORD 'owner-change-me'" -c "CREATE DATABASE fleet OWNER fleet_owner"
owner="postgres://fleet_owner:owner-change-me@127.0.0.1:$port/fleet"
"$cli" migrate "$owner" > /dev/null
documented roles.sql | psql -U postgres -d fleet
documented grants.sql | psql -U fleet_owner -d fleet
ship="postgres://ledger_ship:change-me@127.0.0.1:$port/fleet"
report="postgres://ledger_report:change-me-too@127.0.0.1:$port/fleet"
apple="postgres://ledger_apple:change-me-three@127.0.0.1:$port/fleet"
ingest="postgres://ledger_ingest:change-me-four@127.0.0.1:$port/fleet"
cat >&2 << EOF2
fleet-up: a fleet store on 127.0.0.1:$port (PostgreSQL in $folder), migrated, with the documented roles:
  owner (migrate, forget):  $owner
  shipping (ship):          $ship
  reporting (report):       $report
  Apple (apple-import):     $apple
  ingest service (serve):   $ingest
Stop it and delete it with: Tools/fleet-up.sh stop $folder
EOF2
# On stdout, for `eval "$(Tools/fleet-up.sh)"`: the same URLs as variables the docs' commands use.
printf "export FLEET_OWNER='%s' FLEET_SHIP='%s' FLEET_REPORT='%s' FLEET_APPLE='%s' FLEET_INGEST='%s' FLEET_FOLDER='%s'\n" \
  "$owner" "$ship" "$report" "$apple" "$ingest" "$folder"
