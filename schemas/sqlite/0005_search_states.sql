-- Two more job states, for sessions with a search (`[search]` in the spec): `held`, a candidate
-- its shape's search has not chosen yet, and `skipped`, one the search ended without choosing.
-- SQLite cannot change a CHECK in place, so the job table is rebuilt as 0003 did it (see there
-- for why the foreign keys are deferred): same columns, keys, indexes and ids. The outbox's rows
-- point at job ids, which are kept.
PRAGMA defer_foreign_keys = ON;

CREATE TABLE job_0005_copy AS SELECT * FROM job;

DROP TABLE job;

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
    state             TEXT    NOT NULL CHECK (state = 'new' OR state = 'compile_queued'
                          OR state = 'compiling' OR state = 'compiled' OR state = 'eval_queued'
                          OR state = 'evaluating' OR state = 'evaluated' OR state = 'errored'
                          OR state = 'not_applicable' OR state = 'held' OR state = 'skipped'),
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

INSERT INTO job (id, session_id, config_id, solver_id, compile_step, eval_step, compile_params,
    run_params, candidate_key, build_key, state, attempt, retries, lease_deadline_ms, worker,
    artifact, failure_kind, last_error, created_ms, updated_ms, compile_queued_ms, compiling_ms,
    compiled_ms, eval_queued_ms, evaluating_ms, finished_ms)
SELECT id, session_id, config_id, solver_id, compile_step, eval_step, compile_params,
    run_params, candidate_key, build_key, state, attempt, retries, lease_deadline_ms, worker,
    artifact, failure_kind, last_error, created_ms, updated_ms, compile_queued_ms, compiling_ms,
    compiled_ms, eval_queued_ms, evaluating_ms, finished_ms
FROM job_0005_copy ORDER BY id;

DROP TABLE job_0005_copy;

-- The indexes of 0001 and 0003, unchanged (dropped with the old table).
CREATE INDEX job_by_state ON job (session_id, state, id);
CREATE INDEX job_new_by_build ON job (session_id, build_key, id) WHERE state = 'new';
CREATE INDEX job_by_lease ON job (lease_deadline_ms) WHERE lease_deadline_ms IS NOT NULL;
