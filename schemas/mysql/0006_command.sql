-- Commands applied (shoal_model::command): one row per command id the Scheduler applied, with
-- the reply it sent. A command redelivered after a crash finds its row and gets the same reply
-- again instead of being applied twice. Mirrors schemas/sqlite/0007.
CREATE TABLE IF NOT EXISTS command (
    -- chosen by the CLI: up to 64 of [A-Za-z0-9-]
    id         VARCHAR(64) NOT NULL,
    -- JSON: the CommandReply
    reply      MEDIUMTEXT NOT NULL,
    applied_ms BIGINT NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
