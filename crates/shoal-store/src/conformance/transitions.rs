//! Conformance cases for job state changes: the compare-and-set, attempts, results, retries,
//! leases, failures and races. Each takes a fresh, migrated, empty store and panics on a
//! violation; every assertion checks something an implementation could plausibly get wrong.

use super::*;
use JobState::*;

async fn job(store: &dyn Store, id: JobId) -> shoal_model::Job {
    store.job(id).await.unwrap().unwrap()
}

pub async fn happy_path_increments_attempts_and_keeps_artifact(store: &dyn Store) {
    let w = world(store).await;
    let id = one_job(store, &w, "8").await;

    assert!(step(store, tr(id, New, 0, CompileQueued).with_lease(5_000)).await);
    let j = job(store, id).await;
    assert_eq!(
        (j.state, j.attempt, j.lease_deadline_ms),
        (CompileQueued, 1, Some(5_000))
    );

    assert!(
        step(
            store,
            tr(id, CompileQueued, 1, Compiling)
                .with_worker("cc-1")
                .with_lease(9_000)
        )
        .await
    );
    let j = job(store, id).await;
    assert_eq!((j.state, j.attempt), (Compiling, 1));
    assert_eq!(j.worker.as_deref(), Some("cc-1"));
    // What a compile worker reads of a job: its state and attempt, and no more.
    assert_eq!(store.job_progress(id).await.unwrap(), Some((Compiling, 1)));
    assert_eq!(
        store
            .job_progress(shoal_model::JobId(id.0 + 1000))
            .await
            .unwrap(),
        None
    );
    assert_eq!(j.lease_deadline_ms, Some(9_000));

    assert!(
        step(
            store,
            tr(id, Compiling, 1, Compiled).with_artifact("sha256:aa")
        )
        .await
    );
    let j = job(store, id).await;
    assert_eq!((j.state, j.attempt), (Compiled, 1));
    assert_eq!(j.artifact.as_deref(), Some("sha256:aa"));
    assert_eq!(
        (j.lease_deadline_ms, j.worker.clone()),
        (None, None),
        "cleared when not given"
    );

    assert!(step(store, tr(id, Compiled, 1, EvalQueued).with_lease(20_000)).await);
    let j = job(store, id).await;
    assert_eq!(
        (j.state, j.attempt),
        (EvalQueued, 2),
        "eval dispatch is attempt 2"
    );
    assert_eq!(j.artifact.as_deref(), Some("sha256:aa"), "artifact kept");

    assert!(
        step(
            store,
            tr(id, EvalQueued, 2, Evaluating).with_worker("gpu-0")
        )
        .await
    );
    assert!(
        step_with(
            store,
            tr(id, Evaluating, 2, Evaluated),
            measured(&w, id, 2, 12.5)
        )
        .await
    );
    let j = job(store, id).await;
    assert_eq!((j.state, j.attempt, j.retries), (Evaluated, 2, 0));
    assert_eq!(j.artifact.as_deref(), Some("sha256:aa"));
    assert!(j.updated_ms > 1_600_000_000_000, "updated_ms is epoch ms");
    assert_eq!(
        store.results(id).await.unwrap(),
        vec![measured(&w, id, 2, 12.5)]
    );
}

pub async fn stale_transition_writes_nothing(store: &dyn Store) {
    let w = world(store).await;
    let id = one_job(store, &w, "8").await;
    to_evaluating(store, id).await;
    let before = store.job(id).await.unwrap().unwrap();

    // Wrong attempt (a reply of the first dispatch), carrying its result.
    let stale = tr(id, Evaluating, 1, Evaluated).with_worker("late");
    assert!(!step_with(store, stale, measured(&w, id, 1, 1.0)).await);
    // Wrong state.
    let wrong = tr(id, EvalQueued, 2, Evaluated).with_artifact("sha256:zz");
    assert!(!step_with(store, wrong, measured(&w, id, 2, 2.0)).await);
    assert!(!step(store, tr(id, New, 2, CompileQueued)).await);
    assert_eq!(
        store.job(id).await.unwrap().unwrap(),
        before,
        "job untouched"
    );
    assert!(
        store.results(id).await.unwrap().is_empty(),
        "no result of a stale change"
    );

    // In one batch, a stale change and a matching one: only the matching one applies.
    let batch = Batch {
        changes: vec![
            Change {
                transition: tr(id, Evaluating, 1, Evaluated),
                result: Some(measured(&w, id, 1, 1.0)),
            },
            Change {
                transition: tr(id, Evaluating, 2, Evaluated),
                result: Some(measured(&w, id, 2, 3.0)),
            },
        ],
        builds: vec![],
    };
    assert_eq!(store.apply(&batch).await.unwrap(), vec![false, true]);
    // The same reply delivered again is now stale too.
    assert!(
        !step_with(
            store,
            tr(id, Evaluating, 2, Evaluated),
            measured(&w, id, 2, 4.0)
        )
        .await
    );
    assert_eq!(
        store.results(id).await.unwrap(),
        vec![measured(&w, id, 2, 3.0)]
    );
}

