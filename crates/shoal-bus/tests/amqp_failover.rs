//! A broker given as a list of nodes: the bus connects to the first node that answers, and when
//! its node goes, it fails over to the next one, its consumers and publishers with it.
//!
//! One real broker plays every node: the others are TCP forwarders to it (which can be made to
//! vanish, connections and listener at once, as a killed node does) or ports where nothing
//! listens (a node that is down). The broker is `SHOAL_TEST_AMQP` (default
//! `amqp://guest:guest@127.0.0.1:5672/%2f`). The three-node cluster itself, a node SIGKILLed under
//! a tuning session, is `tests/broker_cluster.rs` at the workspace root.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shoal_bus::{Bus, Consumer, Delivery, QueueOptions, RabbitBus, RabbitOptions};
use shoal_model::queue::Namespace;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{timeout, Instant};

const WITHIN: Duration = Duration::from_secs(20);

fn broker_url() -> String {
    std::env::var("SHOAL_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_string())
}

/// The test broker's `host:port`.
fn broker_addr() -> String {
    let url = broker_url();
    let rest = url.split_once("://").expect("a URL").1;
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:5672")
    }
}

/// The test broker's URL with `hosts` (each `host:port`) as its node list instead of its host.
fn node_list(hosts: &[String]) -> String {
    let url = broker_url();
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let userinfo = authority.rsplit_once('@').map(|(u, _)| format!("{u}@"));
    format!(
        "{scheme}://{}{}{tail}",
        userinfo.unwrap_or_default(),
        hosts.join(",")
    )
}

/// A port on 127.0.0.1 where nothing listens (bound, then let go).
async fn dead_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

/// A node in front of the real broker: forwards every connection until `kill`, which closes its
/// listener and every connection through it at once.
struct Forwarder {
    port: u16,
    stop: watch::Sender<bool>,
}

impl Forwarder {
    async fn start(target: String) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stop, _) = watch::channel(false);
        let mut stopped = stop.subscribe();
        let each = stop.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    _ = stopped.wait_for(|s| *s) => return,
                };
                let Ok((mut inbound, _)) = accepted else {
                    continue;
                };
                let target = target.clone();
                let mut stopped = each.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = stopped.wait_for(|s| *s) => {}
                    }
                });
            }
        });
        Forwarder { port, stop }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The node dies: its listener and its connections close.
    fn kill(&self) {
        self.stop.send_replace(true);
    }
}

fn fresh_namespace(tag: &str) -> Namespace {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Namespace::new(&format!("tf-{tag}-{}-{n}", std::process::id())).expect("namespace")
}

fn options(ns: &Namespace) -> RabbitOptions {
    RabbitOptions {
        connection_name: format!("shoal-failover-{}", ns.as_str()),
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
        ..RabbitOptions::default()
    }
}

/// Removes the namespace from the broker (over a connection of its own, straight to it).
async fn cleanup(bus: &RabbitBus) {
    let queues: Vec<String> = bus.declared_queues().into_keys().collect();
    let ns = bus.namespace().clone();
    let done = async move {
        let admin = RabbitBus::connect(&broker_url(), ns).await?;
        admin.delete_queues(&queues).await?;
        admin.delete_namespace().await?;
        admin.close().await
    };
    if let Err(e) = done.await {
        eprintln!("cleaning up the test namespace failed: {e}");
    }
}

async fn recv(c: &mut dyn Consumer, what: &str) -> Delivery {
    match timeout(WITHIN, c.next()).await {
        Ok(Some(Ok(d))) => d,
        Ok(Some(Err(e))) => panic!("{what}: consumer failed: {e}"),
        Ok(None) => panic!("{what}: consumer ended"),
        Err(_) => panic!("{what}: nothing arrived within {WITHIN:?}"),
    }
}

fn msgs(tag: &str, range: std::ops::Range<usize>) -> Vec<Vec<u8>> {
    range
        .map(|i| format!("{tag}-{i:03}").into_bytes())
        .collect()
}

