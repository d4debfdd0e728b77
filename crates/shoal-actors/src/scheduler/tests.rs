//! Scheduler tests: a compile result dispatching its eval in the same write (real SQLite store,
//! in-process bus), and how held-back "started" notices and results are planned.

use super::*;
use shoal_model::{JobId, JobState::*};

/// A compile result dispatches its jobs' evals in the same transaction: one compare-and-set
/// per job from `compile_queued` to `eval_queued` (attempt 2) and an eval request published
/// after it; a replayed result changes nothing and publishes nothing; a job whose build is
/// known goes from `new` to `eval_queued` in one dispatch.
#[tokio::test]
async fn a_compile_result_dispatches_the_eval_in_the_same_write() {
    use shoal_bus::{Bus, MemoryBus};
    use shoal_model::message::{CompileReply, ReplyBody};
    use shoal_model::queue::Namespace;
    use shoal_model::{NewConfig, NewJob, NewSession, NewSolver, Params};
    use shoal_store::SqliteStore;

    let store = SqliteStore::open_in_memory().unwrap();
    store.migrate().await.unwrap();
    let session = store
        .create_session(&NewSession {
            reason: "chain".into(),
            arch: "x86_64".into(),
            num_cu: 2,
            backend: "noop".into(),
            spec: String::new(),
            spec_path: String::new(),
            library_version: String::new(),
            driver_version: String::new(),
            max_retries: 3,
        })
        .await
        .unwrap();
    let config = store
        .upsert_configs(&[NewConfig {
            kind: "noop".into(),
            key: "noop".into(),
            params: Params::new(),
            tags: vec![],
        }])
        .await
        .unwrap()[0]
        .0;
    let solver = store
        .upsert_solvers(&[NewSolver {
            name: "noop".into(),
            tunable: true,
        }])
        .await
        .unwrap()[0]
        .id;
    let jobs: Vec<NewJob> = (0..3)
        .map(|i| {
            let compile = Params::from_key("B=1").unwrap();
            NewJob {
                session,
                config,
                solver,
                compile_step: "noop_build".into(),
                eval_step: "noop_run".into(),
                build_key: "noop:B=1".into(),
                compile_params: compile,
                run_params: Params::from_key(&format!("R={i}")).unwrap(),
            }
        })
        .collect();
    assert_eq!(store.insert_jobs(&jobs).await.unwrap(), 3);

    let ns = Namespace::new("chain").unwrap();
    let bus = MemoryBus::new(ns.clone());
    let (_trigger, signal) = crate::shutdown::channel();
    let drain = crate::shutdown::Drain::new();
    let scheduler = Scheduler::new(
        Arc::new(store.clone()),
        bus.clone(),
        SessionBackends::default(),
        SchedulerConfig {
            sessions: vec![session],
            eval_batch: 8,
            ..SchedulerConfig::default()
        },
        signal,
        drain.guard(),
    );
    let inner = scheduler.inner.clone();
    assert!(inner.dispatch_compile(session).await.unwrap());
    let compile_queue = ns.compile_queue("noop_build", "x86_64");
    let mut compiles = bus.consume(&compile_queue, 8).await.unwrap();
    let d = compiles.next().await.unwrap().unwrap();
    let Ok(Message::Compile(req)) = envelope::decode(&d.payload) else {
        panic!("not a compile request");
    };
    assert_eq!(req.jobs.len(), 3);
    d.ack().await.unwrap();

    let reply = Message::Reply(ReplyBody::Compiled(CompileReply {
        session,
        jobs: req.jobs.clone(),
        build_key: req.build_key.clone(),
        result: Ok("sha256:art".into()),
        worker: "cc".into(),
        duration_ms: 1,
    }));
    let results = ns.results_queue();
    bus.declare_queue(&results, &QueueOptions { delivery_limit: 5 })
        .await
        .unwrap();
    let mut replies = bus.consume(&results, 8).await.unwrap();
    for _ in 0..2 {
        crate::publish(&*bus, &results, &reply).await.unwrap();
    }
    let first = replies.next().await.unwrap().unwrap();
    inner.apply_deliveries(vec![first]).await.unwrap();

    for r in &req.jobs {
        let j = store.job(r.job).await.unwrap().unwrap();
        assert_eq!((j.state, j.attempt), (EvalQueued, 2));
        assert_eq!(j.artifact.as_deref(), Some("sha256:art"));
        assert!(j.lease_deadline_ms.is_some());
    }
    assert_eq!(inner.in_flight_of(session).await.unwrap().eval, 3);
    assert!(inner.compiling.lock().unwrap().is_empty());
    let eval_queue = ns.eval_queue("noop_run", "x86_64", 2);
    assert_eq!(bus.queue_depth(&eval_queue).await.unwrap(), 1);
    let mut evals = bus.consume(&eval_queue, 8).await.unwrap();
    let d = evals.next().await.unwrap().unwrap();
    let Ok(Message::Eval(eval)) = envelope::decode(&d.payload) else {
        panic!("not an eval request");
    };
    d.ack().await.unwrap();
    let items: Vec<_> = eval
        .items
        .iter()
        .map(|i| (i.job, i.artifact.as_str()))
        .collect();
    let want: Vec<_> = req
        .jobs
        .iter()
        .map(|r| {
            (
                shoal_model::JobRef {
                    job: r.job,
                    attempt: 2,
                },
                "sha256:art",
            )
        })
        .collect();
    assert_eq!(items, want);

    // The same reply again: stale, nothing written, nothing published.
    let again = replies.next().await.unwrap().unwrap();
    inner.apply_deliveries(vec![again]).await.unwrap();
    assert_eq!(bus.queue_depth(&eval_queue).await.unwrap(), 0);
    assert_eq!(inner.in_flight_of(session).await.unwrap().eval, 3);

    // A job whose build is known goes from new to eval_queued in one dispatch.
    let mut late = jobs[0].clone();
    late.run_params = Params::from_key("R=9").unwrap();
    assert_eq!(store.insert_jobs(&[late]).await.unwrap(), 1);
    assert!(inner.dispatch_compile(session).await.unwrap());
    let id = store.jobs_in_state(session, EvalQueued, 10).await.unwrap()[3].id;
    let j = store.job(id).await.unwrap().unwrap();
    assert_eq!((j.state, j.attempt), (EvalQueued, 2));
    assert_eq!(j.artifact.as_deref(), Some("sha256:art"));
    assert_eq!(
        bus.queue_depth(&compile_queue).await.unwrap(),
        0,
        "no build"
    );
    let d = evals.next().await.unwrap().unwrap();
    let Ok(Message::Eval(eval)) = envelope::decode(&d.payload) else {
        panic!("not an eval request");
    };
    d.ack().await.unwrap();
    assert_eq!(
        eval.items.iter().map(|i| i.job).collect::<Vec<_>>(),
        vec![shoal_model::JobRef {
            job: id,
            attempt: 2
        }]
    );
    assert_eq!(inner.in_flight_of(session).await.unwrap().eval, 4);
}

