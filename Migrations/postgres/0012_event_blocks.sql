-- 0012_event_blocks: the fleet's log in blocks, as a ledger keeps its own (docs/fleet.md, "The
-- log in blocks"). A ship stores each ledger's new events in blocks of at most 1,024: their
-- frames compressed with LZ4 (binary payload v1 inside, times as deltas), and every event's full
-- chain link beside them. One row per event took 292 bytes an event with its index (5,000
-- ledgers, ledger-bench fleet); blocks take 64.
--
-- `migrate` moves the rows of `events` into blocks right after this file, in the same
-- transaction, then drops the old table (FleetStore.moveEventRows). Re-run the GRANTs of
-- docs/fleet.md after it (and the row-level security block where it is used): the table is new.
CREATE TABLE event_blocks (
    ledger_id uuid NOT NULL,
    first_seq bigint NOT NULL,
    last_seq bigint NOT NULL,
    raw_size bigint NOT NULL,                -- bytes of the frames before compression
    frames bytea NOT NULL,                   -- the LZ4 block of the events' frames
    links bytea NOT NULL,                    -- each event's 32-byte chain link, in seq order
    PRIMARY KEY (ledger_id, first_seq),
    CHECK (first_seq >= 1 AND last_seq >= first_seq AND last_seq - first_seq < 1024),
    CHECK (octet_length(links) = 32 * (last_seq - first_seq + 1))
);
-- Compressed already: stored out of line as they are, never compressed again by the server.
ALTER TABLE event_blocks ALTER COLUMN frames SET STORAGE EXTERNAL;
ALTER TABLE event_blocks ALTER COLUMN links SET STORAGE EXTERNAL;

ALTER TABLE events RENAME TO events_before_blocks;

CREATE OR REPLACE FUNCTION forget_unshipped_ledgers(ledgers uuid[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    DELETE FROM public.ledgers l
    WHERE l.ledger_id = ANY (ledgers) AND l.last_seq = 0
        AND NOT EXISTS (SELECT 1 FROM public.event_blocks e WHERE e.ledger_id = l.ledger_id)
$$;
