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

-- The three functions below run with the owner's rights (SECURITY DEFINER): every name in them is
-- schema-qualified and their search_path holds only pg_catalog, then pg_temp, so a caller's
-- temporary table, view or function named like one of ours is never what they use.

-- The digest of a user id: the same for the same id in this store, nothing without its secret.
CREATE FUNCTION erased_subject_digest(user_id text) RETURNS bytea
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_catalog.sha256(s.secret || pg_catalog.convert_to(user_id, 'UTF8')) FROM public.fleet_secret s WHERE s.id = 1 $$;
REVOKE ALL ON FUNCTION erased_subject_digest(text) FROM PUBLIC;

-- Which of `user_ids` were erased from this store.
CREATE FUNCTION erased_subjects_among(user_ids text[]) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT u FROM pg_catalog.unnest(user_ids) AS u
    WHERE EXISTS (SELECT 1 FROM public.erased_subjects e WHERE e.digest = public.erased_subject_digest(u))
$$;
REVOKE ALL ON FUNCTION erased_subjects_among(text[]) FROM PUBLIC;

-- A ledger shipped before keys were kept (public_key NULL) is bound to the first key shipped with
-- it (trust on first use). The shipping role may not update public_key itself (docs/fleet.md
-- grants it the other columns of ledgers only): it claims a missing key through this function,
-- which never replaces one.
CREATE FUNCTION claim_ledger_key(ledger uuid, key bytea) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ UPDATE public.ledgers SET public_key = key WHERE ledger_id = ledger AND public_key IS NULL $$;

-- A row the lock of a ship created for a ledger it then refused (nothing of it was stored) is
-- removed through this function: the shipping role has no DELETE on ledgers, so it cannot delete
-- a ledger's row and register the id again under another key.
CREATE FUNCTION forget_unshipped_ledgers(ledgers uuid[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    DELETE FROM public.ledgers l
    WHERE l.ledger_id = ANY (ledgers) AND l.last_seq = 0
        AND NOT EXISTS (SELECT 1 FROM public.events e WHERE e.ledger_id = l.ledger_id)
$$;
REVOKE ALL ON FUNCTION forget_unshipped_ledgers(uuid[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION claim_ledger_key(uuid, bytea) FROM PUBLIC;

-- The chain's mode each ledger shipped with ('sha256' or 'hmac-sha256'), set when its row is
-- made and never updated by the shipping role: the fleet audit recomputes a plain chain from its
-- first event and reports an altered first event, which it could not tell from a keyed chain.
ALTER TABLE ledgers ADD COLUMN chain text;
