//! The actors of Shoal, on actix: [`scheduler::Scheduler`], [`compiler::Compiler`],
//! [`evaluator::Evaluator`], [`exporter::Exporter`] and [`monitor::GpuMonitor`], and the wiring
//! that runs them all in one process ([`embedded`]).
//!
//! **Architecture invariants:**
//! - Actors talk to the world only through `dyn Store` and `dyn Bus`, so the embedded mode and the
//!   cluster run the same code.
//! - The Scheduler is the only writer of job state. Workers reply; they never change a job.
//! - A delivery is acknowledged only after its reply is confirmed by the bus (workers) or its
//!   state change is committed (Scheduler). A worker that dies leaves its delivery unacked, and
//!   the bus delivers it again.
//! - A fault in tuned code ends a child process and becomes an outcome; it never stops an actor.
//!   A failure of the machinery, or a panic, stops the actor, and actix's `Supervisor` starts it
//!   again with fresh state after a backoff ([`supervise::RestartPace`]).
//! - Each actor's state is its own: work arrives as typed actix messages from thin adapters of
//!   the bus, and no state is shared through statics ([`presence::Activity`] and
//!   [`shutdown::GiveUp`] are passed to the actors that need them).

pub mod backends;
pub mod cluster;
pub mod commands;
pub mod compiler;
mod control;
pub mod embedded;
pub mod evaluator;
pub mod exporter;
pub mod monitor;
pub mod presence;
mod restart;
pub mod results_queue;
pub mod scheduler;
mod serving;
pub mod shutdown;
pub mod supervise;
pub mod topology;

use shoal_model::SessionId;

