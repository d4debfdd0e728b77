-- Commands applied (shoal_model::command): one row per command id the Scheduler applied, with
-- the reply it sent. A command redelivered after a crash finds its row and gets the same reply
-- again instead of being applied twice. Mirrors schemas/mysql/0006.
CREATE TABLE command (
    -- chosen by the CLI: up to 64 of [A-Za-z0-9-]
    id         TEXT PRIMARY KEY,
    -- JSON: the CommandReply
    reply      TEXT NOT NULL,
    applied_ms INTEGER NOT NULL
) WITHOUT ROWID;
