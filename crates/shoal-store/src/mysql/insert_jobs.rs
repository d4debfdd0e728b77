//! Loading jobs: the labels they name (two steps and a build key each) and the rows, in one
//! transaction (`ops` has the store's other operations).

use mysql_async::{Conn, Value};
use shoal_model::{JobState, NewJob};

use super::labels::{self, KnownLabels, LabelIds};
use super::ops::{begin, finish, Ctx, OpResult};
use super::queries as q;
use super::rows::{int, text, to_json};

pub(crate) async fn insert_jobs(
    mut conn: Conn,
    ctx: Ctx,
    known: &KnownLabels,
    jobs: &[NewJob],
    now: i64,
) -> OpResult<u64> {
    // The labels the rows name: two steps and a build key each.
    let texts = jobs.iter().flat_map(|j| {
        [
            j.compile_step.as_str(),
            j.eval_step.as_str(),
            j.build_key.as_str(),
        ]
    });
    let mut tx = begin(&mut conn).await?;
    let r = async {
        let labels = labels::write(&mut tx, ctx, known, texts).await?;
        let params = jobs
            .iter()
            .map(|j| job_params(j, &labels, now))
            .collect::<crate::Result<_>>()?;
        Ok((ctx.bulk(&mut tx, q::INSERT_JOB, params).await?, labels))
    }
    .await;
    let (inserted, labels) = finish(tx, r).await?;
    known.remember(labels);
    Ok(inserted)
}

/// The parameters of `q::INSERT_JOB` for one job, with the ids of its labels.
fn job_params(j: &NewJob, labels: &LabelIds, now: i64) -> crate::Result<Vec<Value>> {
    let state = if j.held {
        JobState::Held
    } else {
        JobState::New
    };
    Ok(vec![
        int(j.session.0),
        int(j.config.0),
        int(j.solver.0),
        labels.id(j.compile_step.as_str())?,
        labels.id(j.eval_step.as_str())?,
        // The identity hash's inputs (see `q::INSERT_JOB`).
        int(j.config.0),
        int(j.solver.0),
        text(j.compile_step.as_str()),
        text(j.eval_step.as_str()),
        text(&j.candidate_key()),
        text(&to_json("compile params", &j.compile_params)?),
        text(&to_json("run params", &j.run_params)?),
        labels.id(&j.build_key)?,
        text(state.as_str()),
        int(now),
        int(now),
    ])
}
