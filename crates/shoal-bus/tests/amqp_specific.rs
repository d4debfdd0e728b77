//! What `RabbitBus` does beyond the conformance suite: surviving a dropped connection, the
//! broker's own dead-lettering past the delivery limit, the queue arguments it relies on, and
//! keeping credentials out of errors.
//!
//! The broker is `SHOAL_TEST_AMQP` (default `amqp://guest:guest@127.0.0.1:5672/%2f`). Tests that
//! drop the connection on the broker's side use `rabbitmqctl close_connection` on this test's
//! own connection only (found by its connection name); without `rabbitmqctl` they close it from
//! the client's side instead.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shoal_bus::{Bus, BusError, Consumer, Delivery, QueueOptions, RabbitBus, RabbitOptions};
use shoal_model::queue::Namespace;
use tokio::time::{sleep, timeout, Instant};

const WITHIN: Duration = Duration::from_secs(20);

fn broker_url() -> String {
    std::env::var("SHOAL_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_string())
}

fn fresh_namespace(tag: &str) -> Namespace {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Namespace::new(&format!("ts-{tag}-{}-{n}", std::process::id())).expect("namespace")
}

fn options(ns: &Namespace) -> RabbitOptions {
    RabbitOptions {
        connection_name: format!("shoal-test-{}", ns.as_str()),
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
        ..RabbitOptions::default()
    }
}

/// A bus whose namespace is deleted from the broker when it is dropped, passed or failed (over a
/// connection of its own: deleting a queue while a consumer of it is being cancelled on the same
/// channel is a race best not run).
struct Scratch(Arc<RabbitBus>);

impl Deref for Scratch {
    type Target = Arc<RabbitBus>;

    fn deref(&self) -> &Arc<RabbitBus> {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let queues: Vec<String> = self.0.declared_queues().into_keys().collect();
        let ns = self.0.namespace().clone();
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let bus = RabbitBus::connect(&broker_url(), ns).await?;
                bus.delete_queues(&queues).await?;
                bus.delete_namespace().await?;
                bus.close().await
            })
        });
        if let Ok(Err(e)) = cleanup.join() {
            eprintln!("cleaning up the test namespace failed: {e}");
        }
    }
}

async fn connect(ns: &Namespace) -> Scratch {
    let bus = RabbitBus::connect_with(&broker_url(), ns.clone(), options(ns))
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ for the tests (set SHOAL_TEST_AMQP): {e}"));
    Scratch(bus)
}

async fn recv(c: &mut dyn Consumer, what: &str) -> Delivery {
    match timeout(WITHIN, c.next()).await {
        Ok(Some(Ok(d))) => d,
        Ok(Some(Err(e))) => panic!("{what}: consumer failed: {e}"),
        Ok(None) => panic!("{what}: consumer ended"),
        Err(_) => panic!("{what}: nothing arrived within {WITHIN:?}"),
    }
}

fn text(d: &Delivery) -> String {
    String::from_utf8_lossy(&d.payload).into_owned()
}

fn msgs(tag: &str, range: std::ops::Range<usize>) -> Vec<Vec<u8>> {
    range
        .map(|i| format!("{tag}-{i:03}").into_bytes())
        .collect()
}

