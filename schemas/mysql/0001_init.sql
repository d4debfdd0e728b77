-- Shoal MySQL/MariaDB schema, version 1: the same tables, keys and indexes as
-- schemas/sqlite/0001_init.sql, in MySQL types.
--
-- Applied by `shoal db migrate` (MysqlStore::migrate), statement by statement, followed by the row
-- in `schema_version` that records it. MySQL commits every DDL statement on its own, so a
-- migration cannot be one transaction: every statement here must be safe to run again
-- (`CREATE TABLE IF NOT EXISTS`, indexes declared inside the table), so that a migration cut off
-- half-way is finished by the next `migrate`. Never edit a released migration: add 0003_*.sql.
--
-- Conventions:
-- - InnoDB, utf8mb4 with the binary collation `utf8mb4_bin`: case-sensitive, ordered by code
--   point (the byte order SQLite's BINARY collation uses), portable to MySQL 8 and MariaDB.
--   It is a PAD SPACE collation, so `'a' = 'a '`; the identity columns where that would matter
--   (config key, candidate key) are compared through a SHA-256 of their exact bytes instead.
-- - Ids are BIGINT AUTO_INCREMENT; timestamps are BIGINT milliseconds since the Unix epoch.
-- - Free text is TEXT/MEDIUMTEXT; indexed text is VARCHAR, sized so that every index stays
--   under InnoDB's 3072-byte key limit (4 bytes a character).
--
-- Every query on a hot path is backed by an index here; crates/shoal-store/tests/mysql_explain.rs
-- runs EXPLAIN on each of them and fails on a full table scan.

-- One tuning campaign. Every column of NewSession is part of the identity `find_session` matches.
CREATE TABLE IF NOT EXISTS session (
    id              BIGINT       NOT NULL AUTO_INCREMENT,
    reason          TEXT         NOT NULL,
    arch            VARCHAR(255) NOT NULL,
    num_cu          INT UNSIGNED NOT NULL,
    backend         VARCHAR(255) NOT NULL,
    spec            MEDIUMTEXT   NOT NULL,
    spec_path       TEXT         NOT NULL,
    library_version TEXT         NOT NULL,
    driver_version  TEXT         NOT NULL,
    max_retries     INT UNSIGNED NOT NULL,
    created_ms      BIGINT       NOT NULL,
    PRIMARY KEY (id),
    -- find_session narrows by the short identity columns first; the rest are compared on few rows.
    KEY session_identity (arch, num_cu, backend)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One problem; `key` is its canonical text, unique through `key_hash` (its SHA-256, computed by
-- the server: TEXT cannot be a unique key whole). `params` is the JSON of shoal_model::Params.
CREATE TABLE IF NOT EXISTS config (
    id       BIGINT       NOT NULL AUTO_INCREMENT,
    kind     VARCHAR(255) NOT NULL,
    `key`    MEDIUMTEXT   NOT NULL,
    key_hash BINARY(32)   AS (UNHEX(SHA2(`key`, 256))) STORED,
    params   MEDIUMTEXT   NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY config_key (key_hash)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS config_tag (
    config_id BIGINT       NOT NULL,
    tag       VARCHAR(255) NOT NULL,
    UNIQUE KEY config_tag_unique (config_id, tag),
    -- configs_with_tag: by tag, already in config id order.
    KEY config_tag_by_tag (tag, config_id),
    CONSTRAINT config_tag_config FOREIGN KEY (config_id) REFERENCES config (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS solver (
    id      BIGINT       NOT NULL AUTO_INCREMENT,
    name    VARCHAR(255) NOT NULL,
    tunable TINYINT      NOT NULL CHECK (tunable IN (0, 1)),
    PRIMARY KEY (id),
    UNIQUE KEY solver_name (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One unit of tuning work. `state` and `attempt` are the compare-and-set pair of every change;
-- one timestamp column per state a job can enter (finished_ms for the terminal ones) tells where
-- the time went. `candidate_hash` is the SHA-256 of `candidate_key`, so the identity of a job is
-- a unique key of bounded size.
CREATE TABLE IF NOT EXISTS job (
    id                BIGINT       NOT NULL AUTO_INCREMENT,
    session_id        BIGINT       NOT NULL,
    config_id         BIGINT       NOT NULL,
    solver_id         BIGINT       NOT NULL,
    compile_step      VARCHAR(128) NOT NULL,
    eval_step         VARCHAR(128) NOT NULL,
    compile_params    MEDIUMTEXT   NOT NULL,
    run_params        MEDIUMTEXT   NOT NULL,
    candidate_key     MEDIUMTEXT   NOT NULL,
    candidate_hash    BINARY(32)   AS (UNHEX(SHA2(candidate_key, 256))) STORED,
    -- 700 characters: the longest that keeps job_by_state under the 3072-byte key limit.
    build_key         VARCHAR(700) NOT NULL,
    state             VARCHAR(16)  NOT NULL CHECK (state IN ('new', 'compile_queued',
                          'compiling', 'compiled', 'eval_queued', 'evaluating', 'evaluated',
                          'errored', 'not_applicable')),
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
    UNIQUE KEY job_identity (session_id, config_id, solver_id, compile_step, eval_step,
                             candidate_hash),
    -- jobs_in_state (equality on session and state, ordered by build key then id, no sort step),
    -- in_flight and state_counts (prefix session_id, state), final_results (prefix session_id).
    KEY job_by_state (session_id, state, build_key, id),
    -- final_results: one session's jobs in id order, with no sort step and no walk of the whole
    -- primary key (which InnoDB's optimizer picks to avoid the sort when it has no better way).
    KEY job_by_session (session_id, id),
    -- expired_leases: in-flight states with a deadline before now, across sessions.
    KEY job_by_lease (state, lease_deadline_ms),
    CONSTRAINT job_session FOREIGN KEY (session_id) REFERENCES session (id),
    CONSTRAINT job_config FOREIGN KEY (config_id) REFERENCES config (id),
    CONSTRAINT job_solver FOREIGN KEY (solver_id) REFERENCES solver (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Outcomes, one per (job, attempt), never overwritten. status is 'ok' or a FailureKind name.
-- A NaN or infinite time is stored as NULL (MySQL has no NaN) and read back as NaN.
CREATE TABLE IF NOT EXISTS result (
    id         BIGINT       NOT NULL AUTO_INCREMENT,
    job_id     BIGINT       NOT NULL,
    session_id BIGINT       NOT NULL,
    attempt    INT UNSIGNED NOT NULL,
    status     VARCHAR(32)  NOT NULL,
    time_us    DOUBLE,
    samples    MEDIUMTEXT,
    workspace  BIGINT,
    detail     MEDIUMTEXT,
    worker     TEXT         NOT NULL,
    device     TEXT         NOT NULL,
    created_ms BIGINT       NOT NULL,
    PRIMARY KEY (id),
    -- The index behind results() and the final_results join.
    UNIQUE KEY result_attempt (job_id, attempt),
    CONSTRAINT result_job FOREIGN KEY (job_id) REFERENCES job (id),
    CONSTRAINT result_session FOREIGN KEY (session_id) REFERENCES session (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- What a build key produced in a session: an artifact hash, or a candidate fault.
CREATE TABLE IF NOT EXISTS build (
    session_id   BIGINT       NOT NULL,
    build_key    VARCHAR(700) NOT NULL,
    artifact     TEXT,
    failure_kind VARCHAR(32),
    detail       MEDIUMTEXT,
    PRIMARY KEY (session_id, build_key),
    CONSTRAINT build_session FOREIGN KEY (session_id) REFERENCES session (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Compiled kernels and binaries, content-addressed.
CREATE TABLE IF NOT EXISTS artifact (
    hash       VARCHAR(255) NOT NULL,
    bytes      LONGBLOB     NOT NULL,
    size       BIGINT       NOT NULL,
    created_ms BIGINT       NOT NULL,
    PRIMARY KEY (hash)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
