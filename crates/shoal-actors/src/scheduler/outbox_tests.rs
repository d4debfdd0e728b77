//! The Scheduler's outbox ([`super::send`]): a request owed by a commit is sent even when the
//! Scheduler that owed it died before publishing, or the broker refused it; and only a request
//! the broker took leaves the outbox. And a turn sends while the results queue's adapter holds
//! the bus's channel lock.

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use shoal_bus::{Bus, BusError, MemoryBus};
use shoal_model::envelope::Codec;
use shoal_model::queue::Namespace;
use shoal_model::JobState::*;

use super::tests::session_with_jobs;
use super::*;
use crate::now_ms;
use shoal_bus::Consumer;
use shoal_model::Message;

/// The in-process bus, refusing every publish while `refuse` is set: a broker that is down.
struct RefusingBus {
    inner: Arc<MemoryBus>,
    refuse: AtomicBool,
}

#[async_trait]
impl Bus for RefusingBus {
    fn namespace(&self) -> &Namespace {
        self.inner.namespace()
    }
    fn codec(&self) -> &Codec {
        self.inner.codec()
    }
    async fn declare_queue(&self, name: &str, options: &QueueOptions) -> shoal_bus::Result<()> {
        self.inner.declare_queue(name, options).await
    }
    async fn publish(&self, queue: &str, payloads: Vec<Vec<u8>>) -> shoal_bus::Result<()> {
        if self.refuse.load(Ordering::SeqCst) {
            return Err(BusError::Closed);
        }
        self.inner.publish(queue, payloads).await
    }
    async fn consume(&self, queue: &str, prefetch: u16) -> shoal_bus::Result<Box<dyn Consumer>> {
        self.inner.consume(queue, prefetch).await
    }
    async fn queue_depth(&self, queue: &str) -> shoal_bus::Result<u64> {
        self.inner.queue_depth(queue).await
    }
    async fn consumer_count(&self, queue: &str) -> shoal_bus::Result<u32> {
        self.inner.consumer_count(queue).await
    }
    async fn publish_topic(
        &self,
        topic: &str,
        key: &str,
        payload: Vec<u8>,
    ) -> shoal_bus::Result<()> {
        self.inner.publish_topic(topic, key, payload).await
    }
    async fn subscribe(&self, topic: &str, pattern: &str) -> shoal_bus::Result<Box<dyn Consumer>> {
        self.inner.subscribe(topic, pattern).await
    }
    async fn close(&self) -> shoal_bus::Result<()> {
        self.inner.close().await
    }
}

fn scheduler(store: Arc<dyn Store>, bus: Arc<dyn Bus>, session: SessionId) -> Inner {
    let (_trigger, signal) = crate::shutdown::channel();
    let drain = crate::shutdown::Drain::new();
    Scheduler::new(
        store,
        bus,
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
        signal,
        drain.guard(),
    )
    .fresh_inner()
}

/// The compile requests waiting in the session's compile queue, as (job, attempt) lists.
async fn compile_requests(bus: &dyn Bus) -> Vec<Vec<(i64, u32)>> {
    let queue = bus
        .namespace()
        .compile_queue(shoal_model::Step::NoopBuild, "x86_64");
    let mut consumer = bus.consume(&queue, 64).await.unwrap();
    let mut out = Vec::new();
    while let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(50), consumer.next()).await {
        let d = d.unwrap();
        let Ok(Message::Compile(req)) = bus.codec().decode(&d.payload) else {
            panic!("not a compile request");
        };
        out.push(req.jobs.iter().map(|r| (r.job.0, r.attempt)).collect());
        d.ack().await.unwrap();
    }
    out
}

/// A Scheduler committed three jobs to `compile_queued` and died before publishing: its
/// successor's first sweep sends the request, and the outbox is then empty.
#[tokio::test]
async fn a_successor_sends_what_a_dead_scheduler_owed() {
    let (store, session) = session_with_jobs(3).await;
    let jobs = store.jobs_in_state(session, New, 10).await.unwrap();
    let changes = jobs
        .iter()
        .map(|j| {
            Transition::new(j.id, New, 0, CompileQueued)
                .unwrap()
                .with_lease(i64::MAX)
                .into()
        })
        .collect();
    let batch = Batch {
        changes,
        builds: vec![],
    };
    assert_eq!(store.apply(&batch).await.unwrap(), vec![true; 3]);
    assert_eq!(store.unsent(i64::MAX, 10).await.unwrap().len(), 3);

    let bus = MemoryBus::new(Namespace::new("outbox").unwrap());
    let mut inner = scheduler(Arc::new(store.clone()), bus.clone(), session);
    let mut sweep = send::OwedSweep::new();
    let before = sweep.due(now_ms()).expect("the first sweep is due at once");
    assert_eq!(
        inner.send_owed(before).await.unwrap(),
        1,
        "one request, one build"
    );
    let want: Vec<(i64, u32)> = jobs.iter().map(|j| (j.id.0, 1)).collect();
    assert_eq!(compile_requests(&*bus).await, vec![want]);
    assert!(store.unsent(i64::MAX, 10).await.unwrap().is_empty());
    // The build is out: dispatch does not ask for it again.
    assert!(inner.building.contains(&(session, "noop:B=1".to_string())));
}

