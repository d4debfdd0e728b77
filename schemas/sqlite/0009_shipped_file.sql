-- Files shipped with a spec (shoal_model::shipped): `shoal tune --cluster` sends a spec's
-- sources, shapes CSV and recorded space in parts of at most 1 MiB, content-addressed, and the
-- Scheduler stores them here; every host that needs the spec writes them out from here and
-- checks their hashes. A part stored twice is kept once. Mirrors schemas/mysql/0008.
CREATE TABLE shipped_file_part (
    -- the whole file's hex sha256
    sha256 TEXT NOT NULL,
    part   INTEGER NOT NULL,
    -- the whole file's size in bytes
    size   INTEGER NOT NULL,
    data   BLOB NOT NULL,
    PRIMARY KEY (sha256, part)
) WITHOUT ROWID;
