-- The outbox: requests the Scheduler owes the bus. A row is written in the same transaction as
-- the job's move into a queued state (`compile_queued`, `eval_queued`) and removed when the
-- broker has confirmed the request, or when the job leaves the queued state (the request was
-- consumed or is no longer wanted). Rows left behind by a failed publish or a crash are sent
-- again, first of all when the Scheduler starts. Mirrors schemas/mysql/0003.
CREATE TABLE outbox (
    job_id     INTEGER NOT NULL REFERENCES job (id),
    -- The attempt the request is for: the job's attempt in its queued state. (Not named
    -- `attempt`, so the sender's join with `job` needs no aliases.)
    job_attempt INTEGER NOT NULL,
    owed_ms    INTEGER NOT NULL,
    PRIMARY KEY (job_id, job_attempt)
) WITHOUT ROWID;

-- The sender reads the oldest rows first.
CREATE INDEX outbox_by_age ON outbox (owed_ms);
