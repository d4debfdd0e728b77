//! Migration 12's second half: the jobs of the backend once named `command` given the steps of
//! its new name, `exec`, each with its identity hash computed again
//! (`schemas/mysql/0012_exec_backend.sql` says why the file alone cannot).
//!
//! A job's hash covers its two step names and its candidate key, which only its parameters
//! still hold (migration 10 dropped the key's column), so each job is read, its key made again
//! with [`candidate_key`], and its steps and hash written by one UPDATE with the expression
//! `INSERT_JOB` uses. Batches go in id order, one transaction each; only jobs that still name an
//! old step are read, so a migration cut off half-way is finished by the next `migrate`, and a
//! store that never had such a job costs two lookups.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, TxOpts, Value};
use shoal_model::record::candidate_key;
use shoal_model::{Params, Step};

use super::queries::identity_hash;
use super::rows::{int, text};
use super::OpError;
use crate::StoreError;

/// The migration whose file this follows.
pub(crate) const VERSION: u32 = 12;

/// The steps renamed, as (old name, new step).
const RENAMED_STEPS: [(&str, Step); 2] = [
    ("command_build", Step::ExecBuild),
    ("command_run", Step::ExecRun),
];

/// Jobs re-keyed per transaction.
const BATCH: u32 = 1000;

const LABEL_ID: &str = "SELECT id FROM label WHERE text = ?";

/// The next jobs after an id, in id order, that name an old step (the two old labels' ids; 0,
/// which no job names, for one that is not a label), with what their identity is made of. A
/// walk of the primary key from the cursor: each batch reads on from where the last stopped.
const OLD_JOBS: &str = "SELECT j.id, j.config_id, j.solver_id, j.compile_step, cs.text, \
     j.eval_step, es.text, j.compile_params, j.run_params FROM job j \
     JOIN label cs ON cs.id = j.compile_step JOIN label es ON es.id = j.eval_step \
     WHERE j.id > ? AND (j.compile_step IN (?, ?) OR j.eval_step IN (?, ?)) ORDER BY j.id LIMIT ?";

/// Parameters: the two steps' label ids, then the hash's five inputs, then the job.
const REKEY: &str = concat!(
    "UPDATE job SET compile_step = ?, eval_step = ?, identity_hash = ",
    identity_hash!(),
    " WHERE id = ?"
);

/// A job as [`OLD_JOBS`] reads it: id, config, solver, each step's label (id and text), and the
/// compile and run parameters (JSON).
type OldJob = (i64, i64, i64, u32, Vec<u8>, u32, Vec<u8>, String, String);

async fn label_id(conn: &mut Conn, name: &str) -> Result<Option<u32>, OpError> {
    Ok(conn.exec_first(LABEL_ID, (name,)).await?)
}

/// Renames the old steps of every job that still names one; see the module's doc. Returns how
/// many jobs it renamed.
pub(crate) async fn rename_jobs(conn: &mut Conn) -> Result<u64, OpError> {
    // (old label's id, new name, new label's id) per renamed step.
    let mut renames = Vec::new();
    for (old, step) in RENAMED_STEPS {
        let Some(old_id) = label_id(conn, old).await? else {
            continue;
        };
        // The migration's file made it.
        let new_id = label_id(conn, step.as_str())
            .await?
            .ok_or_else(|| StoreError::Invalid(format!("migration 12: no label `{step}`")))?;
        renames.push((old_id, step.as_str(), new_id));
    }
    if renames.is_empty() {
        return Ok(0);
    }
    let old = |i: usize| renames.get(i).map_or(0, |r| r.0);
    let mut after = 0i64;
    let mut renamed = 0u64;
    loop {
        let rows: Vec<OldJob> = conn
            .exec(OLD_JOBS, (after, old(0), old(1), old(0), old(1), BATCH))
            .await?;
        let Some(last) = rows.last() else {
            break;
        };
        after = last.0;
        let params = rows
            .into_iter()
            .map(|row| rekey_params(row, &renames))
            .collect::<Result<Vec<_>, StoreError>>()?;
        renamed += params.len() as u64;
        let mut tx = conn.start_transaction(TxOpts::default()).await?;
        tx.exec_batch(REKEY, params).await?;
        tx.commit().await.map_err(OpError::Commit)?;
    }
    tracing::info!(
        jobs = renamed,
        "migration 12: the jobs of the command backend renamed exec"
    );
    Ok(renamed)
}

/// The parameters of [`REKEY`] for one job: each step renamed where its label is an old one.
fn rekey_params(
    (id, config, solver, cs_id, cs, es_id, es, compile, run): OldJob,
    renames: &[(u32, &str, u32)],
) -> Result<Vec<Value>, StoreError> {
    let bad = |what: &str, e: &dyn std::fmt::Display| {
        StoreError::Invalid(format!("migration 12: job {id}: {what}: {e}"))
    };
    let step = |label: u32, name: Vec<u8>| -> Result<(u32, String), StoreError> {
        match renames.iter().find(|r| r.0 == label) {
            Some(&(_, new, new_id)) => Ok((new_id, new.to_string())),
            None => Ok((
                label,
                String::from_utf8(name).map_err(|e| bad("a step's label", &e))?,
            )),
        }
    };
    let (cs_id, cs) = step(cs_id, cs)?;
    let (es_id, es) = step(es_id, es)?;
    let compile: Params = serde_json::from_str(&compile).map_err(|e| bad("compile params", &e))?;
    let run: Params = serde_json::from_str(&run).map_err(|e| bad("run params", &e))?;
    Ok(vec![
        int(cs_id),
        int(es_id),
        int(config),
        int(solver),
        text(&cs),
        text(&es),
        text(&candidate_key(&compile, &run)),
        int(id),
    ])
}
