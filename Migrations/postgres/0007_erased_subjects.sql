-- 0007_erased_subjects: users erased from the fleet stay erased in every ledger shipped later
-- (contract 5.3), including a device of theirs never shipped before, whose refs erased_users
-- cannot know. The store keeps no user id: for each erased user, SHA-256 of a secret of this
-- database and the id (erased_subjects). Only the owner reads the secret and the digests; the
-- shipping role may only ask which of the user ids it is about to ship were erased
-- (erased_subjects_among, GRANT EXECUTE in docs/fleet.md): it can test a guess, never list them.
CREATE TABLE fleet_secret (
    id int PRIMARY KEY CHECK (id = 1),
    secret bytea NOT NULL
);
-- 32 random bytes from the server's strong random source (two version-4 UUIDs, 244 random bits).
INSERT INTO fleet_secret
VALUES (1, decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));

CREATE TABLE erased_subjects (
    digest bytea PRIMARY KEY,
    erased_at timestamptz NOT NULL
);

-- The digest of a user id: the same for the same id in this store, nothing without its secret.
CREATE FUNCTION erased_subject_digest(user_id text) RETURNS bytea
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public
AS $$ SELECT sha256(secret || convert_to(user_id, 'UTF8')) FROM fleet_secret WHERE id = 1 $$;
REVOKE ALL ON FUNCTION erased_subject_digest(text) FROM PUBLIC;

-- Which of `user_ids` were erased from this store.
CREATE FUNCTION erased_subjects_among(user_ids text[]) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public
AS $$
    SELECT u FROM unnest(user_ids) AS u
    WHERE EXISTS (SELECT 1 FROM erased_subjects e WHERE e.digest = erased_subject_digest(u))
$$;
REVOKE ALL ON FUNCTION erased_subjects_among(text[]) FROM PUBLIC;

-- A ledger shipped before keys were kept (public_key NULL) is bound to the first key shipped with
-- it (trust on first use). The shipping role may not update public_key itself (docs/fleet.md
-- grants it the other columns of ledgers only): it claims a missing key through this function,
-- which never replaces one.
CREATE FUNCTION claim_ledger_key(ledger uuid, key bytea) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public
AS $$ UPDATE ledgers SET public_key = key WHERE ledger_id = ledger AND public_key IS NULL $$;
REVOKE ALL ON FUNCTION claim_ledger_key(uuid, bytea) FROM PUBLIC;
