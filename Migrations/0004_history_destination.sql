-- 0004_history_destination: a row of owned_content_history keeps its destination only when it is
-- not its download's latest copy-out; the latest one's is the download's own (downloads.destination),
-- and the row holds NULL. A destination is a path of 50-120 bytes and nearly every download is
-- copied out once, so each was stored twice: 3.7 bytes per event of the shared 1,000,000-event
-- workload. owned_content_history_view gives every row its destination, as before.
DROP VIEW owned_content_history_view;

CREATE TABLE owned_content_history_new (
    seq INTEGER PRIMARY KEY,             -- the contentCopiedOut event
    download_id TEXT NOT NULL,
    destination TEXT,                    -- NULL for the download's latest copy-out: downloads.destination
    copied_at_ms INTEGER NOT NULL,
    superseded_at_ms INTEGER,
    deleted_at_ms INTEGER
);
INSERT INTO owned_content_history_new (seq, download_id, destination, copied_at_ms, superseded_at_ms, deleted_at_ms)
    SELECT seq, download_id,
           CASE WHEN seq IN (SELECT max(seq) FROM owned_content_history GROUP BY download_id) THEN NULL ELSE destination END,
           copied_at_ms, superseded_at_ms, deleted_at_ms
    FROM owned_content_history ORDER BY seq;
DROP TABLE owned_content_history;
ALTER TABLE owned_content_history_new RENAME TO owned_content_history;

CREATE VIEW owned_content_history_view AS
    SELECT h.seq, t.product, d.content, d.content_version, coalesce(h.destination, d.destination) AS destination,
           d.transaction_id, t.user_id, h.download_id, h.copied_at_ms, h.superseded_at_ms, h.deleted_at_ms
    FROM owned_content_history h
    JOIN downloads d ON d.download_id = h.download_id
    JOIN transactions t ON t.transaction_id = d.transaction_id;
