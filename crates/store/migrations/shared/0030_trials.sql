-- Trials (contract 14.3). A session keeps the trial its config version
-- offered when it was made (0: none), so that pay reads no config; a
-- subscription keeps its `trial_end` (null without a trial). The index
-- finds a buyer's earlier subscriptions to a product (one trial per buyer
-- and product).
ALTER TABLE checkout_sessions ADD COLUMN trial_period_days BIGINT NOT NULL DEFAULT 0;
ALTER TABLE subscriptions ADD COLUMN trial_end BIGINT;
CREATE INDEX subscriptions_by_buyer_product ON subscriptions (buyer_ref, product_ref);
