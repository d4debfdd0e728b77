//! `RabbitBus`: the [`Bus`] of the cluster mode, over RabbitMQ (AMQP 0.9.1, lapin).
//!
//! # Topology (per namespace `<ns>`)
//!
//! - Work queues (`<ns>.compile.…`, `<ns>.eval.…`, `<ns>.results`): durable **quorum** queues
//!   declared by [`Bus::declare_queue`], with `x-delivery-limit`, dead-lettering through the
//!   direct exchange `<ns>.dlx` to `<ns>.dead` (`x-dead-letter-strategy = at-least-once`,
//!   `x-overflow = reject-publish`). See [`headers::work_queue_args`] for why each is set.
//! - `<ns>.dead`: the dead-letter queue, a durable quorum queue whose arguments set no limit; it
//!   exists from [`RabbitBus::connect`] on, and declaring it again changes nothing. Its bound
//!   is the broker's policy `<ns>-dead-bound` (`scripts/services-up`: at most
//!   `SHOAL_DEAD_MAX_LENGTH` messages, none older than `SHOAL_DEAD_MAX_AGE_S`, the oldest dropped
//!   first), so that operators change it without redeclaring the queue; `shoal dead-letters`
//!   reports how full it is.
//! - `<ns>.events` and `<ns>.control`: durable topic exchanges. A subscriber gets an exclusive,
//!   auto-deleted queue of its own bound with its pattern, bounded like the in-process bus's
//!   subscriber buffer (`x-max-length`, dropping the oldest).
//!
//! # How the bus's semantics map to AMQP
//!
//! - `publish`: persistent messages on the default exchange to the queue, `mandatory`, on one
//!   channel in confirm mode. All frames of a call are queued, then all confirms are awaited
//!   together. A `basic.return` (no such queue) is [`BusError::NoSuchQueue`]. A `basic.nack` (a
//!   quorum queue that cannot enqueue: its leader's node died and the channel has not found the
//!   new leader) sends the refused messages again on a fresh channel, and if the connection
//!   drops, the unconfirmed messages are sent again on the next connection; both with backoff,
//!   for up to [`RabbitOptions::publish_retry_for`], then an error naming the queue.
//! - `consume`: a channel per consumer, `basic.qos(prefetch)` on it, manual acks. `ack` is
//!   `basic.ack`, `requeue` (and a delivery dropped unsettled) is `basic.nack(requeue)`,
//!   `dead_letter(reason)` publishes a confirmed copy to `<ns>.dead` with the header
//!   `x-shoal-dead-reason`, then acks the original. A dropped consumer cancels its
//!   subscription and requeues what the broker had pushed to it but nobody took; deliveries
//!   already handed out keep their channel open until they are settled.
//! - `delivery_count` is the quorum queue's `x-delivery-count` (returns so far) plus one. The
//!   broker allows `x-delivery-limit` returns and dead-letters on the next, so the queue's limit
//!   of N deliveries is declared as `x-delivery-limit = N - 1`.
//! - A message the broker dead-lettered carries `x-first-death-reason = delivery_limit` and
//!   `x-first-death-queue`; read from the dead-letter queue its reason is
//!   `delivery limit N exceeded (queue <name>)`, N from the `x-shoal-delivery-limit` header the
//!   publisher stamps (from the queue's declaration on its bus).
//! - `queue_depth`: a passive `queue.declare` (ready messages, not unacknowledged ones).
//! - `close`: `connection.close`, which the broker answers only after the acks sent before it,
//!   so nothing acknowledged is redelivered; everything unacknowledged goes back to its queue.
//!
//! # Failures
//!
//! The broker may be a cluster: the URL then lists its nodes
//! (`amqp://user:password@h1:5672,h2:5672,h3:5672/vhost`, see [`broker_endpoints`]). The bus
//! connects to the first node that answers. When the connection drops (a node killed or
//! restarted, network, `rabbitmqctl close_connection`), the bus reconnects to the next node of
//! the list that answers, round robin starting after the one it lost, trying each once per round
//! and backing off exponentially between rounds ([`RabbitOptions::backoff_min`] to
//! `backoff_max`); a single node is the list of one. Quorum queues are replicated across the
//! cluster's nodes, so the survivors elect a new leader for each queue whose leader died, and the
//! queue goes on from there with its messages. A consumer's `next()` waits and subscribes again
//! (on whichever node the bus reached); deliveries from the lost channel can no longer
//! be settled (their `ack` fails with an error saying so, their `requeue` and drop do nothing),
//! and the broker delivers those messages again (RabbitMQ 3.10 counts that as a delivery:
//! `delivery_count` goes up, so a message that keeps killing its consumer's connection still
//! reaches the delivery limit). Publishers retry within their bound, then fail. A queue deleted
//! under a consumer ends its subscription; `next()` then returns `NoSuchQueue` (again on every
//! call until the queue is back).
//!
//! Settling costs no round trip: `ack` and `requeue` return once the frame is queued on the
//! consumer's channel (measured: about 8 µs of client CPU per consumed and acked message, against
//! about 33 µs when each ack also waited for lapin's I/O thread to write it).
//!
//! Prefetch is cheap to raise and costly to keep at 1: measured on the 2-core dev box, a consumer
//! with prefetch 1 cost the broker about 330 µs of CPU per message (every ack its own Raft
//! command), against about 60 µs at prefetch 10 and 14 µs at prefetch 500.
//!
//! The URL carries credentials: logs and errors name a node as `amqp://host:port/vhost` only,
//! and the list as `amqp://h1:5672,h2:5672/vhost`.
//! (lapin itself logs its frames at `trace` level, the login frame included: never enable
//! `lapin=trace` where logs are kept.)
//!
//! TLS (`amqps://`) needs the `tls` feature: rustls with the ring backend and the system's CA
//! store, built with cc (no cmake); [`TlsOptions`] adds CA certificates.
//!
//! Everything runs on the current tokio runtime (lapin 4 takes `Handle::current()` and runs its
//! I/O on a thread of its own); a current-thread runtime, as in actix's `System`, is enough.

