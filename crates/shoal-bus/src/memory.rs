//! `MemoryBus`: the in-process [`Bus`] of the embedded mode.
//!
//! It gives the semantics the RabbitMQ bus gives with quorum queues, so that an actor tested
//! against one behaves the same on the other (both pass [`crate::conformance`]):
//!
//! - A queue is a FIFO of messages. A consumer holds at most `prefetch` unsettled deliveries;
//!   `next()` waits while it is at that limit or the queue is empty.
//! - `ack` forgets a message. `requeue` (explicit, or a [`Delivery`] dropped unsettled) puts it
//!   back at the *front* of its queue, one delivery more — unless it has already been delivered
//!   `delivery_limit` times, in which case it goes to the namespace's dead-letter queue with the
//!   reason `delivery limit N exceeded (queue <name>)`. `dead_letter(reason)` sends it there with
//!   that reason. The dead-letter queue always exists and has no delivery limit, so nothing
//!   dead-lettered is ever lost.
//! - A consumer dropped while its deliveries live on does not take them back: each [`Delivery`]
//!   is settled exactly once, by its owner or by its own `Drop` (which requeues it).
//! - Topics are broadcasts. Each subscriber has a bounded buffer of [`SUBSCRIBER_BUFFER`]
//!   messages; when a slow subscriber's buffer is full, the oldest message is dropped (counted and
//!   logged), so a publisher never waits on a subscriber. Topic messages are facts that a newer
//!   one supersedes (health, progress, control), and RabbitMQ gives no more: a subscriber's
//!   queue there is bounded too.
//!
//! # Design
//!
//! Each queue is a `std::sync::Mutex<VecDeque<Message>>` plus a `tokio::sync::Notify` that wakes
//! waiting consumers. Settlement is synchronous: it takes the queue's lock, moves the message,
//! and returns an already finished [`SettleFuture`], so a delivery dropped in `Drop` — with or
//! without a runtime — is back in its queue before `drop` returns. Per message, the bus allocates
//! a copy of the payload for the delivery (the queue keeps the original for a requeue, as a
//! broker does) and the delivery's boxed settlement; every operation is O(1) in the queue's
//! length.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use async_trait::async_trait;
use shoal_model::queue::Namespace;
use tokio::sync::Notify;

use crate::{
    topic_matches, Bus, BusError, Consumer, Delivery, QueueOptions, Result, Settle, SettleFuture,
    Settlement,
};

/// Messages a topic subscriber may have waiting before the oldest is dropped.
pub const SUBSCRIBER_BUFFER: usize = 1024;

/// Publishing a batch of more than this many messages wakes every waiting consumer at once
/// instead of one per message.
const WAKE_ALL_ABOVE: usize = 4;

/// The in-process bus. Cheap to share: every handle it gives out holds what it needs.
pub struct MemoryBus {
    ns: Namespace,
    codec: shoal_model::envelope::Codec,
    life: Arc<Life>,
    queues: RwLock<HashMap<String, Arc<Queue>>>,
    dead: Arc<Queue>,
    topics: Arc<Topics>,
}

/// Whether the bus is closed, and how waiters learn that it just was.
struct Life {
    closed: AtomicBool,
    closing: Notify,
}

impl Life {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// One message waiting in a queue.
struct Message {
    payload: Vec<u8>,
    /// How often it has been delivered from this queue so far.
    delivered: u32,
    dead_reason: Option<String>,
}

struct Queue {
    name: String,
    options: QueueOptions,
    /// Where dead letters go; `None` for the dead-letter queue itself.
    dead: Option<Arc<Queue>>,
    life: Arc<Life>,
    ready: Mutex<VecDeque<Message>>,
    /// Wakes consumers waiting for a message.
    available: Notify,
    /// Consumers alive (a `QueueConsumer` counts itself until dropped).
    consumers: AtomicU32,
}

/// Locks a mutex, ignoring poisoning: nothing that runs under our locks can panic halfway
/// through a change, and settlement runs in `Drop`, where a second panic would abort.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Queue {
    fn new(name: String, options: QueueOptions, dead: Option<Arc<Queue>>, life: Arc<Life>) -> Self {
        Queue {
            name,
            options,
            dead,
            life,
            ready: Mutex::new(VecDeque::new()),
            available: Notify::new(),
            consumers: AtomicU32::new(0),
        }
    }

