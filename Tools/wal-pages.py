#!/usr/bin/env python3
"""Which pages each single-event append writes: imports the first 2,000 lines of a workload into
a scratch ledger, appends the next N lines one `purchase-ledger append` call each while a reader
holds the WAL open (so nothing is checkpointed away), then names the table or index of every page
in the WAL's frames.

    Tools/wal-pages.py .build/release/purchase-ledger bench-results/workload-100000.jsonl [N]
"""
import collections, os, sqlite3, struct, subprocess, sys, tempfile

binary, workload = sys.argv[1], sys.argv[2]
count = int(sys.argv[3]) if len(sys.argv) > 3 else 40
lines = open(workload).read().splitlines()
with tempfile.TemporaryDirectory() as scratch:
    ledger, seed = os.path.join(scratch, "wal.ledger"), os.path.join(scratch, "seed.jsonl")
    open(seed, "w").write("\n".join(lines[:2000]) + "\n")
    subprocess.run([binary, "import", ledger, seed], capture_output=True, check=True)
    reader = sqlite3.connect(ledger, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM events").fetchone()
    wal = ledger + "-wal"
    start = os.path.getsize(wal) if os.path.exists(wal) else 0
    stored = 0
    for line in lines[2000:2000 + count]:
        if subprocess.run([binary, "append", ledger, "-"], input=line.encode(), capture_output=True).returncode == 0:
            stored += 1
    data = open(wal, "rb").read()
    page_size = struct.unpack(">I", data[8:12])[0]
    offset, pages = max(32, start), []
    while offset + 24 + page_size <= len(data):
        pages.append(struct.unpack(">I", data[offset:offset + 4])[0])
        offset += 24 + page_size
    reader.execute("COMMIT")
    names = {page: name for name, page in sqlite3.connect(ledger).execute("SELECT name, pageno FROM dbstat")}
    counts = collections.Counter(names.get(p, "page 1" if p == 1 else "?") for p in pages)
    print(f"{len(pages)} WAL pages for {stored} appends: {len(pages) / max(stored, 1):.2f} per append")
    for name, n in counts.most_common():
        print(f"  {name}: {n}")