mod consumer;
pub mod headers;
mod link;
mod nodes;

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{ExchangeDeleteOptions, QueueDeclareOptions, QueueDeleteOptions};
use shoal_model::queue::Namespace;

use self::consumer::{RabbitConsumer, Source};
use self::link::{amqp_code, backend, durable, Shared, Target};
pub use self::nodes::{broker_endpoints, InvalidBrokerUrl, MAX_NODES, NODE_LIST_FORM};
use crate::{Bus, BusError, Consumer, QueueOptions, Result};

/// TLS settings for `amqps://` URLs (needs the `tls` feature: rustls with ring).
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// CA certificates (PEM) to trust for the broker's certificate, besides the system's.
    pub ca_pem: Option<String>,
}

/// How [`RabbitBus`] connects and retries.
#[derive(Clone, Debug)]
pub struct RabbitOptions {
    /// AMQP heartbeat interval (whole seconds; 0 turns heartbeats off): a broker that stays
    /// silent for about two of them counts as gone. A `?heartbeat=` in the URL wins.
    pub heartbeat: Duration,
    /// The `connection_name` client property, shown by `rabbitmqctl list_connections
    /// client_properties` and the management UI.
    pub connection_name: String,
    /// How long one connection attempt may take. A `?connection_timeout=` (ms) in the URL wins.
    pub connect_timeout: Duration,
    /// How long a publish (and a dead-letter settlement) keeps retrying across reconnections
    /// before it fails; also how long it waits for confirms.
    pub publish_retry_for: Duration,
    /// First pause between reconnection attempts; it doubles up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// How long [`RabbitBus::connect_with`] keeps trying before it gives up: zero fails on the
    /// first refusal; a worker waits, so that one restarted while the broker restarts comes up
    /// with it instead of exiting.
    pub connect_wait: Duration,
    pub tls: TlsOptions,
    /// Signs and verifies messages: the deployment's key (`SHOAL_HMAC_KEY_FILE`). The default
    /// is a random key, which only suits a bus whose publishers and consumers share a process.
    pub codec: shoal_model::envelope::Codec,
}

impl Default for RabbitOptions {
    fn default() -> Self {
        RabbitOptions {
            heartbeat: Duration::from_secs(15),
            connection_name: "shoal".to_string(),
            connect_timeout: Duration::from_secs(10),
            publish_retry_for: Duration::from_secs(30),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
            connect_wait: Duration::ZERO,
            tls: TlsOptions::default(),
            codec: crate::random_codec(),
        }
    }
}

/// The RabbitMQ bus. See the [module docs](self) for the topology and the semantics.
pub struct RabbitBus {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RabbitBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitBus")
            .field("endpoint", &self.shared.endpoint())
            .field("namespace", &self.shared.ns.as_str())
            .finish()
    }
}

impl RabbitBus {
    /// Connects with default options. See [`RabbitBus::connect_with`].
    pub async fn connect(url: &str, ns: Namespace) -> Result<Arc<RabbitBus>> {
        RabbitBus::connect_with(url, ns, RabbitOptions::default()).await
    }