    fn push_back(&self, payloads: Vec<Vec<u8>>) {
        let n = payloads.len();
        lock(&self.ready).extend(payloads.into_iter().map(|payload| Message {
            payload,
            delivered: 0,
            dead_reason: None,
        }));
        self.wake(n);
    }

    /// Wakes consumers for `n` new messages. A consumer that is not waiting now looks at the
    /// queue before it next waits, so it needs no wake-up.
    fn wake(&self, n: usize) {
        if n > WAKE_ALL_ABOVE {
            self.available.notify_waiters();
        } else {
            for _ in 0..n {
                self.available.notify_one();
            }
        }
    }

    fn pop(&self) -> Option<Message> {
        lock(&self.ready).pop_front()
    }

    /// A delivered message comes back: to the front, or to the dead letters past the limit.
    fn requeue(&self, msg: Message) {
        let limit = self.options.delivery_limit;
        if msg.delivered >= limit {
            let reason = format!("delivery limit {limit} exceeded (queue {})", self.name);
            self.dead_letter(msg, reason);
        } else {
            lock(&self.ready).push_front(msg);
            self.wake(1);
        }
    }

    fn dead_letter(&self, msg: Message, reason: String) {
        let dead = self.dead.as_deref().unwrap_or(self);
        tracing::debug!(queue = %self.name, %reason, "message dead-lettered");
        lock(&dead.ready).push_back(Message {
            payload: msg.payload,
            delivered: 0,
            dead_reason: Some(reason),
        });
        dead.wake(1);
    }
}

impl MemoryBus {
    /// A bus with no queues but the namespace's dead-letter queue, signing with a random key
    /// (every user of an in-process bus is in this process).
    pub fn new(ns: Namespace) -> Arc<MemoryBus> {
        MemoryBus::with_codec(ns, crate::random_codec())
    }

    /// As [`MemoryBus::new`], signing with `codec`.
    pub fn with_codec(ns: Namespace, codec: shoal_model::envelope::Codec) -> Arc<MemoryBus> {
        let life = Arc::new(Life {
            closed: AtomicBool::new(false),
            closing: Notify::new(),
        });
        let dead_options = QueueOptions::limited(u32::MAX);
        let dead = Arc::new(Queue::new(
            ns.dead_letter_queue(),
            dead_options,
            None,
            life.clone(),
        ));
        let queues = HashMap::from([(dead.name.clone(), dead.clone())]);
        Arc::new(MemoryBus {
            ns,
            codec,
            life,
            queues: RwLock::new(queues),
            dead,
            topics: Arc::new(Topics::default()),
        })
    }

    fn check_open(&self) -> Result<()> {
        if self.life.is_closed() {
            Err(BusError::Closed)
        } else {
            Ok(())
        }
    }

    fn queue(&self, name: &str) -> Result<Arc<Queue>> {
        self.check_open()?;
        let queues = self.queues.read().unwrap_or_else(PoisonError::into_inner);
        queues
            .get(name)
            .cloned()
            .ok_or_else(|| BusError::NoSuchQueue(name.to_string()))
    }
}

#[async_trait]
impl Bus for MemoryBus {
    fn namespace(&self) -> &Namespace {
        &self.ns
    }

    fn codec(&self) -> &shoal_model::envelope::Codec {
        &self.codec
    }

    async fn declare_queue(&self, name: &str, options: &QueueOptions) -> Result<()> {
        self.check_open()?;
        let mut queues = self.queues.write().unwrap_or_else(PoisonError::into_inner);
        match queues.get(name) {
            // The dead-letter queue exists from the start, with no limit.
            Some(_) if name == self.dead.name => {}
            Some(q) if q.options != *options => tracing::warn!(
                queue = name,
                declared = ?q.options,
                asked = ?options,
                "queue redeclared with other options; keeping the first"
            ),
            Some(_) => {}
            None => {
                let q = Queue::new(
                    name.to_string(),
                    options.clone(),
                    Some(self.dead.clone()),
                    self.life.clone(),
                );
                queues.insert(name.to_string(), Arc::new(q));
            }
        }
        Ok(())
    }

