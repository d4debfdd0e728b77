-- Which solvers apply to which configs in a session (MIOpen's `applicability` step). One row per
-- (session, config, solver) that was checked; `applicable` says the answer. Re-checking replaces
-- the row, so the table always holds the latest answer. Mirrors schemas/sqlite/0002.
CREATE TABLE IF NOT EXISTS applicability (
    session_id BIGINT  NOT NULL,
    config_id  BIGINT  NOT NULL,
    solver_id  BIGINT  NOT NULL,
    applicable TINYINT NOT NULL CHECK (applicable IN (0, 1)),
    updated_ms BIGINT  NOT NULL,
    -- The primary key serves `applicable_solvers` (session, config → solvers).
    PRIMARY KEY (session_id, config_id, solver_id),
    CONSTRAINT applicability_session FOREIGN KEY (session_id) REFERENCES session (id),
    CONSTRAINT applicability_config FOREIGN KEY (config_id) REFERENCES config (id),
    CONSTRAINT applicability_solver FOREIGN KEY (solver_id) REFERENCES solver (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