    /// Connects to the broker at `url` (`amqp://user:password@host:port/vhost`, `%2f` for the
    /// vhost `/`; a cluster's nodes as `…@h1:5672,h2:5672/vhost`, the first that answers) and
    /// declares the namespace's exchanges and dead-letter queue. One round of attempts unless
    /// [`RabbitOptions::connect_wait`] says to wait: a broker none of whose nodes can be reached
    /// now is an error (later losses are retried).
    pub async fn connect_with(
        url: &str,
        ns: Namespace,
        options: RabbitOptions,
    ) -> Result<Arc<RabbitBus>> {
        let shared = Arc::new(Shared::new(url, ns, options)?);
        let connect_wait = shared.options.connect_wait;
        shared
            .link(Some(tokio::time::Instant::now() + connect_wait))
            .await?;
        tracing::info!(endpoint = %shared.endpoint(), ns = %shared.ns, "RabbitMQ bus connected");
        Ok(Arc::new(RabbitBus { shared }))
    }

    /// The node of the current (or last) connection as logs name it:
    /// `amqp://host:port/vhost`, without credentials.
    pub fn endpoint(&self) -> &str {
        self.shared.endpoint()
    }

    /// Every node of the broker setting, as logs name them: `amqp://h1:5672,h2:5672/vhost`
    /// (for a single node, its endpoint).
    pub fn nodes(&self) -> &str {
        &self.shared.all_endpoints
    }

    /// The queues this bus declared, with their options.
    pub fn declared_queues(&self) -> HashMap<String, QueueOptions> {
        self.shared
            .declared
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Deletes queues by name, messages and all; a queue that does not exist is skipped.
    pub async fn delete_queues(&self, names: &[String]) -> Result<()> {
        let link = self.shared.link(Some(self.deadline())).await?;
        for name in names {
            link.admin(|c| async move {
                c.queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                    .await
            })
            .await
            .map_err(|e| backend(format!("delete queue `{name}`"), e))?;
            self.shared
                .declared
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(name);
        }
        Ok(())
    }

    /// Removes the namespace from the broker: every queue this bus declared, the dead-letter
    /// queue (messages and all) and the namespace's exchanges. For tests and for retiring a
    /// deployment; queues declared only by other processes must be named to
    /// [`RabbitBus::delete_queues`].
    pub async fn delete_namespace(&self) -> Result<()> {
        let mut queues: Vec<String> = self.declared_queues().into_keys().collect();
        queues.push(self.shared.dead_queue.clone());
        self.delete_queues(&queues).await?;
        let link = self.shared.link(Some(self.deadline())).await?;
        let ns = &self.shared.ns;
        for exchange in [
            ns.events_topic(),
            ns.control_topic(),
            self.shared.dead_exchange.clone(),
        ] {
            let name = exchange.as_str();
            link.admin(|c| async move {
                c.exchange_delete(name.into(), ExchangeDeleteOptions::default())
                    .await
            })
            .await
            .map_err(|e| backend(format!("delete exchange `{exchange}`"), e))?;
            self.shared.forget_exchange(&exchange);
        }
        Ok(())
    }

    /// A passive `queue.declare`: the queue's ready messages and consumers, or `NoSuchQueue`.
    async fn passive_declare(&self, queue: &str, what: &str) -> Result<lapin::Queue> {
        let link = self.shared.link(Some(self.deadline())).await?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let declared = link
            .admin(|c| async move {
                c.queue_declare(queue.into(), passive, Default::default())
                    .await
            })
            .await;
        match declared {
            Ok(q) => Ok(q),
            Err(e) if amqp_code(&e) == Some(404) => Err(BusError::NoSuchQueue(queue.to_string())),
            Err(e) => Err(backend(format!("{what} of queue `{queue}`"), e)),
        }
    }

    /// [`RabbitBus::delete_namespace`], and first the work queues of each device kind (`arch`,
    /// `num_cu`) that other processes may have declared ([`Namespace::work_queues`]): what a
    /// test or a benchmark run leaves behind, so that runs do not pile queues up on a shared
    /// broker.
    pub async fn delete_namespace_of(&self, kinds: &[(String, u32)]) -> Result<()> {
        let ns = self.shared.ns.clone();
        for (arch, num_cu) in kinds {
            self.delete_queues(&ns.work_queues(arch, *num_cu)).await?;
        }
        self.delete_queues(&[ns.commands_queue()]).await?;
        self.delete_namespace().await
    }

    fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.shared.options.publish_retry_for
    }

