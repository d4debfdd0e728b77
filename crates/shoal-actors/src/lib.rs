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
//!   A failure of the machinery restarts the failing loop with backoff ([`supervise`]).

pub mod backends;
pub mod cluster;
pub mod compiler;
mod control;
pub mod embedded;
pub mod evaluator;
pub mod exporter;
pub mod monitor;
pub mod scheduler;
pub mod shutdown;
pub mod supervise;

use shoal_model::SessionId;

/// Errors that stop an actor's loop (and so restart it). Candidate faults are not errors.
#[derive(Debug, thiserror::Error)]
pub enum ActorError {
    #[error(transparent)]
    Store(#[from] shoal_store::StoreError),
    #[error(transparent)]
    Bus(#[from] shoal_bus::BusError),
    #[error("session {0} is not in the store")]
    UnknownSession(SessionId),
    #[error("{0}")]
    Other(String),
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

/// The next request a worker should act on, or `None` when it should stop (stop signal or bus
/// closed). Messages that are not requests of the expected kind — unsigned or badly signed,
/// undecodable bytes, an unknown wire version, a message routed to the wrong queue — are
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
        let reason = match codec.decode(&delivery.payload).map(&extract) {
            Ok(Some(req)) => return Ok(Some((req, delivery))),
            Ok(None) => format!("queue {queue} expects {expect} messages and got another kind"),
            Err(e) => format!("refused on {queue}: {e}"),
        };
        tracing::error!(queue = %queue, reason = %reason, "dead-lettering a message");
        delivery.dead_letter(reason).await?;
    }
}
