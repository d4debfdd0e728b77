//! Scheduler tests (real SQLite store, in-process bus): a compile result dispatching its eval in
//! the same write; replies settled one by one (forged, impossible, unknown-session and stale
//! replies dead-lettered alone while the good ones apply); a store outage during apply.
//! (How "started" notices and results are planned: `started.rs`.)

use super::*;
use shoal_bus::Consumer;
use shoal_model::JobState::*;
use shoal_model::Message;
use shoal_store::StoreError;

/// A compile result dispatches its jobs' evals in the same transaction: one compare-and-set
/// per job from `compile_queued` to `eval_queued` (attempt 2) and an eval request published
/// after it; a replayed result changes nothing and publishes nothing; a job whose build is
/// known goes from `new` to `eval_queued` in one dispatch.
#[tokio::test]
async fn a_compile_result_dispatches_the_eval_in_the_same_write() {
    use shoal_bus::Bus;
    use shoal_model::message::{CompileReply, ReplyBody};

    let (store, session) = session_with_jobs(3).await;
    let (mut inner, bus, req, stop, _drain) = dispatched(Arc::new(store.clone()), session).await;
    assert_eq!(req.jobs.len(), 3);
    let ns = bus.namespace().clone();

    let reply = Message::Reply(ReplyBody::Compiled(CompileReply {
        session,
        jobs: req.jobs.clone(),
        build_key: req.build_key.clone(),
        result: Ok("sha256:art".into()),
        worker: "cc".into(),
        duration_ms: 1,
    }));
    let results = ns.results_queue();
    let mut replies = bus.consume(&results, 8).await.unwrap();
    for _ in 0..2 {
        crate::publish(&*bus, &results, &reply).await.unwrap();
    }
    let first = replies.next().await.unwrap().unwrap();
    inner.apply_deliveries(vec![first], &stop).await.unwrap();

    for r in &req.jobs {
        let j = store.job(r.job).await.unwrap().unwrap();
        assert_eq!((j.state, j.attempt), (EvalQueued, 2));
        assert_eq!(j.artifact.as_deref(), Some("sha256:art"));
        assert!(j.lease_deadline_ms.is_some());
    }
    assert_eq!(inner.in_flight_of(session).await.unwrap().eval, 3);
    assert!(inner.compiling.is_empty());
    let eval_queue = ns.eval_queue(shoal_model::Step::NoopRun, "x86_64", 2);
    assert_eq!(bus.queue_depth(&eval_queue).await.unwrap(), 1);
    let mut evals = bus.consume(&eval_queue, 8).await.unwrap();
    let eval = next_eval_request(&*bus, &mut evals).await;
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

    // The same reply again: stale, nothing written, nothing published; dead-lettered as such.
    let again = replies.next().await.unwrap().unwrap();
    inner.apply_deliveries(vec![again], &stop).await.unwrap();
    assert_eq!(bus.queue_depth(&eval_queue).await.unwrap(), 0);
    let dead = dead_reasons(&*bus).await;
    assert_eq!(dead.len(), 1);
    assert!(dead[0].contains("stale compile result"), "{dead:?}");
    assert_eq!(inner.in_flight_of(session).await.unwrap().eval, 3);

    a_known_build_goes_straight_to_eval(&store, &mut inner, &*bus, &mut evals, &req).await;
}

/// The end of [`a_compile_result_dispatches_the_eval_in_the_same_write`]: a job added later
/// with the same build key goes from new to eval_queued in one dispatch, building nothing,
/// and its eval request follows.
async fn a_known_build_goes_straight_to_eval(
    store: &shoal_store::SqliteStore,
    inner: &mut Inner,
    bus: &dyn shoal_bus::Bus,
    evals: &mut Box<dyn Consumer>,
    req: &shoal_model::message::CompileRequest,
) {
    let first = store.job(req.jobs[0].job).await.unwrap().unwrap();
    let session = first.session;
    let late = shoal_model::NewJob {
        session,
        config: first.config,
        solver: first.solver,
        compile_step: first.compile_step,
        eval_step: first.eval_step,
        build_key: first.build_key,
        held: false,
        compile_params: first.compile_params,
        run_params: shoal_model::Params::from_key("R=9").unwrap(),
    };
    assert_eq!(store.insert_jobs(&[late]).await.unwrap(), 1);
    assert!(inner.dispatch_compile(session).await.unwrap());
    let id = store.jobs_in_state(session, EvalQueued, 10).await.unwrap()[3].id;
    let j = store.job(id).await.unwrap().unwrap();
    assert_eq!((j.state, j.attempt), (EvalQueued, 2));
    assert_eq!(j.artifact.as_deref(), Some("sha256:art"));
    let compile_queue = bus
        .namespace()
        .compile_queue(shoal_model::Step::NoopBuild, "x86_64");
    assert_eq!(
        bus.queue_depth(&compile_queue).await.unwrap(),
        0,
        "no build"
    );
    let eval = next_eval_request(bus, evals).await;
    assert_eq!(
        eval.items.iter().map(|i| i.job).collect::<Vec<_>>(),
        vec![shoal_model::JobRef {
            job: id,
            attempt: 2
        }]
    );
    assert_eq!(inner.in_flight_of(session).await.unwrap().eval, 4);
}

