//! Consumers of queues and topic subscriptions, each on a channel of its own, and the settlement
//! of their deliveries.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};

use async_trait::async_trait;
use futures_util::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};
use tokio::task::JoinHandle;
use tokio::time::sleep;

use super::headers;
use super::link::{amqp_code, backend, Link, Shared, Target};
use crate::memory::SUBSCRIBER_BUFFER;
use crate::{BusError, Consumer, Delivery, Result, Settle, SettleFuture, Settlement};

/// What a consumer reads.
#[derive(Clone)]
pub(super) enum Source {
    /// A work queue, with manual acks and this prefetch.
    Queue { queue: String, prefetch: u16 },
    /// A topic exchange through a queue of the subscriber's own, bound with the pattern.
    Topic { topic: String, pattern: String },
}

impl Source {
    fn describe(&self) -> String {
        match self {
            Source::Queue { queue, .. } => format!("queue `{queue}`"),
            Source::Topic { topic, pattern } => format!("topic `{topic}` ({pattern})"),
        }
    }
}

/// A channel that lives as long as its consumer or any delivery taken from it, whichever goes
/// last (a delivery outlives its consumer and can still be settled). Dropping the last handle
/// closes the channel (lapin closes a channel when its last clone goes).
pub(super) struct Held {
    channel: Channel,
    shared: Arc<Shared>,
    queue: String,
}

/// One `basic.consume` on one channel.
struct Subscription {
    stream: lapin::Consumer,
    held: Arc<Held>,
}

impl Subscription {
    /// Stops a queue subscription: cancels it, then gives back what the broker had already pushed
    /// to it but nobody took. Deliveries handed out stay valid.
    async fn retire(self) {
        let Subscription { mut stream, held } = self;
        if held.shared.is_closed() || !held.channel.status().connected() {
            return;
        }
        if let Err(e) = held
            .channel
            .basic_cancel(stream.tag(), BasicCancelOptions::default())
            .await
        {
            tracing::debug!(queue = %held.queue, error = %e, "cancel of a dropped consumer failed");
            return;
        }
        // After cancel-ok the stream yields what was buffered, then ends.
        while let Some(Ok(d)) = stream.next().await {
            let requeue = BasicNackOptions {
                multiple: false,
                requeue: true,
            };
            if let Err(e) = d.acker.nack(requeue).await {
                tracing::debug!(queue = %held.queue, error = %e, "requeue of a prefetched message failed");
            }
        }
    }
}

pub(super) struct RabbitConsumer {
    shared: Arc<Shared>,
    source: Source,
    current: Option<Subscription>,
    /// A (re)subscription under way; kept across `next()` calls so that cancelling `next()`
    /// loses nothing.
    pending: Option<JoinHandle<Result<Subscription>>>,
}

impl RabbitConsumer {
    /// Subscribes now (so that an undeclared queue is an error at once).
    pub async fn start(shared: Arc<Shared>, source: Source) -> Result<RabbitConsumer> {
        let link = shared.link(Some(retry_deadline(&shared))).await?;
        let sub = subscribe(&shared, &link, &source).await?;
        Ok(RabbitConsumer {
            shared,
            source,
            current: Some(sub),
            pending: None,
        })
    }

    fn wrap(&self, d: lapin::message::Delivery, held: &Arc<Held>) -> Delivery {
        let props = d.properties;
        let count = headers::delivery_count(props.headers().as_ref());
        let publisher = props.user_id().as_ref().map(|u| u.to_string());
        match self.source {
            Source::Topic { .. } => {
                Delivery::new(d.data, 1, None, Box::new(NoSettle)).with_publisher(publisher)
            }
            Source::Queue { .. } => {
                let reason = headers::dead_reason(props.headers().as_ref(), |q| {
                    self.shared.delivery_limit(q)
                });
                let original =
                    headers::original_publisher(props.headers().as_ref(), publisher.as_deref());
                let settle = RabbitSettle {
                    held: held.clone(),
                    delivery_tag: d.delivery_tag,
                    properties: props,
                    // Kept for a dead-letter copy; the delivery hands out the original.
                    payload: d.data.clone(),
                };
                Delivery::new(d.data, count, reason, Box::new(settle))
                    .with_publisher(publisher)
                    .with_original_publisher(original)
            }
        }
    }
}

/// Subscribes again after a connection or channel failure, with backoff, until the bus closes.
/// A queue that no longer exists ends the attempts with `NoSuchQueue`.
async fn resubscribe(shared: Arc<Shared>, source: Source) -> Result<Subscription> {
    let mut delay = shared.options.backoff_min;
    loop {
        let link = shared.link(None).await?;
        match subscribe(&shared, &link, &source).await {
            Ok(sub) => {
                tracing::info!(source = %source.describe(), "consumer resubscribed");
                return Ok(sub);
            }
            Err(e @ (BusError::NoSuchQueue(_) | BusError::Closed)) => return Err(e),
            Err(e) => {
                tracing::warn!(source = %source.describe(), error = %e, retry_in = ?delay, "resubscribe failed");
            }
        }
        tokio::select! {
            () = sleep(delay) => {}
            () = shared.closing() => return Err(BusError::Closed),
        }
        delay = (delay * 2).min(shared.options.backoff_max);
    }
}