/// Errors that stop an actor's work (and so restart it), or that a wiring or export function
/// returns. Candidate faults are not errors: they are outcomes.
#[derive(Debug, thiserror::Error)]
pub enum ActorError {
    #[error(transparent)]
    Store(#[from] shoal_store::StoreError),
    #[error(transparent)]
    Bus(#[from] shoal_bus::BusError),
    #[error(transparent)]
    MiopenExport(#[from] shoal_miopen::export::ExportError),
    #[error(transparent)]
    Output(#[from] shoal_export::files::OutputError),
    #[error("session {0} is not in the store")]
    UnknownSession(SessionId),
    #[error("config {0} is not in the store")]
    UnknownConfig(shoal_model::ConfigId),
    /// The session's stored spec does not parse where it was tuned (its directory moved).
    #[error("session {session}: {source}")]
    Spec {
        session: SessionId,
        #[source]
        source: shoal_backend::spec::SpecError,
    },
    /// The session's shipped tree cannot be set up on this host.
    #[error("session {session}: {source}")]
    Tree {
        session: SessionId,
        #[source]
        source: shoal_commands::shipped::TreeError,
    },
    #[error("session {0} is not an exec-backend session; it has no tuning spec")]
    NoSpec(SessionId),
    #[error(
        "session {0} is not a MIOpen session: the find, perf and kernel db options are for \
         MIOpen sessions"
    )]
    NotMiopen(SessionId),
    #[error(transparent)]
    ExportDir(#[from] exporter::ExportDirRefused),
    /// A directory or file of this host that the work needs could not be made or written.
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A build or an artifact's installation found the disk full or read-only: this host's
    /// state, not the candidate's fault.
    #[error("this host cannot write its disk (full or read-only): {0}")]
    DiskFull(String),
    /// A task of the actor's own (a probe, a reply being sent) ended without its result.
    #[error("{what} task: {source}")]
    Task {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    /// What a process was asked to run cannot be run on this host.
    #[error(transparent)]
    Plan(#[from] topology::PlanError),
    /// A phase of the stop outlasted its deadline and the grace after its children were killed.
    #[error("the {phase} did not stop within {secs}s, even after their children were killed")]
    StopTimedOut { phase: String, secs: u64 },
}

impl ActorError {
    /// Whether this is the store not answering, past its patience
    /// ([`shoal_store::patient`]): a worker then hands its jobs back rather than failing them.
    pub fn is_store_unreachable(&self) -> bool {
        matches!(self, ActorError::Store(e) if e.is_unreachable())
    }
}

/// Milliseconds since the Unix epoch: the clock of leases and timestamps.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Publishes one message, signed and encoded with the wire envelope, and waits for the bus to confirm it.
pub(crate) async fn publish(
    bus: &dyn shoal_bus::Bus,
    queue: &str,
    msg: &shoal_model::Message,
) -> Result<(), ActorError> {
    bus.publish(queue, vec![bus.codec().encode(msg)]).await?;
    Ok(())
}

/// How long a worker keeps trying to send a reply the broker cannot take (see
/// [`publish_reply`]): longer than a broker restart or a failover takes.
pub(crate) const REPLY_PATIENCE: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Publishes a worker's reply (a build's verdict, measurements, jobs handed back), and while the
/// broker cannot take it (down, restarting, failing over: each try gives up after the bus's own
/// `publish_retry_for`) keeps it and tries again, with backoff up to 10 s, for up to
/// [`REPLY_PATIENCE`]: work done is not dropped for want of a broker. Meanwhile the request stays
/// unacked; if its channel was lost, the broker delivers it again and the worker that gets it
/// finds the job started and leaves it to this one ([`still_current`]). Gives up at once when the
/// bus is closed or the process is shutting down.
pub(crate) async fn publish_reply(
    bus: &dyn shoal_bus::Bus,
    queue: &str,
    msg: &shoal_model::Message,
) -> Result<(), ActorError> {
    let give_up = tokio::time::Instant::now() + REPLY_PATIENCE;
    let mut delay = std::time::Duration::from_secs(1);
    loop {
        match publish(bus, queue, msg).await {
            Err(ActorError::Bus(e @ shoal_bus::BusError::Backend { .. }))
                if !shoal_store::patient::stopping()
                    && tokio::time::Instant::now() + delay < give_up =>
            {
                tracing::warn!(error = %e, retry_in = ?delay, "the broker does not take the reply; it is kept and sent again");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(10));
            }
            other => return other,
        }
    }
}

/// Whether job `r` of a redelivered request still waits for it: at the attempt the request
/// names and still in `queued`, the queued state of the request's phase. Otherwise it is not run
/// again:
/// - the store has moved past it (its lease ran out and it was dispatched again, or it ended);
/// - or a worker has started it (its notice was applied): the broker gave the request back
///   because that worker's connection dropped (a broker node died, the worker was killed). A
///   worker that lives finishes it and sends its result on its next connection; one that died
///   stops renewing its running lease, and the job is dispatched again at a new attempt within
///   seconds. Running it here as well would only do the work twice and have its result refused
///   (another host's lease is not taken over).
///
/// Reads a job's state and attempt only (`Store::job_progress`), all the compile role may read
/// of a job.
pub(crate) async fn still_current(
    store: &dyn shoal_store::Store,
    r: shoal_model::JobRef,
    queued: shoal_model::JobState,
) -> Result<bool, ActorError> {
    Ok(matches!(
        store.job_progress(r.job).await?,
        Some((state, attempt)) if attempt == r.attempt && state == queued
    ))
}

/// How long a worker waits before it checks the jobs of a redelivered request
/// ([`still_current`]): twice the Scheduler's hold on started notices, so that the notice of the
/// worker that had the request before (sent just before its connection dropped or it died) is
/// written by then, and the job is seen as started rather than run a second time by another
/// host, whose result the lease holder's rule would refuse. Redeliveries are rare (a worker
/// killed, a broker node lost), so the pause costs little.
pub(crate) const REDELIVERY_PAUSE: std::time::Duration =
    std::time::Duration::from_millis(2 * scheduler::STARTED_DEBOUNCE.as_millis() as u64);

/// Gives `jobs` back to the Scheduler without an outcome and without counting a retry (this
/// worker is shutting down, or its host cannot write its disk): they are dispatched again.
pub(crate) async fn hand_back(
    bus: &dyn shoal_bus::Bus,
    session: shoal_model::SessionId,
    phase: shoal_model::message::Phase,
    jobs: &[shoal_model::JobRef],
    reason: String,
    worker: &str,
) -> Result<(), ActorError> {
    let back = shoal_model::message::ReplyBody::HandedBack {
        session,
        phase,
        jobs: jobs.to_vec(),
        reason,
        count_retry: false,
        worker: worker.to_string(),
    };
    let results = bus.namespace().results_queue();
    publish_reply(bus, &results, &shoal_model::Message::Reply(back)).await
}

/// Runs `work` to its end while sending `beat` (a [`ReplyBody::Heartbeat`]) to `queue` every
/// [`HEARTBEAT_EVERY`], so the Scheduler keeps renewing the leases of the jobs it names. A
/// heartbeat that cannot be sent is logged, not fatal: the work goes on, and if the broker stays
/// away the lease runs out and the job is tried again elsewhere, which is what it is for. While
/// it runs, the jobs it names are this process's held jobs in its presence record
/// ([`presence::Activity::hold`]).
///
/// [`ReplyBody::Heartbeat`]: shoal_model::message::ReplyBody::Heartbeat
/// [`HEARTBEAT_EVERY`]: shoal_model::message::HEARTBEAT_EVERY
pub(crate) async fn with_heartbeats<F: std::future::Future>(
    activity: &presence::Activity,
    bus: &dyn shoal_bus::Bus,
    queue: &str,
    beat: shoal_model::message::ReplyBody,
    work: F,
) -> F::Output {
    let every = shoal_model::message::HEARTBEAT_EVERY;
    let _held = match &beat {
        shoal_model::message::ReplyBody::Heartbeat { jobs, .. } => {
            activity.hold(jobs.iter().map(|j| j.job))
        }
        _ => activity.hold([]),
    };
    let beat = shoal_model::Message::Reply(beat);
    tokio::pin!(work);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = tick.tick() => {
                if let Err(e) = publish(bus, queue, &beat).await {
                    tracing::warn!(error = %e, "heartbeat not sent");
                }
            }
        }
    }
}

/// The next request a worker should act on, or `None` when it should stop (stop signal or bus
/// closed). Messages that are not requests of the expected kind — unsigned or badly signed,
/// undecodable bytes, an unknown wire version, a sender not in the role that sends it (an eval
/// host's compile request, an operator's command from another user), a message routed to the
/// wrong queue — are
/// dead-lettered with the reason and skipped: a bad message never stops a consumer.
pub(crate) async fn next_request<T>(
    codec: &shoal_model::envelope::Codec,
    consumer: &mut dyn shoal_bus::Consumer,
    stop: &mut shutdown::Signal,
    queue: &str,
    expect: &str,
    extract: impl Fn(shoal_model::Message) -> Option<T>,
) -> Result<Option<(T, shoal_bus::Delivery)>, ActorError> {
    loop {
        let next = tokio::select! {
            d = consumer.next() => d,
            _ = stop.triggered() => return Ok(None),
        };
        let Some(delivery) = next else {
            return Ok(None);
        };
        let delivery = delivery?;
        let opened = codec.open(&delivery.payload, delivery.publisher.as_deref());
        let reason = match opened.map(|t| extract(t.message)) {
            Ok(Some(req)) => return Ok(Some((req, delivery))),
            Ok(None) => format!("queue {queue} expects {expect} messages and got another kind"),
            Err(e) => format!("refused on {queue}: {e}"),
        };
        tracing::error!(queue = %queue, reason = %reason, "dead-lettering a message");
        delivery.dead_letter(reason).await?;
    }
}

#[cfg(test)]
mod heartbeat_tests {
    use shoal_bus::{Bus, MemoryBus};
    use shoal_model::message::{Phase, ReplyBody, HEARTBEAT_EVERY};
    use shoal_model::queue::Namespace;
    use shoal_model::{JobId, JobRef, Message, SessionId};

    /// Work lasting 2.5 heartbeat periods sends two heartbeats, then its own output; the clock
    /// is paused, so this takes no real time.
    #[tokio::test(start_paused = true)]
    async fn long_work_sends_a_heartbeat_every_period() {
        let bus = MemoryBus::new(Namespace::new("beat").unwrap());
        let queue = bus.namespace().results_queue();
        bus.declare_queue(&queue, &Default::default())
            .await
            .unwrap();
        let beat = ReplyBody::Heartbeat {
            session: SessionId(1),
            phase: Phase::Eval,
            jobs: vec![JobRef {
                job: JobId(7),
                attempt: 2,
            }],
            worker: "w".into(),
        };
        let work = tokio::time::sleep(HEARTBEAT_EVERY * 5 / 2);
        super::with_heartbeats(&Default::default(), &*bus, &queue, beat.clone(), async {
            work.await;
            42
        })
        .await;
        assert_eq!(bus.queue_depth(&queue).await.unwrap(), 2);
        let mut consumer = bus.consume(&queue, 8).await.unwrap();
        let d = consumer.next().await.unwrap().unwrap();
        assert_eq!(
            bus.codec().decode(&d.payload).unwrap(),
            Message::Reply(beat)
        );
    }
}