    async fn publish(&self, queue: &str, payloads: Vec<Vec<u8>>) -> Result<()> {
        self.queue(queue)?.push_back(payloads);
        Ok(())
    }

    async fn consume(&self, queue: &str, prefetch: u16) -> Result<Box<dyn Consumer>> {
        let queue = self.queue(queue)?;
        queue.consumers.fetch_add(1, Ordering::AcqRel);
        Ok(Box::new(QueueConsumer {
            queue,
            // AMQP reads a prefetch of 0 as "no limit".
            prefetch: if prefetch == 0 {
                u32::MAX
            } else {
                u32::from(prefetch)
            },
            slots: Arc::new(Slots {
                unsettled: AtomicU32::new(0),
                freed: Notify::new(),
            }),
        }))
    }

    async fn queue_depth(&self, queue: &str) -> Result<u64> {
        let queue = self.queue(queue)?;
        let depth = lock(&queue.ready).len();
        Ok(depth as u64)
    }

    async fn consumer_count(&self, queue: &str) -> Result<u32> {
        let queue = self.queue(queue)?;
        Ok(queue.consumers.load(Ordering::Acquire))
    }

    async fn publish_topic(&self, topic: &str, routing_key: &str, payload: Vec<u8>) -> Result<()> {
        self.check_open()?;
        self.topics.publish(topic, routing_key, payload);
        Ok(())
    }

    async fn subscribe(&self, topic: &str, pattern: &str) -> Result<Box<dyn Consumer>> {
        self.check_open()?;
        let sub = Arc::new(Subscription {
            pattern: pattern.to_string(),
            buffer: Mutex::new(VecDeque::new()),
            ready: Notify::new(),
            dropped: AtomicU64::new(0),
        });
        lock(&self.topics.subs)
            .entry(topic.to_string())
            .or_default()
            .push(sub.clone());
        Ok(Box::new(Subscriber {
            topics: self.topics.clone(),
            topic: topic.to_string(),
            sub,
            life: self.life.clone(),
        }))
    }

    async fn close(&self) -> Result<()> {
        if !self.life.closed.swap(true, Ordering::AcqRel) {
            self.life.closing.notify_waiters();
            lock(&self.topics.subs).clear();
        }
        Ok(())
    }
}

// ----- queue consumers -----

/// A consumer's count of unsettled deliveries, shared with those deliveries.
struct Slots {
    unsettled: AtomicU32,
    /// Wakes the consumer when one of its deliveries is settled.
    freed: Notify,
}

struct QueueConsumer {
    queue: Arc<Queue>,
    prefetch: u32,
    slots: Arc<Slots>,
}

impl Drop for QueueConsumer {
    fn drop(&mut self) {
        self.queue.consumers.fetch_sub(1, Ordering::AcqRel);
    }
}

impl QueueConsumer {
    fn at_limit(&self) -> bool {
        self.slots.unsettled.load(Ordering::Acquire) >= self.prefetch
    }

    fn deliver(&self, mut msg: Message) -> Delivery {
        self.slots.unsettled.fetch_add(1, Ordering::AcqRel);
        msg.delivered += 1;
        let payload = msg.payload.clone();
        let (count, reason) = (msg.delivered, msg.dead_reason.clone());
        let settle = QueueSettle {
            queue: self.queue.clone(),
            slots: self.slots.clone(),
            msg,
        };
        Delivery::new(payload, count, reason, Box::new(settle)).with_publisher(in_process())
    }
}

#[async_trait]
impl Consumer for QueueConsumer {
    async fn next(&mut self) -> Option<Result<Delivery>> {
        let life = &*self.queue.life;
        loop {
            // Every `Notified` is created before the condition it waits on is checked, so no
            // wake-up falls between the check and the wait. Nothing is taken from the queue
            // across an `.await`, which makes this cancel-safe.
            let closing = life.closing.notified();
            if life.is_closed() {
                return None;
            }
            if self.at_limit() {
                // `notify_one` keeps a permit for a consumer not yet waiting.
                let freed = self.slots.freed.notified();
                if self.at_limit() {
                    tokio::select! {
                        _ = freed => {}
                        _ = closing => return None,
                    }
                }
                continue;
            }
            if let Some(msg) = self.queue.pop() {
                return Some(Ok(self.deliver(msg)));
            }
            let mut available = std::pin::pin!(self.queue.available.notified());
            available.as_mut().enable();
            if let Some(msg) = self.queue.pop() {
                return Some(Ok(self.deliver(msg)));
            }
            tokio::select! {
                _ = available => {}
                _ = closing => return None,
            }
        }
    }
}

