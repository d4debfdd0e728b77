//! Applying batches of state changes, renewing leases and settling the outbox: the store's
//! writes of job state, on one connection each ([`super::ops`] has the rest and the shared
//! helpers).
//!
//! A batch locks its jobs' rows, works out in memory which compare-and-sets hold
//! ([`plan`]: each change sees the ones before it), and writes only those: compare-and-sets
//! that share their new values as one `UPDATE … WHERE id IN (…)` ([`write_updates`]), result
//! rows and builds as one bulk execution each.

use std::collections::{BTreeSet, HashMap};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Transaction, Value};
use shoal_model::message::JobRef;
use shoal_model::{Job, JobState, Transition};

use super::labels::{self, KnownLabels, LabelIds};
use super::ops::{begin, finish, jobs, padded, Ctx, OpResult};
use super::queries as q;
use super::rows::{self, int, opt_int, opt_text, text};
use crate::encoding::{build_columns, outcome_status, timestamps, RowWrite};
use crate::{Batch, BuildRecord, StoreError};

/// The six per-state timestamp parameters of `CAS_UPDATE`: `now` in the column of the state
/// entered, NULL (keep) in the others ([`timestamps`]).
fn timestamp_params(to: JobState, now: i64) -> [Value; 6] {
    timestamps(to, now).map(opt_int)
}

/// What a batch writes, worked out from the locked rows: which changes apply (in order, each
/// seeing the ones before it), the writes that make it so, and the result rows to insert.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Plan {
    pub applied: Vec<bool>,
    /// (index of the change, wave): a job's first applied change in the batch is in wave 0, its
    /// second in wave 1, and so on. The writes of one wave touch distinct jobs, so they may go
    /// in any order; waves go in order.
    pub writes: Vec<(usize, usize)>,
    pub results: Vec<Vec<Value>>,
}

/// Replays the batch against `current` (job id → state and attempt, for the jobs that exist),
/// exactly as one compare-and-set per change in batch order would; updates `current` to the
/// state after the batch.
pub(crate) fn plan(
    batch: &Batch,
    current: &mut HashMap<i64, (JobState, u32)>,
    labels: &LabelIds,
) -> crate::Result<Plan> {
    let mut plan = Plan::default();
    let mut waves: HashMap<i64, usize> = HashMap::new();
    for (i, change) in batch.changes.iter().enumerate() {
        let t = &change.transition;
        let row = current.get_mut(&t.job.0);
        let ok = matches!(row.as_deref(), Some(&(state, attempt)) if state == t.from && attempt == t.attempt);
        plan.applied.push(ok);
        let Some(row) = row.filter(|_| ok) else {
            continue;
        };
        *row = (t.to, t.next_attempt());
        let wave = waves.entry(t.job.0).or_insert(0);
        plan.writes.push((i, *wave));
        *wave += 1;
        if let Some(r) = &change.result {
            plan.results.push(rows::result_params(r, labels)?);
        }
    }
    Ok(plan)
}

/// The SET parameters of a compare-and-set ([`q::CAS_SET_PARAMS`] of them), with the ids of
/// the labels it names.
fn set_params(t: &Transition, now: i64, labels: &LabelIds) -> crate::Result<Vec<Value>> {
    let (kind, error) = match &t.failure {
        Some((k, e)) => (Some(k.as_str()), Some(e.as_str())),
        None => (None, None),
    };
    let mut params = Vec::with_capacity(q::CAS_SET_PARAMS + 3);
    params.extend([
        text(t.to.as_str()),
        int(t.next_attempt()),
        int(i64::from(t.count_retry)),
        opt_int(t.lease_deadline_ms),
        labels.id_or(t.worker.as_deref(), int(0))?,
        labels.id_or(t.artifact.as_deref(), Value::NULL)?,
        labels.id_or(kind, int(0))?,
        opt_text(error),
        int(now),
    ]);
    params.extend(timestamp_params(t.to, now));
    Ok(params)
}

/// Changes that may share one grouped update: the same compare-and-set pair and the same new
/// values (the job id aside).
#[derive(Clone, Copy, Hash, PartialEq, Eq)]
struct GroupKey<'a> {
    from: JobState,
    attempt: u32,
    row: RowWrite<'a>,
}

impl<'a> GroupKey<'a> {
    fn of(t: &'a Transition) -> Self {
        GroupKey {
            from: t.from,
            attempt: t.attempt,
            row: RowWrite::of(t),
        }
    }
}

/// The smallest group written as one `UPDATE … WHERE id IN (…)`: below it, the round trip of a
/// statement of its own costs more than the group saves over the rows' share of one bulk
/// execution (measured: a grouped update does a row in about half the server time).
pub(crate) const MIN_GROUP: usize = 8;

