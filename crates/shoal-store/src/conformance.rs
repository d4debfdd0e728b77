//! The conformance suite every [`Store`] implementation must pass, written once.
//!
//! Why a shared suite: the embedded mode (SQLite) and the cluster (MySQL) must mean exactly the
//! same thing by "apply this transition", or a bug shows up only in the deployment nobody tested.
//! Each case is a `pub async fn` taking a fresh, migrated, empty store; the
//! [`store_conformance_tests!`](crate::store_conformance_tests) macro turns the whole list into
//! one `#[tokio::test]` per case for a given store factory:
//!
//! ```no_run
//! shoal_store::store_conformance_tests!(async {
//!     let store = shoal_store::SqliteStore::open_in_memory().unwrap();
//!     shoal_store::Store::migrate(&store).await.unwrap();
//!     store
//! });
//! ```
//!
//! The calling crate needs `tokio` (features `macros`, `rt`) among its dev-dependencies. Cases
//! only use the [`Store`] interface, so a new implementation runs them unchanged.

use shoal_model::{
    ConfigId, FailureKind, JobId, JobState, Measurement, NewConfig, NewJob, NewSession, NewSolver,
    Outcome, Params, ResultRow, SessionId, SolverId, Transition,
};

use crate::{Batch, BuildRecord, Change, Store, StoreError};

mod catalog;
mod commands;
mod db_import;
mod exec_rename;
mod outage;
mod outbox;
mod presence;
mod search_states;
mod transitions;
pub use catalog::*;
pub use commands::*;
pub use db_import::*;
pub use exec_rename::*;
pub use outage::*;
pub use outbox::*;
pub use presence::*;
pub use search_states::*;
pub use transitions::*;

/// Expands to one `#[tokio::test]` per conformance case. `$make` is an async expression that
/// yields a fresh, migrated, empty store; it is evaluated once per test.
#[macro_export]
macro_rules! store_conformance_tests {
    (@cases $make:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let store = $make.await;
                $crate::conformance::$case(&store).await;
            }
        )+
    };
    ($make:expr) => {
        $crate::store_conformance_tests!(@cases $make;
            migrate_is_idempotent,
            sessions_round_trip_and_find,
            configs_dedup_and_tags,
            solvers_upsert_is_idempotent,
            applicability_round_trip_and_replace,
            insert_jobs_is_idempotent,
            new_jobs_come_oldest_first_and_limit,
            jobs_in_every_other_state_come_oldest_first,
            happy_path_increments_attempts_and_keeps_artifact,
            stale_transition_writes_nothing,
            illegal_edge_rejects_whole_batch,
            result_rows_one_per_attempt,
            final_results_use_final_attempt,
            retries_are_counted,
            expired_leases_listed_while_in_flight,
            in_flight_lists_queued_and_running,
            state_counts_per_state,
            builds_round_trip_and_replace,
            artifacts_are_content_addressed,
            failures_are_recorded_on_errored,
            concurrent_cas_has_one_winner,
            batch_changes_apply_in_order,
            queued_jobs_owe_a_request_until_sent,
            leaving_a_queue_settles_what_was_owed,
            a_change_that_does_not_apply_owes_nothing,
            a_chain_through_a_cached_build_owes_only_the_eval,
            heartbeats_renew_running_leases_only_later,
            held_jobs_are_released_or_skipped,
            worker_presence_is_upserted_and_listed_newest_first,
            finish_times_list_ended_jobs_oldest_first,
            the_first_reply_of_a_command_is_kept,
            a_cancelled_session_stays_cancelled,
            a_shipped_file_is_whole_only_with_every_part,
            database_imports_are_stored_whole_and_read_back_in_order,
            an_outage_extends_in_flight_leases_set_before_it,
        );
    };
}

// ---- fixtures shared by the cases -------------------------------------------------------------

/// A session identity with every field set, so `find_session` has something to mismatch on.
pub fn sample_session(reason: &str) -> NewSession {
    NewSession {
        reason: reason.to_string(),
        arch: "sm_90".to_string(),
        num_cu: 132,
        backend: shoal_model::Backend::Exec,
        spec: "[build]\ncommand = \"make\"".to_string(),
        spec_path: "examples/gemm.toml".to_string(),
        library_version: "1.2.3".to_string(),
        driver_version: "550.54".to_string(),
        max_retries: 3,
    }
}

fn params(pairs: &[(&str, &str)]) -> Params {
    let mut p = Params::new();
    for (n, v) in pairs {
        p.push(*n, *v);
    }
    p
}

/// A session, one config and one solver to hang jobs on.
pub struct World {
    pub session: SessionId,
    pub config: ConfigId,
    pub solver: SolverId,
}

