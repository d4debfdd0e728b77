//! The connection to the broker, replaced whenever it drops (by one to the next node of the
//! list that answers, round robin, with backoff after each round in which none did), and the
//! pipelined, confirmed publish every sender goes through.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use lapin::options::{
    ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::tcp::OwnedTLSConfig;
use lapin::types::FieldTable;
use lapin::uri::AMQPScheme;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use shoal_model::queue::Namespace;
use tokio::sync::watch;
use tokio::time::{sleep, timeout, Instant};

use super::headers;
use super::nodes::{self, Node};
use super::RabbitOptions;
use crate::{BusError, QueueOptions, Result};

mod publish;

/// Locks a std mutex, ignoring poisoning: nothing under these locks panics halfway.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn backend(
    context: impl Into<String>,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> BusError {
    BusError::Backend {
        context: context.into(),
        source: source.into(),
    }
}

/// Whether the broker refused our login (wrong user or password, or no access to the vhost).
fn login_refused(e: &lapin::Error) -> bool {
    use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
    matches!(e.kind(), lapin::ErrorKind::ProtocolError(amqp)
        if matches!(amqp.kind(), AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED)))
}

/// The AMQP reply code of a channel or connection error (404 not found, 406 precondition
/// failed…), if that is what `e` is.
pub(super) fn amqp_code(e: &lapin::Error) -> Option<u16> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(err) => Some(err.get_id()),
        _ => None,
    }
}

/// What the bus shares with its consumers and deliveries.
pub(super) struct Shared {
    pub ns: Namespace,
    pub options: RabbitOptions,
    /// The broker's nodes, in the order given (one for a single broker). Their URIs carry the
    /// credentials; logs and errors name a node by its endpoint.
    nodes: Vec<Node>,
    /// The node of the current connection (or of the last one): where the next reconnection
    /// starts looking after it, so that a node that died is tried last.
    at: AtomicUsize,
    /// The whole list as logs name it: `amqp://h1:5672,h2:5672/vhost`.
    pub all_endpoints: String,
    pub dead_exchange: String,
    pub dead_queue: String,
    /// The broker user this bus connects as: every message it publishes carries it as its
    /// `user_id`, which the broker checks against the connection ("validated user-id"), so a
    /// consumer knows who sent it.
    pub user: String,
    /// The connection in use; replaced when it drops.
    link: Mutex<Option<Arc<Link>>>,
    /// Held by whoever is reconnecting, so that one task reconnects and the others wait for it.
    reconnecting: tokio::sync::Mutex<()>,
    /// `true` once the bus is closed.
    closed: watch::Sender<bool>,
    /// Queues this bus declared, with their options: the delivery limit stamped on messages, and
    /// what `delete_namespace` removes.
    pub declared: RwLock<HashMap<String, QueueOptions>>,
    /// Exchanges known to exist (publishing to a missing one would close the publisher channel).
    exchanges: Mutex<HashSet<String>>,
}

/// One connection with its long-lived channels.
pub(super) struct Link {
    pub conn: Connection,
    /// The index of its node in [`Shared::nodes`].
    node: usize,
    /// The channel in confirm mode every publish goes through; reopened if it alone fails.
    publisher: tokio::sync::Mutex<Channel>,
    /// Serialises the synchronous part of publishing (a delivery tag is assigned and the frames
    /// are queued in one poll), so that tags follow frame order on the channel.
    frames: Mutex<()>,
    /// For declarations and passive declares; reopened after a channel error (a 404 closes it).
    admin: tokio::sync::Mutex<Option<Channel>>,
}

impl Link {
    pub fn alive(&self) -> bool {
        self.conn.status().connected()
    }

    /// Runs `op` on the admin channel, opening one if needed. A channel error closes that channel
    /// on the broker; the next call opens another.
    pub async fn admin<T, F, Fut>(&self, op: F) -> lapin::Result<T>
    where
        F: FnOnce(Channel) -> Fut,
        Fut: Future<Output = lapin::Result<T>>,
    {
        let mut admin = self.admin.lock().await;
        let channel = match admin.as_ref() {
            Some(c) if c.status().connected() => c.clone(),
            _ => {
                let c = self.conn.create_channel().await?;
                *admin = Some(c.clone());
                c
            }
        };
        let result = op(channel).await;
        if result.is_err() {
            // A channel error (404, 406) closes the channel on the broker: a fresh one next time.
            *admin = None;
        }
        result
    }