pub async fn illegal_edge_rejects_whole_batch(store: &dyn Store) {
    let w = world(store).await;
    let a = one_job(store, &w, "1").await;
    let b = one_job(store, &w, "2").await;
    let mut illegal = tr(b, New, 0, CompileQueued);
    illegal.to = Evaluated; // Transition::new refuses this edge, so build it by hand.
    let batch = Batch {
        changes: vec![tr(a, New, 0, CompileQueued).into(), illegal.into()],
        builds: vec![built(w.session, "b", "sha256:aa")],
    };
    assert_invalid(store.apply(&batch).await);
    for id in [a, b] {
        let j = store.job(id).await.unwrap().unwrap();
        assert_eq!(
            (j.state, j.attempt),
            (New, 0),
            "nothing of the batch applied"
        );
    }
    assert!(store
        .builds(w.session, &["b".into()])
        .await
        .unwrap()
        .is_empty());

    // A result that belongs to another job or attempt is refused the same way.
    let wrong_job = Change {
        transition: tr(a, New, 0, CompileQueued),
        result: Some(measured(&w, b, 1, 1.0)),
    };
    assert_invalid(
        store
            .apply(&Batch {
                changes: vec![wrong_job],
                builds: vec![],
            })
            .await,
    );
    let wrong_attempt = Change {
        transition: tr(a, New, 0, Errored),
        result: Some(failed(&w, a, 1, FailureKind::NotApplicable)),
    };
    assert_invalid(
        store
            .apply(&Batch {
                changes: vec![wrong_attempt],
                builds: vec![],
            })
            .await,
    );
    assert_eq!(store.job(a).await.unwrap().unwrap().state, New);
}

pub async fn result_rows_one_per_attempt(store: &dyn Store) {
    let w = world(store).await;
    let id = one_job(store, &w, "8").await;
    to_evaluating(store, id).await;
    // The evaluator died: handed back with an infrastructure result for attempt 2.
    let back = tr(id, Evaluating, 2, Compiled).counting_retry();
    assert!(step_with(store, back, failed(&w, id, 2, FailureKind::Infrastructure)).await);

    // Another change on the same attempt carrying a second result for (job, 2) must not be
    // swallowed: the batch fails and nothing of it stays.
    let dup = Change {
        transition: tr(id, Compiled, 2, Errored).with_failure(FailureKind::Crashed, "x"),
        result: Some(failed(&w, id, 2, FailureKind::Crashed)),
    };
    assert!(store
        .apply(&Batch {
            changes: vec![dup],
            builds: vec![]
        })
        .await
        .is_err());
    assert_eq!(
        store.job(id).await.unwrap().unwrap().state,
        Compiled,
        "rolled back"
    );

    assert!(step(store, tr(id, Compiled, 2, EvalQueued)).await);
    assert!(step(store, tr(id, EvalQueued, 3, Evaluating)).await);
    assert!(
        step_with(
            store,
            tr(id, Evaluating, 3, Evaluated),
            measured(&w, id, 3, 7.0)
        )
        .await
    );
    let rows = store.results(id).await.unwrap();
    assert_eq!(
        rows,
        vec![
            failed(&w, id, 2, FailureKind::Infrastructure),
            measured(&w, id, 3, 7.0)
        ],
        "one row per attempt, oldest first"
    );
}

