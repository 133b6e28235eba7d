-- Webhooks: endpoints with versioned signing secrets (encrypted at rest),
-- subscriptions, data profile grants, deliveries and their attempts.

CREATE TABLE webhook_endpoints (
    endpoint_ref    TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL REFERENCES environments (environment_ref),
    url             TEXT NOT NULL,
    description     TEXT,
    status          TEXT NOT NULL CHECK (status IN ('active', 'paused', 'disabled')),
    url_immutable   BIGINT NOT NULL DEFAULT 0,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX webhook_endpoints_by_env ON webhook_endpoints (environment_ref, created_at DESC, endpoint_ref DESC);

CREATE TABLE webhook_secret_versions (
    endpoint_ref      TEXT NOT NULL REFERENCES webhook_endpoints (endpoint_ref),
    environment_ref   TEXT NOT NULL,
    version           BIGINT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('active', 'pending', 'retiring', 'revoked', 'expired')),
    secret_ciphertext TEXT NOT NULL,
    secret_hint       TEXT NOT NULL,
    created_at        BIGINT NOT NULL,
    expires_at        BIGINT,
    PRIMARY KEY (endpoint_ref, version)
);

CREATE TABLE webhook_subscriptions (
    subscription_id   TEXT PRIMARY KEY,
    endpoint_ref      TEXT NOT NULL REFERENCES webhook_endpoints (endpoint_ref),
    environment_ref   TEXT NOT NULL,
    public_event_type TEXT NOT NULL,
    scope_type        TEXT NOT NULL,
    scope_ref         TEXT NOT NULL,
    dto_version       BIGINT NOT NULL,
    custom_field_refs TEXT NOT NULL,
    created_at        BIGINT NOT NULL,
    UNIQUE (endpoint_ref, public_event_type, scope_type, scope_ref)
);
CREATE INDEX webhook_subscriptions_by_type ON webhook_subscriptions (environment_ref, public_event_type);

CREATE TABLE webhook_data_profile_grants (
    grant_id          TEXT PRIMARY KEY,
    endpoint_ref      TEXT NOT NULL REFERENCES webhook_endpoints (endpoint_ref),
    environment_ref   TEXT NOT NULL,
    purpose           TEXT NOT NULL,
    reason            TEXT NOT NULL,
    data_classes      TEXT NOT NULL,
    custom_field_refs TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('active', 'revoked')),
    created_at        BIGINT NOT NULL,
    revoked_at        BIGINT,
    revoke_reason     TEXT
);
CREATE UNIQUE INDEX webhook_data_profile_grants_one_active ON webhook_data_profile_grants (endpoint_ref) WHERE status = 'active';
CREATE INDEX webhook_data_profile_grants_by_endpoint ON webhook_data_profile_grants (endpoint_ref, created_at DESC);

CREATE TABLE webhook_deliveries (
    delivery_ref      TEXT PRIMARY KEY,
    environment_ref   TEXT NOT NULL,
    endpoint_ref      TEXT NOT NULL REFERENCES webhook_endpoints (endpoint_ref),
    event_ref         TEXT NOT NULL,
    public_event_type TEXT NOT NULL,
    dto_version       BIGINT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('pending', 'held', 'succeeded', 'failed')),
    diagnostic        BIGINT NOT NULL,
    generation        BIGINT NOT NULL,
    attempt_count     BIGINT NOT NULL DEFAULT 0,
    next_attempt_at   BIGINT,
    last_attempt_at   BIGINT,
    occurred_at       BIGINT NOT NULL,
    event_data        TEXT NOT NULL,
    match_reasons     TEXT NOT NULL,
    body_status       TEXT NOT NULL CHECK (body_status IN ('available', 'redacted', 'expired')),
    payload           TEXT,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    version           BIGINT NOT NULL DEFAULT 1,
    UNIQUE (event_ref, endpoint_ref, dto_version)
);
CREATE INDEX webhook_deliveries_by_endpoint ON webhook_deliveries (endpoint_ref, created_at DESC, delivery_ref DESC);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);

CREATE TABLE webhook_attempts (
    attempt_ref           TEXT PRIMARY KEY,
    delivery_ref          TEXT NOT NULL REFERENCES webhook_deliveries (delivery_ref),
    environment_ref       TEXT NOT NULL,
    endpoint_ref          TEXT NOT NULL,
    generation            BIGINT NOT NULL,
    attempt_number        BIGINT NOT NULL,
    status                TEXT NOT NULL CHECK (status IN ('succeeded', 'failed')),
    response_status       BIGINT,
    error                 TEXT,
    response_body_excerpt TEXT,
    duration_ms           BIGINT NOT NULL,
    started_at            BIGINT NOT NULL,
    next_attempt_at       BIGINT,
    created_at            BIGINT NOT NULL,
    UNIQUE (delivery_ref, generation, attempt_number)
);
CREATE INDEX webhook_attempts_by_delivery ON webhook_attempts (delivery_ref, created_at DESC, attempt_ref DESC);
CREATE INDEX webhook_attempts_by_endpoint ON webhook_attempts (endpoint_ref, started_at DESC);