/// Nodes that are down are skipped: the bus connects to the first that answers, and says
/// which; errors and logs name the nodes without the password.
#[tokio::test]
async fn connects_to_the_first_node_that_answers() {
    let ns = fresh_namespace("first");
    let down = format!("127.0.0.1:{}", dead_port().await);
    let url = node_list(&[down.clone(), broker_addr()]);
    let bus = RabbitBus::connect_with(&url, ns.clone(), options(&ns))
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ for the tests (set SHOAL_TEST_AMQP): {e}"));
    assert!(
        bus.endpoint().contains(&broker_addr()),
        "{}",
        bus.endpoint()
    );
    assert!(bus.nodes().contains(&format!("{down},")), "{}", bus.nodes());
    let q = ns.results_queue();
    bus.declare_queue(&q, &QueueOptions::default())
        .await
        .unwrap();
    bus.publish(&q, msgs("n", 0..3)).await.unwrap();
    assert_eq!(bus.queue_depth(&q).await.unwrap(), 3);
    cleanup(&bus).await;
    bus.close().await.unwrap();

    // No node answers: one error naming every node, and no password.
    let secret = "hunter2-do-not-print";
    let other_down = format!("127.0.0.1:{}", dead_port().await);
    let unreachable = format!("amqp://shoal:{secret}@{down},{other_down}/%2f");
    let err = RabbitBus::connect(&unreachable, ns.clone())
        .await
        .expect_err("no node listens");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(secret), "{shown}");
    assert!(shown.contains(&format!("amqp://{down}/%2f")), "{shown}");
    assert!(
        shown.contains(&format!("amqp://{other_down}/%2f")),
        "{shown}"
    );
    // A malformed list is refused before any connection, without the value.
    let err = RabbitBus::connect(&format!("amqp://u:{secret}@h1,,h3/%2f"), ns.clone())
        .await
        .expect_err("an empty host");
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("host 2 of 3 is empty"), "{shown}");
    assert!(!shown.contains(secret), "{shown}");
}

/// The node of the bus's connection dies: the bus goes on on the next node of the list. A publish
/// made right after the loss is confirmed there; the consumer subscribes again there and gets
/// every message not acknowledged (those it held on the dead connection again).
#[tokio::test]
async fn fails_over_to_the_next_node_when_its_node_dies() {
    let ns = fresh_namespace("over");
    let first = Forwarder::start(broker_addr()).await;
    let url = node_list(&[first.addr(), broker_addr()]);
    let bus: Arc<RabbitBus> = RabbitBus::connect_with(&url, ns.clone(), options(&ns))
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ for the tests (set SHOAL_TEST_AMQP): {e}"));
    assert!(bus.endpoint().contains(&first.addr()), "{}", bus.endpoint());
    let q = ns.compile_queue(shoal_model::Step::ExecBuild, "failover");
    bus.declare_queue(&q, &QueueOptions::limited(10))
        .await
        .unwrap();
    bus.publish(&q, msgs("a", 0..50)).await.unwrap();
    let mut c = bus.consume(&q, 10).await.unwrap();
    let mut acked = BTreeMap::new();
    let mut held = Vec::new();
    for i in 0..5 {
        let d = recv(&mut *c, "before the failover").await;
        if i < 2 {
            acked.insert(String::from_utf8(d.payload.clone()).unwrap(), 1);
            d.ack().await.unwrap();
        } else {
            held.push(d);
        }
    }
    // Let the two acks reach the broker before the node dies.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t0 = Instant::now();
    first.kill();
    bus.publish(&q, msgs("b", 0..50))
        .await
        .expect("publish across the failover");
    let failover = t0.elapsed();
    assert!(
        bus.endpoint().contains(&broker_addr()),
        "on the second node now: {}",
        bus.endpoint()
    );
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut redelivered = 0;
    while acked.len() < 100 {
        assert!(
            Instant::now() < deadline,
            "only {} of 100 arrived",
            acked.len()
        );
        let d = recv(&mut *c, "after the failover").await;
        if d.delivery_count > 1 {
            redelivered += 1;
        }
        *acked
            .entry(String::from_utf8(d.payload.clone()).unwrap())
            .or_insert(0) += 1;
        d.ack().await.expect("ack after the failover");
    }
    let twice: Vec<_> = acked.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "acked twice: {twice:?}");
    assert!(
        redelivered >= 3,
        "the held messages came back: {redelivered}"
    );
    assert_eq!(bus.queue_depth(&q).await.unwrap(), 0);
    eprintln!("failed over and published in {failover:?}; {redelivered} redelivered");
    assert!(failover < Duration::from_secs(10), "{failover:?}");
    drop(c);
    cleanup(&bus).await;
    bus.close().await.unwrap();
}