    /// Test hook: closes the current connection from this side without closing the bus, as a
    /// broker restart would; the bus reconnects as after any other loss.
    #[cfg(feature = "test-support")]
    pub async fn drop_connection_for_test(&self) {
        if let Ok(link) = self.shared.link(Some(self.deadline())).await {
            let _ = link
                .conn
                .close(320, "shoal test: connection dropped".into())
                .await;
        }
    }
}

#[async_trait]
impl Bus for RabbitBus {
    fn namespace(&self) -> &Namespace {
        &self.shared.ns
    }

    fn publisher(&self) -> &str {
        &self.shared.user
    }

    fn codec(&self) -> &shoal_model::envelope::Codec {
        &self.shared.options.codec
    }

    async fn declare_queue(&self, name: &str, options: &QueueOptions) -> Result<()> {
        let shared = &self.shared;
        let link = shared.link(Some(self.deadline())).await?;
        if name == shared.dead_queue {
            // Exists from the start with arguments of its own; nothing to change.
            return Ok(());
        }
        let mut args = headers::work_queue_args(
            &shared.dead_exchange,
            &shared.dead_queue,
            options.delivery_limit,
        );
        if let Some(after) = options.expires_after {
            headers::expire_unused(&mut args, after);
        }
        let declared = link
            .admin(|c| async move { c.queue_declare(name.into(), durable(), args).await })
            .await;
        match declared {
            Ok(_) => {}
            // Declared before with other arguments: as the in-process bus does, keep the first.
            Err(e) if amqp_code(&e) == Some(406) => {
                tracing::warn!(queue = name, asked = ?options, error = %e, "queue redeclared with other options; keeping the first");
                return Ok(());
            }
            Err(e) => return Err(backend(format!("declare queue `{name}`"), e)),
        }
        shared
            .declared
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_string())
            .or_insert_with(|| options.clone());
        Ok(())
    }

    async fn publish(&self, queue: &str, payloads: Vec<Vec<u8>>) -> Result<()> {
        self.shared.check_open()?;
        if payloads.is_empty() {
            return Ok(());
        }
        let properties = headers::queue_message_properties(self.shared.delivery_limit(queue))
            .with_user_id(self.shared.user.as_str().into());
        let target = Target {
            exchange: "",
            routing_key: queue,
            mandatory: true,
            name: queue,
        };
        self.shared.publish(&target, &payloads, &properties).await
    }

    async fn consume(&self, queue: &str, prefetch: u16) -> Result<Box<dyn Consumer>> {
        let source = Source::Queue {
            queue: queue.to_string(),
            prefetch,
        };
        Ok(Box::new(
            RabbitConsumer::start(self.shared.clone(), source).await?,
        ))
    }

    async fn queue_depth(&self, queue: &str) -> Result<u64> {
        Ok(u64::from(
            self.passive_declare(queue, "depth").await?.message_count(),
        ))
    }

    async fn consumer_count(&self, queue: &str) -> Result<u32> {
        Ok(self
            .passive_declare(queue, "consumers")
            .await?
            .consumer_count())
    }

    async fn publish_topic(&self, topic: &str, routing_key: &str, payload: Vec<u8>) -> Result<()> {
        let link = self.shared.link(Some(self.deadline())).await?;
        self.shared.ensure_topic(&link, topic).await?;
        let target = Target {
            exchange: topic,
            routing_key,
            mandatory: false,
            name: topic,
        };
        let properties =
            headers::topic_message_properties().with_user_id(self.shared.user.as_str().into());
        self.shared
            .publish(&target, std::slice::from_ref(&payload), &properties)
            .await
    }

    async fn subscribe(&self, topic: &str, pattern: &str) -> Result<Box<dyn Consumer>> {
        let source = Source::Topic {
            topic: topic.to_string(),
            pattern: pattern.to_string(),
        };
        Ok(Box::new(
            RabbitConsumer::start(self.shared.clone(), source).await?,
        ))
    }

    async fn close(&self) -> Result<()> {
        let Some(link) = self.shared.close() else {
            return Ok(());
        };
        if !link.alive() {
            return Ok(());
        }
        // Close-ok comes after the broker has processed every frame sent before the close
        // (acks included), so nothing acked is delivered again.
        match link.conn.close(200, "shoal bus closed".into()).await {
            Ok(()) => {
                tracing::debug!(endpoint = %self.shared.endpoint(), "RabbitMQ bus closed");
                Ok(())
            }
            Err(_) if !link.alive() => Ok(()),
            Err(e) => Err(backend(
                format!("close the connection to {}", self.shared.endpoint()),
                e,
            )),
        }
    }
}
