//! Migration 12, the command backend named exec (`schemas/*/0012_exec_backend.sql`): what a
//! store written before it reads as after it, the same for both stores.
//!
//! Not a case of [`store_conformance_tests!`](crate::store_conformance_tests): making rows look
//! as a build before migration 12 wrote them takes each store's own SQL, so each store's tests
//! call [`old_names_read_as_exec`] with theirs.

use std::future::Future;

use shoal_model::{Backend, Step};

use super::*;
use JobState::*;

/// An exec session with a new job and an evaluated one (with its result), beside a no-op
/// session's job, made old by `age`, which must write every row that names the exec backend as
/// a build before migration 12 wrote it (sessions' backend `command`, jobs' steps
/// `command_build` and `command_run`, and whatever the store derives from them, such as the
/// MySQL store's identity hash, derived from those) and record the schema as version 11.
///
/// After `migrate`, the session reads as exec and is
/// found by its identity, its jobs read with the exec steps, loading the same jobs again adds
/// none (their identity is kept), the no-op session is as it was, and a second `migrate`
/// changes nothing.
pub async fn old_names_read_as_exec<F, Fut>(store: &dyn Store, age: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    let version = store.migrate().await.unwrap();
    let w = world(store).await;
    let jobs = [new_job(&w, "1", "b1"), new_job(&w, "2", "b2")];
    assert_eq!(store.insert_jobs(&jobs).await.unwrap(), 2);
    let listed = store.jobs_in_state(w.session, New, 10).await.unwrap();
    let (evaluated, waiting) = (listed[0].id, listed[1].id);
    to_evaluating(store, evaluated).await;
    let result = measured(&w, evaluated, 2, 12.5);
    assert!(
        step_with(
            store,
            tr(evaluated, Evaluating, 2, Evaluated),
            result.clone()
        )
        .await
    );
    let noop = NewSession {
        backend: Backend::Noop,
        ..sample_session("noop")
    };
    let noop_session = store.create_session(&noop).await.unwrap();
    let noop_jobs = [NewJob {
        session: noop_session,
        compile_step: Step::NoopBuild,
        eval_step: Step::NoopRun,
        ..new_job(&w, "1", "b1")
    }];
    assert_eq!(store.insert_jobs(&noop_jobs).await.unwrap(), 1);

    age().await;
    assert_eq!(store.migrate().await.unwrap(), version);

    for pass in ["migrated", "migrated again"] {
        let session = store.session(w.session).await.unwrap().unwrap();
        assert_eq!(session.info.backend, Backend::Exec, "{pass}");
        assert_eq!(
            store
                .find_session(&sample_session("conformance"))
                .await
                .unwrap()
                .map(|s| s.id),
            Some(w.session),
            "{pass}: an exec session's identity finds it"
        );
        for id in [evaluated, waiting] {
            let j = store.job(id).await.unwrap().unwrap();
            assert_eq!(
                (j.compile_step, j.eval_step),
                (Step::ExecBuild, Step::ExecRun)
            );
        }
        let j = store.job(evaluated).await.unwrap().unwrap();
        assert_eq!((j.state, j.attempt), (Evaluated, 2), "{pass}");
        assert_eq!(
            store.results(evaluated).await.unwrap(),
            std::slice::from_ref(&result)
        );
        let finals = store.final_results(w.session).await.unwrap();
        assert!(
            finals.iter().all(|r| r.eval_step == Step::ExecRun),
            "{pass}"
        );
        assert_eq!(
            store.insert_jobs(&jobs).await.unwrap(),
            0,
            "{pass}: the same jobs again add none"
        );
        let session = store.session(noop_session).await.unwrap().unwrap();
        assert_eq!(session.info.backend, Backend::Noop, "{pass}");
        let noops = store.jobs_in_state(noop_session, New, 10).await.unwrap();
        assert_eq!(noops.len(), 1, "{pass}");
        assert_eq!(
            (noops[0].compile_step, noops[0].eval_step),
            (Step::NoopBuild, Step::NoopRun),
            "{pass}"
        );
        assert_eq!(store.insert_jobs(&noop_jobs).await.unwrap(), 0);
        assert_eq!(store.migrate().await.unwrap(), version);
    }
}
