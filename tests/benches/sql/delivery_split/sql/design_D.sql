-- D: today's table, minus every index whose key or predicate references a column the
-- lease/settle updates change (status, next_attempt_at, updated_at, last_response_class).
-- Leaves pkey, unique, by_endpoint, by_env  => all three steps are HOT-eligible.
DROP INDEX webhook_deliveries_due_at, webhook_deliveries_settled,
  webhook_deliveries_failed_by_endpoint, webhook_deliveries_failed_by_endpoint_response,
  webhook_deliveries_failed_by_endpoint_type, webhook_deliveries_failed_by_env,
  webhook_deliveries_open_by_key, webhook_deliveries_blocking;
