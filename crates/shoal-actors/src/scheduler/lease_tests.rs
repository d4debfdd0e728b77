//! Leases, with the Scheduler's clock injected and moved by hand: a heartbeat keeps a running
//! job's lease alive past its first deadline; silence past the renewed deadline puts the job
//! back with a retry counted; a job whose retries run out is errored with the reason.

use std::sync::atomic::{AtomicI64, Ordering};

use shoal_bus::MemoryBus;
use shoal_model::message::{Phase, ReplyBody, RUNNING_LEASE};
use shoal_model::queue::Namespace;
use shoal_model::{FailureKind, JobRef, JobState::*};

use super::tests::session_with_jobs;
use super::*;
use shoal_model::Message;

/// A clock that moves only when told.
struct ManualClock(AtomicI64);

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl ManualClock {
    fn advance(&self, d: Duration) {
        self.0.fetch_add(d.as_millis() as i64, Ordering::SeqCst);
    }
}

fn scheduler_at(
    store: &shoal_store::SqliteStore,
    session: SessionId,
    clock: Arc<ManualClock>,
) -> (Inner, Arc<MemoryBus>) {
    let bus = MemoryBus::new(Namespace::new("leases").unwrap());
    let (_trigger, signal) = crate::shutdown::channel();
    let drain = crate::shutdown::Drain::new();
    let scheduler = Scheduler::new(
        Arc::new(store.clone()),
        bus.clone(),
        SessionBackends::default(),
        SchedulerConfig {
            sessions: vec![session],
            ..SchedulerConfig::default()
        },
        signal,
        drain.guard(),
    )
    .with_clock(clock);
    (scheduler.fresh_inner(), bus)
}

#[tokio::test]
async fn heartbeats_keep_a_lease_and_silence_ends_it() {
    let (store, session) = session_with_jobs(1).await;
    let clock = Arc::new(ManualClock(AtomicI64::new(1_000_000)));
    let (mut inner, bus) = scheduler_at(&store, session, clock.clone());
    assert!(inner.dispatch_compile(session).await.unwrap());
    let job = store.in_flight(session).await.unwrap()[0].clone();
    assert_eq!((job.state, job.attempt), (CompileQueued, 1));
    let at = JobRef {
        job: job.id,
        attempt: 1,
    };
    // The worker starts: the lease is a running lease from now, as the plan gives it.
    let started = Transition::new(job.id, CompileQueued, 1, Compiling)
        .unwrap()
        .with_lease(inner.now() + RUNNING_LEASE.as_millis() as i64);
    inner
        .apply_counted(&Batch::from_changes(vec![started.into()]), &[session])
        .await
        .unwrap();

    // Most of a lease on, a heartbeat: the lease now runs a full running lease from there.
    clock.advance(RUNNING_LEASE * 5 / 6);
    let results = bus.namespace().results_queue();
    bus.declare_queue(&results, &QueueOptions::limited(5))
        .await
        .unwrap();
    let beat = Message::Reply(ReplyBody::Heartbeat {
        session,
        phase: Phase::Compile,
        jobs: vec![at],
        worker: "cc".into(),
    });
    crate::publish(&*bus, &results, &beat).await.unwrap();
    let mut consumer = bus.consume(&results, 8).await.unwrap();
    let d = consumer.next().await.unwrap().unwrap();
    let (_trigger, stop) = crate::shutdown::channel();
    inner.apply_deliveries(vec![d], &stop).await.unwrap();

    // Past the first deadline, within the renewed one: still running.
    clock.advance(RUNNING_LEASE - Duration::from_secs(1));
    inner.sweep_leases().await.unwrap();
    let j = store.job(job.id).await.unwrap().unwrap();
    assert_eq!((j.state, j.retries), (Compiling, 0));

    // Silence past the renewed deadline: back to `new`, one retry counted, the reason kept.
    clock.advance(Duration::from_secs(2));
    inner.sweep_leases().await.unwrap();
    let j = store.job(job.id).await.unwrap().unwrap();
    assert_eq!((j.state, j.retries), (New, 1));
    assert!(
        j.last_error
            .as_deref()
            .unwrap_or("")
            .contains("lease expired"),
        "{j:?}"
    );
    assert_eq!(inner.in_flight_of(session).await.unwrap().compile, 0);
}

#[tokio::test]
async fn a_job_whose_retries_run_out_is_errored_with_the_reason() {
    let (store, session) = session_with_jobs(1).await;
    let clock = Arc::new(ManualClock(AtomicI64::new(1_000_000)));
    let (mut inner, _bus) = scheduler_at(&store, session, clock.clone());
    let config = SchedulerConfig::default();
    let limits = shoal_backend::SessionBackend::Noop.time_limits();
    let (queue_lease, _) = super::queue_leases(limits, 1, config.queue_lease_margin);
    // max_retries is 3: four expired leases, then the next dispatch gives up.
    for round in 1..=4 {
        assert!(inner.dispatch_compile(session).await.unwrap());
        clock.advance(queue_lease + Duration::from_secs(1));
        inner.sweep_leases().await.unwrap();
        let j = store.jobs_in_state(session, New, 10).await.unwrap();
        assert_eq!(j[0].retries, round);
    }
    inner.dispatch_compile(session).await.unwrap();
    let results = store.final_results(session).await.unwrap();
    assert_eq!(results[0].state, Errored);
    assert_eq!(results[0].failure, Some(FailureKind::Infrastructure));
    let error = results[0].last_error.as_deref().unwrap_or("");
    assert!(
        error.contains("gave up after 4 retries") && error.contains("lease expired"),
        "{error}"
    );
}

/// A queued job's lease comes from its step's limits, not a fixed ten minutes: a noop session's
/// compile request is taken back just past the margin plus two build limits, and not before.
#[tokio::test]
async fn a_queue_lease_is_derived_from_the_steps_limits() {
    let (store, session) = session_with_jobs(1).await;
    let clock = Arc::new(ManualClock(AtomicI64::new(1_000_000)));
    let (mut inner, _bus) = scheduler_at(&store, session, clock.clone());
    let config = SchedulerConfig::default();
    let (compile, eval) = super::queue_leases(
        (Duration::from_secs(10), Duration::from_secs(1)),
        4,
        config.queue_lease_margin,
    );
    assert_eq!(compile, config.queue_lease_margin + Duration::from_secs(20));
    assert_eq!(eval, config.queue_lease_margin + Duration::from_secs(8));
    // The noop session's own limits.
    let (compile, _) = super::queue_leases(
        shoal_backend::SessionBackend::Noop.time_limits(),
        1,
        config.queue_lease_margin,
    );

    assert!(inner.dispatch_compile(session).await.unwrap());
    let job = store.in_flight(session).await.unwrap()[0].clone();
    assert_eq!(
        job.lease_deadline_ms,
        Some(1_000_000 + compile.as_millis() as i64)
    );
    clock.advance(compile - Duration::from_secs(1));
    inner.sweep_leases().await.unwrap();
    assert_eq!(
        store.job(job.id).await.unwrap().unwrap().state,
        CompileQueued
    );
    clock.advance(Duration::from_secs(2));
    inner.sweep_leases().await.unwrap();
    let j = store.job(job.id).await.unwrap().unwrap();
    assert_eq!((j.state, j.retries), (New, 1));
    assert!(compile < Duration::from_secs(600));
}
