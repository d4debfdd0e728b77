//! Migration 10's second half: the rows of `job` and `result` carried into the lean tables
//! that `schemas/mysql/0010_lean_job.sql` creates, and those tables swapped in
//! ([`super::carry`] says how, step by step).

use super::carry::Rebuild;

/// Whether `job` is still the table of versions 1 to 9 (it has `candidate_key`).
const JOB_IS_OLD: &str = "SELECT COUNT(*) FROM information_schema.columns \
     WHERE table_schema = DATABASE() AND table_name = 'job' AND column_name = 'candidate_key'";

/// The identity hash of migration 10, from the old columns. `queries::INSERT_JOB` computes it
/// with the same expression from bound values.
const COPY_JOBS: &str = "INSERT INTO job_lean (id, session_id, config_id, solver_id, \
     compile_step, eval_step, identity_hash, compile_params, run_params, build_key, state, \
     attempt, retries, lease_deadline_ms, worker, artifact, failure_kind, last_error, \
     created_ms, updated_ms, compile_queued_ms, compiling_ms, compiled_ms, eval_queued_ms, \
     evaluating_ms, finished_ms) \
     SELECT id, session_id, config_id, solver_id, compile_step, eval_step, \
     UNHEX(LEFT(SHA2(CONCAT(config_id, CHAR(10), solver_id, CHAR(10), compile_step, CHAR(10), \
     eval_step, CHAR(10), candidate_key), 256), 32)), \
     compile_params, run_params, build_key, state, attempt, retries, lease_deadline_ms, \
     worker, artifact, failure_kind, last_error, \
     created_ms, updated_ms, compile_queued_ms, compiling_ms, compiled_ms, eval_queued_ms, \
     evaluating_ms, finished_ms FROM job ORDER BY id";

const COPY_RESULTS: &str = "INSERT INTO result_lean (job_id, attempt, session_id, status, \
     time_us, samples, workspace, detail, worker, device, created_ms) \
     SELECT job_id, attempt, session_id, status, time_us, samples, workspace, detail, worker, \
     device, created_ms FROM result ORDER BY job_id, attempt";

const SWAP: &str =
    "RENAME TABLE job TO job_v9, job_lean TO job, result TO result_v9, result_lean TO result";

/// Migration 10.
pub(crate) const REBUILD: Rebuild = Rebuild {
    version: 10,
    job_is_old: JOB_IS_OLD,
    clear: &["DELETE FROM result_lean", "DELETE FROM job_lean"],
    copies: &[COPY_JOBS, COPY_RESULTS],
    jobs_copy: 0,
    swap: SWAP,
    drop_old: "DROP TABLE IF EXISTS result_v9, job_v9",
    outbox_fk_old: "outbox_job",
    outbox_fk_new: "outbox_job_ref",
    server_check: None,
};
