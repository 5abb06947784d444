-- 0007_personal_values: personal values (contract 5.3) kept beside the log, not in it, so that
-- `forget` can erase a user without rewriting the hash chain. An event stores a personal field as
-- the number (ref) of a row here; the event that first uses a ref also stores its commitment,
-- SHA-256("purchase-ledger personal value v1" || 0x00 || salt || value) cut to 16 bytes, with the
-- salt of the value's owner (a value of no user: its own), so the chain covers every value without
-- holding it. docs/storage.md ("Erasure") has the whole design.
CREATE TABLE personal_values (
    ref INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused, even after an erasure
    owner INTEGER NOT NULL,              -- the ref of the user id it belongs to (a user id: its own ref); 0: no user
    salt BLOB,                           -- 16 random bytes, on a user id's row (and a value of no user); erased with it
    value BLOB NOT NULL                  -- UTF-8, byte for byte (a NUL included)
);
-- Finds a user id's row again (one per user id; any other value has a row per event holding it).
CREATE INDEX personal_values_users ON personal_values (value) WHERE owner = ref;

-- Refs assigned when each snapshot was taken: a state loaded from a snapshot needs, for the
-- events after it, only the user ids' rows and the rows assigned since (any other value has a row
-- per event), not the whole table. NULL for snapshots taken before.
ALTER TABLE snapshots ADD COLUMN personal_refs INTEGER;

-- The first seq whose personal fields are refs: events before it (written by an earlier
-- version) hold their personal values inside the chain, and `forget` refuses their users.
INSERT INTO ledger_info (key, value) VALUES ('personal_values_since', 1 + max(
    coalesce((SELECT max(seq) FROM events), 0),
    coalesce((SELECT max(last_seq) FROM event_blocks), 0)));
