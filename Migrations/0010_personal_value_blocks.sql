-- 0010_personal_value_blocks: personal values other than user ids sealed into LZ4-compressed
-- blocks, as the log's events are (docs/storage.md, "Erasure"; docs/format.md has the layout).
-- `personal_values` keeps every user id's row (found again whenever it recurs, and erased alone)
-- and the open tail: the other values not yet sealed. Each block holds the rows of refs
-- first_ref...last_ref that are not user ids, in ref order; an erasure rewrites the blocks holding
-- the user's values without them (secure_delete zeroes the old bytes). Rows written before this
-- migration stay rows until the next append seals them.
CREATE TABLE personal_value_blocks (
    first_ref INTEGER PRIMARY KEY,       -- the lowest ref the block held when sealed
    last_ref INTEGER NOT NULL,           -- the highest
    raw_size INTEGER NOT NULL,           -- bytes of the records, decompressed
    data BLOB NOT NULL                   -- LZ4 (liblz4's block format) of the records
);