fn rabbitmqctl(args: &[&str]) -> Option<String> {
    let out = Command::new("rabbitmqctl").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Closes this bus's connection on the broker's side (`rabbitmqctl close_connection`, as an
/// operator or a broker shutdown would), or from the client's side without `rabbitmqctl`.
async fn drop_connection(bus: &RabbitBus, connection_name: &str) {
    let name = connection_name.to_string();
    let closed = tokio::task::spawn_blocking(move || {
        let list = rabbitmqctl(&[
            "list_connections",
            "-q",
            "--no-table-headers",
            "pid",
            "client_properties",
        ])?;
        let property = format!("{{\"connection_name\",\"{name}\"}}");
        let pid = list
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .find(|(_, properties)| properties.contains(&property))?
            .0
            .to_string();
        rabbitmqctl(&["close_connection", &pid, "shoal test: connection dropped"])
    })
    .await
    .expect("rabbitmqctl task");
    if closed.is_none() {
        eprintln!("rabbitmqctl unavailable: closing the connection from the client side");
        bus.drop_connection_for_test().await;
    }
}

/// A connection closed under the bus: nothing is lost, the consumer resumes on its own,
/// deliveries from the dead channel fail to settle without panicking, and publishing goes on.
#[tokio::test]
async fn consumers_and_publishers_survive_a_dropped_connection() {
    let ns = fresh_namespace("reconnect");
    let bus = connect(&ns).await;
    let q = ns.compile_queue(shoal_model::Step::ExecBuild, "reconnect");
    bus.declare_queue(&q, &QueueOptions::limited(10))
        .await
        .unwrap();
    bus.publish(&q, msgs("a", 0..50)).await.unwrap();

    let mut c = bus.consume(&q, 10).await.unwrap();
    let mut acked = BTreeMap::new();
    let mut held = Vec::new();
    for i in 0..5 {
        let d = recv(&mut *c, "before the drop").await;
        if i < 2 {
            acked.insert(text(&d), 1);
            d.ack().await.expect("ack before the drop");
        } else {
            held.push(d);
        }
    }
    // The two acks went out long before (rabbitmqctl takes a second to start).
    drop_connection(&bus, &options(&ns).connection_name).await;

    // Publishing right away: retried on the new connection.
    bus.publish(&q, msgs("b", 0..50))
        .await
        .expect("publish across the reconnection");

    // The dead channel's deliveries: an ack, a requeue and a drop are no-ops (the broker
    // delivers them again); nothing panics, and nothing fails its caller.
    let (first, second, third) = {
        let mut it = held.drain(..);
        (it.next().unwrap(), it.next().unwrap(), it.next().unwrap())
    };
    let lost = text(&first);
    first.ack().await.expect("ack on a lost channel: a no-op");
    second.requeue().await.expect("requeue on a lost channel");
    drop(third);

    // The consumer resumes and gets every message not acked, the held ones again.
    let mut redelivered_counts = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.len() < 100 {
        assert!(
            Instant::now() < deadline,
            "only {} of 100 arrived",
            acked.len()
        );
        let d = recv(&mut *c, "after the drop").await;
        let t = text(&d);
        if t == lost || d.delivery_count > 1 {
            redelivered_counts.push((t.clone(), d.delivery_count));
        }
        *acked.entry(t).or_insert(0) += 1;
        d.ack().await.expect("ack after the drop");
    }
    let mut want: Vec<String> = msgs("a", 0..50)
        .into_iter()
        .chain(msgs("b", 0..50))
        .map(|m| String::from_utf8(m).unwrap())
        .collect();
    want.sort();
    assert_eq!(
        acked.keys().cloned().collect::<Vec<_>>(),
        want,
        "nothing lost"
    );
    let twice: Vec<_> = acked.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "acked twice: {twice:?}");
    assert!(
        redelivered_counts.iter().any(|(t, _)| *t == lost),
        "the message held on the lost channel came back: {redelivered_counts:?}"
    );
    eprintln!("redelivered after the drop (payload, delivery_count): {redelivered_counts:?}");
    assert_eq!(bus.queue_depth(&q).await.unwrap(), 0);
}

/// A publish in flight while the connection drops completes on the next connection.
#[tokio::test]
async fn publish_in_flight_completes_after_reconnecting() {
    let ns = fresh_namespace("inflight");
    let bus = connect(&ns).await;
    let q = ns.results_queue();
    bus.declare_queue(&q, &QueueOptions::default())
        .await
        .unwrap();
    let publishing = {
        let (bus, q) = (bus.clone(), q.clone());
        tokio::spawn(async move {
            for batch in 0..20 {
                let tag = format!("p{batch:02}");
                bus.publish(&q, msgs(&tag, 0..100)).await?;
            }
            Ok::<_, BusError>(())
        })
    };
    sleep(Duration::from_millis(30)).await;
    bus.drop_connection_for_test().await;
    publishing.await.unwrap().expect("every batch confirmed");

    // At least once: every message is there (one may be there twice, sent again after a
    // confirm that was lost with the connection).
    let depth = bus.queue_depth(&q).await.unwrap();
    assert!(depth >= 2000, "depth {depth}");
    let mut c = bus.consume(&q, 500).await.unwrap();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..depth {
        let d = recv(&mut *c, "published across the drop").await;
        seen.insert(text(&d));
        d.ack().await.unwrap();
    }
    assert_eq!(seen.len(), 2000, "every message arrived");
    drop(c);
}

/// Past the delivery limit the broker itself dead-letters the message (quorum queue
/// `x-delivery-limit`); a bus that never declared the queue reads the reason with the limit, from
/// the header the publisher stamped.
#[tokio::test]
async fn broker_dead_letters_past_the_limit_with_a_readable_reason() {
    let ns = fresh_namespace("limit");
    let bus = connect(&ns).await;
    let q = ns.eval_queue(shoal_model::Step::ExecRun, "limit", 110);
    bus.declare_queue(&q, &QueueOptions::limited(2))
        .await
        .unwrap();
    bus.publish(&q, vec![b"poison".to_vec()]).await.unwrap();
    let mut c = bus.consume(&q, 1).await.unwrap();
    for count in 1..=2 {
        let d = recv(&mut *c, "within the limit").await;
        assert_eq!(d.delivery_count, count);
        d.requeue().await.unwrap();
    }
    assert!(
        timeout(Duration::from_millis(500), c.next()).await.is_err(),
        "nothing past the limit"
    );
    drop(c);

    let reader = RabbitBus::connect(&broker_url(), ns.clone()).await.unwrap();
    let mut dead = reader.consume(&ns.dead_letter_queue(), 1).await.unwrap();
    let d = recv(&mut *dead, "dead letter").await;
    assert_eq!(text(&d), "poison");
    assert_eq!(d.delivery_count, 1);
    assert_eq!(
        d.dead_reason.as_deref(),
        Some(format!("delivery limit 2 exceeded (queue {q})").as_str())
    );
    d.ack().await.unwrap();
    reader.close().await.unwrap();
}

/// The queues are what the wire contract says: durable quorum queues with the limit and the
/// dead-letter settings set explicitly.
#[tokio::test]
async fn work_queues_are_durable_quorum_queues_with_explicit_dead_lettering() {
    let ns = fresh_namespace("args");
    let bus = connect(&ns).await;
    let q = ns.compile_queue(shoal_model::Step::ExecBuild, "args");
    bus.declare_queue(&q, &QueueOptions::limited(5))
        .await
        .unwrap();
    let listing = tokio::task::spawn_blocking(|| {
        rabbitmqctl(&[
            "list_queues",
            "-q",
            "--no-table-headers",
            "name",
            "type",
            "durable",
            "arguments",
        ])
    })
    .await
    .unwrap();
    match listing {
        None => eprintln!("rabbitmqctl unavailable: queue arguments not checked"),
        Some(listing) => {
            let line = listing
                .lines()
                .find(|l| l.starts_with(&format!("{q}\t")))
                .unwrap_or_else(|| panic!("{q} not listed in:\n{listing}"));
            for want in [
                "quorum",
                "true",
                "x-delivery-limit",
                "x-dead-letter-exchange",
                &format!("{}.dlx", ns.as_str()),
                "at-least-once",
                "reject-publish",
            ] {
                assert!(line.contains(want), "`{want}` missing from: {line}");
            }
            assert!(
                line.contains("{\"x-delivery-limit\",4}"),
                "limit 5 deliveries = 4 returns: {line}"
            );
            let dlq = listing
                .lines()
                .find(|l| l.starts_with(&format!("{}\t", ns.dead_letter_queue())))
                .expect("dead-letter queue listed");
            assert!(dlq.contains("quorum"), "{dlq}");
        }
    }
}

/// Publishing to a queue nobody declared fails with `NoSuchQueue` and leaves the bus working.
#[tokio::test]
async fn publish_to_an_undeclared_queue_fails_and_the_bus_goes_on() {
    let ns = fresh_namespace("undeclared");
    let bus = connect(&ns).await;
    let missing = ns.compile_queue(shoal_model::Step::ExecBuild, "missing");
    for _ in 0..2 {
        match bus.publish(&missing, msgs("x", 0..3)).await {
            Err(BusError::NoSuchQueue(name)) => assert_eq!(name, missing),
            other => panic!("publish to an undeclared queue: {other:?}"),
        }
    }
    let q = ns.results_queue();
    bus.declare_queue(&q, &QueueOptions::default())
        .await
        .unwrap();
    bus.publish(&q, msgs("y", 0..3))
        .await
        .expect("publish after the failure");
    assert_eq!(bus.queue_depth(&q).await.unwrap(), 3);
}

/// The URL's password appears in no error and no debug output.
#[tokio::test]
async fn credentials_stay_out_of_errors_and_logs() {
    let ns = fresh_namespace("secret");
    let secret = "hunter2-do-not-print";
    let unreachable = format!("amqp://shoal:{secret}@127.0.0.1:1/%2f");
    let err = RabbitBus::connect(&unreachable, ns.clone())
        .await
        .expect_err("nothing listens on port 1");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(secret), "{shown}");
    assert!(shown.contains("amqp://127.0.0.1:1/%2f"), "{shown}");

    let wrong_password = broker_url().replacen("guest:guest", &format!("guest:{secret}"), 1);
    if wrong_password != broker_url() {
        let err = RabbitBus::connect(&wrong_password, ns.clone())
            .await
            .expect_err("wrong password");
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(secret), "{shown}");
    }

    let err = RabbitBus::connect(&format!("amqp://u:{secret}@host:notaport/"), ns.clone())
        .await
        .expect_err("malformed URL");
    assert!(!format!("{err} {err:?}").contains(secret), "{err:?}");

    let bus = connect(&ns).await;
    let shown = format!("{:?} {}", *bus, bus.endpoint());
    assert!(!shown.contains("guest:guest"), "{shown}");
}