/// The broker refuses the publish right after dispatch commits: the jobs stay queued and owed
/// (nothing fails), the sweep skips them while they are younger than the grace, and sends them
/// once the broker is back; only then is the outbox empty.
#[tokio::test]
async fn a_refused_publish_stays_owed_until_the_broker_takes_it() {
    let (store, session) = session_with_jobs(2).await;
    let memory = MemoryBus::new(Namespace::new("outbox").unwrap());
    let bus = Arc::new(RefusingBus {
        inner: memory.clone(),
        refuse: AtomicBool::new(true),
    });
    let mut inner = scheduler(Arc::new(store.clone()), bus.clone(), session);
    assert!(inner.dispatch_compile(session).await.unwrap(), "no error");
    for j in store.in_flight(session).await.unwrap() {
        assert_eq!((j.state, j.attempt), (CompileQueued, 1));
    }
    assert_eq!(store.unsent(i64::MAX, 10).await.unwrap().len(), 2);
    // Still refused: nothing leaves the outbox.
    assert_eq!(inner.send_owed(i64::MAX).await.unwrap(), 0);
    assert_eq!(store.unsent(i64::MAX, 10).await.unwrap().len(), 2);

    bus.refuse.store(false, Ordering::SeqCst);
    let mut sweep = send::OwedSweep::new();
    sweep.due(now_ms());
    let later = sweep.due(now_ms() + 1_000).unwrap();
    assert_eq!(
        inner.send_owed(later).await.unwrap(),
        0,
        "owed for less than the grace: left to the fast path"
    );
    let much_later = sweep
        .due(now_ms() + 1_000 + send::OWED_GRACE.as_millis() as i64 * 2)
        .unwrap();
    assert_eq!(inner.send_owed(much_later).await.unwrap(), 1);
    assert_eq!(compile_requests(&*memory).await.len(), 1);
    assert!(store.unsent(i64::MAX, 10).await.unwrap().is_empty());
}

#[test]
fn the_first_sweep_takes_everything_then_once_a_second_what_is_past_the_grace() {
    let mut sweep = send::OwedSweep::new();
    assert_eq!(sweep.due(10_000), Some(i64::MAX));
    assert_eq!(sweep.due(10_500), None);
    assert_eq!(
        sweep.due(11_000),
        Some(11_000 - send::OWED_GRACE.as_millis() as i64)
    );
}

/// A heartbeat for a running job pushes its lease a [`RUNNING_LEASE`] ahead; the reply is acked,
/// not dead-lettered, and a heartbeat for a job that is not running changes nothing.
#[tokio::test]
async fn a_heartbeat_renews_the_lease_of_running_work() {
    use shoal_model::message::{Phase, ReplyBody};
    let (store, session) = session_with_jobs(2).await;
    let jobs = store.jobs_in_state(session, New, 10).await.unwrap();
    let (running, queued) = (jobs[0].id, jobs[1].id);
    for (j, to_start) in [(running, true), (queued, false)] {
        let mut changes: Vec<Change> = vec![Transition::new(j, New, 0, CompileQueued)
            .unwrap()
            .with_lease(1_000)
            .into()];
        if to_start {
            changes.push(
                Transition::new(j, CompileQueued, 1, Compiling)
                    .unwrap()
                    .with_lease(2_000)
                    .into(),
            );
        }
        let batch = Batch {
            changes,
            builds: vec![],
        };
        store.apply(&batch).await.unwrap();
    }
    let bus = MemoryBus::new(Namespace::new("outbox").unwrap());
    let mut inner = scheduler(Arc::new(store.clone()), bus.clone(), session);
    let results = bus.namespace().results_queue();
    bus.declare_queue(&results, &QueueOptions::limited(5))
        .await
        .unwrap();
    let beat = Message::Reply(ReplyBody::Heartbeat {
        session,
        phase: Phase::Compile,
        jobs: [running, queued]
            .map(|job| shoal_model::JobRef { job, attempt: 1 })
            .to_vec(),
        worker: "cc".into(),
    });
    crate::publish(&*bus, &results, &beat).await.unwrap();
    let mut consumer = bus.consume(&results, 8).await.unwrap();
    let d = consumer.next().await.unwrap().unwrap();
    let (_trigger, stop) = crate::shutdown::channel();
    let before = now_ms();
    inner.apply_deliveries(vec![d], &stop).await.unwrap();
    let lease = store
        .job(running)
        .await
        .unwrap()
        .unwrap()
        .lease_deadline_ms
        .unwrap();
    let ahead = shoal_model::message::RUNNING_LEASE.as_millis() as i64;
    assert!(
        lease >= before + ahead && lease <= now_ms() + ahead,
        "{lease}"
    );
    let q = store.job(queued).await.unwrap().unwrap();
    assert_eq!((q.state, q.lease_deadline_ms), (CompileQueued, Some(1_000)));
    assert_eq!(bus.queue_depth(&results).await.unwrap(), 0, "acked");
    let dead = bus.namespace().dead_letter_queue();
    assert_eq!(bus.queue_depth(&dead).await.unwrap(), 0);
}

