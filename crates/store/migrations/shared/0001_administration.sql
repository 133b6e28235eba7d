-- Administration: environments, service accounts, credentials, grants,
-- idempotency records and request logs. Timestamps are Unix milliseconds.

CREATE TABLE environments (
    environment_ref TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    mode            TEXT NOT NULL UNIQUE CHECK (mode IN ('sandbox', 'live')),
    created_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);

CREATE TABLE service_accounts (
    principal_ref   TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL REFERENCES environments (environment_ref),
    name            TEXT NOT NULL,
    description     TEXT,
    status          TEXT NOT NULL CHECK (status IN ('active', 'suspended', 'retired')),
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    suspended_at    BIGINT,
    retired_at      BIGINT,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX service_accounts_by_env ON service_accounts (environment_ref, created_at DESC, principal_ref DESC);
CREATE UNIQUE INDEX service_accounts_admin ON service_accounts (environment_ref, name) WHERE name = 'admin';

CREATE TABLE credentials (
    credential_ref            TEXT PRIMARY KEY,
    environment_ref           TEXT NOT NULL REFERENCES environments (environment_ref),
    principal_ref             TEXT NOT NULL REFERENCES service_accounts (principal_ref),
    name                      TEXT,
    status                    TEXT NOT NULL CHECK (status IN ('active', 'revoked')),
    secret_digest             TEXT NOT NULL UNIQUE,
    secret_hint               TEXT NOT NULL,
    previous_secret_digest    TEXT,
    previous_secret_expires_at BIGINT,
    created_at                BIGINT NOT NULL,
    updated_at                BIGINT NOT NULL,
    expires_at                BIGINT,
    last_used_at              BIGINT,
    revoked_at                BIGINT,
    version                   BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX credentials_by_principal ON credentials (principal_ref, created_at DESC, credential_ref DESC);
CREATE INDEX credentials_by_previous ON credentials (previous_secret_digest);

CREATE TABLE grants (
    grant_id          TEXT PRIMARY KEY,
    environment_ref   TEXT NOT NULL REFERENCES environments (environment_ref),
    principal_ref     TEXT NOT NULL REFERENCES service_accounts (principal_ref),
    permission_action TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('active', 'revoked')),
    granted_at        BIGINT NOT NULL,
    revoked_at        BIGINT
);
CREATE UNIQUE INDEX grants_one_active ON grants (principal_ref, permission_action) WHERE status = 'active';
CREATE INDEX grants_by_principal ON grants (principal_ref, granted_at DESC);

CREATE TABLE idempotency_keys (
    environment_ref TEXT NOT NULL,
    principal_ref   TEXT NOT NULL,
    operation_id    TEXT NOT NULL,
    idem_key        TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('in_flight', 'done')),
    status_code     BIGINT,
    response_body   TEXT,
    response_etag   TEXT,
    created_at      BIGINT NOT NULL,
    locked_at       BIGINT NOT NULL,
    PRIMARY KEY (environment_ref, principal_ref, operation_id, idem_key)
);
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);

CREATE TABLE request_logs (
    request_log_ref TEXT PRIMARY KEY,
    environment_ref TEXT,
    operation_id    TEXT,
    method          TEXT NOT NULL,
    path            TEXT NOT NULL,
    status          BIGINT NOT NULL,
    error_code      TEXT,
    principal_ref   TEXT,
    credential_ref  TEXT,
    idempotency_key TEXT,
    duration_ms     BIGINT NOT NULL,
    created_at      BIGINT NOT NULL
);
CREATE INDEX request_logs_by_env ON request_logs (environment_ref, created_at DESC, request_log_ref DESC);
