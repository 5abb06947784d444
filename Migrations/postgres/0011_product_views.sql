-- 0011_product_views: each ledger's store product views (SKStoreProductViewController and
-- SKOverlay presentations), as its `product_views` projection holds them; replaced by every ship
-- like the other projection rows. Re-run the GRANTs of docs/fleet.md after it (and the
-- row-level security block where it is used): the table is new.
CREATE TABLE product_views (
    ledger_id uuid NOT NULL,
    view_id text NOT NULL,
    item text NOT NULL,
    style text NOT NULL,
    state text NOT NULL,
    affiliate_token text,
    campaign_token text,
    provider_token text,
    error_domain text,
    error_code bigint,
    error_message text,
    presented_at_ms bigint,
    loaded_at_ms bigint,
    failed_at_ms bigint,
    dismissed_at_ms bigint,
    replaced_at_ms bigint,
    replaces_view text,
    events bigint NOT NULL,
    PRIMARY KEY (ledger_id, view_id)
);
CREATE INDEX product_views_by_presentation ON product_views (presented_at_ms);
