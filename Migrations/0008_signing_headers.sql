-- 0008_signing_headers: the header of each distinct signed-transaction chain (a JWS's first part:
-- its alg and its three certificates, about 4 KB, the same for every transaction one chain
-- signs), stored once, keyed by the SHA-256 of its text. An event holds that digest in its payload
-- (so the hash chain covers the header) and the JWS's body (payload and signature) as a personal
-- value (personal_values, packed). docs/format.md ("Signed transactions") has the whole layout.
CREATE TABLE signing_headers (
    digest BLOB PRIMARY KEY, -- SHA-256 of header, 32 bytes
    header TEXT NOT NULL     -- the JWS's first part, base64url, exactly as recorded
) WITHOUT ROWID;
