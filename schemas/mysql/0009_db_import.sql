-- MIOpen databases imported into the store (`shoal import-db --store`, MITuna's import_db): a
-- shipped find db and perf db as rows, each tied to the config its key describes, so that they
-- join to a session's results by config id. An import is written whole, in one transaction, and
-- never changed: its counts are computed from its records then. Mirrors schemas/sqlite/0010.
CREATE TABLE IF NOT EXISTS db_import (
    id           BIGINT          NOT NULL AUTO_INCREMENT,
    label        TEXT            NOT NULL,
    -- the device, from the files' base name (gfx942130 -> gfx942, 304)
    arch         VARCHAR(255)    NOT NULL,
    num_cu       INT UNSIGNED    NOT NULL,
    -- the file names the records came from, a JSON list
    files        TEXT            NOT NULL,
    created_ms   BIGINT          NOT NULL,
    find_records BIGINT UNSIGNED NOT NULL,
    perf_records BIGINT UNSIGNED NOT NULL,
    configs      BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One (key, solver) of a find db (time, workspace, algorithm) or of a perf db (params), `seq`
-- its place in the import; the primary key clusters one import's records in one range.
-- `config_id` is NULL for a perf key that describes several configs.
CREATE TABLE IF NOT EXISTS db_record (
    import_id BIGINT          NOT NULL,
    seq       BIGINT          NOT NULL,
    kind      VARCHAR(4)      NOT NULL CHECK (kind IN ('find', 'perf')),
    config_id BIGINT,
    db_key    TEXT            NOT NULL,
    solver    VARCHAR(255)    NOT NULL,
    time_ms   DOUBLE,
    workspace BIGINT UNSIGNED,
    algorithm VARCHAR(255),
    params    TEXT,
    PRIMARY KEY (import_id, seq),
    -- An import's records of one config: the join to a session's results.
    KEY db_record_by_import_config (import_id, config_id),
    -- The foreign key's own index (InnoDB would make one).
    KEY db_record_by_config (config_id),
    CHECK ((kind = 'find' AND time_ms IS NOT NULL AND workspace IS NOT NULL
            AND algorithm IS NOT NULL AND params IS NULL)
        OR (kind = 'perf' AND params IS NOT NULL AND time_ms IS NULL AND workspace IS NULL
            AND algorithm IS NULL)),
    CONSTRAINT db_record_import FOREIGN KEY (import_id) REFERENCES db_import (id),
    CONSTRAINT db_record_config FOREIGN KEY (config_id) REFERENCES config (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