/// The next eval request on `evals`, acked.
async fn next_eval_request(
    bus: &dyn shoal_bus::Bus,
    evals: &mut Box<dyn Consumer>,
) -> shoal_model::message::EvalRequest {
    let d = evals.next().await.unwrap().unwrap();
    let Ok(Message::Eval(eval)) = bus.codec().decode(&d.payload) else {
        panic!("not an eval request");
    };
    d.ack().await.unwrap();
    eval
}

/// The reasons of every message in the namespace's dead-letter queue.
async fn dead_reasons(bus: &dyn shoal_bus::Bus) -> Vec<String> {
    let dead = bus.namespace().dead_letter_queue();
    let mut consumer = bus.consume(&dead, 64).await.unwrap();
    let mut reasons = Vec::new();
    while let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(50), consumer.next()).await {
        let d = d.unwrap();
        reasons.push(d.dead_reason.clone().unwrap_or_default());
        d.ack().await.unwrap();
    }
    reasons
}

/// A session with `n` jobs of one build, in a fresh in-memory SQLite store.
pub(super) async fn session_with_jobs(n: usize) -> (shoal_store::SqliteStore, SessionId) {
    use shoal_model::{NewConfig, NewJob, NewSession, NewSolver, Params};
    let store = shoal_store::SqliteStore::open_in_memory().unwrap();
    store.migrate().await.unwrap();
    let session = store
        .create_session(&NewSession {
            reason: "replies".into(),
            arch: "x86_64".into(),
            num_cu: 2,
            backend: shoal_model::Backend::Noop,
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
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob {
            session,
            config,
            solver,
            compile_step: shoal_model::Step::NoopBuild,
            eval_step: shoal_model::Step::NoopRun,
            build_key: "noop:B=1".into(),
            held: false,
            compile_params: Params::from_key("B=1").unwrap(),
            run_params: Params::from_key(&format!("R={i}")).unwrap(),
        })
        .collect();
    store.insert_jobs(&jobs).await.unwrap();
    (store, session)
}

/// A Scheduler over `store` and a fresh bus, its compile request dispatched and taken.
async fn dispatched(
    store: Arc<dyn Store>,
    session: SessionId,
) -> (
    Inner,
    Arc<shoal_bus::MemoryBus>,
    shoal_model::message::CompileRequest,
    Signal,
    crate::shutdown::Drain,
) {
    use shoal_bus::Bus;
    let ns = shoal_model::queue::Namespace::new("replies").unwrap();
    let bus = shoal_bus::MemoryBus::new(ns.clone());
    let (_trigger, signal) = crate::shutdown::channel();
    let drain = crate::shutdown::Drain::new();
    let scheduler = Scheduler::new(
        store,
        bus.clone(),
        SessionBackends::default(),
        SchedulerConfig {
            sessions: vec![session],
            eval: super::shape::ShapeConfig {
                fixed_batch: Some(8),
                fixed_in_flight: Some(8),
                ..Default::default()
            },
            ..SchedulerConfig::default()
        },
        signal.clone(),
        drain.guard(),
    );
    let mut inner = scheduler.fresh_inner();
    assert!(inner.dispatch_compile(session).await.unwrap());
    let mut compiles = bus
        .consume(&ns.compile_queue(shoal_model::Step::NoopBuild, "x86_64"), 8)
        .await
        .unwrap();
    let d = compiles.next().await.unwrap().unwrap();
    let Ok(Message::Compile(req)) = bus.codec().decode(&d.payload) else {
        panic!("not a compile request");
    };
    d.ack().await.unwrap();
    bus.declare_queue(&ns.results_queue(), &QueueOptions::limited(5))
        .await
        .unwrap();
    (inner, bus, req, signal, drain)
}

/// One batch holding a forged reply (signed with another key), a reply for a session that does
/// not exist, a reply with a negative time and the genuine compile result: the three bad ones
/// are dead-lettered, each with its own reason, and the genuine one applies.
#[tokio::test]
async fn bad_replies_are_dead_lettered_alone_and_the_good_ones_apply() {
    use shoal_bus::Bus;
    use shoal_model::message::{CompileReply, EvalReply, ReplyBody};
    use shoal_model::{FailureKind, Measurement, Outcome};
    let (store, session) = session_with_jobs(2).await;
    let (mut inner, bus, req, stop, _drain) = dispatched(Arc::new(store.clone()), session).await;
    let results = bus.namespace().results_queue();
    let compiled = |session, result| {
        Message::Reply(ReplyBody::Compiled(CompileReply {
            session,
            jobs: req.jobs.clone(),
            build_key: req.build_key.clone(),
            result,
            worker: "cc".into(),
            duration_ms: 1,
        }))
    };
    let stranger = shoal_model::envelope::Codec::new(&[9u8; 32]).unwrap();
    let forged = stranger.encode(&compiled(
        session,
        Err((FailureKind::BuildFailed, "forged".into())),
    ));
    let negative = Message::Reply(ReplyBody::Evaluated(EvalReply {
        session,
        step: shoal_model::Step::NoopRun,
        outcomes: vec![(
            req.jobs[0],
            Outcome::Measured(Measurement {
                time_us: -5.0,
                samples_us: vec![],
                workspace: 0,
                details: Default::default(),
            }),
        )],
        worker: "ev".into(),
        device: "cpu".into(),
        busy_us: 0,
    }));
    bus.publish(
        &results,
        vec![
            forged,
            bus.codec()
                .encode(&compiled(SessionId(999), Ok("sha256:x".into()))),
            bus.codec().encode(&negative),
            bus.codec()
                .encode(&compiled(session, Ok("sha256:art".into()))),
        ],
    )
    .await
    .unwrap();
    let mut consumer = bus.consume(&results, 8).await.unwrap();
    let mut batch = Vec::new();
    for _ in 0..4 {
        batch.push(consumer.next().await.unwrap().unwrap());
    }
    inner.apply_deliveries(batch, &stop).await.unwrap();
    for r in &req.jobs {
        let j = store.job(r.job).await.unwrap().unwrap();
        assert_eq!(j.state, EvalQueued, "the genuine result applied");
        assert_eq!(j.artifact.as_deref(), Some("sha256:art"));
    }
    let dead = dead_reasons(&*bus).await;
    assert_eq!(dead.len(), 3, "{dead:?}");
    assert!(dead[0].contains("bad signature"), "{dead:?}");
    assert!(dead[1].contains("session 999"), "{dead:?}");
    assert!(dead[2].contains("finite and positive"), "{dead:?}");
    assert_eq!(bus.queue_depth(&results).await.unwrap(), 0);
}

/// A store that refuses `apply` the first `failures` times, as an unreachable database does.
struct Unreachable {
    inner: Arc<dyn Store>,
    failures: std::sync::atomic::AtomicU32,
}

shoal_store::delegating_store! {
    impl Store for Unreachable {
        delegate to inner;
        fn describe(&self) -> String {
            self.inner.describe()
        }
        async fn apply(&self, batch: &Batch) -> shoal_store::Result<Vec<bool>> {
            use std::sync::atomic::Ordering;
            if self
                .failures
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(StoreError::backend(
                    "apply",
                    std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "database down"),
                ));
            }
            self.inner.apply(batch).await
        }
    }
}

