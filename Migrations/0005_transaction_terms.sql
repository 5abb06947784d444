-- 0005_transaction_terms: what a transaction was paid, where and by whom, fixed when it was
-- purchased or restored (contract 5.1): its event's own price and currency, else the product's
-- registration in force at that seq (price_source 'event' when the event gave it, NULL when the
-- catalog did; price NULL when neither existed), the storefront, the environment (NULL for
-- production, else sandbox or xcode), the ownership (NULL for purchased, else familyShared) and
-- the offer. NULL stands for what nearly every row holds: spelled out, those three columns cost
-- 2.9 bytes per event of the 1,000,000-event workload. A ledger written before this migration has its
-- projections rebuilt from the log on its next writable open (reducer 2, projections 2), which
-- fills these columns for every transaction as its seq decides.
ALTER TABLE transactions ADD COLUMN price TEXT;
ALTER TABLE transactions ADD COLUMN currency TEXT;
ALTER TABLE transactions ADD COLUMN price_source TEXT;
ALTER TABLE transactions ADD COLUMN storefront TEXT;
ALTER TABLE transactions ADD COLUMN environment TEXT;
ALTER TABLE transactions ADD COLUMN ownership TEXT;
ALTER TABLE transactions ADD COLUMN offer_type TEXT;
ALTER TABLE transactions ADD COLUMN offer_id TEXT;
