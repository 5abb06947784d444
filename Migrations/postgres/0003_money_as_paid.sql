-- 0003_money_as_paid: each ledger's own catalog, and each transaction's own price (contract 5.1).
--
-- The catalog tables (products, product_contents, related_products) were one row per product for
-- the whole fleet, the newest registration winning: one device's registration changed every other
-- device's revenue. They are now keyed by ledger_id first, like every other table, and a ship
-- replaces that ledger's rows only. A transaction carries the price it was paid, fixed when it
-- was purchased or restored (columns as in a ledger file's migration 0005), and revenue is summed
-- from it, never from the catalog.
--
-- Rows shipped before this migration are kept and approximated: each ledger gets a copy of the
-- old shared rows of the products its transactions name, and each transaction the old shared
-- price (price_source NULL: not known from the ledger). ledgers.rows_version 1 marks such a
-- ledger; its next ship replaces all its rows from the file even when it has no new event
-- (rows_version 2), which makes them exact. Re-ship every ledger after this migration.

ALTER TABLE ledgers ADD COLUMN rows_version smallint NOT NULL DEFAULT 1;

ALTER TABLE transactions
    ADD COLUMN price text,
    ADD COLUMN currency text,
    ADD COLUMN price_source text,             -- 'event'; NULL: from the catalog (or approximated by this migration)
    ADD COLUMN storefront text,
    ADD COLUMN environment text,              -- NULL: production; sandbox, xcode
    ADD COLUMN ownership text,                -- NULL: purchased; familyShared
    ADD COLUMN offer_type text,
    ADD COLUMN offer_id text;

ALTER TABLE products RENAME TO products_v1;
ALTER TABLE product_contents RENAME TO product_contents_v1;
ALTER TABLE related_products RENAME TO related_products_v1;

CREATE TABLE products (
    ledger_id uuid NOT NULL,
    product text NOT NULL,
    kind text NOT NULL,
    price text NOT NULL,
    currency text NOT NULL,
    downloadable boolean NOT NULL,
    title text,
    registered_at_ms bigint NOT NULL,
    PRIMARY KEY (ledger_id, product)
);

CREATE TABLE product_contents (
    ledger_id uuid NOT NULL,
    product text NOT NULL,
    content text NOT NULL,
    latest_version text NOT NULL,
    PRIMARY KEY (ledger_id, product, content)
);

CREATE TABLE related_products (
    ledger_id uuid NOT NULL,
    product text NOT NULL,
    related_product text NOT NULL,
    PRIMARY KEY (ledger_id, product, related_product)
);

CREATE TEMPORARY TABLE ledger_products ON COMMIT DROP AS SELECT DISTINCT ledger_id, product FROM transactions;
INSERT INTO products
    SELECT lp.ledger_id, p.product, p.kind, p.price, p.currency, p.downloadable, p.title, p.registered_at_ms
    FROM products_v1 p JOIN ledger_products lp ON lp.product = p.product;
INSERT INTO product_contents
    SELECT lp.ledger_id, c.product, c.content, c.latest_version
    FROM product_contents_v1 c JOIN ledger_products lp ON lp.product = c.product;
INSERT INTO related_products
    SELECT lp.ledger_id, r.product, r.related_product
    FROM related_products_v1 r JOIN ledger_products lp ON lp.product = r.product;
UPDATE transactions t SET price = p.price, currency = p.currency
    FROM products_v1 p WHERE p.product = t.product AND t.state IN ('purchased', 'restored');

DROP TABLE products_v1;
DROP TABLE product_contents_v1;
DROP TABLE related_products_v1;
