-- 0005_erased_users: users erased from the fleet (`purchase-ledger forget postgres://... --user U`,
-- contract 5.3). Not the user ids: each ledger's own number for the user id (its ref in the
-- ledger's personal_values, which the shipped payloads hold). A later ship of a device that still
-- holds the user sends its rows with the user's values replaced by markers, so the user does not
-- come back. The shipping role reads this table: GRANT SELECT ON erased_users TO the shipping role
-- (docs/fleet.md).
CREATE TABLE erased_users (
    ledger_id uuid NOT NULL,
    user_ref bigint NOT NULL,
    erased_at timestamptz NOT NULL,
    PRIMARY KEY (ledger_id, user_ref)
);
