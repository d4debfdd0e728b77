//! Migration 10's second half: the rows of `job` and `result` carried into the lean tables
//! that `schemas/mysql/0010_lean_job.sql` creates, and those tables swapped in.
//!
//! MySQL commits every DDL statement on its own, and a copy, a rename and a foreign key cannot
//! each be written so that running them twice is harmless. So every step here first asks the
//! catalog whether it is done: a migration cut off anywhere is finished by the next `migrate`,
//! which runs [`carry_forward`] again. The order matters:
//! 1. While `job` still has the old columns: copy both tables (each `INSERT … SELECT` is one
//!    transaction; a copy cut off earlier is emptied and made again), drop the outbox's foreign
//!    key to the old `job` (a RENAME would carry it along to the old table), then swap with one
//!    RENAME of four tables, which is atomic: no reader ever sees a store without a `job`.
//! 2. Drop the old tables, and point the outbox at the new `job`.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::OpError;

/// The migration whose file creates the lean tables, and after which [`carry_forward`] runs.
pub(crate) const VERSION: u32 = 10;

/// Whether `job` is still the table of versions 1 to 9 (it has `candidate_key`).
const JOB_IS_OLD: &str = "SELECT COUNT(*) FROM information_schema.columns \
     WHERE table_schema = DATABASE() AND table_name = 'job' AND column_name = 'candidate_key'";

/// Whether a table has a foreign key of this name: (table, constraint).
const HAS_FOREIGN_KEY: &str = "SELECT COUNT(*) FROM information_schema.referential_constraints \
     WHERE constraint_schema = DATABASE() AND table_name = ? AND constraint_name = ?";

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

/// Finishes migration 10 from wherever an earlier run stopped; see the module's doc.
pub(crate) async fn carry_forward(conn: &mut Conn) -> Result<(), OpError> {
    if job_is_old(conn).await? {
        conn.query_drop("DELETE FROM result_lean").await?;
        conn.query_drop("DELETE FROM job_lean").await?;
        conn.query_drop(COPY_JOBS).await?;
        let copied = conn.affected_rows();
        conn.query_drop(COPY_RESULTS).await?;
        tracing::info!(
            jobs = copied,
            "migration 10: jobs copied into the lean table"
        );
        if has_foreign_key(conn, "outbox", "outbox_job").await? {
            conn.query_drop("ALTER TABLE outbox DROP FOREIGN KEY outbox_job")
                .await?;
        }
        conn.query_drop(SWAP).await?;
    }
    conn.query_drop("DROP TABLE IF EXISTS result_v9, job_v9")
        .await?;
    if !has_foreign_key(conn, "outbox", "outbox_job_ref").await? {
        conn.query_drop(
            "ALTER TABLE outbox ADD CONSTRAINT outbox_job_ref \
             FOREIGN KEY (job_id) REFERENCES job (id)",
        )
        .await?;
    }
    Ok(())
}

/// Whether `job` is still the table of versions 1 to 9. Once it is not, the file of migration
/// 10 must not run again: its new tables' constraint names are the swapped-in tables' now.
pub(crate) async fn job_is_old(conn: &mut Conn) -> Result<bool, OpError> {
    let n: Option<i64> = conn.exec_first(JOB_IS_OLD, ()).await?;
    Ok(n.unwrap_or(0) > 0)
}

async fn has_foreign_key(conn: &mut Conn, table: &str, name: &str) -> Result<bool, OpError> {
    let n: Option<i64> = conn.exec_first(HAS_FOREIGN_KEY, (table, name)).await?;
    Ok(n.unwrap_or(0) > 0)
}
