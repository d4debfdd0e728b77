-- Cancelled sessions (`shoal session cancel`): the Scheduler starts no more of their work and
-- skips what is not under way. A row per cancelled session, never removed. Mirrors
-- schemas/sqlite/0008.
CREATE TABLE IF NOT EXISTS session_cancel (
    session_id   BIGINT NOT NULL,
    cancelled_ms BIGINT NOT NULL,
    PRIMARY KEY (session_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
