-- Presence: one row per `shoal worker` process, written when it starts and every few seconds
-- after (shoal_model::presence), read by `shoal workers`, `shoal status` and the dashboard. A
-- row is kept after its process is gone: stopped (stopped_ms set) or silent (last_seen_ms old).
-- Mirrors schemas/sqlite/0006.
CREATE TABLE IF NOT EXISTS worker (
    -- host:pid:started_ms
    id           VARCHAR(255) NOT NULL,
    host         VARCHAR(255) NOT NULL,
    pid          INT UNSIGNED NOT NULL,
    version      VARCHAR(64)  NOT NULL,
    -- JSON: ["compile", "eval"]
    roles        VARCHAR(255) NOT NULL,
    -- JSON: [{"id", "name", "arch", "units", "healthy", "detail"}]
    devices      MEDIUMTEXT   NOT NULL,
    -- JSON: the job ids it builds or times now
    jobs         MEDIUMTEXT   NOT NULL,
    heartbeat_ms BIGINT NOT NULL,
    started_ms   BIGINT NOT NULL,
    last_seen_ms BIGINT NOT NULL,
    stopped_ms   BIGINT NULL,
    PRIMARY KEY (id),
    KEY worker_by_last_seen (last_seen_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
