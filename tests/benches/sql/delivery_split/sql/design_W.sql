-- W: today's schema as migrated; the lifecycle (kind 'born') inserts each row with its settled
-- state, as a dispatcher that attempts before it writes would.
SELECT 1;
