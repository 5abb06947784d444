-- 0008_apple_evidence: what each shipped transaction's signed transaction (Apple's StoreKit 2 JWS)
-- says, whatever the trust roots, as `ship` checked it from the signed data in the device's file
-- (the device's own verdict is never read): `signed` (`apple` once its chain reaches a trusted
-- root, judged by the report with its roots), `xcode`, or `invalid` with why. No row: unsigned.
-- The chains' headers (their certificates), once per distinct chain across the store.
-- The shipping role writes both (docs/fleet.md, GRANTs); re-run the GRANTs after this migration.
CREATE TABLE signing_headers (
    digest bytea PRIMARY KEY,   -- SHA-256 of header
    header text NOT NULL        -- the JWS's first part, base64url
);

CREATE TABLE transaction_evidence (
    ledger_id uuid NOT NULL,
    transaction_id text NOT NULL,
    seq bigint NOT NULL,        -- the ledger's event whose signedTransaction it judges
    level text NOT NULL,        -- 'signed', 'xcode' or 'invalid'
    reason text,
    signing_header bytea,
    PRIMARY KEY (ledger_id, transaction_id)
);
