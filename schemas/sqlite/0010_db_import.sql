-- MIOpen databases imported into the store (`shoal import-db --store`, MITuna's import_db): a
-- shipped find db and perf db as rows, each tied to the config its key describes, so that they
-- join to a session's results by config id. An import is written whole, in one transaction, and
-- never changed: its counts are computed from its records then. Mirrors schemas/mysql/0009.
CREATE TABLE db_import (
    id           INTEGER PRIMARY KEY,
    label        TEXT    NOT NULL,
    -- the device, from the files' base name (gfx942130 -> gfx942, 304)
    arch         TEXT    NOT NULL,
    num_cu       INTEGER NOT NULL,
    -- the file names the records came from, a JSON list
    files        TEXT    NOT NULL,
    created_ms   INTEGER NOT NULL,
    find_records INTEGER NOT NULL,
    perf_records INTEGER NOT NULL,
    configs      INTEGER NOT NULL
);

-- One (key, solver) of a find db (time, workspace, algorithm) or of a perf db (params), `seq`
-- its place in the import. Clustered by import (WITHOUT ROWID), so one import's records are read
-- in one range. `config_id` is NULL for a perf key that describes several configs.
CREATE TABLE db_record (
    import_id INTEGER NOT NULL REFERENCES db_import (id),
    seq       INTEGER NOT NULL,
    kind      TEXT    NOT NULL CHECK (kind IN ('find', 'perf')),
    config_id INTEGER REFERENCES config (id),
    db_key    TEXT    NOT NULL,
    solver    TEXT    NOT NULL,
    time_ms   REAL,
    workspace INTEGER,
    algorithm TEXT,
    params    TEXT,
    PRIMARY KEY (import_id, seq),
    CHECK ((kind = 'find' AND time_ms IS NOT NULL AND workspace IS NOT NULL
            AND algorithm IS NOT NULL AND params IS NULL)
        OR (kind = 'perf' AND params IS NOT NULL AND time_ms IS NULL AND workspace IS NULL
            AND algorithm IS NULL))
) WITHOUT ROWID;
-- An import's records of one config: the join to a session's results.
CREATE INDEX db_record_by_import_config ON db_record (import_id, config_id);
