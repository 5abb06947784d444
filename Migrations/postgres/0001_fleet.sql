-- 0001_fleet: the fleet store. Many device ledgers' logs and projections in one PostgreSQL database.
-- Shipped migrations are immutable: change the schema with a new NNNN_name.sql file in this folder.
--
-- Every table but the catalog is keyed by ledger_id first, so Citus can distribute them all by
-- that one column with colocated joins (docs/fleet.md has the statements); the catalog
-- (products, product_contents, related_products) is small and shared: reference tables.
-- Columns mirror the SQLite ledger's tables (Migrations/0001_initial.sql), booleans as boolean.

-- One row per shipped ledger: how far it has been shipped, and the chain link there.
CREATE TABLE ledgers (
    ledger_id uuid PRIMARY KEY,
    identity_origin text NOT NULL,           -- 'created', or when an old ledger was given its id
    last_seq bigint NOT NULL,
    last_link bytea NOT NULL,                -- hash chain link after last_seq (32 bytes)
    first_shipped_at timestamptz NOT NULL,
    last_shipped_at timestamptz NOT NULL
);

-- The log: every event exactly once, as the ledger stored it.
CREATE TABLE events (
    ledger_id uuid NOT NULL,
    seq bigint NOT NULL,
    stream text NOT NULL,
    version bigint NOT NULL,
    type text NOT NULL,                      -- the contract's event type name
    at_ns bigint NOT NULL,                   -- when it happened, nanoseconds since 1970 UTC
    recorded_ns bigint NOT NULL,             -- when the ledger stored it
    anomaly text,                            -- the rule it broke, when stored as an anomaly
    appended_by_ledger boolean NOT NULL,
    payload bytea NOT NULL,                  -- binary payload v1 (docs/format.md), uncompressed
    link bytea NOT NULL,                     -- hash chain link after this event
    PRIMARY KEY (ledger_id, seq)
);

CREATE TABLE products (
    product text PRIMARY KEY,
    kind text NOT NULL,
    price text NOT NULL,
    currency text NOT NULL,
    downloadable boolean NOT NULL,
    title text,
    registered_at_ms bigint NOT NULL
);

CREATE TABLE product_contents (
    product text NOT NULL,
    content text NOT NULL,
    latest_version text NOT NULL,
    PRIMARY KEY (product, content)
);

CREATE TABLE related_products (
    product text NOT NULL,
    related_product text NOT NULL,
    PRIMARY KEY (product, related_product)
);

CREATE TABLE transactions (
    ledger_id uuid NOT NULL,
    transaction_id text NOT NULL,
    product text NOT NULL,
    user_id text,
    quantity bigint NOT NULL,
    state text NOT NULL,
    finished boolean NOT NULL,
    revoked boolean NOT NULL,
    revocation_reason text,
    original_transaction text,
    store_transaction_id text,
    error_domain text,
    error_code bigint,
    error_message text,
    was_deferred boolean NOT NULL,
    discarded_content boolean NOT NULL,
    queued_at_ms bigint,
    purchased_at_ms bigint,
    failed_at_ms bigint,
    finished_at_ms bigint,
    revoked_at_ms bigint,
    events bigint NOT NULL,
    PRIMARY KEY (ledger_id, transaction_id)
);
CREATE INDEX transactions_by_user ON transactions (user_id);
CREATE INDEX transactions_by_purchase ON transactions (purchased_at_ms) WHERE state = 'purchased';

CREATE TABLE downloads (
    ledger_id uuid NOT NULL,
    download_id text NOT NULL,
    transaction_id text,
    position bigint NOT NULL,
    url text,
    content text,
    content_version text,
    content_length bigint,
    state text NOT NULL,
    started boolean NOT NULL,
    progress double precision NOT NULL,
    bytes_written bigint,
    content_url text,
    copied_out boolean NOT NULL,
    destination text,
    discarded boolean NOT NULL,
    lost boolean NOT NULL,
    cancel_reason text,
    error_domain text,
    error_code bigint,
    error_message text,
    attempts bigint NOT NULL,
    started_at_ms bigint,
    last_activity_at_ms bigint,
    finished_at_ms bigint,
    copied_out_at_ms bigint,
    events bigint NOT NULL,
    PRIMARY KEY (ledger_id, download_id)
);
CREATE INDEX downloads_by_transaction ON downloads (ledger_id, transaction_id, position);

CREATE TABLE owned_content (
    ledger_id uuid NOT NULL,
    product text NOT NULL,
    content text NOT NULL,
    content_version text NOT NULL,
    destination text NOT NULL,
    transaction_id text NOT NULL,
    download_id text NOT NULL,
    copied_at_ms bigint NOT NULL,
    history_seq bigint NOT NULL,
    PRIMARY KEY (ledger_id, product, content)
);

CREATE TABLE owned_content_history (
    ledger_id uuid NOT NULL,
    seq bigint NOT NULL,
    download_id text NOT NULL,
    destination text NOT NULL,
    copied_at_ms bigint NOT NULL,
    superseded_at_ms bigint,
    deleted_at_ms bigint,
    PRIMARY KEY (ledger_id, seq)
);
