-- 0004_ledger_keys: a ledger id is held by the key that proves it (contract 5.2).
--
-- A ledger made by this version derives its id from the public half of an Ed25519 identity key
-- it keeps in its file (docs/fleet.md, "Ledger identity"). The first ship of an id stores that
-- public key; every later ship of the id must come from the same key, and a file whose own key
-- does not derive a key-derived id is refused before anything is written: a file that copies
-- another ledger's id is an id conflict, and the rightful ledger still ships. Ledgers shipped
-- before this migration have no key here: the next ship of each stores its key (trust on first
-- use, as for any id made before ids were derived).
--
-- head_statement is the ledger's own signature over its shipped head (a checkpoint signed by the
-- identity key, JSON as docs/format.md describes): anyone can check later that the head the fleet
-- holds was shipped by that ledger.

ALTER TABLE ledgers
    ADD COLUMN public_key bytea,
    ADD COLUMN head_statement text;
