#!/usr/bin/env bash
# Runs the same 22 read-only commands (export, verify, stats, replay, timeline, events and every
# report view and format) with two builds of the CLI, each on its own copy of LEDGER, and says for
# each whether stdout, stderr and the exit status are byte for byte the same: what a refactoring
# must keep (docs/performance.md, #47). Needs sqlite3 (to pick ids from the ledger).
#   Tools/compare-outputs.sh OLD/purchase-ledger NEW/purchase-ledger user.ledger /tmp/compare
set -u
[ $# -eq 4 ] || { echo "usage: Tools/compare-outputs.sh OLD_CLI NEW_CLI LEDGER OUTDIR" >&2; exit 2; }
A=$1; B=$2; L=$3; OUT=$4
mkdir -p $OUT/a $OUT/b
T=$(sqlite3 $L "SELECT transaction_id FROM transactions ORDER BY transaction_id LIMIT 1 OFFSET 77")
U=$(sqlite3 $L "SELECT user_id FROM transactions WHERE user_id IS NOT NULL ORDER BY transaction_id LIMIT 1 OFFSET 5")
D=$(sqlite3 $L "SELECT download_id FROM downloads ORDER BY download_id LIMIT 1 OFFSET 11")
cmds=(
 "export LEDGER"
 "verify LEDGER"
 "verify LEDGER --all"
 "stats LEDGER"
 "stats LEDGER --json"
 "replay LEDGER --json"
 "replay LEDGER --at 77777 --json"
 "replay LEDGER --at 55555 --transaction $T --json"
 "replay LEDGER --at 55555 --user $U"
 "timeline LEDGER --transaction $T"
 "timeline LEDGER --download $D --json"
 "events LEDGER --transaction $T"
 "report LEDGER"
 "report LEDGER --user $U --format json"
 "report LEDGER --view revenue"
 "report LEDGER --view revenue --group-by month --format csv"
 "report LEDGER --view revenue --all-environments --format json"
 "report LEDGER --view undelivered --format csv"
 "report LEDGER --view stuck --format json"
 "report LEDGER --view unfinished"
 "report LEDGER --view failures --format csv"
 "report LEDGER --view history --format html"
)
i=0
for c in "${cmds[@]}"; do
  i=$((i+1))
  for side in a b; do
    bin=$A; [ $side = b ] && bin=$B
    cp $L $OUT/$side/l.ledger; rm -f $OUT/$side/l.ledger-wal $OUT/$side/l.ledger-shm
    cmd=${c//LEDGER/$OUT\/$side\/l.ledger}
    $bin $cmd > $OUT/$side/$i.out 2> $OUT/$side/$i.err; echo "exit $?" >> $OUT/$side/$i.err
    sed -i "s#$OUT/$side/#DIR/#g" $OUT/$side/$i.out $OUT/$side/$i.err
  done
  if cmp -s $OUT/a/$i.out $OUT/b/$i.out && cmp -s $OUT/a/$i.err $OUT/b/$i.err; then r=same; else r=DIFFERENT; fi
  printf "%-8s %10s bytes  %s\n" "$r" "$(wc -c < $OUT/a/$i.out)" "$c"
done
