-- 0008_signing_headers: the header of each distinct signed-transaction chain (a JWS's first part:
-- its alg and its three certificates, about 4 KB, the same for every transaction one chain
-- signs), stored once, keyed by the SHA-256 of its text. An event holds that digest in its payload
-- (so the hash chain covers the header) and the JWS's body (payload and signature) as a personal
-- value (personal_values, packed). docs/format.md ("Signed transactions") has the whole layout.
CREATE TABLE signing_headers (
    digest BLOB PRIMARY KEY, -- SHA-256 of header, 32 bytes
    header TEXT NOT NULL     -- the JWS's first part, base64url, exactly as recorded
) WITHOUT ROWID;

-- What each signed transaction's signature says, whatever the trust roots (AppleSignatureVerifier's
-- root-independent check), for the transaction's latest applied event that carried one: `signed`
-- (form, time, markers and ES256 signature hold: `apple` once the chain in signing_headers reaches
-- a trusted root, judged when read), `xcode`, or `invalid` with why. A transaction with no row is
-- unsigned. Derived from the log like the projections: `rebuild` remakes it and `verify` compares
-- it with a recomputation, except where forget erased the signature (the row recorded while it was
-- there stands).
CREATE TABLE transaction_evidence (
    transaction_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,        -- the event whose signedTransaction it judges
    level TEXT NOT NULL,         -- 'signed', 'xcode' or 'invalid'
    reason TEXT,                 -- why, for 'invalid'
    signing_header BLOB,         -- signing_headers.digest of its chain (NULL when it has none)
    signed_key BLOB              -- HMAC-SHA-256 of Apple's transactionId under redaction_secret, 16 bytes: one
                                 -- Apple transaction vouches for one ledger transaction; NULL once forget erased it
) WITHOUT ROWID;
CREATE INDEX transaction_evidence_by_key ON transaction_evidence (signed_key) WHERE signed_key IS NOT NULL;
