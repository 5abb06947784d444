-- 0002_snapshot_pages_rowid: snapshot pages move to an ordinary (rowid) table with the same
-- columns. A page is a few kilobytes of LZ4; in a WITHOUT ROWID table at most about a quarter of a
-- database page of it stays in the B-tree and the rest goes to overflow pages whose last one is
-- mostly empty, while a rowid table fills its overflow pages and keeps the remainder beside other
-- rows: about 2 bytes per event less at 1,000,000 events (docs/format.md). Only the layout
-- changes, so a version that knows this migration still reads a ledger opened read-only before it
-- ran (Migrations.layoutOnly).
CREATE TABLE snapshot_pages_new (
    hash BLOB PRIMARY KEY NOT NULL,      -- SHA-256 of the stored (compressed) page
    raw_size INTEGER NOT NULL,
    data BLOB NOT NULL                   -- LZ4-compressed records
);
INSERT INTO snapshot_pages_new (hash, raw_size, data) SELECT hash, raw_size, data FROM snapshot_pages ORDER BY hash;
DROP TABLE snapshot_pages;
ALTER TABLE snapshot_pages_new RENAME TO snapshot_pages;
