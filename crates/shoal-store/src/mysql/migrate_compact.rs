//! Migration 11's second half: every string that `job` and `result` repeat put in `label`, the
//! rows carried into the compact tables that `schemas/mysql/0011_compact_job.sql` creates with
//! label ids in its place, and those tables swapped in ([`super::carry`] says how, step by
//! step).

use super::carry::Rebuild;

/// Whether `job` is still the table of version 10 (its steps are text).
const JOB_IS_OLD: &str = "SELECT COUNT(*) FROM information_schema.columns \
     WHERE table_schema = DATABASE() AND table_name = 'job' AND column_name = 'compile_step' \
     AND data_type = 'varchar'";

/// Every distinct string of the old rows that becomes a label. `ON DUPLICATE KEY` leaves the
/// labels of a copy cut off earlier as they are.
const FILL_LABELS: &str = "INSERT INTO label (text) \
     SELECT t FROM ( \
       SELECT compile_step AS t FROM job UNION SELECT eval_step FROM job \
       UNION SELECT build_key FROM job \
       UNION SELECT worker FROM job WHERE worker IS NOT NULL \
       UNION SELECT artifact FROM job WHERE artifact IS NOT NULL \
       UNION SELECT failure_kind FROM job WHERE failure_kind IS NOT NULL \
       UNION SELECT status FROM result UNION SELECT worker FROM result \
       UNION SELECT device FROM result) AS texts \
     ON DUPLICATE KEY UPDATE id = id";

/// NULLs become 0 (none); every text its label's id. The inner joins cannot drop a job: every
/// text was made a label just before, and `carry` checks the count.
const COPY_JOBS: &str = "INSERT INTO job_compact (id, session_id, config_id, solver_id, \
     compile_step, eval_step, identity_hash, compile_params, run_params, build_key, state, \
     attempt, retries, lease_deadline_ms, worker, artifact, failure_kind, last_error, \
     created_ms, updated_ms, compile_queued_ms, compiling_ms, compiled_ms, eval_queued_ms, \
     evaluating_ms, finished_ms) \
     SELECT j.id, j.session_id, j.config_id, j.solver_id, cs.id, es.id, j.identity_hash, \
     j.compile_params, j.run_params, bk.id, j.state, j.attempt, j.retries, \
     COALESCE(j.lease_deadline_ms, 0), COALESCE(wk.id, 0), COALESCE(af.id, 0), \
     COALESCE(fk.id, 0), j.last_error, j.created_ms, j.updated_ms, \
     COALESCE(j.compile_queued_ms, 0), COALESCE(j.compiling_ms, 0), \
     COALESCE(j.compiled_ms, 0), COALESCE(j.eval_queued_ms, 0), \
     COALESCE(j.evaluating_ms, 0), COALESCE(j.finished_ms, 0) \
     FROM job j \
     JOIN label cs ON cs.text = j.compile_step \
     JOIN label es ON es.text = j.eval_step \
     JOIN label bk ON bk.text = j.build_key \
     LEFT JOIN label wk ON wk.text = j.worker \
     LEFT JOIN label af ON af.text = j.artifact \
     LEFT JOIN label fk ON fk.text = j.failure_kind \
     ORDER BY j.id";

const COPY_RESULTS: &str = "INSERT INTO result_compact (job_id, attempt, status, time_us, \
     samples, workspace, detail, worker, device, created_ms) \
     SELECT r.job_id, r.attempt, st.id, r.time_us, r.samples, r.workspace, r.detail, wk.id, \
     dv.id, r.created_ms \
     FROM result r \
     JOIN label st ON st.text = r.status \
     JOIN label wk ON wk.text = r.worker \
     JOIN label dv ON dv.text = r.device \
     ORDER BY r.job_id, r.attempt";

/// Migration 11.
pub(crate) const REBUILD: Rebuild = Rebuild {
    version: 11,
    job_is_old: JOB_IS_OLD,
    clear: &["DELETE FROM result_compact", "DELETE FROM job_compact"],
    copies: &[FILL_LABELS, COPY_JOBS, COPY_RESULTS],
    jobs_copy: 1,
    swap: "RENAME TABLE job TO job_v10, job_compact TO job, result TO result_v10, \
           result_compact TO result",
    drop_old: "DROP TABLE IF EXISTS result_v10, job_v10",
    outbox_fk_old: "outbox_job_ref",
    outbox_fk_new: "outbox_job_fk",
    server_check: Some((
        "SELECT @@global.innodb_read_only_compressed",
        "its tables are ROW_FORMAT = COMPRESSED, which this server only reads \
         (innodb_read_only_compressed = ON, the default of MariaDB 10.6.0 to 10.6.5): set it OFF \
         in the server's configuration, or upgrade",
    )),
};
