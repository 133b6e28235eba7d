-- A: today's schema exactly as migrated (public.webhook_deliveries); nothing to do.
SELECT 1;