/// The database is unreachable while a reply is applied: the reply is held and retried with
/// backoff, then applied and acked once; nothing is dead-lettered or given back.
#[tokio::test]
async fn a_store_outage_during_apply_holds_the_replies_and_retries() {
    use shoal_bus::Bus;
    use shoal_model::message::{CompileReply, ReplyBody};
    let (store, session) = session_with_jobs(2).await;
    let flaky = Arc::new(Unreachable {
        inner: Arc::new(store.clone()),
        failures: std::sync::atomic::AtomicU32::new(0),
    });
    let (mut inner, bus, req, stop, _drain) = dispatched(flaky.clone(), session).await;
    flaky.failures.store(3, std::sync::atomic::Ordering::SeqCst);
    let results = bus.namespace().results_queue();
    let reply = Message::Reply(ReplyBody::Compiled(CompileReply {
        session,
        jobs: req.jobs.clone(),
        build_key: req.build_key.clone(),
        result: Ok("sha256:art".into()),
        worker: "cc".into(),
        duration_ms: 1,
    }));
    crate::publish(&*bus, &results, &reply).await.unwrap();
    let mut consumer = bus.consume(&results, 8).await.unwrap();
    let d = consumer.next().await.unwrap().unwrap();
    assert_eq!(d.delivery_count, 1);
    inner.apply_deliveries(vec![d], &stop).await.unwrap();
    assert_eq!(flaky.failures.load(std::sync::atomic::Ordering::SeqCst), 0);
    for r in &req.jobs {
        let j = store.job(r.job).await.unwrap().unwrap();
        assert_eq!((j.state, j.attempt), (EvalQueued, 2));
    }
    assert!(dead_reasons(&*bus).await.is_empty());
    assert_eq!(
        bus.queue_depth(&results).await.unwrap(),
        0,
        "acked, not given back"
    );
}

