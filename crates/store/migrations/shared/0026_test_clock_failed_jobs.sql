-- Test clocks (contract 12.4): a clock never stays `advancing`. A job of
-- the clock that fails for good during an advance is dropped and counted
-- here, in the unit of work that drops it; the advance then goes on and
-- the clock ends `ready`.
ALTER TABLE test_clocks ADD COLUMN failed_jobs BIGINT NOT NULL DEFAULT 0;
