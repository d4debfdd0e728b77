//! Conformance case for what the Scheduler does after a store outage: the leases that ran
//! during it move later by its length.

use super::*;
use JobState::*;

/// In-flight leases set before the outage ended move later by its length; a job not in flight,
/// or changed after the outage, keeps its deadline.
pub async fn an_outage_extends_in_flight_leases_set_before_it(store: &dyn Store) {
    let w = world(store).await;
    let queued = one_job(store, &w, "1").await;
    let running = one_job(store, &w, "2").await;
    let done = one_job(store, &w, "3").await;
    assert!(step(store, tr(queued, New, 0, CompileQueued).with_lease(1_000)).await);
    assert!(step(store, tr(running, New, 0, CompileQueued).with_lease(1_000)).await);
    assert!(
        step(
            store,
            tr(running, CompileQueued, 1, Compiling).with_lease(2_000)
        )
        .await
    );
    assert!(step(store, tr(done, New, 0, CompileQueued).with_lease(1_000)).await);
    assert!(
        step(
            store,
            tr(done, CompileQueued, 1, Compiled).with_lease(3_000)
        )
        .await
    );
    let lease = |j: Option<shoal_model::Job>| j.unwrap().lease_deadline_ms;

    // Changed after the "outage" (its end is before every change): nothing moves.
    assert_eq!(store.extend_leases(60_000, 0).await.unwrap(), 0);
    assert_eq!(lease(store.job(queued).await.unwrap()), Some(1_000));

    let ended = crate::encoding::now_ms() + 60_000;
    assert_eq!(store.extend_leases(60_000, ended).await.unwrap(), 2);
    assert_eq!(lease(store.job(queued).await.unwrap()), Some(61_000));
    assert_eq!(lease(store.job(running).await.unwrap()), Some(62_000));
    assert_eq!(
        lease(store.job(done).await.unwrap()),
        Some(3_000),
        "a job out of flight keeps its deadline"
    );
}
