-- Retention (contract 12.1): a finished redrive job (`succeeded` or
-- `canceled`; only those have a `finished_at`) goes `retention.request_logs`
-- after it finished. The sweep reads its candidates, oldest first, as a
-- range of this index; open jobs, which have none, are not in it.
CREATE INDEX webhook_redrive_jobs_finished ON webhook_redrive_jobs (finished_at)
    WHERE finished_at IS NOT NULL;
