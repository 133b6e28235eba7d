-- Checkout sessions and the records a payment makes (contract 10.1):
-- buyers, payments, captures, orders, invoices with their per-environment
-- numbering, entitlements, stored payment methods, subscriptions and their
-- changes, journeys. Money is a currency code and minor units; lists of
-- items and steps are JSON text written by the store. Every row has a
-- version, bumped by each write (its ETag).
CREATE TABLE buyers (
    buyer_ref       TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    email           TEXT NOT NULL,
    -- The e-mail lower-cased: buyers are found case-insensitively.
    email_key       TEXT NOT NULL,
    name            TEXT,
    created_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE UNIQUE INDEX buyers_by_email ON buyers (environment_ref, email_key);
CREATE INDEX buyers_by_environment ON buyers (environment_ref, created_at, buyer_ref);

CREATE TABLE checkout_sessions (
    checkout_session_ref TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    config_ref      TEXT NOT NULL REFERENCES checkout_configs (config_ref),
    config_version  BIGINT NOT NULL,
    status          TEXT NOT NULL,
    mode            TEXT NOT NULL,
    buyer_email     TEXT NOT NULL,
    buyer_name      TEXT,
    buyer_ref       TEXT,
    journey_ref     TEXT NOT NULL,
    line_items      TEXT NOT NULL,
    currency        TEXT NOT NULL,
    amount_total    BIGINT NOT NULL,
    custom_fields   TEXT NOT NULL,
    payment_intent_ref TEXT,
    subscription_ref TEXT,
    success_url     TEXT NOT NULL,
    cancel_url      TEXT,
    expires_at      BIGINT NOT NULL,
    completed_at    BIGINT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX checkout_sessions_by_environment ON checkout_sessions (environment_ref, created_at, checkout_session_ref);

CREATE TABLE payments (
    payment_intent_ref TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    checkout_session_ref TEXT NOT NULL REFERENCES checkout_sessions (checkout_session_ref),
    buyer_ref       TEXT,
    buyer_email     TEXT NOT NULL,
    buyer_name      TEXT,
    currency        TEXT NOT NULL,
    amount_minor    BIGINT NOT NULL,
    amount_refunded_minor BIGINT NOT NULL DEFAULT 0,
    status          TEXT NOT NULL,
    failure_code    TEXT,
    -- The payment method as given (`pm_card_…` or `spm_…`) and its card.
    method          TEXT NOT NULL,
    card            TEXT NOT NULL,
    save_method     BIGINT NOT NULL DEFAULT 0,
    stored_payment_method_ref TEXT,
    product_refs    TEXT NOT NULL,
    action_expires_at BIGINT,
    captured_at     BIGINT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX payments_by_environment ON payments (environment_ref, created_at, payment_intent_ref);
CREATE INDEX payments_by_session ON payments (checkout_session_ref);

CREATE TABLE captures (
    capture_ref     TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    payment_intent_ref TEXT NOT NULL REFERENCES payments (payment_intent_ref),
    currency        TEXT NOT NULL,
    amount_minor    BIGINT NOT NULL,
    amount_refunded_minor BIGINT NOT NULL DEFAULT 0,
    captured_at     BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX captures_by_environment ON captures (environment_ref, created_at, capture_ref);
CREATE INDEX captures_by_payment ON captures (payment_intent_ref);

CREATE TABLE orders (
    order_ref       TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    checkout_session_ref TEXT NOT NULL UNIQUE REFERENCES checkout_sessions (checkout_session_ref),
    buyer_ref       TEXT NOT NULL REFERENCES buyers (buyer_ref),
    payment_intent_ref TEXT NOT NULL REFERENCES payments (payment_intent_ref),
    line_items      TEXT NOT NULL,
    currency        TEXT NOT NULL,
    amount_total    BIGINT NOT NULL,
    status          TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX orders_by_environment ON orders (environment_ref, created_at, order_ref);

-- The last invoice number given per environment and year: taken and bumped
-- inside the paying transaction, so numbers are gapless and never shared.
CREATE TABLE invoice_counters (
    environment_ref TEXT NOT NULL,
    year            BIGINT NOT NULL,
    last_number     BIGINT NOT NULL,
    PRIMARY KEY (environment_ref, year)
);

CREATE TABLE invoices (
    invoice_ref     TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    number          TEXT NOT NULL,
    order_ref       TEXT NOT NULL REFERENCES orders (order_ref),
    buyer_ref       TEXT NOT NULL REFERENCES buyers (buyer_ref),
    subscription_ref TEXT,
    currency        TEXT NOT NULL,
    amount_total    BIGINT NOT NULL,
    status          TEXT NOT NULL,
    issued_at       BIGINT NOT NULL,
    paid_at         BIGINT,
    created_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE UNIQUE INDEX invoices_by_number ON invoices (environment_ref, number);
CREATE INDEX invoices_by_environment ON invoices (environment_ref, created_at, invoice_ref);

CREATE TABLE entitlements (
    entitlement_ref TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    buyer_ref       TEXT NOT NULL REFERENCES buyers (buyer_ref),
    product_ref     TEXT NOT NULL,
    order_ref       TEXT NOT NULL REFERENCES orders (order_ref),
    status          TEXT NOT NULL,
    granted_at      BIGINT NOT NULL,
    revoked_at      BIGINT,
    created_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX entitlements_by_environment ON entitlements (environment_ref, created_at, entitlement_ref);
CREATE INDEX entitlements_by_order ON entitlements (order_ref);

CREATE TABLE stored_payment_methods (
    stored_payment_method_ref TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    buyer_ref       TEXT NOT NULL REFERENCES buyers (buyer_ref),
    -- The sandbox card it was made from, which decides its outcomes.
    method          TEXT NOT NULL,
    brand           TEXT NOT NULL,
    last4           TEXT NOT NULL,
    exp_month       BIGINT NOT NULL,
    exp_year        BIGINT NOT NULL,
    status          TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX stored_payment_methods_by_environment ON stored_payment_methods (environment_ref, created_at, stored_payment_method_ref);

CREATE TABLE subscriptions (
    subscription_ref TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    buyer_ref       TEXT,
    price_ref       TEXT NOT NULL,
    product_ref     TEXT NOT NULL,
    checkout_session_ref TEXT NOT NULL,
    status          TEXT NOT NULL,
    current_period_start BIGINT,
    current_period_end BIGINT,
    stored_payment_method_ref TEXT,
    started_at      BIGINT,
    canceled_at     BIGINT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX subscriptions_by_environment ON subscriptions (environment_ref, created_at, subscription_ref);
CREATE INDEX subscriptions_by_session ON subscriptions (checkout_session_ref);

CREATE TABLE subscription_changes (
    subscription_change_ref TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    subscription_ref TEXT NOT NULL REFERENCES subscriptions (subscription_ref),
    kind            TEXT NOT NULL,
    from_price_ref  TEXT,
    to_price_ref    TEXT,
    effective_at    BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX subscription_changes_by_environment ON subscription_changes (environment_ref, created_at, subscription_change_ref);

CREATE TABLE journeys (
    journey_ref     TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    checkout_session_ref TEXT NOT NULL,
    buyer_ref       TEXT,
    status          TEXT NOT NULL,
    steps           TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX journeys_by_environment ON journeys (environment_ref, created_at, journey_ref);

-- Journeys as read: with their session's expiry, after which an open
-- journey reads abandoned.
CREATE VIEW journeys_read AS
    SELECT j.*, s.expires_at FROM journeys j
    JOIN checkout_sessions s ON s.checkout_session_ref = j.checkout_session_ref;