fn change(job: i64, from: shoal_model::JobState, to: shoal_model::JobState) -> Change {
    Transition::new(JobId(job), from, 1, to).unwrap().into()
}

#[test]
fn started_notices_are_held_back_and_results_take_one_path() {
    let mut notices = StartedNotices::default();
    let s = SessionId(1);
    let t0 = Instant::now();
    // A notice and its result in one batch: no notice written, only the queued path tried.
    let (out, _) = notices.sift(
        vec![
            change(1, EvalQueued, Evaluating),
            change(1, Evaluating, Evaluated),
            change(1, EvalQueued, Evaluated),
        ],
        vec![s; 3],
        t0,
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].transition.from, EvalQueued);
    // A notice alone is held, then written once it is old enough.
    let (out, _) = notices.sift(vec![change(2, EvalQueued, Evaluating)], vec![s], t0);
    assert!(out.is_empty());
    let later = t0 + STARTED_DEBOUNCE;
    let (out, _) = notices.sift(vec![], vec![], later);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].transition.to, Evaluating);
    // Its result now takes only the started path.
    let (out, _) = notices.sift(
        vec![
            change(2, Evaluating, Evaluated),
            change(2, EvalQueued, Evaluated),
        ],
        vec![s; 2],
        later,
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].transition.from, Evaluating);
    // Unknown jobs (a restarted Scheduler) keep both alternatives.
    let (out, _) = notices.sift(
        vec![
            change(3, Evaluating, Evaluated),
            change(3, EvalQueued, Evaluated),
        ],
        vec![s; 2],
        later,
    );
    assert_eq!(out.len(), 2);
    // Shutdown writes what is held.
    notices.sift(vec![change(4, CompileQueued, Compiling)], vec![s], later);
    assert_eq!(notices.drain().0.len(), 1);
}
