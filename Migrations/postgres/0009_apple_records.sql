-- 0009_apple_records: Apple's own record of the fleet's transactions (docs/reconciling.md), stored
-- by `purchase-ledger apple-import postgres://...` after every signature verified: App Store Server
-- API history pages and transactions' info, and App Store Server Notifications V2. Keyed by
-- Apple's ids, not by a ledger: one Apple transaction is one row set whichever devices recorded it,
-- and `report --view divergence` joins it to every ledger's transactions by store_transaction_id.
-- Rows name the fleet's user they were matched to (or were given); `forget` deletes a user's.

-- One row per statement: Apple signs a transaction again at each request (a new signedDate); a
-- statement of the same facts as the latest held is not stored again, a changed one (a refund, its
-- reversal) is. The facts are columns, so reports read no JWS. A JWS's header (its three
-- certificates, 2 KB of its 3) is kept once per chain, in signing_headers (migration 0008).
CREATE TABLE apple_transactions (
    transaction_id text NOT NULL,             -- Apple's transactionId (a device's store_transaction_id)
    signed_date_ms bigint NOT NULL,
    statement bytea NOT NULL,                 -- SHA-256 of the facts and signedDate below: the statement's identity
    record bigint GENERATED ALWAYS AS IDENTITY,  -- its number, as the divergence report names it
    source text NOT NULL,                     -- 'history', 'transactionInfo' or 'notification'
    notification_uuid text,                   -- the notification it came in, if it did
    user_id text,                             -- the fleet's user it belongs to; NULL: not known
    original_transaction_id text,
    bundle_id text,
    product text,
    type text,                                -- Apple's: 'Consumable', 'Non-Consumable'...
    ownership text,                           -- inAppOwnershipType: 'PURCHASED', 'FAMILY_SHARED'
    environment text,                         -- 'Production', 'Sandbox'
    storefront text,
    quantity bigint,
    price bigint,                             -- milliunits, as Apple states it
    currency text,
    offer_type bigint,
    purchase_date_ms bigint,
    revocation_date_ms bigint,
    revocation_reason bigint,
    signing_header bytea NOT NULL,            -- the JWS's header (its certificates), in signing_headers by its SHA-256
    signed_body text NOT NULL,                -- the rest of the JWS: payload and signature (the JWS: header || '.' || body)
    imported_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (transaction_id, statement)
);
CREATE INDEX apple_transactions_by_user ON apple_transactions (user_id);

-- Each notification once (Apple retries one up to five times).
CREATE TABLE apple_notifications (
    notification_uuid text PRIMARY KEY,
    notification_type text NOT NULL,
    subtype text,
    transaction_id text,                      -- its data.signedTransactionInfo's transactionId
    user_id text,
    signed_date_ms bigint,
    signing_header bytea NOT NULL,            -- as in apple_transactions: the JWS is header || '.' || signed_body
    signed_body text NOT NULL,
    imported_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX apple_notifications_by_user ON apple_notifications (user_id);

-- A user's transaction history read to its last page (hasMore false): Apple's record of that
-- user is complete as of signed_date_ms, the latest signedDate of its pages.
CREATE TABLE apple_histories (
    user_id text NOT NULL,
    revision text NOT NULL,
    signed_date_ms bigint NOT NULL,
    imported_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, revision)
);

-- Device transactions by Apple's id, for the join above (partial: most transactions have one).
CREATE INDEX transactions_by_store_transaction ON transactions (store_transaction_id) WHERE store_transaction_id IS NOT NULL;