pub async fn final_results_use_final_attempt(store: &dyn Store) {
    let w = world(store).await;
    let retried = one_job(store, &w, "1").await;
    let untouched = one_job(store, &w, "2").await;
    let crashed = one_job(store, &w, "3").await;
    // Another session's job must not appear.
    let other = store
        .create_session(&sample_session("other"))
        .await
        .unwrap();
    let mut foreign = new_job(&w, "1", "b");
    foreign.session = other;
    assert_eq!(store.insert_jobs(&[foreign]).await.unwrap(), 1);

    to_evaluating(store, retried).await;
    let back = tr(retried, Evaluating, 2, Compiled).counting_retry();
    assert!(step_with(store, back, measured(&w, retried, 2, 99.0)).await);
    assert!(step(store, tr(retried, Compiled, 2, EvalQueued)).await);
    assert!(
        step_with(
            store,
            tr(retried, EvalQueued, 3, Evaluated),
            measured(&w, retried, 3, 5.0)
        )
        .await
    );

    to_evaluating(store, crashed).await;
    let err = tr(crashed, Evaluating, 2, Errored).with_failure(FailureKind::Crashed, "SIGSEGV");
    assert!(step_with(store, err, failed(&w, crashed, 2, FailureKind::Crashed)).await);

    let fr = store.final_results(w.session).await.unwrap();
    assert_eq!(
        fr.iter().map(|r| r.job).collect::<Vec<_>>(),
        vec![retried, untouched, crashed]
    );
    let config = store.config(w.config).await.unwrap().unwrap();
    for r in &fr {
        assert_eq!(r.config, w.config);
        assert_eq!(r.config_params, config.params);
        assert_eq!(r.solver, "gemm");
        assert_eq!(r.run_params, params(&[("SPLIT", "1")]));
    }
    assert_eq!(fr[0].compile_params, params(&[("TILE", "1")]));
    assert_eq!(fr[0].state, Evaluated);
    assert_eq!(
        fr[0].outcome,
        Some(measured(&w, retried, 3, 5.0).outcome),
        "final attempt only"
    );
    assert_eq!(
        (fr[0].worker.as_deref(), fr[0].device.as_deref()),
        (Some("host-a/gpu0"), Some("NVIDIA H100")),
        "who measured the final attempt"
    );
    assert!(fr.iter().all(|r| r.eval_step == shoal_model::Step::ExecRun));
    assert_eq!((fr[1].state, fr[1].outcome.clone()), (New, None));
    assert_eq!((fr[1].worker.clone(), fr[1].device.clone()), (None, None));
    assert_eq!(fr[2].state, Errored);
    assert_eq!(
        fr[2].outcome,
        Some(failed(&w, crashed, 2, FailureKind::Crashed).outcome)
    );
    assert_eq!(fr[2].failure, Some(FailureKind::Crashed));
    assert_eq!(fr[2].last_error.as_deref(), Some("SIGSEGV"));
}

pub async fn retries_are_counted(store: &dyn Store) {
    let w = world(store).await;
    let id = one_job(store, &w, "8").await;
    assert!(step(store, tr(id, New, 0, CompileQueued)).await);
    assert!(step(store, tr(id, CompileQueued, 1, New).counting_retry()).await);
    let j = store.job(id).await.unwrap().unwrap();
    assert_eq!(
        (j.state, j.attempt, j.retries),
        (New, 1, 1),
        "a retry keeps the attempt"
    );

    assert!(step(store, tr(id, New, 1, CompileQueued)).await);
    assert!(step(store, tr(id, CompileQueued, 2, New)).await);
    assert_eq!(
        store.job(id).await.unwrap().unwrap().retries,
        1,
        "not counted"
    );

    assert!(step(store, tr(id, New, 2, CompileQueued)).await);
    assert!(step(store, tr(id, CompileQueued, 3, Compiled)).await);
    assert!(step(store, tr(id, Compiled, 3, EvalQueued)).await);
    assert!(step(store, tr(id, EvalQueued, 4, Compiled).counting_retry()).await);
    let j = store.job(id).await.unwrap().unwrap();
    assert_eq!((j.state, j.attempt, j.retries), (Compiled, 4, 2));
    // A stale retry counts nothing.
    assert!(!step(store, tr(id, EvalQueued, 4, Compiled).counting_retry()).await);
    assert_eq!(store.job(id).await.unwrap().unwrap().retries, 2);
}

