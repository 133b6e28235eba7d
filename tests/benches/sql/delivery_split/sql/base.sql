-- rows every design needs (FK targets), and pg_walinspect
CREATE EXTENSION IF NOT EXISTS pg_walinspect;
INSERT INTO environments (environment_ref, name, mode, created_at, version)
VALUES ('env_4Usv0VUT6ePh', 'Sandbox', 'sandbox', 1795987400000, 1);
INSERT INTO webhook_endpoints (endpoint_ref, environment_ref, url, description, status, created_at, updated_at)
VALUES ('whep_4UthzoaVrKja', 'env_4Usv0VUT6ePh', 'https://example.com/hook', NULL, 'active', 1795987400000, 1795987400000);
