-- Where a subscription's periods are counted from once a price change to
-- another interval started a new period at the change (contract 14.2):
-- every later period ends a whole number of intervals after it. Null: they
-- count from `trial_end`, or else from `started_at`, as before.
ALTER TABLE subscriptions ADD COLUMN period_anchor BIGINT;