pub async fn expired_leases_listed_while_in_flight(store: &dyn Store) {
    let w = world(store).await;
    let early = one_job(store, &w, "1").await;
    let late = one_job(store, &w, "2").await;
    let parked = one_job(store, &w, "3").await;
    assert!(step(store, tr(early, New, 0, CompileQueued).with_lease(1_000)).await);
    assert!(step(store, tr(late, New, 0, CompileQueued).with_lease(5_000)).await);
    // Not in flight, even with a (stale) deadline: never listed.
    assert!(step(store, tr(parked, New, 0, CompileQueued)).await);
    assert!(step(store, tr(parked, CompileQueued, 1, Compiled).with_lease(10)).await);

    let ids = |v: Vec<shoal_model::Job>| v.into_iter().map(|j| j.id).collect::<Vec<_>>();
    assert!(
        store.expired_leases(1_000, 10).await.unwrap().is_empty(),
        "strictly before now"
    );
    assert_eq!(
        ids(store.expired_leases(2_000, 10).await.unwrap()),
        vec![early]
    );
    assert_eq!(
        ids(store.expired_leases(10_000, 10).await.unwrap()),
        vec![early, late]
    );
    assert_eq!(
        ids(store.expired_leases(10_000, 1).await.unwrap()),
        vec![early],
        "limit"
    );

    // Requeued (lease cleared, back to new): no longer listed.
    assert!(step(store, tr(early, CompileQueued, 1, New).counting_retry()).await);
    assert_eq!(
        ids(store.expired_leases(10_000, 10).await.unwrap()),
        vec![late]
    );
    // Running under a renewed lease: listed again once that one passes.
    assert!(
        step(
            store,
            tr(late, CompileQueued, 1, Compiling).with_lease(20_000)
        )
        .await
    );
    assert!(store.expired_leases(10_000, 10).await.unwrap().is_empty());
    assert_eq!(
        ids(store.expired_leases(20_001, 10).await.unwrap()),
        vec![late]
    );
}

pub async fn in_flight_lists_queued_and_running(store: &dyn Store) {
    let w = world(store).await;
    let mut ids = Vec::new();
    for tile in ["a", "b", "c", "d", "e", "f", "g"] {
        ids.push(one_job(store, &w, tile).await);
    }
    // a: new, b: compile_queued, c: compiling, d: compiled, e: eval_queued, f: evaluating,
    // g: evaluated.
    assert!(step(store, tr(ids[1], New, 0, CompileQueued)).await);
    assert!(step(store, tr(ids[2], New, 0, CompileQueued)).await);
    assert!(step(store, tr(ids[2], CompileQueued, 1, Compiling)).await);
    to_compiled(store, ids[3]).await;
    to_compiled(store, ids[4]).await;
    assert!(step(store, tr(ids[4], Compiled, 1, EvalQueued)).await);
    to_evaluating(store, ids[5]).await;
    to_evaluating(store, ids[6]).await;
    assert!(step(store, tr(ids[6], Evaluating, 2, Evaluated)).await);

    let got: Vec<_> = store
        .in_flight(w.session)
        .await
        .unwrap()
        .into_iter()
        .map(|j| (j.id, j.state))
        .collect();
    assert_eq!(
        got,
        vec![
            (ids[1], CompileQueued),
            (ids[2], Compiling),
            (ids[4], EvalQueued),
            (ids[5], Evaluating)
        ]
    );
    let other = store
        .create_session(&sample_session("other"))
        .await
        .unwrap();
    assert!(store.in_flight(other).await.unwrap().is_empty());
}

pub async fn failures_are_recorded_on_errored(store: &dyn Store) {
    let w = world(store).await;
    let id = one_job(store, &w, "8").await;
    assert!(step(store, tr(id, New, 0, CompileQueued)).await);
    assert!(step(store, tr(id, CompileQueued, 1, Compiling)).await);
    let err = tr(id, Compiling, 1, Errored).with_failure(FailureKind::BuildFailed, "nvcc: error");
    assert!(step_with(store, err, failed(&w, id, 1, FailureKind::BuildFailed)).await);
    let j = store.job(id).await.unwrap().unwrap();
    assert_eq!((j.state, j.attempt), (Errored, 1));
    assert_eq!(j.failure, Some(FailureKind::BuildFailed));
    assert_eq!(j.last_error.as_deref(), Some("nvcc: error"));
    assert_eq!(
        store.results(id).await.unwrap(),
        vec![failed(&w, id, 1, FailureKind::BuildFailed)]
    );
    // Terminal: every edge out of it is refused before the store is touched.
    for to in JobState::ALL {
        let mut t = tr(id, New, 1, CompileQueued);
        (t.from, t.to) = (Errored, to);
        assert_invalid(
            store
                .apply(&Batch {
                    changes: vec![t.into()],
                    builds: vec![],
                })
                .await,
        );
    }
    assert_eq!(store.job(id).await.unwrap().unwrap(), j);
    assert_eq!(
        store.state_counts(w.session).await.unwrap().get(&Errored),
        Some(&1)
    );
}

