-- 0009_product_views: each store product view (SKStoreProductViewController, SKOverlay: the
-- App Store's page of another item shown in the app), as the storeProductView events leave it.
-- A projection like the others: rebuilt from the log, compared by verify, shipped to the fleet.
CREATE TABLE product_views (
    view_id TEXT PRIMARY KEY NOT NULL,   -- the app's id for this presentation
    item TEXT NOT NULL,                  -- the item's Apple ID, digits
    style TEXT NOT NULL,                 -- sheet or overlay
    state TEXT NOT NULL,                 -- presented, loaded, failed, dismissed
    affiliate_token TEXT,
    campaign_token TEXT,
    provider_token TEXT,
    error_domain TEXT,                   -- the load's error, when it failed
    error_code INTEGER,
    error_message TEXT,
    presented_at_ms INTEGER,
    loaded_at_ms INTEGER,
    failed_at_ms INTEGER,
    dismissed_at_ms INTEGER,
    replaced_at_ms INTEGER,              -- another presentation came while it was on screen
    replaces_view TEXT,                  -- the view this presentation replaced on screen
    events INTEGER NOT NULL              -- events stored in its stream
) WITHOUT ROWID;
CREATE INDEX product_views_by_item ON product_views (item, style);
