-- Shoal SQLite schema, version 11: new jobs are claimed oldest first (by id, through
-- `job_by_state`), like the jobs of every other state, no longer in build-key order.
--
-- Why: the jobs that share a build are usually far apart in the table (a build serves every
-- shape, and a spec loads shape by shape), so claiming by build key walked the whole table, one
-- page per job: a session of a million jobs dispatched at about 12,000 jobs/s against 16,000
-- for one of 100,000, and at 22,000 once claims went by id. The partial index that served the
-- old order is only a cost now.
DROP INDEX IF EXISTS job_new_by_build;
