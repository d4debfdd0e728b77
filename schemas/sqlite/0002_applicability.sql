-- Which solvers apply to which configs in a session (MIOpen's `applicability` step). One row per
-- (session, config, solver) that was checked; `applicable` says the answer. Re-checking replaces
-- the row, so the table always holds the latest answer.
CREATE TABLE applicability (
    session_id INTEGER NOT NULL REFERENCES session (id),
    config_id  INTEGER NOT NULL REFERENCES config (id),
    solver_id  INTEGER NOT NULL REFERENCES solver (id),
    applicable INTEGER NOT NULL CHECK (applicable IN (0, 1)),
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (session_id, config_id, solver_id)
) WITHOUT ROWID;
-- The primary key serves `applicable_solvers` (session, config → solvers).
