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
//! codec lives in `shoal_model::envelope`. A bus carries its deployment's [`Codec`] (the
//! signing key) beside its [`Namespace`], so every actor that can reach the bus signs and
//! verifies with the same key, and none can publish around it by accident.

pub mod amqp;
/// With the `test-support` feature only: no release binary carries the suite.
#[cfg(feature = "test-support")]
pub mod conformance;
pub mod memory;
pub mod outages;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_trait::async_trait;
use shoal_model::envelope::Codec;
use shoal_model::queue::Namespace;

pub use amqp::{RabbitBus, RabbitOptions, TlsOptions};
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
    /// A queue of one process (a CLI's reply queue): the broker deletes it once it has had no
    /// consumer for this long, so processes that end leave nothing behind. `None`: kept until
    /// deleted. (The in-process bus lives as long as its process, and ignores it.)
    pub expires_after: Option<std::time::Duration>,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            delivery_limit: 5,
            expires_after: None,
        }
    }
}

impl QueueOptions {
    /// A durable work queue with this delivery limit.
    pub fn limited(delivery_limit: u32) -> Self {
        QueueOptions {
            delivery_limit,
            ..QueueOptions::default()
        }
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
    fn settle(self: Box<Self>, how: Settlement) -> SettleFuture;
}

/// What [`Settle::settle`] returns: either already finished (the memory bus settles
/// synchronously inside `settle`, without allocating) or still running (a network round trip).
///
/// A settlement that is already finished is what lets a [`Delivery`] dropped unsettled be
/// requeued at once, deterministically, from `Drop`, with or without a runtime.
#[must_use = "await the settlement to learn whether it succeeded"]
pub struct SettleFuture(SettleState);

enum SettleState {
    Ready(Option<Result<()>>),
    Running(Pin<Box<dyn Future<Output = Result<()>> + Send>>),
}

impl SettleFuture {
    /// A settlement that has already happened, with this outcome.
    pub fn ready(result: Result<()>) -> Self {
        SettleFuture(SettleState::Ready(Some(result)))
    }

    /// A settlement that finishes when `fut` does.
    pub fn new(fut: impl Future<Output = Result<()>> + Send + 'static) -> Self {
        SettleFuture(SettleState::Running(Box::pin(fut)))
    }
}

impl Future for SettleFuture {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        match &mut self.0 {
            SettleState::Ready(result) => {
                Poll::Ready(result.take().expect("SettleFuture polled after completion"))
            }
            SettleState::Running(fut) => fut.as_mut().poll(cx),
        }
    }
}

/// One message handed to a consumer.
pub struct Delivery {
    pub payload: Vec<u8>,
    /// 1 on the first delivery, then one more each time it comes back.
    pub delivery_count: u32,
    /// For messages read from a dead-letter queue: why they are there.
    pub dead_reason: Option<String>,
    /// Who published it, as the bus authenticated them: the broker user whose connection
    /// published it (RabbitMQ validates the `user_id` property against the connection), or
    /// `in-process` on the in-process bus; `None` when a publisher set none (such a message is
    /// refused: `shoal_model::envelope::Codec::open`).
    pub publisher: Option<String>,
    /// Who published the message first: [`Delivery::publisher`], except on a copy that a bus
    /// dead-lettered itself, which that bus re-stamped with its own user: there, the original's
    /// publisher as the copy names it (`None` if the original had none). What `shoal
    /// dead-letters --messages` counts dead letters by.
    pub original_publisher: Option<String>,
    settle: Option<Box<dyn Settle>>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("bytes", &self.payload.len())
            .field("delivery_count", &self.delivery_count)
            .field("dead_reason", &self.dead_reason)
            .field("publisher", &self.publisher)
            .field("original_publisher", &self.original_publisher)
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
            publisher: None,
            original_publisher: None,
            settle: Some(settle),
        }
    }

    /// The same delivery, published by `publisher` (see [`Delivery::publisher`]), first
    /// published by it too.
    pub fn with_publisher(mut self, publisher: Option<String>) -> Self {
        self.original_publisher = publisher.clone();
        self.publisher = publisher;
        self
    }

    /// The same delivery, first published by `original` (see [`Delivery::original_publisher`]).
    pub fn with_original_publisher(mut self, original: Option<String>) -> Self {
        self.original_publisher = original;
        self
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

/// Runs a settle future from `Drop`. It is polled once right here, so a settlement that finishes
/// at once (the memory bus) happens before `drop` returns; one still running goes on as a task on
/// the current tokio runtime, if there is one.
fn drop_settle(mut fut: SettleFuture) {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match Pin::new(&mut fut).poll(&mut cx) {
        Poll::Ready(result) => log_drop_requeue(result),
        Poll::Pending => match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move { log_drop_requeue(fut.await) });
            }
            Err(_) => tracing::warn!(
                "a delivery dropped outside a tokio runtime could not be requeued; \
                 the broker redelivers it when the connection closes"
            ),
        },
    }
}