/// How a queue delivery is settled: the message itself, kept for a requeue or a dead letter.
struct QueueSettle {
    queue: Arc<Queue>,
    slots: Arc<Slots>,
    msg: Message,
}

impl Settle for QueueSettle {
    fn settle(self: Box<Self>, how: Settlement) -> SettleFuture {
        let QueueSettle { queue, slots, msg } = *self;
        let result = if queue.life.is_closed() {
            Err(BusError::Closed)
        } else {
            match how {
                Settlement::Ack => {}
                Settlement::Requeue => queue.requeue(msg),
                Settlement::DeadLetter(reason) => queue.dead_letter(msg, reason),
            }
            Ok(())
        };
        // After the message has moved, so a consumer woken here finds it back in the queue.
        slots.unsettled.fetch_sub(1, Ordering::AcqRel);
        slots.freed.notify_one();
        SettleFuture::ready(result)
    }
}

// ----- topics -----

#[derive(Default)]
struct Topics {
    subs: Mutex<HashMap<String, Vec<Arc<Subscription>>>>,
}

struct Subscription {
    pattern: String,
    buffer: Mutex<VecDeque<Vec<u8>>>,
    ready: Notify,
    /// Messages dropped because the buffer was full.
    dropped: AtomicU64,
}

impl Topics {
    fn publish(&self, topic: &str, key: &str, payload: Vec<u8>) {
        let subs = lock(&self.subs);
        let Some(list) = subs.get(topic) else {
            return;
        };
        let mut matching = list.iter().filter(|s| topic_matches(&s.pattern, key));
        let Some(mut sub) = matching.next() else {
            return;
        };
        // Every subscriber but the last gets a copy; the last gets the payload itself.
        for next in matching {
            sub.push(topic, payload.clone());
            sub = next;
        }
        sub.push(topic, payload);
    }
}

impl Subscription {
    fn push(&self, topic: &str, payload: Vec<u8>) {
        let mut buffer = lock(&self.buffer);
        if buffer.len() >= SUBSCRIBER_BUFFER {
            buffer.pop_front();
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(
                    topic,
                    pattern = %self.pattern,
                    dropped,
                    "slow topic subscriber: oldest messages dropped"
                );
            }
        }
        buffer.push_back(payload);
        drop(buffer);
        self.ready.notify_one();
    }
}

struct Subscriber {
    topics: Arc<Topics>,
    topic: String,
    sub: Arc<Subscription>,
    life: Arc<Life>,
}

#[async_trait]
impl Consumer for Subscriber {
    async fn next(&mut self) -> Option<Result<Delivery>> {
        loop {
            let closing = self.life.closing.notified();
            if self.life.is_closed() {
                return None;
            }
            let ready = self.sub.ready.notified();
            if let Some(payload) = lock(&self.sub.buffer).pop_front() {
                return Some(Ok(Delivery::new(payload, 1, None, Box::new(NoSettle))
                    .with_publisher(in_process())));
            }
            tokio::select! {
                _ = ready => {}
                _ = closing => return None,
            }
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let mut subs = lock(&self.topics.subs);
        if let Some(list) = subs.get_mut(&self.topic) {
            list.retain(|s| !Arc::ptr_eq(s, &self.sub));
            if list.is_empty() {
                subs.remove(&self.topic);
            }
        }
    }
}

/// Topic deliveries need no settling.
struct NoSettle;

impl Settle for NoSettle {
    fn settle(self: Box<Self>, _how: Settlement) -> SettleFuture {
        SettleFuture::ready(Ok(()))
    }
}

/// Every message of the in-process bus is published by this process.
fn in_process() -> Option<String> {
    Some(shoal_model::identity::IN_PROCESS_USER.to_string())
}
