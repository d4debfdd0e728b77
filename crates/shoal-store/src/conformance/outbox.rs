//! Conformance cases for the outbox ([`crate::outbox`]): a queued job owes a request until the
//! broker confirms it or the job leaves the queue.

use shoal_model::message::JobRef;
use shoal_model::{Job, JobId, JobState};

use super::{one_job, step, tr, world};
use crate::{Batch, Store};

/// Everything owed now, as (job, state, attempt).
async fn owed(store: &dyn Store) -> Vec<(JobId, JobState, u32)> {
    let jobs: Vec<Job> = store.unsent(i64::MAX, 100).await.unwrap();
    let mut v: Vec<_> = jobs.iter().map(|j| (j.id, j.state, j.attempt)).collect();
    v.sort();
    v
}

fn r(job: JobId, attempt: u32) -> JobRef {
    JobRef { job, attempt }
}

pub async fn queued_jobs_owe_a_request_until_sent(store: &dyn Store) {
    use JobState::*;
    let w = world(store).await;
    let a = one_job(store, &w, "1").await;
    let b = one_job(store, &w, "2").await;
    assert!(owed(store).await.is_empty(), "new jobs owe nothing");
    assert!(step(store, tr(a, New, 0, CompileQueued).with_lease(i64::MAX)).await);
    assert!(step(store, tr(b, New, 0, CompileQueued).with_lease(i64::MAX)).await);
    assert_eq!(
        owed(store).await,
        vec![(a, CompileQueued, 1), (b, CompileQueued, 1)]
    );
    assert!(
        store.unsent(0, 100).await.unwrap().is_empty(),
        "only rows written before the time given"
    );
    assert_eq!(store.unsent(i64::MAX, 1).await.unwrap().len(), 1, "limit");
    store.mark_sent(&[r(a, 1)]).await.unwrap();
    assert_eq!(owed(store).await, vec![(b, CompileQueued, 1)]);
    // A confirmation for an attempt that is not owed removes nothing else.
    store.mark_sent(&[r(b, 7), r(a, 1)]).await.unwrap();
    assert_eq!(owed(store).await, vec![(b, CompileQueued, 1)]);
}

pub async fn leaving_a_queue_settles_what_was_owed(store: &dyn Store) {
    use JobState::*;
    let w = world(store).await;
    let started = one_job(store, &w, "1").await;
    let requeued = one_job(store, &w, "2").await;
    let evaluating = one_job(store, &w, "3").await;
    for j in [started, requeued, evaluating] {
        assert!(step(store, tr(j, New, 0, CompileQueued).with_lease(i64::MAX)).await);
    }
    assert!(step(store, tr(started, CompileQueued, 1, Compiling)).await);
    assert!(step(store, tr(requeued, CompileQueued, 1, New).counting_retry()).await);
    assert!(step(store, tr(evaluating, CompileQueued, 1, Compiling)).await);
    assert!(
        step(
            store,
            tr(evaluating, Compiling, 1, Compiled).with_artifact("sha256:aa")
        )
        .await
    );
    assert!(owed(store).await.is_empty(), "{:?}", owed(store).await);
    // Queued again, for eval: owed again, at the new attempt; consumed once it runs.
    assert!(
        step(
            store,
            tr(evaluating, Compiled, 1, EvalQueued).with_lease(i64::MAX)
        )
        .await
    );
    assert_eq!(owed(store).await, vec![(evaluating, EvalQueued, 2)]);
    assert!(step(store, tr(evaluating, EvalQueued, 2, Evaluating)).await);
    assert!(owed(store).await.is_empty());
    // Settled rows confirmed late are no error.
    store
        .mark_sent(&[r(started, 1), r(evaluating, 2)])
        .await
        .unwrap();
}

pub async fn a_change_that_does_not_apply_owes_nothing(store: &dyn Store) {
    use JobState::*;
    let w = world(store).await;
    let j = one_job(store, &w, "1").await;
    assert!(
        !step(store, tr(j, New, 3, CompileQueued)).await,
        "stale attempt"
    );
    assert!(owed(store).await.is_empty());
}

pub async fn a_chain_through_a_cached_build_owes_only_the_eval(store: &dyn Store) {
    use JobState::*;
    let w = world(store).await;
    let j = one_job(store, &w, "1").await;
    let applied = store
        .apply(&Batch {
            changes: vec![
                tr(j, New, 0, CompileQueued).with_lease(i64::MAX).into(),
                tr(j, CompileQueued, 1, Compiled)
                    .with_artifact("sha256:aa")
                    .into(),
                tr(j, Compiled, 1, EvalQueued).with_lease(i64::MAX).into(),
            ],
            builds: vec![],
        })
        .await
        .unwrap();
    assert_eq!(applied, vec![true; 3]);
    assert_eq!(owed(store).await, vec![(j, EvalQueued, 2)]);
    let job = &store.unsent(i64::MAX, 10).await.unwrap()[0];
    assert_eq!(
        job.artifact.as_deref(),
        Some("sha256:aa"),
        "what an eval request needs"
    );
}