pub async fn world(store: &dyn Store) -> World {
    let session = store
        .create_session(&sample_session("conformance"))
        .await
        .unwrap();
    let config = store
        .upsert_configs(&[NewConfig {
            kind: "shape".to_string(),
            key: "m=64,n=64".to_string(),
            params: params(&[("m", "64"), ("n", "64")]),
            tags: vec!["small".to_string()],
        }])
        .await
        .unwrap()[0]
        .0;
    let solver = store
        .upsert_solvers(&[NewSolver {
            name: "gemm".to_string(),
            tunable: true,
        }])
        .await
        .unwrap()[0]
        .id;
    World {
        session,
        config,
        solver,
    }
}

/// A job of `w` whose candidate is `tile` and whose build key is `build`.
pub fn new_job(w: &World, tile: &str, build: &str) -> NewJob {
    NewJob {
        session: w.session,
        config: w.config,
        solver: w.solver,
        compile_step: shoal_model::Step::ExecBuild,
        eval_step: shoal_model::Step::ExecRun,
        compile_params: params(&[("TILE", tile)]),
        run_params: params(&[("SPLIT", "1")]),
        build_key: build.to_string(),
        held: false,
    }
}

/// Inserts one job and returns its id.
pub async fn one_job(store: &dyn Store, w: &World, tile: &str) -> JobId {
    assert_eq!(
        store.insert_jobs(&[new_job(w, tile, "b")]).await.unwrap(),
        1
    );
    let jobs = store
        .jobs_in_state(w.session, JobState::New, 1000)
        .await
        .unwrap();
    jobs.iter()
        .find(|j| j.compile_params.get("TILE") == Some(tile))
        .expect("the job just inserted")
        .id
}

pub fn tr(job: JobId, from: JobState, attempt: u32, to: JobState) -> Transition {
    Transition::new(job, from, attempt, to).unwrap()
}

/// Applies one transition alone; returns whether it matched.
pub async fn step(store: &dyn Store, t: Transition) -> bool {
    let out = store
        .apply(&Batch {
            changes: vec![t.into()],
            builds: vec![],
        })
        .await
        .unwrap();
    assert_eq!(out.len(), 1);
    out[0]
}

pub fn measured(w: &World, job: JobId, attempt: u32, time_us: f64) -> ResultRow {
    ResultRow {
        job,
        session: w.session,
        attempt,
        outcome: Outcome::Measured(Measurement {
            time_us,
            samples_us: vec![time_us, time_us + 1.0, time_us - 0.5],
            workspace: 4096,
            details: Params(vec![("params".into(), "16,16,4".into())]),
        }),
        worker: "host-a/gpu0".to_string(),
        device: "NVIDIA H100".to_string(),
        created_ms: 1_700_000_000_000 + i64::from(attempt),
    }
}

pub fn failed(w: &World, job: JobId, attempt: u32, kind: FailureKind) -> ResultRow {
    ResultRow {
        outcome: Outcome::failed(kind, "exit status 139"),
        ..measured(w, job, attempt, 0.0)
    }
}

/// Applies one transition together with its result row.
pub async fn step_with(store: &dyn Store, t: Transition, r: ResultRow) -> bool {
    store
        .apply(&Batch {
            changes: vec![Change {
                transition: t,
                result: Some(r),
            }],
            builds: vec![],
        })
        .await
        .unwrap()[0]
}

/// Drives a job from `new` to `compiled` (attempt 1) and returns.
pub async fn to_compiled(store: &dyn Store, job: JobId) {
    use JobState::*;
    assert!(step(store, tr(job, New, 0, CompileQueued).with_lease(i64::MAX)).await);
    assert!(step(store, tr(job, CompileQueued, 1, Compiling)).await);
    assert!(
        step(
            store,
            tr(job, Compiling, 1, Compiled).with_artifact("sha256:aa")
        )
        .await
    );
}

/// Drives a job from `new` to `evaluating` (attempt 2) and returns.
pub async fn to_evaluating(store: &dyn Store, job: JobId) {
    use JobState::*;
    to_compiled(store, job).await;
    assert!(step(store, tr(job, Compiled, 1, EvalQueued).with_lease(i64::MAX)).await);
    assert!(step(store, tr(job, EvalQueued, 2, Evaluating)).await);
}

/// `Err` must be an `Invalid`, the error a caller can act on (not a backend failure).
pub fn assert_invalid<T: std::fmt::Debug>(r: Result<T, StoreError>) {
    match r {
        Err(StoreError::Invalid(_)) => {}
        other => panic!("expected StoreError::Invalid, got {other:?}"),
    }
}

/// A build record with an artifact.
pub fn built(session: SessionId, key: &str, artifact: &str) -> BuildRecord {
    BuildRecord {
        session,
        build_key: key.to_string(),
        result: Ok(artifact.to_string()),
    }
}
