-- 0001_initial: the event log, its compression dictionaries and snapshots, and the projections.
-- Shipped migrations are immutable: change the schema with a new NNNN_name.sql file.
-- Times in projection tables are INTEGER milliseconds since 1970-01-01T00:00:00Z (`*_ms`);
-- in the log they are nanoseconds (`at_ns`). docs/storage.md describes every table.

-- Facts about this ledger: chain mode and key check, projection version and position.
CREATE TABLE ledger_info (
    key TEXT PRIMARY KEY NOT NULL,
    value
) WITHOUT ROWID;

-- The open tail of the log: one row per event not yet sealed into a block.
CREATE TABLE events (
    seq INTEGER PRIMARY KEY,             -- global position, gap-free from 1
    stream TEXT NOT NULL,                -- transaction:<id>, download:<id>, catalog, restore
    version INTEGER NOT NULL,            -- position within the stream, from 1
    type INTEGER NOT NULL,               -- event type code (docs/format.md)
    at_ns INTEGER NOT NULL,              -- when it happened, as given
    recorded_ns INTEGER NOT NULL,        -- when the ledger stored it
    flags INTEGER NOT NULL,              -- bit 0: appended by the ledger; bits 1-7: anomaly rule code
    codec INTEGER NOT NULL,              -- payload codec: 0 = binary payload v1, uncompressed
    payload BLOB NOT NULL,
    link BLOB NOT NULL                   -- hash chain link after this event (32 bytes)
);

-- Sealed runs of consecutive events, compressed together.
CREATE TABLE event_blocks (
    first_seq INTEGER PRIMARY KEY,
    last_seq INTEGER NOT NULL,
    codec INTEGER NOT NULL,              -- 0 = raw frames, 1 = LZ4, 2 = LZ4 with dictionary
    dictionary_id INTEGER REFERENCES dictionaries(id),
    raw_size INTEGER NOT NULL,
    data BLOB NOT NULL,
    last_link BLOB NOT NULL              -- hash chain link after the block's last event
);

-- LZ4 dictionaries, never changed once written (a new one gets a new id).
CREATE TABLE dictionaries (
    id INTEGER PRIMARY KEY,
    created_at_seq INTEGER NOT NULL,
    bytes BLOB NOT NULL
);

-- Reducer state at some seqs, for fast time travel. Rebuildable: ignored when stale or damaged.
-- A snapshot is a manifest of pages; pages are stored once by content hash and shared between
-- snapshots, so many snapshots cost little more than one.
CREATE TABLE snapshots (
    seq INTEGER PRIMARY KEY,
    reducer_version INTEGER NOT NULL,
    format INTEGER NOT NULL,
    manifest BLOB NOT NULL               -- scalars and the ordered page hashes
);

CREATE TABLE snapshot_pages (
    hash BLOB PRIMARY KEY NOT NULL,      -- SHA-256 of the uncompressed page
    raw_size INTEGER NOT NULL,
    data BLOB NOT NULL                   -- LZ4-compressed records
) WITHOUT ROWID;

-- Projections: current state, kept up to date inside every append.
CREATE TABLE products (
    product TEXT PRIMARY KEY NOT NULL,
    kind TEXT NOT NULL,
    price TEXT NOT NULL,                 -- decimal string in `currency` units, as registered
    currency TEXT NOT NULL,
    downloadable INTEGER NOT NULL,
    title TEXT,
    registered_at_ms INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE product_contents (
    product TEXT NOT NULL,
    content TEXT NOT NULL,
    latest_version TEXT NOT NULL,        -- highest version ever published
    PRIMARY KEY (product, content)
) WITHOUT ROWID;

CREATE TABLE related_products (
    product TEXT NOT NULL,
    related_product TEXT NOT NULL,       -- as declared on `product`'s registration
    PRIMARY KEY (product, related_product)
) WITHOUT ROWID;

CREATE TABLE transactions (
    transaction_id TEXT PRIMARY KEY NOT NULL,
    product TEXT NOT NULL,
    user_id TEXT,
    quantity INTEGER NOT NULL,
    state TEXT NOT NULL,                 -- purchasing, deferred, purchased, failed, restored
    finished INTEGER NOT NULL,
    revoked INTEGER NOT NULL,
    revocation_reason TEXT,
    original_transaction TEXT,
    store_transaction_id TEXT,
    error_domain TEXT,
    error_code INTEGER,
    error_message TEXT,
    was_deferred INTEGER NOT NULL,
    discarded_content INTEGER NOT NULL,
    queued_at_ms INTEGER,
    purchased_at_ms INTEGER,
    failed_at_ms INTEGER,
    finished_at_ms INTEGER,
    revoked_at_ms INTEGER,
    events INTEGER NOT NULL              -- events stored in its stream
);
CREATE INDEX transactions_by_user ON transactions (user_id);

CREATE TABLE downloads (
    download_id TEXT PRIMARY KEY NOT NULL,
    transaction_id TEXT,                 -- NULL for standalone content registered by URL
    position INTEGER NOT NULL,           -- order within its transaction's delivery
    url TEXT,
    content TEXT,
    content_version TEXT,
    content_length INTEGER,
    state TEXT NOT NULL,                 -- waiting, active, paused, finished, failed, cancelled
    started INTEGER NOT NULL,
    progress REAL NOT NULL,
    bytes_written INTEGER,
    content_url TEXT,                    -- NULL once its transaction is finished
    copied_out INTEGER NOT NULL,
    destination TEXT,
    discarded INTEGER NOT NULL,
    lost INTEGER NOT NULL,               -- cancelled by an early finish
    cancel_reason TEXT,
    error_domain TEXT,
    error_code INTEGER,
    error_message TEXT,
    attempts INTEGER NOT NULL,
    started_at_ms INTEGER,
    last_activity_at_ms INTEGER,
    finished_at_ms INTEGER,
    copied_out_at_ms INTEGER,
    events INTEGER NOT NULL              -- events stored in its stream
);
CREATE INDEX downloads_by_transaction ON downloads (transaction_id, position);
CREATE UNIQUE INDEX downloads_by_url ON downloads (url) WHERE url IS NOT NULL;

-- The version of each product's content copied out last (owned or not: join transactions for that).
CREATE TABLE owned_content (
    product TEXT NOT NULL,
    content TEXT NOT NULL,
    content_version TEXT NOT NULL,
    destination TEXT NOT NULL,
    transaction_id TEXT NOT NULL,
    download_id TEXT NOT NULL,
    copied_at_ms INTEGER NOT NULL,
    history_seq INTEGER NOT NULL,        -- its row in owned_content_history
    PRIMARY KEY (product, content)
) WITHOUT ROWID;

-- Every version ever copied out, with when it was superseded or deleted. Product, content and
-- version are the download's; owned_content_history_view joins them in.
CREATE TABLE owned_content_history (
    seq INTEGER PRIMARY KEY,             -- the contentCopiedOut event
    download_id TEXT NOT NULL,
    destination TEXT NOT NULL,
    copied_at_ms INTEGER NOT NULL,
    superseded_at_ms INTEGER,
    deleted_at_ms INTEGER
);

CREATE VIEW owned_content_history_view AS
    SELECT h.seq, t.product, d.content, d.content_version, h.destination, d.transaction_id, t.user_id,
           h.download_id, h.copied_at_ms, h.superseded_at_ms, h.deleted_at_ms
    FROM owned_content_history h
    JOIN downloads d ON d.download_id = h.download_id
    JOIN transactions t ON t.transaction_id = d.transaction_id;
