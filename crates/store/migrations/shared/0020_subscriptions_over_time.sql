-- Subscriptions over time (contract 12.4): renewals, dunning, cancel and
-- test clocks.

-- A subscription set to cancel at its period's end, why one was canceled,
-- and the test clock it lives on (NULL: the wall clock).
ALTER TABLE subscriptions ADD COLUMN cancel_at_period_end BIGINT NOT NULL DEFAULT 0;
ALTER TABLE subscriptions ADD COLUMN cancel_reason TEXT;
ALTER TABLE subscriptions ADD COLUMN test_clock_ref TEXT;
ALTER TABLE buyers ADD COLUMN test_clock_ref TEXT;
ALTER TABLE checkout_sessions ADD COLUMN test_clock_ref TEXT;

-- The payment that paid an invoice (NULL while it is open), and how many
-- times its charge was tried (dunning counts its retries from it).
ALTER TABLE invoices ADD COLUMN payment_intent_ref TEXT;
ALTER TABLE invoices ADD COLUMN attempt_count BIGINT NOT NULL DEFAULT 1;
UPDATE invoices SET payment_intent_ref = (
    SELECT orders.payment_intent_ref FROM orders WHERE orders.order_ref = invoices.order_ref
);
-- A subscription's open invoice is found when its retry runs.
CREATE INDEX invoices_open_by_subscription ON invoices (subscription_ref) WHERE status = 'open';

-- Timed work of a subscription on a test clock runs when its clock
-- advances past it, never by the wall clock.
ALTER TABLE jobs ADD COLUMN test_clock_ref TEXT;
CREATE INDEX jobs_by_clock ON jobs (test_clock_ref, due_at) WHERE test_clock_ref IS NOT NULL;

CREATE TABLE test_clocks (
    test_clock_ref  TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    name            TEXT,
    frozen_time     BIGINT NOT NULL,
    status          TEXT NOT NULL,
    -- Where an advance that is running goes (NULL when ready).
    advance_to      BIGINT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX test_clocks_by_environment ON test_clocks (environment_ref, created_at, test_clock_ref);
