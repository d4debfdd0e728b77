-- Presence: one row per `shoal worker` process, written when it starts and every few seconds
-- after (shoal_model::presence), read by `shoal workers`, `shoal status` and the dashboard. A
-- row is kept after its process is gone: stopped (stopped_ms set) or silent (last_seen_ms old).
-- Mirrors schemas/mysql/0005.
CREATE TABLE worker (
    -- host:pid:started_ms
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    version      TEXT NOT NULL,
    -- JSON: ["compile", "eval"]
    roles        TEXT NOT NULL,
    -- JSON: [{"id", "name", "arch", "units", "healthy", "detail"}]
    devices      TEXT NOT NULL,
    -- JSON: the job ids it builds or times now
    jobs         TEXT NOT NULL,
    heartbeat_ms INTEGER NOT NULL,
    started_ms   INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    stopped_ms   INTEGER
) WITHOUT ROWID;

CREATE INDEX worker_by_last_seen ON worker (last_seen_ms);