/// A store whose `apply` panics the first `panics` times: a bug in the Scheduler's own
/// path, not a candidate's fault.
struct Panicking {
    inner: Arc<dyn Store>,
    panics: std::sync::atomic::AtomicU32,
    calls: std::sync::atomic::AtomicU32,
}

shoal_store::delegating_store! {
    impl Store for Panicking {
        delegate to inner;
        fn describe(&self) -> String {
            self.inner.describe()
        }
        async fn apply(&self, batch: &Batch) -> shoal_store::Result<Vec<bool>> {
            use std::sync::atomic::Ordering;
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self
                .panics
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                panic!("a bug in the Scheduler's path");
            }
            self.inner.apply(batch).await
        }
    }
}

/// The Scheduler actor panics in its first turn of dispatch (its first write): actix's `Supervisor` starts it
/// again with fresh state (after the first backoff), and the restarted actor dispatches the
/// session's compile request. Then the stop signal drains it and it stops for good, dropping its
/// drain guard.
#[actix::test]
async fn a_scheduler_that_panics_is_restarted_by_its_supervisor() {
    use shoal_bus::Bus;
    use std::sync::atomic::Ordering;
    let (store, session) = session_with_jobs(2).await;
    let panicking = Arc::new(Panicking {
        inner: Arc::new(store.clone()),
        panics: std::sync::atomic::AtomicU32::new(1),
        calls: std::sync::atomic::AtomicU32::new(0),
    });
    let ns = shoal_model::queue::Namespace::new("restarts").unwrap();
    let bus = shoal_bus::MemoryBus::new(ns.clone());
    let compiles = ns.compile_queue(shoal_model::Step::NoopBuild, "x86_64");
    bus.declare_queue(&compiles, &QueueOptions::limited(5))
        .await
        .unwrap();
    let restarts_before = shoal_metrics::metrics().loop_restarts("scheduler");
    let (trigger, drain) = start_scheduler(panicking.clone(), bus.clone(), session);
    first_compile_request(&*bus, &compiles).await;
    assert_eq!(panicking.panics.load(Ordering::SeqCst), 0, "it panicked");
    assert!(panicking.calls.load(Ordering::SeqCst) >= 2, "and ran again");
    assert!(shoal_metrics::metrics().loop_restarts("scheduler") > restarts_before);
    trigger.trigger();
    tokio::time::timeout(Duration::from_secs(10), drain.wait())
        .await
        .expect("the Scheduler stopped for good after the stop signal");
}

/// A Scheduler actor serving `session`, under its supervisor; the trigger stops it, and the
/// drain completes once it is gone.
pub(super) fn start_scheduler(
    store: Arc<dyn Store>,
    bus: Arc<dyn shoal_bus::Bus>,
    session: SessionId,
) -> (crate::shutdown::Trigger, crate::shutdown::Drain) {
    let (trigger, signal) = crate::shutdown::channel();
    let drain = crate::shutdown::Drain::new();
    Scheduler::new(
        store,
        bus,
        SessionBackends::default(),
        SchedulerConfig {
            sessions: vec![session],
            ..SchedulerConfig::default()
        },
        signal,
        drain.guard(),
    )
    .start_supervised();
    (trigger, drain)
}

/// Waits up to 10 s for the first request on `queue` and checks that it is a compile request.
pub(super) async fn first_compile_request(bus: &dyn shoal_bus::Bus, queue: &str) {
    let mut consumer = bus.consume(queue, 8).await.unwrap();
    let d = tokio::time::timeout(Duration::from_secs(10), consumer.next())
        .await
        .expect("a compile request went out within 10 s")
        .unwrap()
        .unwrap();
    assert!(matches!(
        bus.codec().decode(&d.payload),
        Ok(Message::Compile(_))
    ));
    d.ack().await.unwrap();
}
