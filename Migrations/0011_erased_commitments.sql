-- 0011_erased_commitments: the commitments of erased personal values. Blocks of events sealed
-- since this migration may store an event's introductions elided (docs/format.md, "Tail rows
-- and sealed blocks": codecs 6-8): the refs alone, each commitment made again from the value and
-- its owner's salt when read. Erasure deletes both, so `forget` first keeps here the commitment
-- of every value it erases, and the chain (and each erased value's marker) still reads as it did.
-- A commitment says nothing of its value without the salt, which the erasure deleted.
CREATE TABLE erased_commitments (
    ref INTEGER PRIMARY KEY,             -- the erased value's ref
    commitment BLOB NOT NULL             -- its 16 bytes, as its event introduced it
);
