-- 0010_ingest: what the ingest service (`purchase-ledger serve`, docs/ingest.md) and `pull` need.
-- Re-run the GRANTs of docs/fleet.md after it: two tables are new.

-- Each ledger's personal values (docs/storage.md, "Erasure"), as its device holds them: the
-- events hold refs and salted commitments, these rows the values. Shipped or uploaded with the
-- events that introduce them, so the service replays a ledger with its values and `pull`
-- rebuilds the file that verifies. `forget` deletes a user's rows (the user id's and every row
-- it owns, salts included).
CREATE TABLE personal_values (
    ledger_id uuid NOT NULL,
    ref bigint NOT NULL,
    owner bigint NOT NULL,             -- the user id's ref that owns it; 0: no user; = ref: a user id
    salt bytea,                        -- on a user id's row and a value of no user
    value bytea NOT NULL,              -- as stored in the ledger (a signed body packed)
    PRIMARY KEY (ledger_id, ref)
);

-- The ingest service's bearer tokens: only their SHA-256 is kept (a token is printed once, by
-- `token create`). A revoked token stays listed, refused.
CREATE TABLE ingest_tokens (
    name text PRIMARY KEY,
    digest bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
