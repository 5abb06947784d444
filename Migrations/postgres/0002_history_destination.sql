-- 0002_history_destination: as in a ledger file (its migration 0004), a row of
-- owned_content_history holds NULL for its download's latest copy-out, whose destination is the
-- download's (downloads.destination); earlier copy-outs of the same download keep theirs.
ALTER TABLE owned_content_history ALTER COLUMN destination DROP NOT NULL;
UPDATE owned_content_history h SET destination = NULL
    FROM (SELECT ledger_id, download_id, max(seq) AS seq FROM owned_content_history GROUP BY ledger_id, download_id) latest
    WHERE h.ledger_id = latest.ledger_id AND h.seq = latest.seq AND h.destination IS NOT NULL;
