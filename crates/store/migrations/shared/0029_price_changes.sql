-- Subscriptions that change price (contract 14.2).

-- A buyer's credit balance, per currency: what price changes gave back and
-- later invoices use first (`credit_applied`). It never goes below zero:
-- every use is a conditional update (`amount_minor >= $n`), and the check
-- holds whatever a statement does.
CREATE TABLE credit_balances (
    buyer_ref       TEXT NOT NULL,
    currency        TEXT NOT NULL,
    environment_ref TEXT NOT NULL,
    amount_minor    BIGINT NOT NULL DEFAULT 0 CHECK (amount_minor >= 0),
    updated_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1,
    PRIMARY KEY (buyer_ref, currency)
);

-- The buyer shows its balance in its currency (the currency of its first
-- order, or of its first credit): `credit_minor` mirrors that currency's
-- row of `credit_balances`, written in the same unit of work.
ALTER TABLE buyers ADD COLUMN credit_currency TEXT;
ALTER TABLE buyers ADD COLUMN credit_minor BIGINT NOT NULL DEFAULT 0;
UPDATE buyers SET credit_currency = (
    SELECT orders.currency FROM orders WHERE orders.buyer_ref = buyers.buyer_ref
    ORDER BY orders.created_at, orders.order_ref LIMIT 1
);

-- A `next_invoice` change's proration lines, waiting for the next
-- renewal's invoice: `{"currency": …, "lines": [...]}` as invoices keep
-- lines, or NULL when none wait.
ALTER TABLE subscriptions ADD COLUMN pending_invoice_lines TEXT;

-- A `price_change`'s proration mode (NULL for other kinds).
ALTER TABLE subscription_changes ADD COLUMN proration TEXT;