/// The bus works on a current-thread runtime inside a `LocalSet`, as in actix's `System`.
#[test]
fn runs_on_a_current_thread_runtime_with_a_local_set() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let ns = fresh_namespace("local");
        let bus = connect(&ns).await;
        let q = ns.results_queue();
        bus.declare_queue(&q, &QueueOptions::default())
            .await
            .unwrap();
        let mut c = bus.consume(&q, 4).await.unwrap();
        let sender = {
            let (bus, q) = (bus.clone(), q.clone());
            tokio::task::spawn_local(async move { bus.publish(&q, msgs("l", 0..10)).await })
        };
        sender.await.unwrap().unwrap();
        for _ in 0..10 {
            recv(&mut *c, "local").await.ack().await.unwrap();
        }
        // Dropped unsettled at the end: requeued from `Drop` on this runtime.
        bus.publish(&q, msgs("m", 0..1)).await.unwrap();
        drop(recv(&mut *c, "to drop").await);
        let d = recv(&mut *c, "dropped, back").await;
        assert_eq!(d.delivery_count, 2);
        d.ack().await.unwrap();
        drop(c);
    });
}

/// The broker refuses a message past the decoder's limit (`max_message_size` =
/// `MAX_MESSAGE_BYTES`, 4 MiB; `scripts/services-up`, `deploy/rabbitmq/rabbitmq.conf`): a
/// 100 MB payload fails to publish with the broker's reason and never reaches a consumer, and
/// the bus goes on. Under RabbitMQ's default of 128 MiB the broker would take it.
#[tokio::test]
async fn the_broker_refuses_a_message_past_the_decoders_limit() {
    let ns = fresh_namespace("size");
    let bus = connect(&ns).await;
    let q = ns.results_queue();
    bus.declare_queue(&q, &QueueOptions::default())
        .await
        .unwrap();
    let mut c = bus.consume(&q, 1).await.unwrap();
    let huge = vec![0x5a; 100 * 1000 * 1000];
    let started = Instant::now();
    let err = timeout(Duration::from_secs(60), bus.publish(&q, vec![huge]))
        .await
        .expect("the publish ends (no retrying a refusal)")
        .expect_err("a 100 MB message is refused by the broker");
    let shown = err.to_string();
    eprintln!("refused after {:?}: {shown}", started.elapsed());
    assert!(
        shown.contains("max size")
            && shown.contains(&shoal_model::envelope::MAX_MESSAGE_BYTES.to_string()),
        "the broker's limit is the decoder's: {shown}"
    );
    assert!(
        timeout(Duration::from_secs(2), c.next()).await.is_err(),
        "nothing reached the consumer"
    );
    // Right at the limit it goes through, and the bus goes on after the refusal.
    let edge = vec![0xa5; shoal_model::envelope::MAX_MESSAGE_BYTES];
    bus.publish(&q, vec![edge]).await.expect("4 MiB is allowed");
    let d = recv(&mut *c, "the message at the limit").await;
    assert_eq!(d.payload.len(), shoal_model::envelope::MAX_MESSAGE_BYTES);
    d.ack().await.unwrap();
    drop(c);
}