    /// Replaces the publisher channel with a fresh one. RabbitMQ 3.10 keeps, per channel and
    /// quorum queue, the queue's members with the leader it knew first; a channel that first
    /// published while that leader's node was down keeps asking the dead node and nacks every
    /// publish to that queue for as long as the node stays down. A fresh channel starts from
    /// the leader the cluster knows now.
    async fn renew_publisher(&self) {
        let mut publisher = self.publisher.lock().await;
        if !self.alive() {
            return;
        }
        let _ = publisher
            .close(200, "shoal: fresh publisher channel".into())
            .await;
        match self.conn.create_channel().await {
            Ok(channel) => {
                if channel
                    .confirm_select(ConfirmSelectOptions::default())
                    .await
                    .is_ok()
                {
                    *publisher = channel;
                }
            }
            Err(e) => tracing::debug!(error = %e, "opening a fresh publisher channel failed"),
        }
    }

    async fn publisher(&self) -> lapin::Result<Channel> {
        let mut publisher = self.publisher.lock().await;
        if !publisher.status().connected() && self.alive() {
            let channel = self.conn.create_channel().await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            *publisher = channel;
        }
        Ok(publisher.clone())
    }
}

/// What became of one attempt at publishing a batch.
enum Attempt {
    Confirmed,
    /// The broker could not route a mandatory message: no such queue.
    Returned,
    /// The broker refused these (indices into the batch; with any lost beside them).
    Nacked(Vec<usize>),
    Unconfirmed(usize),
    /// The connection or channel failed: these (indices into the batch) may not have arrived.
    Lost(Vec<usize>, lapin::Error),
}

/// Where a batch goes.
pub(super) struct Target<'a> {
    pub exchange: &'a str,
    pub routing_key: &'a str,
    /// Fail with `NoSuchQueue` when nothing takes the message (publishing to a queue).
    pub mandatory: bool,
    /// For errors: the queue or topic.
    pub name: &'a str,
}

impl Shared {
    pub fn new(url: &str, ns: Namespace, options: RabbitOptions) -> Result<Shared> {
        let mut nodes = nodes::parse(url).map_err(|e| backend("invalid broker URL", e))?;
        // The URL's own `?heartbeat=` and `?connection_timeout=` win over the options.
        let heartbeat = u16::try_from(options.heartbeat.as_secs()).unwrap_or(u16::MAX);
        let connect_ms = u64::try_from(options.connect_timeout.as_millis()).unwrap_or(u64::MAX);
        for node in &mut nodes {
            node.uri.query.heartbeat.get_or_insert(heartbeat);
            node.uri.query.connection_timeout.get_or_insert(connect_ms);
        }
        let all_endpoints = nodes::list_endpoint(&nodes);
        if nodes.iter().any(|n| n.uri.scheme == AMQPScheme::AMQPS) && !cfg!(feature = "tls") {
            return Err(backend(
                format!("connect to {all_endpoints}"),
                "amqps:// needs shoal-bus built with its `tls` feature",
            ));
        }
        let (closed, _) = watch::channel(false);
        Ok(Shared {
            // One user for every node: the list shares its credentials.
            user: nodes[0].uri.authority.userinfo.username.clone(),
            dead_exchange: ns.dead_letter_exchange(),
            dead_queue: ns.dead_letter_queue(),
            ns,
            options,
            nodes,
            at: AtomicUsize::new(0),
            all_endpoints,
            link: Mutex::new(None),
            reconnecting: tokio::sync::Mutex::new(()),
            closed,
            declared: RwLock::new(HashMap::new()),
            exchanges: Mutex::new(HashSet::new()),
        })
    }

    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// The node of the current (or last) connection as logs name it: `amqp://host:port/vhost`.
    pub fn endpoint(&self) -> &str {
        &self.nodes[self.at.load(Ordering::Relaxed)].endpoint
    }

