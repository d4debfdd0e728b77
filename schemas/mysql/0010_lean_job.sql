-- Shoal MySQL/MariaDB schema, version 10: leaner `job` and `result` rows.
--
-- Why: a deployment keeps every session, so a store grows to millions of jobs, and each job
-- used to cost about 900 bytes at rest (1,015 measured right after a run), most of it in
-- indexes:
-- - the identity key repeated the two step names and a 32-byte hash of the candidate's text,
--   in random order, so its pages sat half full;
-- - `job_by_state` held the build key (64 characters for MIOpen's, declared up to 700) in
--   every entry, and claims followed it across the table;
-- - the candidate's text was stored twice (`compile_params`/`run_params`, and `candidate_key`
--   beside its hash);
-- - each result carried a surrogate id and a second index for its session.
--
-- Now:
-- - `identity_hash` is the first 16 bytes of the SHA-256 of the job's identity text:
--   `config_id, solver_id, compile_step, eval_step, candidate key`, joined by newlines, where the
--   candidate key is `shoal_model::candidate_key` (compile then run parameters). The server
--   computes it, from bound values on insert (`queries::INSERT_JOB`) and from the old columns
--   here, with the same expression. 128 bits: two different jobs of one session collide with
--   odds below 2^-64 at 2^32 jobs.
-- - `job_by_state` is (session, state, id): new jobs are claimed oldest first, like the jobs of
--   every other state, no longer by build key. The jobs that share a build are usually far
--   apart in the table (a build serves every shape), so claiming by build key walked the table
--   one page per job; the index no longer holds the key either. The key itself is no longer
--   limited to 700 characters here (the `build` table still keys on it).
-- - `result` is keyed by (job, attempt), which it was unique on already.
--
-- Not done by SQL alone: this file only creates the new tables. `mysql::migrate_lean` copies the
-- rows into them, swaps them in with one atomic RENAME, points the outbox's foreign key at the
-- new `job`, and drops the old tables. Each of its steps checks whether it is already done, so a
-- migration cut off half-way is finished by the next `migrate`, as the other files' statements
-- are.

CREATE TABLE IF NOT EXISTS job_lean (
    id                BIGINT       NOT NULL AUTO_INCREMENT,
    session_id        BIGINT       NOT NULL,
    config_id         BIGINT       NOT NULL,
    solver_id         BIGINT       NOT NULL,
    compile_step      VARCHAR(128) NOT NULL,
    eval_step         VARCHAR(128) NOT NULL,
    identity_hash     BINARY(16)   NOT NULL,
    compile_params    MEDIUMTEXT   NOT NULL,
    run_params        MEDIUMTEXT   NOT NULL,
    build_key         MEDIUMTEXT   NOT NULL,
    state             VARCHAR(16)  NOT NULL CHECK (state IN ('new', 'compile_queued',
                          'compiling', 'compiled', 'eval_queued', 'evaluating', 'evaluated',
                          'errored', 'not_applicable', 'held', 'skipped')),
    attempt           INT UNSIGNED NOT NULL DEFAULT 0,
    retries           INT UNSIGNED NOT NULL DEFAULT 0,
    lease_deadline_ms BIGINT,
    worker            TEXT,
    artifact          TEXT,
    failure_kind      VARCHAR(32),
    last_error        MEDIUMTEXT,
    created_ms        BIGINT       NOT NULL,
    updated_ms        BIGINT       NOT NULL,
    compile_queued_ms BIGINT,
    compiling_ms      BIGINT,
    compiled_ms       BIGINT,
    eval_queued_ms    BIGINT,
    evaluating_ms     BIGINT,
    finished_ms       BIGINT,
    PRIMARY KEY (id),
    -- A job's identity within its session: insert_jobs leaves an existing one as it is.
    UNIQUE KEY job_identity (session_id, identity_hash),
    -- jobs_in_state (equality on session and state, in id order, no sort step), in_flight and
    -- state_counts (prefix session_id, state).
    KEY job_by_state (session_id, state, id),
    -- final_results: one session's jobs in id order, with no sort step.
    KEY job_by_session (session_id, id),
    -- expired_leases: in-flight states with a deadline before now, across sessions.
    KEY job_by_lease (state, lease_deadline_ms),
    CONSTRAINT job_session_ref FOREIGN KEY (session_id) REFERENCES session (id),
    CONSTRAINT job_config_ref FOREIGN KEY (config_id) REFERENCES config (id),
    CONSTRAINT job_solver_ref FOREIGN KEY (solver_id) REFERENCES solver (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Outcomes, one per (job, attempt), never overwritten, as before. `session_id` is the job's
-- session, written with it; the job's own foreign key ties it to the session, so it has none
-- (and no index of its own to keep).
CREATE TABLE IF NOT EXISTS result_lean (
    job_id     BIGINT       NOT NULL,
    attempt    INT UNSIGNED NOT NULL,
    session_id BIGINT       NOT NULL,
    status     VARCHAR(32)  NOT NULL,
    time_us    DOUBLE,
    samples    MEDIUMTEXT,
    workspace  BIGINT,
    detail     MEDIUMTEXT,
    worker     TEXT         NOT NULL,
    device     TEXT         NOT NULL,
    created_ms BIGINT       NOT NULL,
    PRIMARY KEY (job_id, attempt),
    CONSTRAINT result_job_ref FOREIGN KEY (job_id) REFERENCES job_lean (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