async fn subscribe(shared: &Arc<Shared>, link: &Link, source: &Source) -> Result<Subscription> {
    let context = || format!("consume {}", source.describe());
    let channel = link
        .conn
        .create_channel()
        .await
        .map_err(|e| backend(context(), e))?;
    let (queue, no_ack) = match source {
        Source::Queue { queue, prefetch } => {
            channel
                .basic_qos(*prefetch, BasicQosOptions { global: false })
                .await
                .map_err(|e| backend(context(), e))?;
            (queue.clone(), false)
        }
        Source::Topic { topic, pattern } => {
            shared.ensure_topic(link, topic).await?;
            let declared = channel
                .queue_declare(
                    "".into(),
                    QueueDeclareOptions {
                        exclusive: true,
                        auto_delete: true,
                        ..QueueDeclareOptions::default()
                    },
                    headers::subscriber_queue_args(SUBSCRIBER_BUFFER),
                )
                .await
                .map_err(|e| backend(context(), e))?;
            let queue = declared.name().as_str().to_string();
            channel
                .queue_bind(
                    queue.as_str().into(),
                    topic.as_str().into(),
                    pattern.as_str().into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(|e| backend(context(), e))?;
            (queue, true)
        }
    };
    let stream = channel
        .basic_consume(
            queue.as_str().into(),
            "".into(),
            BasicConsumeOptions {
                no_ack,
                ..BasicConsumeOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .map_err(|e| match amqp_code(&e) {
            Some(404) => BusError::NoSuchQueue(queue.clone()),
            _ => backend(context(), e),
        })?;
    Ok(Subscription {
        stream,
        held: Arc::new(Held {
            channel,
            shared: shared.clone(),
            queue,
        }),
    })
}

fn retry_deadline(shared: &Shared) -> tokio::time::Instant {
    tokio::time::Instant::now() + shared.options.publish_retry_for
}

#[async_trait]
impl Consumer for RabbitConsumer {
    async fn next(&mut self) -> Option<Result<Delivery>> {
        loop {
            if self.shared.is_closed() {
                return None;
            }
            if let Some(sub) = self.current.as_mut() {
                let item = tokio::select! {
                    item = sub.stream.next() => item,
                    () = self.shared.closing() => return None,
                };
                match item {
                    // Pushed before the channel died and buffered since: the broker has
                    // taken it back already and delivers it again.
                    Some(Ok(d)) if !d.acker.usable() => {
                        tracing::debug!(source = %self.source.describe(), "skipped a delivery of a lost channel");
                    }
                    Some(Ok(d)) => {
                        let held = sub.held.clone();
                        return Some(Ok(self.wrap(d, &held)));
                    }
                    Some(Err(e)) => {
                        if !self.shared.is_closed() {
                            tracing::warn!(
                                source = %self.source.describe(),
                                error = %e,
                                "consumer lost its channel; subscribing again"
                            );
                        }
                        self.current = None;
                    }
                    None => {
                        if !self.shared.is_closed() {
                            tracing::warn!(
                                source = %self.source.describe(),
                                "consumer cancelled by the broker; subscribing again"
                            );
                        }
                        self.current = None;
                    }
                }
                continue;
            }
            let shared = self.shared.clone();
            let source = self.source.clone();
            let pending = self
                .pending
                .get_or_insert_with(|| tokio::spawn(resubscribe(shared, source)));
            let done = tokio::select! {
                done = pending => done,
                () = self.shared.closing() => return None,
            };
            self.pending = None;
            match done {
                Ok(Ok(sub)) => self.current = Some(sub),
                Ok(Err(BusError::Closed)) => return None,
                Ok(Err(e)) => return Some(Err(e)),
                Err(join) => {
                    return Some(Err(backend(
                        format!("consume {}", self.source.describe()),
                        join,
                    )))
                }
            }
        }
    }
}

impl Drop for RabbitConsumer {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            pending.abort();
        }
        let Some(sub) = self.current.take() else {
            return;
        };
        match self.source {
            // Dropping the subscription cancels it and closes its channel; the broker deletes
            // the subscriber's queue.
            Source::Topic { .. } => drop(sub),
            Source::Queue { .. } => start_now(sub.retire()),
        }
    }
}

/// Polls `fut` once right here, then lets it finish as a task on the current runtime.
///
/// The first poll of [`Subscription::retire`] queues the `basic.cancel` frame, so it goes out
/// before anything the caller does next: the requeue of a delivery dropped after its consumer
/// must not reach the broker while the consumer could still be handed that message again. With no
/// runtime the rest is dropped: the channel closes once its last delivery goes, and the broker
/// takes back everything still unacknowledged on it.
fn start_now(fut: impl Future<Output = ()> + Send + 'static) {
    let mut fut = Box::pin(fut);
    let mut cx = Context::from_waker(Waker::noop());
    if fut.as_mut().poll(&mut cx).is_pending() {
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(fut);
        }
    }
}

