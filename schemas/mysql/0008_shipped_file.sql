-- Files shipped with a spec (shoal_model::shipped): `shoal tune --cluster` sends a spec's
-- sources, shapes CSV and recorded space in parts of at most 1 MiB, content-addressed, and the
-- Scheduler stores them here; every host that needs the spec writes them out from here and
-- checks their hashes. A part stored twice is kept once. Mirrors schemas/sqlite/0009.
CREATE TABLE IF NOT EXISTS shipped_file_part (
    -- the whole file's hex sha256
    sha256 CHAR(64) NOT NULL,
    part   INT UNSIGNED NOT NULL,
    -- the whole file's size in bytes
    size   BIGINT UNSIGNED NOT NULL,
    data   MEDIUMBLOB NOT NULL,
    PRIMARY KEY (sha256, part)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
