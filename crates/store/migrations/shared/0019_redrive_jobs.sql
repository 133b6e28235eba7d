-- Redrive jobs (contract 12.2): a filter's deliveries, selected when the
-- job starts (`counting`, resumable from its cursor), kept as the job's
-- items, then redriven once each (`running`): an item is deleted in the
-- transaction that redrives its delivery, so a job survives restarts and
-- redrives each delivery once, whatever the number of runners. A runner
-- holds the job under a lease.
CREATE TABLE webhook_redrive_jobs (
    redrive_job_ref TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('counting', 'running', 'succeeded', 'canceled')),
    filter          TEXT NOT NULL,
    reason          TEXT NOT NULL,
    dry_run         BIGINT NOT NULL,
    matched         BIGINT NOT NULL DEFAULT 0,
    redriven        BIGINT NOT NULL DEFAULT 0,
    skipped         BIGINT NOT NULL DEFAULT 0,
    cursor_at       BIGINT,
    cursor_ref      TEXT,
    lease_owner     TEXT,
    lease_until     BIGINT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    finished_at     BIGINT,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX webhook_redrive_jobs_by_env
    ON webhook_redrive_jobs (environment_ref, created_at, redrive_job_ref);
CREATE INDEX webhook_redrive_jobs_open ON webhook_redrive_jobs (created_at)
    WHERE status IN ('counting', 'running');

CREATE TABLE webhook_redrive_job_items (
    redrive_job_ref TEXT NOT NULL REFERENCES webhook_redrive_jobs (redrive_job_ref),
    delivery_ref    TEXT NOT NULL,
    PRIMARY KEY (redrive_job_ref, delivery_ref)
);
