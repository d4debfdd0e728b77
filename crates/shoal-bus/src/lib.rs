//! The `Bus`: durable queues with acknowledgements, and topics for broadcast facts.
//!
//! One interface, several implementations ([`memory::MemoryBus`] in-process for the embedded
//! mode, RabbitMQ for the cluster), held to one [`conformance`] suite written once. The semantics
//! every implementation gives:
//! - `publish` returns only when the bus has taken responsibility for the messages (a publisher
//!   confirm on RabbitMQ).
//! - A delivery is settled exactly once: `ack`, `requeue`, or `dead_letter(reason)`. A delivery
//!   dropped without being settled — its consumer failed or died — is delivered again.
//! - A message delivered more often than the queue's delivery limit goes to the namespace's
//!   dead-letter queue with the reason, instead of looping forever.
//! - Topics are at-most-once broadcasts: a subscriber sees what is published while it listens.
//!
//! **Architecture invariant:** the bus moves bytes. It does not decode messages; the envelope
//! codec lives in `shoal_model::envelope`.

pub mod conformance;
pub mod memory;

use async_trait::async_trait;
use shoal_model::queue::Namespace;

pub use memory::MemoryBus;

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("bus: queue `{0}` is not declared")]
    NoSuchQueue(String),
    #[error("bus: the bus is closed")]
    Closed,
    #[error("bus: {context}: {source}")]
    Backend {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

pub type Result<T, E = BusError> = std::result::Result<T, E>;

/// How a queue behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueOptions {
    /// Deliveries after which a message is dead-lettered instead of delivered again.
    pub delivery_limit: u32,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions { delivery_limit: 5 }
    }
}

/// How a delivery was settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settlement {
    Ack,
    Requeue,
    DeadLetter(String),
}

/// The implementation side of a delivery's settlement.
pub trait Settle: Send {
    /// Called exactly once: with the chosen settlement, or with `Requeue` when the delivery is
    /// dropped unsettled.
    fn settle(self: Box<Self>, how: Settlement) -> futures_lite::BoxedSettleFuture;
}

/// Futures used by [`Settle`], kept in one place.
pub mod futures_lite {
    use std::future::Future;
    use std::pin::Pin;

    pub type BoxedSettleFuture = Pin<Box<dyn Future<Output = super::Result<()>> + Send>>;
}

/// One message handed to a consumer.
pub struct Delivery {
    pub payload: Vec<u8>,
    /// 1 on the first delivery, then one more each time it comes back.
    pub delivery_count: u32,
    /// For messages read from a dead-letter queue: why they are there.
    pub dead_reason: Option<String>,
    settle: Option<Box<dyn Settle>>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("bytes", &self.payload.len())
            .field("delivery_count", &self.delivery_count)
            .field("dead_reason", &self.dead_reason)
            .finish()
    }
}

impl Delivery {
    pub fn new(
        payload: Vec<u8>,
        delivery_count: u32,
        dead_reason: Option<String>,
        settle: Box<dyn Settle>,
    ) -> Self {
        Delivery {
            payload,
            delivery_count,
            dead_reason,
            settle: Some(settle),
        }
    }

    async fn settle(mut self, how: Settlement) -> Result<()> {
        match self.settle.take() {
            Some(s) => s.settle(how).await,
            None => Ok(()),
        }
    }

    /// The work this message asked for is done and committed: forget the message.
    pub async fn ack(self) -> Result<()> {
        self.settle(Settlement::Ack).await
    }

    /// Give the message back to the queue to be delivered again.
    pub async fn requeue(self) -> Result<()> {
        self.settle(Settlement::Requeue).await
    }

    /// Move the message to the dead-letter queue with a reason (undecodable, unknown version).
    pub async fn dead_letter(self, reason: impl Into<String>) -> Result<()> {
        self.settle(Settlement::DeadLetter(reason.into())).await
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        // Unsettled: the consumer failed or died before it finished. Deliver it again.
        if let Some(s) = self.settle.take() {
            let fut = s.settle(Settlement::Requeue);
            drop_settle(fut);
        }
    }
}

/// Runs a settle future from `Drop`: on the current tokio runtime if there is one; the memory
/// bus's futures complete on first poll, so they also work without one.
fn drop_settle(fut: futures_lite::BoxedSettleFuture) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            if let Err(e) = fut.await {
                tracing::warn!(error = %e, "requeue of a dropped delivery failed");
            }
        });
    } else {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut fut = fut;
        let _ = fut.as_mut().poll(&mut cx);
    }
}

/// A stream of deliveries from one queue or topic subscription.
#[async_trait]
pub trait Consumer: Send {
    /// The next delivery; `None` once the consumer or the bus is closed.
    async fn next(&mut self) -> Option<Result<Delivery>>;
}

/// The messaging interface every actor uses.
#[async_trait]
pub trait Bus: Send + Sync + 'static {
    fn namespace(&self) -> &Namespace;

    /// Declares a queue (idempotent). Names come from [`Namespace`].
    async fn declare_queue(&self, name: &str, options: &QueueOptions) -> Result<()>;

    /// Publishes messages to a queue; returns once the bus has taken responsibility for all.
    async fn publish(&self, queue: &str, payloads: Vec<Vec<u8>>) -> Result<()>;

    /// Starts consuming a queue with at most `prefetch` unsettled deliveries at a time.
    async fn consume(&self, queue: &str, prefetch: u16) -> Result<Box<dyn Consumer>>;

    /// Messages waiting in a queue (not counting deliveries not yet settled).
    async fn queue_depth(&self, queue: &str) -> Result<u64>;

    /// Publishes a broadcast on a topic with a routing key such as `host1.evaluator`.
    async fn publish_topic(&self, topic: &str, routing_key: &str, payload: Vec<u8>) -> Result<()>;

    /// Subscribes to a topic with an AMQP-style pattern (`*` one word, `#` any words). Its
    /// deliveries need no settling.
    async fn subscribe(&self, topic: &str, pattern: &str) -> Result<Box<dyn Consumer>>;

    /// Closes the bus: consumers end, unsettled deliveries go back to their queues.
    async fn close(&self) -> Result<()>;
}

/// Whether an AMQP topic pattern matches a routing key (`*` = one word, `#` = zero or more).
pub fn topic_matches(pattern: &str, key: &str) -> bool {
    fn go(p: &[&str], k: &[&str]) -> bool {
        match (p.first(), k.first()) {
            (None, None) => true,
            (Some(&"#"), _) => go(&p[1..], k) || (!k.is_empty() && go(p, &k[1..])),
            (Some(&"*"), Some(_)) => go(&p[1..], &k[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &k[1..]),
            _ => false,
        }
    }
    let p: Vec<&str> = pattern.split('.').collect();
    let k: Vec<&str> = key.split('.').collect();
    go(&p, &k)
}

#[cfg(test)]
mod tests {
    use super::topic_matches;

    #[test]
    fn topic_patterns() {
        assert!(topic_matches("host1.*", "host1.evaluator"));
        assert!(!topic_matches("host1.*", "host2.evaluator"));
        assert!(topic_matches("#", "a.b.c"));
        assert!(topic_matches("*.evaluator", "h.evaluator"));
        assert!(topic_matches("a.#.z", "a.z"));
        assert!(topic_matches("a.#.z", "a.b.c.z"));
        assert!(!topic_matches("a.*", "a.b.c"));
    }
}