/// The in-process bus behind one async lock held across each operation, with declaring a queue
/// taking a while: as the RabbitMQ bus serialises its channel operations.
struct LockingBus {
    inner: Arc<MemoryBus>,
    channel: tokio::sync::Mutex<()>,
}

#[async_trait]
impl Bus for LockingBus {
    fn namespace(&self) -> &Namespace {
        self.inner.namespace()
    }
    fn codec(&self) -> &Codec {
        self.inner.codec()
    }
    async fn declare_queue(&self, name: &str, options: &QueueOptions) -> shoal_bus::Result<()> {
        let _channel = self.channel.lock().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.inner.declare_queue(name, options).await
    }
    async fn publish(&self, queue: &str, payloads: Vec<Vec<u8>>) -> shoal_bus::Result<()> {
        let _channel = self.channel.lock().await;
        self.inner.publish(queue, payloads).await
    }
    async fn consume(&self, queue: &str, prefetch: u16) -> shoal_bus::Result<Box<dyn Consumer>> {
        let _channel = self.channel.lock().await;
        self.inner.consume(queue, prefetch).await
    }
    async fn queue_depth(&self, queue: &str) -> shoal_bus::Result<u64> {
        self.inner.queue_depth(queue).await
    }
    async fn consumer_count(&self, queue: &str) -> shoal_bus::Result<u32> {
        let _channel = self.channel.lock().await;
        self.inner.consumer_count(queue).await
    }
    async fn publish_topic(
        &self,
        topic: &str,
        key: &str,
        payload: Vec<u8>,
    ) -> shoal_bus::Result<()> {
        self.inner.publish_topic(topic, key, payload).await
    }
    async fn subscribe(&self, topic: &str, pattern: &str) -> shoal_bus::Result<Box<dyn Consumer>> {
        self.inner.subscribe(topic, pattern).await
    }
    async fn close(&self) -> shoal_bus::Result<()> {
        self.inner.close().await
    }
}

/// A Scheduler started while its session already has work dispatches it even though its
/// results queue's adapter holds the bus's channel lock at that moment (declaring its queue):
/// the turn waits for the lock, and the adapter, still polled, lets it go. (Awaiting the turn
/// with `ctx.wait` stopped the adapter mid-operation, lock held: the Scheduler restarted in a
/// chaos run never dispatched.)
#[actix::test]
async fn a_scheduler_dispatches_while_its_adapter_holds_the_bus_channel() {
    let (store, session) = session_with_jobs(2).await;
    let inner = MemoryBus::new(Namespace::new("locking").unwrap());
    let compiles = inner
        .namespace()
        .compile_queue(shoal_model::Step::NoopBuild, "x86_64");
    inner
        .declare_queue(&compiles, &QueueOptions::limited(5))
        .await
        .unwrap();
    let bus = Arc::new(LockingBus {
        inner: inner.clone(),
        channel: tokio::sync::Mutex::new(()),
    });
    let (trigger, drain) = super::tests::start_scheduler(Arc::new(store.clone()), bus, session);
    super::tests::first_compile_request(&*inner, &compiles).await;
    trigger.trigger();
    tokio::time::timeout(Duration::from_secs(10), drain.wait())
        .await
        .expect("the Scheduler stopped");
}
