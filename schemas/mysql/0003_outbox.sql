-- The outbox: requests the Scheduler owes the bus. A row is written in the same transaction as
-- the job's move into a queued state (`compile_queued`, `eval_queued`) and removed when the
-- broker has confirmed the request, or when the job leaves the queued state (the request was
-- consumed or is no longer wanted). Rows left behind by a failed publish or a crash are sent
-- again, first of all when the Scheduler starts. Mirrors schemas/sqlite/0004.
CREATE TABLE IF NOT EXISTS outbox (
    job_id     BIGINT NOT NULL,
    -- The attempt the request is for: the job's attempt in its queued state. (Not named
    -- `attempt`, so the sender's join with `job` needs no aliases.)
    job_attempt INT   NOT NULL,
    owed_ms    BIGINT NOT NULL,
    PRIMARY KEY (job_id, job_attempt),
    -- The sender reads the oldest rows first.
    KEY outbox_by_age (owed_ms),
    CONSTRAINT outbox_job FOREIGN KEY (job_id) REFERENCES job (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
