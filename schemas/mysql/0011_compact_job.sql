-- Shoal MySQL/MariaDB schema, version 11: compact `job` and `result` rows, fixed in size.
--
-- Why: after migration 10 a finished job still cost 650 to 770 bytes at rest (data and
-- indexes, measured by `shoal bench dispatch`), about 3.5 times what its values need:
-- - every row repeated strings that many rows share: two step names, the build key, the
--   worker's name, the artifact's 64-character hash, the failure kind; every result its status,
--   worker and device;
-- - a row grew at almost every state change (a lease set, a NULL timestamp filled in, a worker
--   named), so InnoDB split pages that had been filled at insert, and left them half full;
-- - six secondary indexes: two (`job_by_session`, `job_by_lease`) for queries that another
--   index can answer, and two that InnoDB adds by itself for the foreign keys to `config` and
--   `solver` (26 bytes a job each);
-- - every page of a finished session stayed as large as when it was written, though its rows
--   are alike (the same few labels and ids, timestamps close together) and it is read only by
--   reports.
--
-- Now:
-- - `label` holds each distinct string once; the columns above hold its 4-byte id. Labels are
--   never changed or deleted, so an id, once read, names the same text for good. 0 means none.
--   The store writes labels before the rows that name them, in the same transaction
--   (`mysql::labels`), and statements turn text into ids with `(SELECT id FROM label WHERE
--   text = ?)`, so no id ever crosses the wire and no cache can go stale.
-- - `state` is an ENUM (1 byte), still read and written as its name.
-- - Every column a state change sets is NOT NULL with a default (0 for no lease, no worker, no
--   timestamp yet): the row keeps its size from insert to the end, and every update is in
--   place. Only `last_error` (a failure) can grow a row.
-- - Indexes: the identity, and `job_by_state` as (state, session, id): claims are equality on
--   both and read in id order; the lease sweep reads the in-flight states across sessions (a
--   bounded range: the in-flight window); per-session counts and exports name every state
--   (`queries::STATE_COUNTS`). `job_by_session` and `job_by_lease` are gone.
-- - `job` keeps its foreign key to `session` (served by `job_identity`'s prefix) but not those
--   to `config` and `solver`: configs and solvers are never deleted (no role may), so those
--   keys only ever checked inserts, at the price of an index each over every job. The ids come
--   from the store's own upserts (`insert_jobs` is handed what `upsert_configs` and
--   `upsert_solvers` returned).
-- - `result` loses `session_id` (its job has it).
-- - Both tables are `ROW_FORMAT = COMPRESSED` with 8 KiB pages: InnoDB keeps each page
--   zlib-compressed on disk and in the buffer pool, and a decompressed copy only of the pages in
--   use. Rows of one session compress well (measured: about half), so the finished sessions a
--   store keeps cost half the disk and half the pool, and the hot pages of running sessions
--   keep their place in the pool. The dispatch rate is unchanged (BENCHMARKS.md, "Dispatch").
--   It needs a server that writes compressed tables: MySQL 5.7 and later, MariaDB 10.6.6 and
--   later or 10.5 and earlier (10.6.0 to 10.6.5 set innodb_read_only_compressed = ON, which
--   `migrate_compact` checks before this file runs).
--
-- Not done by SQL alone: this file only creates the new tables. `mysql::migrate_compact` fills
-- `label`, copies the rows into `job_compact` and `result_compact` with their labels, and swaps
-- them in, step by step, each step checking whether it is already done, as migration 10 does.

CREATE TABLE IF NOT EXISTS label (
    id   INT UNSIGNED    NOT NULL AUTO_INCREMENT,
    -- Bytes, compared exactly: a label is the text it was written as. 3072 bytes is InnoDB's
    -- longest index key; build keys (the longest labels) are limited to 700 characters by the
    -- `build` table already.
    text VARBINARY(3072) NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY label_text (text)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS job_compact (
    id                BIGINT       NOT NULL AUTO_INCREMENT,
    session_id        BIGINT       NOT NULL,
    config_id         BIGINT       NOT NULL,
    solver_id         BIGINT       NOT NULL,
    compile_step      INT UNSIGNED NOT NULL,
    eval_step         INT UNSIGNED NOT NULL,
    identity_hash     BINARY(16)   NOT NULL,
    compile_params    MEDIUMTEXT   NOT NULL,
    run_params        MEDIUMTEXT   NOT NULL,
    build_key         INT UNSIGNED NOT NULL,
    state             ENUM('new', 'compile_queued', 'compiling', 'compiled', 'eval_queued',
                          'evaluating', 'evaluated', 'errored', 'not_applicable', 'held',
                          'skipped') NOT NULL,
    attempt           INT UNSIGNED NOT NULL DEFAULT 0,
    retries           INT UNSIGNED NOT NULL DEFAULT 0,
    lease_deadline_ms BIGINT       NOT NULL DEFAULT 0,
    worker            INT UNSIGNED NOT NULL DEFAULT 0,
    artifact          INT UNSIGNED NOT NULL DEFAULT 0,
    failure_kind      INT UNSIGNED NOT NULL DEFAULT 0,
    last_error        MEDIUMTEXT,
    created_ms        BIGINT       NOT NULL,
    updated_ms        BIGINT       NOT NULL,
    compile_queued_ms BIGINT       NOT NULL DEFAULT 0,
    compiling_ms      BIGINT       NOT NULL DEFAULT 0,
    compiled_ms       BIGINT       NOT NULL DEFAULT 0,
    eval_queued_ms    BIGINT       NOT NULL DEFAULT 0,
    evaluating_ms     BIGINT       NOT NULL DEFAULT 0,
    finished_ms       BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    -- A job's identity within its session: insert_jobs leaves an existing one as it is.
    UNIQUE KEY job_identity (session_id, identity_hash),
    -- Claims (equality on state and session, in id order), in_flight, the lease sweep (the
    -- in-flight states across sessions), state counts, final results and finish times (every
    -- state, or every finished state, of one session).
    KEY job_by_state (state, session_id, id),
    CONSTRAINT job_session_fk FOREIGN KEY (session_id) REFERENCES session (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin ROW_FORMAT = COMPRESSED KEY_BLOCK_SIZE = 8;

-- Outcomes, one per (job, attempt), never overwritten, as before; `status`, `worker` and
-- `device` are labels.
CREATE TABLE IF NOT EXISTS result_compact (
    job_id     BIGINT       NOT NULL,
    attempt    INT UNSIGNED NOT NULL,
    status     INT UNSIGNED NOT NULL,
    time_us    DOUBLE,
    samples    MEDIUMTEXT,
    workspace  BIGINT,
    detail     MEDIUMTEXT,
    worker     INT UNSIGNED NOT NULL,
    device     INT UNSIGNED NOT NULL,
    created_ms BIGINT       NOT NULL,
    PRIMARY KEY (job_id, attempt),
    CONSTRAINT result_job_fk FOREIGN KEY (job_id) REFERENCES job_compact (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin ROW_FORMAT = COMPRESSED KEY_BLOCK_SIZE = 8;