fn log_drop_requeue(result: Result<()>) {
    match result {
        Ok(()) => {}
        // Shutting down: the broker (or nobody, in memory) takes the message back anyway.
        Err(BusError::Closed) => tracing::debug!("dropped delivery not requeued: bus closed"),
        Err(e) => tracing::warn!(error = %e, "requeue of a dropped delivery failed"),
    }
}

/// A stream of deliveries from one queue or topic subscription.
#[async_trait]
pub trait Consumer: Send {
    /// The next delivery; `None` once the consumer or the bus is closed.
    ///
    /// Cancel-safe: dropping the future before it finishes (a `select!` branch that lost, a
    /// timeout) loses no message.
    async fn next(&mut self) -> Option<Result<Delivery>>;
}

/// The messaging interface every actor uses.
#[async_trait]
pub trait Bus: Send + Sync + 'static {
    fn namespace(&self) -> &Namespace;

    /// The deployment's codec: every message published is signed with it, and every message
    /// consumed is verified with it before it is decoded.
    fn codec(&self) -> &Codec;

    /// Who this bus publishes as: the broker user its connection authenticated as, which every
    /// message it publishes carries and every consumer sees as [`Delivery::publisher`]; for the
    /// in-process bus, the process itself (`shoal_model::identity::IN_PROCESS_USER`).
    fn publisher(&self) -> &str {
        shoal_model::identity::IN_PROCESS_USER
    }

    /// Declares a queue (idempotent). Names come from [`Namespace`]. The namespace's dead-letter
    /// queue always exists; declaring it changes nothing.
    async fn declare_queue(&self, name: &str, options: &QueueOptions) -> Result<()>;

    /// Publishes messages to a queue; returns once the bus has taken responsibility for all.
    async fn publish(&self, queue: &str, payloads: Vec<Vec<u8>>) -> Result<()>;

    /// Starts consuming a queue with at most `prefetch` unsettled deliveries at a time.
    async fn consume(&self, queue: &str, prefetch: u16) -> Result<Box<dyn Consumer>>;

    /// Messages waiting in a queue (not counting deliveries not yet settled).
    async fn queue_depth(&self, queue: &str) -> Result<u64>;

    /// Consumers of a queue now. The Scheduler sizes what it keeps in flight for a device kind
    /// by it: every device's Evaluator is one consumer of its eval queue.
    async fn consumer_count(&self, queue: &str) -> Result<u32>;

    /// Publishes a broadcast on a topic with a routing key such as `host1.evaluator`.
    async fn publish_topic(&self, topic: &str, routing_key: &str, payload: Vec<u8>) -> Result<()>;

    /// Subscribes to a topic with an AMQP-style pattern (`*` one word, `#` any words). Its
    /// deliveries need no settling.
    async fn subscribe(&self, topic: &str, pattern: &str) -> Result<Box<dyn Consumer>>;

    /// Closes the bus: consumers end, unsettled deliveries go back to their queues.
    async fn close(&self) -> Result<()>;
}

/// A codec with a fresh random key: for a bus whose every publisher and consumer live in this
/// process (the embedded mode, tests), where no key needs to be shared.
pub fn random_codec() -> Codec {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).expect("the operating system's random source is available");
    Codec::new(&key)
        .expect("32 bytes is a valid key")
        .with_origin(random_origin())
}

/// A random origin for a process's message ids (`Codec::with_origin`): no two processes of a
/// deployment draw the same one in practice (64 random bits).
pub fn random_origin() -> u64 {
    let mut origin = [0u8; 8];
    getrandom::fill(&mut origin).expect("the operating system's random source is available");
    u64::from_be_bytes(origin)
}

/// Whether an AMQP topic pattern matches a routing key (`*` = one word, `#` = zero or more).
/// Words are separated by `.`; it allocates nothing.
pub fn topic_matches(pattern: &str, key: &str) -> bool {
    /// The first word and what follows it; `None` when no words are left.
    fn split(words: Option<&str>) -> Option<(&str, Option<&str>)> {
        words.map(|w| match w.split_once('.') {
            Some((first, rest)) => (first, Some(rest)),
            None => (w, None),
        })
    }
    fn go(p: Option<&str>, k: Option<&str>) -> bool {
        match (split(p), split(k)) {
            (None, None) => true,
            (Some(("#", p_rest)), k_words) => {
                go(p_rest, k) || k_words.is_some_and(|(_, k_rest)| go(p, k_rest))
            }
            (Some(("*", p_rest)), Some((_, k_rest))) => go(p_rest, k_rest),
            (Some((a, p_rest)), Some((b, k_rest))) if a == b => go(p_rest, k_rest),
            _ => false,
        }
    }
    go(Some(pattern), Some(key))
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
        assert!(topic_matches("a.#", "a"));
        assert!(topic_matches("#.z", "z"));
        assert!(!topic_matches("a.#.z", "a.b.c"));
        assert!(!topic_matches("host2.x", "host1.x"));
        assert!(topic_matches("host2.x", "host2.x"));
        assert!(!topic_matches("*", "a.b"));
    }
}
