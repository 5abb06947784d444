-- 0006_snapshot_binding: each snapshot is bound to the hash chain at its seq. binding =
-- link'(link(seq), "purchase-ledger snapshot v1" 0x00 SHA-256(manifest)), where link' is the
-- chain's own function (SHA-256, or HMAC-SHA-256 with a keyed ledger's key). A snapshot whose
-- binding does not match (copied from another ledger, or from another point of this one) is never
-- loaded, and plain `verify` reports it. Snapshots written before this migration have none and
-- are never loaded again (they were written by reducer 1 anyway); new ones replace them.
ALTER TABLE snapshots ADD COLUMN binding BLOB;
