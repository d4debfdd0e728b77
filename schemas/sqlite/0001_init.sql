-- Shoal SQLite schema, version 1.
--
-- Applied by `shoal db migrate` (SqliteStore::migrate) inside one transaction, together with the
-- row in `schema_version` that records it. Never edit a released migration: add 0002_*.sql.
--
-- Every query on a hot path is backed by an index here; `hot_queries_use_indexes` in
-- crates/shoal-store checks the query plans, so a new hot query needs its index in a migration.

-- One tuning campaign. Every column of NewSession is part of the identity `find_session` matches.
CREATE TABLE session (
    id              INTEGER PRIMARY KEY,
    reason          TEXT    NOT NULL,
    arch            TEXT    NOT NULL,
    num_cu          INTEGER NOT NULL,
    backend         TEXT    NOT NULL,
    spec            TEXT    NOT NULL,
    spec_path       TEXT    NOT NULL,
    library_version TEXT    NOT NULL,
    driver_version  TEXT    NOT NULL,
    max_retries     INTEGER NOT NULL,
    created_ms      INTEGER NOT NULL
);
-- find_session narrows by the short identity columns first; the rest are compared on few rows.
CREATE INDEX session_identity ON session (arch, num_cu, backend);

-- One problem; `key` is its canonical text. `params` is the JSON of shoal_model::Params.
CREATE TABLE config (
    id     INTEGER PRIMARY KEY,
    kind   TEXT NOT NULL,
    key    TEXT NOT NULL UNIQUE,
    params TEXT NOT NULL
);

CREATE TABLE config_tag (
    config_id INTEGER NOT NULL REFERENCES config (id),
    tag       TEXT    NOT NULL,
    UNIQUE (config_id, tag)
);
-- configs_with_tag: by tag, already in config id order.
CREATE INDEX config_tag_by_tag ON config_tag (tag, config_id);

CREATE TABLE solver (
    id      INTEGER PRIMARY KEY,
    name    TEXT    NOT NULL UNIQUE,
    tunable INTEGER NOT NULL CHECK (tunable IN (0, 1))
);

-- One unit of tuning work. `state` and `attempt` are the compare-and-set pair of every change;
-- one timestamp column per state a job can enter (finished_ms for the terminal ones) tells where
-- the time went.
CREATE TABLE job (
    id                INTEGER PRIMARY KEY,
    session_id        INTEGER NOT NULL REFERENCES session (id),
    config_id         INTEGER NOT NULL REFERENCES config (id),
    solver_id         INTEGER NOT NULL REFERENCES solver (id),
    compile_step      TEXT    NOT NULL,
    eval_step         TEXT    NOT NULL,
    compile_params    TEXT    NOT NULL,
    run_params        TEXT    NOT NULL,
    candidate_key     TEXT    NOT NULL,
    build_key         TEXT    NOT NULL,
    state             TEXT    NOT NULL CHECK (state IN ('new', 'compile_queued', 'compiling',
                          'compiled', 'eval_queued', 'evaluating', 'evaluated', 'errored',
                          'not_applicable')),
    attempt           INTEGER NOT NULL DEFAULT 0,
    retries           INTEGER NOT NULL DEFAULT 0,
    lease_deadline_ms INTEGER,
    worker            TEXT,
    artifact          TEXT,
    failure_kind      TEXT,
    last_error        TEXT,
    created_ms        INTEGER NOT NULL,
    updated_ms        INTEGER NOT NULL,
    compile_queued_ms INTEGER,
    compiling_ms      INTEGER,
    compiled_ms       INTEGER,
    eval_queued_ms    INTEGER,
    evaluating_ms     INTEGER,
    finished_ms       INTEGER,
    UNIQUE (session_id, config_id, solver_id, compile_step, eval_step, candidate_key)
);
-- jobs_in_state (equality on session and state, ordered by build key then id, no sort step),
-- in_flight and state_counts (prefix session_id, state), final_results (prefix session_id).
CREATE INDEX job_by_state ON job (session_id, state, id);
-- Claiming new jobs in build-key order (so jobs that share a build come together). Partial: an
-- entry exists only while a job is new, so the 64-character key is not rewritten on every
-- state change of every job (measured: a third of the store's time in the dispatch benchmark).
CREATE INDEX job_new_by_build ON job (session_id, build_key, id) WHERE state = 'new';
-- expired_leases: only jobs in flight have a deadline; the rest are not in this index.
CREATE INDEX job_by_lease ON job (lease_deadline_ms) WHERE lease_deadline_ms IS NOT NULL;

-- Outcomes, one per (job, attempt), never overwritten. status is 'ok' or a FailureKind name.
CREATE TABLE result (
    id         INTEGER PRIMARY KEY,
    job_id     INTEGER NOT NULL REFERENCES job (id),
    session_id INTEGER NOT NULL REFERENCES session (id),
    attempt    INTEGER NOT NULL,
    status     TEXT    NOT NULL,
    time_us    REAL,
    samples    TEXT,
    workspace  INTEGER,
    detail     TEXT,
    worker     TEXT    NOT NULL,
    device     TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    UNIQUE (job_id, attempt)
);
-- UNIQUE (job_id, attempt) above is the index behind results() and the final_results join.

-- What a build key produced in a session: an artifact hash, or a candidate fault.
CREATE TABLE build (
    session_id   INTEGER NOT NULL REFERENCES session (id),
    build_key    TEXT    NOT NULL,
    artifact     TEXT,
    failure_kind TEXT,
    detail       TEXT,
    PRIMARY KEY (session_id, build_key)
) WITHOUT ROWID;

-- Compiled kernels and binaries, content-addressed. A rowid table on purpose: WITHOUT ROWID
-- suits small rows, and these rows are blobs.
CREATE TABLE artifact (
    hash       TEXT    PRIMARY KEY,
    bytes      BLOB    NOT NULL,
    size       INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
);
