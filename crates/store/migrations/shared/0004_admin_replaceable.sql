-- A retired bootstrap `admin` no longer blocks its replacement: only one
-- admin that is not retired may exist per environment.
DROP INDEX service_accounts_admin;
CREATE UNIQUE INDEX service_accounts_admin ON service_accounts (environment_ref, name) WHERE name = 'admin' AND status <> 'retired';