pub async fn concurrent_cas_has_one_winner(store: &dyn Store) {
    let w = world(store).await;
    let id = one_job(store, &w, "8").await;
    let race = |i: u32| {
        step(
            store,
            tr(id, New, 0, CompileQueued).with_worker(format!("w{i}")),
        )
    };
    let (a, b, c, d, e, f, g, h) = tokio::join!(
        race(0),
        race(1),
        race(2),
        race(3),
        race(4),
        race(5),
        race(6),
        race(7)
    );
    let wins: Vec<u32> = [a, b, c, d, e, f, g, h]
        .into_iter()
        .zip(0..)
        .filter_map(|(won, i)| won.then_some(i))
        .collect();
    assert_eq!(wins.len(), 1, "exactly one dispatch wins: {wins:?}");
    let j = store.job(id).await.unwrap().unwrap();
    assert_eq!((j.state, j.attempt), (CompileQueued, 1), "dispatched once");
    assert_eq!(
        j.worker,
        Some(format!("w{}", wins[0])),
        "the winner's write"
    );
}

pub async fn batch_changes_apply_in_order(store: &dyn Store) {
    let w = world(store).await;
    let id = one_job(store, &w, "8").await;
    // Dispatch and complete from a build cache in one batch: the second change sees the first.
    let batch = Batch {
        changes: vec![
            tr(id, New, 0, CompileQueued).with_lease(9).into(),
            tr(id, CompileQueued, 1, Compiled)
                .with_artifact("sha256:cached")
                .into(),
        ],
        builds: vec![],
    };
    assert_eq!(store.apply(&batch).await.unwrap(), vec![true, true]);
    let j = store.job(id).await.unwrap().unwrap();
    assert_eq!((j.state, j.attempt), (Compiled, 1));
    assert_eq!(j.artifact.as_deref(), Some("sha256:cached"));

    // A reply that may find the job queued or running is sent as both alternatives with the same
    // result: exactly one applies, and exactly one result row is written.
    assert!(step(store, tr(id, Compiled, 1, EvalQueued)).await);
    assert!(step(store, tr(id, EvalQueued, 2, Evaluating)).await);
    let row = measured(&w, id, 2, 3.5);
    let either = |from| Change {
        transition: tr(id, from, 2, Evaluated),
        result: Some(row.clone()),
    };
    let batch = Batch {
        changes: vec![either(EvalQueued), either(Evaluating)],
        builds: vec![],
    };
    assert_eq!(store.apply(&batch).await.unwrap(), vec![false, true]);
    assert_eq!(store.results(id).await.unwrap(), vec![row]);
}

pub async fn heartbeats_renew_running_leases_only_later(store: &dyn Store) {
    use crate::LeaseRenewal;
    use JobState::*;
    let w = world(store).await;
    let running = one_job(store, &w, "1").await;
    let queued = one_job(store, &w, "2").await;
    assert!(step(store, tr(running, New, 0, CompileQueued).with_lease(1_000)).await);
    assert!(
        step(
            store,
            tr(running, CompileQueued, 1, Compiling).with_lease(5_000)
        )
        .await
    );
    assert!(step(store, tr(queued, New, 0, CompileQueued).with_lease(1_000)).await);
    let renew = |job, state, attempt, deadline_ms| LeaseRenewal {
        job: shoal_model::message::JobRef { job, attempt },
        state,
        deadline_ms,
    };
    let lease = |j: Option<shoal_model::Job>| j.unwrap().lease_deadline_ms;
    let renewed = store
        .renew_leases(&[
            renew(running, Compiling, 1, 9_000),
            // Not in that state, or not at that attempt: untouched.
            renew(queued, Compiling, 1, 9_000),
            renew(running, Compiling, 0, 9_000),
        ])
        .await
        .unwrap();
    assert_eq!(renewed, 1);
    assert_eq!(lease(store.job(running).await.unwrap()), Some(9_000));
    assert_eq!(lease(store.job(queued).await.unwrap()), Some(1_000));
    // A late heartbeat never shortens a lease.
    assert_eq!(
        store
            .renew_leases(&[renew(running, Compiling, 1, 7_000)])
            .await
            .unwrap(),
        0
    );
    assert_eq!(lease(store.job(running).await.unwrap()), Some(9_000));
    // Renewal is not a state change: state, attempt and the outbox are as they were.
    let j = store.job(running).await.unwrap().unwrap();
    assert_eq!((j.state, j.attempt), (Compiling, 1));
    assert_eq!(
        store.unsent(i64::MAX, 10).await.unwrap().len(),
        1,
        "only `queued`"
    );
}
