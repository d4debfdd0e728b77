-- Cancelled sessions (`shoal session cancel`): the Scheduler starts no more of their work and
-- skips what is not under way. A row per cancelled session, never removed. Mirrors
-- schemas/mysql/0007.
CREATE TABLE session_cancel (
    session_id   INTEGER PRIMARY KEY REFERENCES session (id),
    cancelled_ms INTEGER NOT NULL
);