    pub fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            Err(BusError::Closed)
        } else {
            Ok(())
        }
    }

    /// Resolves once the bus is closed.
    pub fn closing(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.closed.subscribe();
        async move {
            let _ = rx.wait_for(|closed| *closed).await;
        }
    }

    /// Marks the bus closed and hands back the connection to close.
    pub fn close(&self) -> Option<Arc<Link>> {
        if self.closed.send_replace(true) {
            return None;
        }
        lock(&self.link).take()
    }

    pub fn delivery_limit(&self, queue: &str) -> Option<u32> {
        let declared = self.declared.read().unwrap_or_else(PoisonError::into_inner);
        declared.get(queue).map(|o| o.delivery_limit)
    }

    fn current(&self) -> Option<Arc<Link>> {
        lock(&self.link).clone().filter(|l| l.alive())
    }

    /// The live connection, reconnecting with backoff if it dropped: until `until` if given,
    /// else until the bus is closed.
    pub async fn link(&self, until: Option<Instant>) -> Result<Arc<Link>> {
        self.check_open()?;
        if let Some(link) = self.current() {
            return Ok(link);
        }
        let closing = self.closing();
        let _turn = tokio::select! {
            turn = self.reconnecting.lock() => turn,
            () = closing => return Err(BusError::Closed),
        };
        self.check_open()?;
        if let Some(link) = self.current() {
            return Ok(link);
        }
        // After a loss, the next node first: the one that dropped us is likely down, and is
        // tried last. Before the first connection, the first node of the list.
        let count = self.nodes.len();
        let lost = lock(&self.link).as_ref().map(|old| old.node);
        if lost.is_some() {
            crate::outages::lost();
        }
        let start = lost.map_or(0, |node| (node + 1) % count);
        let mut delay = self.options.backoff_min;
        let mut errors = Vec::with_capacity(count);
        loop {
            errors.clear();
            for i in (0..count).map(|k| (start + k) % count) {
                self.check_open()?;
                let node = &self.nodes[i];
                let error = match timeout(self.options.connect_timeout, self.open(i)).await {
                    Ok(Ok(link)) => return self.install(link, lost).await,
                    // Waiting would not change the broker's mind about our credentials (and
                    // the nodes of a cluster share their users).
                    Ok(Err(e)) if login_refused(&e) => {
                        return Err(backend(format!("connect to {}", node.endpoint), e))
                    }
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => format!("no connection within {:?}", self.options.connect_timeout),
                };
                if count > 1 {
                    tracing::warn!(endpoint = %node.endpoint, %error, "broker node unreachable; trying the next");
                    errors.push(format!("{}: {error}", node.endpoint));
                } else {
                    errors.push(error);
                }
            }
            let error = errors.join("; ");
            if until.is_some_and(|until| Instant::now() + delay > until) {
                return Err(backend(
                    format!("connect to {}", self.all_endpoints),
                    format!("broker unreachable, gave up: {error}"),
                ));
            }
            tracing::warn!(endpoint = %self.all_endpoints, %error, retry_in = ?delay, "broker unreachable");
            tokio::select! {
                () = sleep(delay) => {}
                () = self.closing() => return Err(BusError::Closed),
            }
            delay = (delay * 2).min(self.options.backoff_max);
        }
    }

    /// Makes `link` the connection in use; `lost` is the node of the one it replaces.
    async fn install(&self, link: Link, lost: Option<usize>) -> Result<Arc<Link>> {
        let link = Arc::new(link);
        let node = link.node;
        lock(&self.link).replace(link.clone());
        self.at.store(node, Ordering::Relaxed);
        if self.is_closed() {
            // Closed while connecting: this connection is not wanted.
            let _ = link.conn.close(200, "shoal bus closed".into()).await;
            return Err(BusError::Closed);
        }
        if lost.is_some() {
            crate::outages::regained();
        }
        match lost {
            Some(old) if old != node => tracing::warn!(
                endpoint = %self.nodes[node].endpoint,
                lost = %self.nodes[old].endpoint,
                "failed over to another broker node"
            ),
            Some(_) => tracing::info!(endpoint = %self.endpoint(), "reconnected to the broker"),
            None => {}
        }
        Ok(link)
    }

    /// Connects once and sets up the namespace's fixed topology.
    async fn open(&self, node: usize) -> lapin::Result<Link> {
        let properties = ConnectionProperties::default()
            .with_connection_name(self.options.connection_name.as_str().into());
        let tls = OwnedTLSConfig {
            identity: None,
            cert_chain: self.options.tls.ca_pem.clone(),
        };
        let conn = Connection::connect_uri_with_config(
            self.nodes[node].uri.clone(),
            properties,
            tls,
            lapin::runtime::default_runtime()?,
        )
        .await?;
        let publisher = conn.create_channel().await?;
        publisher
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let admin = conn.create_channel().await?;
        self.declare_topology(&admin).await?;
        tracing::debug!(endpoint = %self.nodes[node].endpoint, ns = %self.ns, "connected to the broker");
        Ok(Link {
            conn,
            node,
            publisher: tokio::sync::Mutex::new(publisher),
            frames: Mutex::new(()),
            admin: tokio::sync::Mutex::new(Some(admin)),
        })
    }

    /// The topic exchanges, the dead-letter exchange and the dead-letter queue bound to it.
    async fn declare_topology(&self, channel: &Channel) -> lapin::Result<()> {
        for topic in [self.ns.events_topic(), self.ns.control_topic()] {
            declare_exchange(channel, &topic, ExchangeKind::Topic).await?;
        }
        declare_exchange(channel, &self.dead_exchange, ExchangeKind::Direct).await?;
        channel
            .queue_declare(
                self.dead_queue.as_str().into(),
                durable(),
                headers::dead_letter_queue_args(),
            )
            .await?;
        channel
            .queue_bind(
                self.dead_queue.as_str().into(),
                self.dead_exchange.as_str().into(),
                self.dead_queue.as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let mut known = lock(&self.exchanges);
        known.insert(self.ns.events_topic());
        known.insert(self.ns.control_topic());
        known.insert(self.dead_exchange.clone());
        Ok(())
    }

    /// Declares a topic exchange (durable) unless it is known to exist.
    pub async fn ensure_topic(&self, link: &Link, topic: &str) -> Result<()> {
        if lock(&self.exchanges).contains(topic) {
            return Ok(());
        }
        link.admin(|c| async move { declare_exchange(&c, topic, ExchangeKind::Topic).await })
            .await
            .map_err(|e| backend(format!("declare topic exchange `{topic}`"), e))?;
        lock(&self.exchanges).insert(topic.to_string());
        Ok(())
    }

    pub fn forget_exchange(&self, name: &str) {
        lock(&self.exchanges).remove(name);
    }

    /// Publishes `payloads` in order and returns once the broker has confirmed every one.
    /// A message the broker refuses outright (406, e.g. one larger than its
    /// `max_message_size`) fails the publish at once, with the broker's reason; messages it
    /// nacks (a quorum queue without a reachable leader) are sent again on a fresh channel, with
    /// backoff, within [`RabbitOptions::publish_retry_for`].
    ///
    /// Every frame of the batch is queued before any confirm is awaited, so a batch costs one
    /// round trip, not one per message. If the connection drops, the messages not confirmed are
    /// sent again on the next connection (at-least-once: one may then arrive twice), with backoff,
    /// for up to [`RabbitOptions::publish_retry_for`].
    pub async fn publish(
        &self,
        target: &Target<'_>,
        payloads: &[Vec<u8>],
        properties: &BasicProperties,
    ) -> Result<()> {
        let deadline = Instant::now() + self.options.publish_retry_for;
        let mut todo: Vec<usize> = (0..payloads.len()).collect();
        let mut delay = self.options.backoff_min;
        let context = || format!("publish to `{}`", target.name);
        loop {
            let link = match self.link(Some(deadline)).await {
                Ok(link) => link,
                Err(BusError::Closed) => return Err(BusError::Closed),
                Err(e) => return Err(backend(context(), e)),
            };
            match link
                .publish(target, payloads, &todo, properties, deadline)
                .await
            {
                Attempt::Confirmed => return Ok(()),
                Attempt::Returned => return Err(BusError::NoSuchQueue(target.name.to_string())),
                // A quorum queue nacks what it cannot enqueue: right after the node of its leader
                // died, until this channel finds the new leader. Sent again on a fresh channel.
                Attempt::Nacked(nacked) => {
                    self.check_open()?;
                    if Instant::now() + delay > deadline {
                        return Err(backend(
                            context(),
                            format!(
                                "the broker refused {} of {} messages (basic.nack) for {:?}",
                                nacked.len(),
                                payloads.len(),
                                self.options.publish_retry_for
                            ),
                        ));
                    }
                    tracing::warn!(
                        endpoint = %self.endpoint(),
                        target = target.name,
                        refused = nacked.len(),
                        retry_in = ?delay,
                        "the broker refused messages (basic.nack); sending them again on a fresh channel"
                    );
                    link.renew_publisher().await;
                    todo = nacked;
                    tokio::select! {
                        () = sleep(delay) => {}
                        () = self.closing() => return Err(BusError::Closed),
                    }
                    delay = (delay * 2).min(self.options.backoff_max);
                }
                Attempt::Unconfirmed(n) => {
                    return Err(backend(
                        context(),
                        format!(
                            "{n} of {} messages not confirmed within {:?}",
                            payloads.len(),
                            self.options.publish_retry_for
                        ),
                    ))
                }
                // 406 PRECONDITION_FAILED on the publisher channel is the broker refusing the
                // message itself (past its `max_message_size`): sending it again gets the same.
                Attempt::Lost(_, error) if amqp_code(&error) == Some(406) => {
                    return Err(backend(
                        context(),
                        format!("the broker refused the message: {error}"),
                    ));
                }
                Attempt::Lost(lost, error) => {
                    self.check_open()?;
                    if Instant::now() + delay > deadline {
                        return Err(backend(
                            context(),
                            format!(
                                "{} of {} messages unconfirmed after {:?} of retries: {error}",
                                lost.len(),
                                payloads.len(),
                                self.options.publish_retry_for
                            ),
                        ));
                    }
                    tracing::warn!(
                        endpoint = %self.endpoint(),
                        target = target.name,
                        unconfirmed = lost.len(),
                        %error,
                        retry_in = ?delay,
                        "publish interrupted; sending the unconfirmed messages again"
                    );
                    todo = lost;
                    tokio::select! {
                        () = sleep(delay) => {}
                        () = self.closing() => return Err(BusError::Closed),
                    }
                    delay = (delay * 2).min(self.options.backoff_max);
                }
            }
        }
    }
}

pub(super) fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

async fn declare_exchange(channel: &Channel, name: &str, kind: ExchangeKind) -> lapin::Result<()> {
    channel
        .exchange_declare(
            name.into(),
            kind,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
}
