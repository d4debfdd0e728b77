//! Conformance cases for the states of searched sessions (`held`, `skipped`): jobs a search has
//! not chosen yet are invisible to dispatch, and leave `held` only by the search's changes.

use super::*;
use JobState::*;

/// A searched shape's jobs: inserted `held`, invisible to the claim of `new` jobs, then
/// released (`held → new`, attempt unchanged, nothing owed) or skipped (final, no result).
pub async fn held_jobs_are_released_or_skipped(store: &dyn Store) {
    let w = world(store).await;
    let held: Vec<NewJob> = ["1", "2", "3"]
        .iter()
        .map(|t| NewJob {
            held: true,
            ..new_job(&w, t, "b")
        })
        .collect();
    assert_eq!(store.insert_jobs(&held).await.unwrap(), 3);
    assert!(store
        .jobs_in_state(w.session, New, 100)
        .await
        .unwrap()
        .is_empty());
    let ids: Vec<JobId> = store
        .jobs_in_state(w.session, Held, 100)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(step(store, tr(ids[0], Held, 0, New)).await);
    assert!(step(store, tr(ids[1], Held, 0, Skipped)).await);
    assert!(
        !step(store, tr(ids[1], Held, 0, New)).await,
        "a skipped job stays skipped"
    );
    let released = store.job(ids[0]).await.unwrap().unwrap();
    assert_eq!((released.state, released.attempt), (New, 0));
    assert!(store.unsent(i64::MAX, 100).await.unwrap().is_empty());
    let counts = store.state_counts(w.session).await.unwrap();
    for (state, n) in [(New, 1), (Skipped, 1), (Held, 1)] {
        assert_eq!(counts.get(&state), Some(&n), "{state}");
    }
    let finals = store.final_results(w.session).await.unwrap();
    let skipped = finals.iter().find(|r| r.job == ids[1]).unwrap();
    assert_eq!((skipped.state, &skipped.outcome), (Skipped, &None));
}