/// Writes the planned updates, wave by wave: large groups as grouped updates, the rest as one
/// bulk execution of the per-row update. Returns the affected rows.
async fn write_updates(
    tx: &mut Transaction<'_>,
    ctx: Ctx,
    (batch, labels): (&Batch, &LabelIds),
    writes: &[(usize, usize)],
    now: i64,
) -> OpResult<u64> {
    let waves = writes.iter().map(|&(_, w)| w + 1).max().unwrap_or(0);
    let mut affected = 0;
    for wave in 0..waves {
        // Groups in order of first appearance, so the statements are the same from run to run.
        let mut order: Vec<GroupKey<'_>> = Vec::new();
        let mut groups: HashMap<GroupKey<'_>, Vec<usize>> = HashMap::new();
        for &(i, _) in writes.iter().filter(|&&(_, w)| w == wave) {
            let key = GroupKey::of(&batch.changes[i].transition);
            groups
                .entry(key)
                .or_insert_with(|| {
                    order.push(key);
                    Vec::new()
                })
                .push(i);
        }
        let mut singles = Vec::new();
        for key in order {
            let members = &groups[&key];
            if members.len() < MIN_GROUP {
                for &i in members {
                    let t = &batch.changes[i].transition;
                    let mut params = set_params(t, now, labels)?;
                    params.extend([int(t.job.0), text(t.from.as_str()), int(t.attempt)]);
                    singles.push(params);
                }
                continue;
            }
            let first = &batch.changes[members[0]].transition;
            for chunk in members.chunks(q::MAX_IN) {
                let mut params = set_params(first, now, labels)?;
                params.extend([text(key.from.as_str()), int(key.attempt)]);
                params.extend(padded(
                    chunk
                        .iter()
                        .map(|&i| int(batch.changes[i].transition.job.0))
                        .collect(),
                ));
                tx.exec_drop(q::cas_update_group(chunk.len()), params)
                    .await?;
                affected += tx.affected_rows();
            }
        }
        affected += ctx.bulk(tx, q::CAS_UPDATE, singles).await?;
    }
    Ok(affected)
}

fn build_params(b: &BuildRecord) -> Vec<Value> {
    let (artifact, kind, detail) = build_columns(b);
    vec![
        int(b.session.0),
        text(&b.build_key),
        opt_text(artifact),
        opt_text(kind),
        opt_text(detail),
    ]
}

/// One transaction: lock the batch's jobs and read their (state, attempt) (one statement per
/// [`q::MAX_IN`] jobs), replay the batch in memory ([`plan`]), then write the updates that
/// apply ([`write_updates`]), their result rows and the builds (one bulk execution each).
pub(crate) async fn apply(
    mut conn: Conn,
    ctx: Ctx,
    known: &KnownLabels,
    batch: &Batch,
    now: i64,
) -> OpResult<Vec<bool>> {
    let mut tx = begin(&mut conn).await?;
    let r = apply_tx(&mut tx, ctx, known, batch, now).await;
    let (applied, labelled) = finish(tx, r).await?;
    known.remember(labelled);
    Ok(applied)
}

/// The texts of a batch that its rows name by label: each change's worker, artifact and
/// failure kind, each result's status, worker and device.
fn label_texts(batch: &Batch) -> Vec<&str> {
    let mut texts = Vec::new();
    for change in &batch.changes {
        let t = &change.transition;
        texts.extend(t.worker.as_deref());
        texts.extend(t.artifact.as_deref());
        texts.extend(t.failure.as_ref().map(|(kind, _)| kind.as_str()));
        if let Some(r) = &change.result {
            texts.extend([
                outcome_status(&r.outcome),
                r.worker.as_str(),
                r.device.as_str(),
            ]);
        }
    }
    texts
}

async fn apply_tx(
    tx: &mut Transaction<'_>,
    ctx: Ctx,
    known: &KnownLabels,
    batch: &Batch,
    now: i64,
) -> OpResult<(Vec<bool>, LabelIds)> {
    // Labels first: every batch takes its locks in the same order, labels then jobs.
    let labelled = labels::write(tx, ctx, known, label_texts(batch)).await?;
    // Ascending order: concurrent batches lock shared jobs in the same order.
    let ids: BTreeSet<i64> = batch.changes.iter().map(|c| c.transition.job.0).collect();
    let ids: Vec<i64> = ids.into_iter().collect();
    let mut current = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(q::MAX_IN) {
        let params = padded(chunk.iter().map(|&id| int(id)).collect());
        let rows: Vec<(i64, String, u32)> = tx.exec(q::cas_lock(chunk.len()), params).await?;
        for (id, state, attempt) in rows {
            let state: JobState = state.parse().map_err(StoreError::from)?;
            current.insert(id, (state, attempt));
        }
    }
    let plan = plan(batch, &mut current, &labelled)?;
    let expected = plan.writes.len() as u64;
    let updated = write_updates(tx, ctx, (batch, &labelled), &plan.writes, now).await?;
    if updated != expected {
        return Err(StoreError::Invalid(format!(
            "applying a batch: {expected} changes were to apply to locked jobs but {updated} \
             did; rolled back"
        ))
        .into());
    }
    ctx.bulk(tx, q::INSERT_RESULT, plan.results).await?;
    let builds = batch.builds.iter().map(build_params).collect();
    ctx.bulk(tx, q::UPSERT_BUILD, builds).await?;
    let effect = crate::outbox::outbox_effect(&batch.changes, &plan.applied);
    for chunk in effect.settled.chunks(q::MAX_IN) {
        let params = padded(chunk.iter().map(|j| int(j.0)).collect());
        tx.exec_drop(q::outbox_settle(chunk.len()), params).await?;
    }
    let owed = effect
        .owed
        .iter()
        .map(|r| vec![int(r.job.0), int(r.attempt), int(now)])
        .collect();
    ctx.bulk(tx, q::OUTBOX_OWE, owed).await?;
    Ok((plan.applied, labelled))
}

