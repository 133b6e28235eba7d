-- Refunds, the resources other systems own (disputes, payouts,
-- participations, projected from their events), and durable timed work.
--
-- A capture's `amount_reserved_minor` is what its scheduled, pending and
-- succeeded refunds hold: a refund reserves its amount with one conditional
-- update of the capture (never above the captured amount), and a failed or
-- canceled one gives it back.
ALTER TABLE captures ADD COLUMN amount_reserved_minor BIGINT NOT NULL DEFAULT 0;

CREATE TABLE refunds (
    refund_ref      TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    payment_intent_ref TEXT NOT NULL REFERENCES payments (payment_intent_ref),
    capture_ref     TEXT NOT NULL REFERENCES captures (capture_ref),
    status          TEXT NOT NULL,
    scope           TEXT NOT NULL,
    currency        TEXT NOT NULL,
    amount_minor    BIGINT NOT NULL,
    reason          TEXT NOT NULL,
    access_effect   TEXT NOT NULL,
    requested_at    BIGINT NOT NULL,
    scheduled_at    BIGINT,
    executed_at     BIGINT,
    canceled_at     BIGINT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX refunds_by_environment ON refunds (environment_ref, created_at, refund_ref);
CREATE INDEX refunds_by_payment ON refunds (payment_intent_ref);

-- Disputes, payouts and participations: the resource as projected (`body`,
-- the API's JSON of it) with the columns lists filter on, and the time of
-- the last event applied (an older event changes nothing).
CREATE TABLE disputes (
    dispute_ref     TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    payment_intent_ref TEXT NOT NULL,
    status          TEXT NOT NULL,
    body            TEXT NOT NULL,
    applied_at      BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX disputes_by_environment ON disputes (environment_ref, created_at, dispute_ref);
CREATE INDEX disputes_by_payment ON disputes (payment_intent_ref);

CREATE TABLE payouts (
    payout_ref      TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    status          TEXT NOT NULL,
    body            TEXT NOT NULL,
    applied_at      BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX payouts_by_environment ON payouts (environment_ref, created_at, payout_ref);

CREATE TABLE participations (
    participation_ref TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    status          TEXT NOT NULL,
    body            TEXT NOT NULL,
    applied_at      BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX participations_by_environment ON participations (environment_ref, created_at, participation_ref);

-- Timed work: one row per thing to do later (start a scheduled refund,
-- settle a pending one, open a sandbox dispute). A runner leases a due
-- job, and deletes it in the transaction that makes its effects, so a job
-- survives a restart and its effects commit once.
CREATE TABLE jobs (
    kind            TEXT NOT NULL,
    subject_ref     TEXT NOT NULL,
    environment_ref TEXT NOT NULL,
    due_at          BIGINT NOT NULL,
    lease_owner     TEXT,
    lease_until     BIGINT,
    created_at      BIGINT NOT NULL,
    PRIMARY KEY (kind, subject_ref)
);
CREATE INDEX jobs_by_due ON jobs (due_at);