/// How a queue delivery is settled: on its own channel, by delivery tag.
struct RabbitSettle {
    held: Arc<Held>,
    delivery_tag: u64,
    properties: BasicProperties,
    payload: Vec<u8>,
}

impl RabbitSettle {
    /// The error for a settlement the broker will not see because the delivery's channel is gone
    /// (the connection dropped): the broker has already taken the message back and delivers it
    /// again.
    fn lost(&self, what: &str) -> BusError {
        if self.held.shared.is_closed() {
            return BusError::Closed;
        }
        backend(
            format!("{what} on `{}`", self.held.queue),
            "the delivery's channel was lost; the broker delivers the message again",
        )
    }

    /// Sends `basic.ack`: done once the frame is queued on the channel, ahead of anything sent
    /// later on the connection (a `connection.close` included, so `close()` flushes it).
    ///
    /// Waiting for the frame to be written as well would cost a wake-up from lapin's I/O thread
    /// per delivery and promise nothing more: written is not processed, and a connection lost
    /// either way means the broker delivers the message again.
    fn ack(&self) -> Result<()> {
        let sent = self
            .held
            .channel
            .basic_ack(self.delivery_tag, BasicAckOptions::default())
            .now_or_never();
        match sent {
            None | Some(Ok(())) => Ok(()),
            // As good as done: an ack queued is no more a promise than this (a connection lost
            // either way means the broker delivers the message again, and the consumer that
            // gets it decides again). Failing here would fail the caller's loop after its work
            // was done and sent.
            Some(Err(e)) if !self.held.channel.status().connected() => {
                tracing::debug!(error = %e, "ack on a lost channel: the broker delivers it again");
                if self.held.shared.is_closed() {
                    return Err(BusError::Closed);
                }
                Ok(())
            }
            Some(Err(e)) => Err(backend(format!("ack on `{}`", self.held.queue), e)),
        }
    }

    /// Sends `basic.nack(requeue)`, as [`RabbitSettle::ack`] sends its ack.
    fn requeue(&self) -> Result<()> {
        let requeue = BasicNackOptions {
            multiple: false,
            requeue: true,
        };
        let sent = self
            .held
            .channel
            .basic_nack(self.delivery_tag, requeue)
            .now_or_never();
        match sent {
            None | Some(Ok(())) => Ok(()),
            // The channel is gone, and with it the delivery: the broker has requeued it already.
            Some(Err(_)) if self.held.shared.is_closed() => Err(BusError::Closed),
            Some(Err(_)) if !self.held.channel.status().connected() => Ok(()),
            Some(Err(e)) => Err(backend(format!("requeue on `{}`", self.held.queue), e)),
        }
    }

    /// A confirmed copy in the dead-letter queue with the reason, then an ack of the original.
    async fn dead_letter(self, reason: String) -> Result<()> {
        if !self.held.channel.status().connected() {
            return Err(self.lost("dead-letter"));
        }
        let shared = self.held.shared.clone();
        let queue = self.held.queue.clone();
        let properties =
            headers::dead_letter_properties(self.properties.clone(), &reason, &queue, &shared.user);
        let target = Target {
            exchange: &shared.dead_exchange,
            routing_key: &shared.dead_queue,
            mandatory: true,
            name: &shared.dead_queue,
        };
        shared
            .publish(&target, std::slice::from_ref(&self.payload), &properties)
            .await?;
        tracing::debug!(queue = %queue, %reason, "message dead-lettered");
        self.ack()
    }
}

impl Settle for RabbitSettle {
    fn settle(self: Box<Self>, how: Settlement) -> SettleFuture {
        match how {
            // Queued at once, so a delivery dropped unsettled is requeued before `drop` returns.
            Settlement::Ack => SettleFuture::ready(self.ack()),
            Settlement::Requeue => SettleFuture::ready(self.requeue()),
            Settlement::DeadLetter(reason) => SettleFuture::new(self.dead_letter(reason)),
        }
    }
}

/// Topic deliveries need no settling (consumed with `no_ack`).
struct NoSettle;

impl Settle for NoSettle {
    fn settle(self: Box<Self>, _how: Settlement) -> SettleFuture {
        SettleFuture::ready(Ok(()))
    }
}