/// Renews leases, in one transaction; returns how many jobs were renewed.
pub(crate) async fn renew_leases(
    mut conn: Conn,
    ctx: Ctx,
    renewals: &[crate::LeaseRenewal],
) -> OpResult<u64> {
    let mut tx = begin(&mut conn).await?;
    let rows = renewals
        .iter()
        .map(|r| {
            vec![
                int(r.deadline_ms),
                int(r.job.job.0),
                text(r.state.as_str()),
                int(r.job.attempt),
                int(r.deadline_ms),
            ]
        })
        .collect();
    let r = ctx.bulk(&mut tx, q::RENEW_LEASE, rows).await;
    finish(tx, r).await
}

/// The oldest requests owed since before `before_ms`, with their jobs (see [`crate::outbox`]).
pub(crate) async fn unsent(mut conn: Conn, before_ms: i64, limit: u32) -> OpResult<Vec<Job>> {
    jobs(conn.exec(q::UNSENT, (before_ms, limit)).await?)
}

/// Removes the outbox rows of confirmed requests, in one transaction.
pub(crate) async fn mark_sent(mut conn: Conn, ctx: Ctx, sent: &[JobRef]) -> OpResult<()> {
    let mut tx = begin(&mut conn).await?;
    let rows = sent
        .iter()
        .map(|r| vec![int(r.job.0), int(r.attempt)])
        .collect();
    let r = ctx.bulk(&mut tx, q::OUTBOX_SENT, rows).await.map(|_| ());
    finish(tx, r).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Change;
    use shoal_model::JobId;
    use JobState::*;

    fn tr(job: i64, from: JobState, attempt: u32, to: JobState) -> Change {
        Transition::new(JobId(job), from, attempt, to)
            .unwrap()
            .into()
    }

    #[test]
    fn plan_replays_in_order_and_skips_stale_and_missing() {
        let mut current: HashMap<i64, (JobState, u32)> =
            [(1, (New, 0)), (2, (Evaluating, 2))].into_iter().collect();
        let batch = Batch {
            changes: vec![
                tr(1, New, 0, CompileQueued),
                tr(1, CompileQueued, 1, Compiled),
                tr(1, New, 0, CompileQueued), // stale after the first
                tr(2, EvalQueued, 2, Evaluated),
                tr(2, Evaluating, 2, Evaluated),
                tr(3, New, 0, CompileQueued), // no such job
            ],
            builds: vec![],
        };
        let plan = plan(&batch, &mut current, &LabelIds::default()).unwrap();
        assert_eq!(plan.applied, vec![true, true, false, false, true, false]);
        // Job 1's second change waits for its first (wave 1); job 2's is in wave 0.
        assert_eq!(plan.writes, vec![(0, 0), (1, 1), (4, 0)]);
        assert_eq!(current[&1], (Compiled, 1));
        assert_eq!(current[&2], (Evaluated, 2));
    }

    #[test]
    fn set_params_stamp_the_state_entered() {
        let t = Transition::new(JobId(1), CompileQueued, 1, Compiled).unwrap();
        let none = LabelIds::default();
        let p = set_params(&t, 7, &none).unwrap();
        assert_eq!(p.len(), q::CAS_SET_PARAMS);
        // The six timestamps follow the 9 other values.
        assert_eq!(p[9..].iter().filter(|v| **v != Value::NULL).count(), 1);
        assert_eq!(p[11], int(7), "compiled_ms");
        assert_eq!(
            (&p[4], &p[5], &p[6]),
            (&int(0), &Value::NULL, &int(0)),
            "no labels"
        );
        let retry = Transition::new(JobId(1), CompileQueued, 1, New).unwrap();
        assert!(set_params(&retry, 7, &none).unwrap()[9..]
            .iter()
            .all(|v| *v == Value::NULL));
        let named = t.with_worker("w");
        assert!(
            set_params(&named, 7, &none).is_err(),
            "a worker without a label is an error, not none"
        );
    }

    #[test]
    fn group_keys_separate_what_differs() {
        let a = Transition::new(JobId(1), New, 0, CompileQueued)
            .unwrap()
            .with_lease(5);
        let b = Transition::new(JobId(2), New, 0, CompileQueued)
            .unwrap()
            .with_lease(5);
        assert!(GroupKey::of(&a) == GroupKey::of(&b), "the job id aside");
        let c = b.clone().with_worker("w");
        assert!(GroupKey::of(&a) != GroupKey::of(&c));
        let d = Transition::new(JobId(2), New, 1, CompileQueued)
            .unwrap()
            .with_lease(5);
        assert!(GroupKey::of(&a) != GroupKey::of(&d), "another attempt");
    }
}
