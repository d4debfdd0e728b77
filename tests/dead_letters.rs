//! The dead-letter queue is bounded by a broker policy, and `shoal dead-letters` says how full
//! it is. On the real RabbitMQ (SHOAL_TEST_AMQP, on vhost `/`) with `rabbitmqctl` to set a
//! small bound for this test's own namespace, as `scripts/services-up` sets the real one.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::cluster::{test_url, write_key_file};
use shoal_bus::{Bus, QueueOptions, RabbitBus};
use shoal_model::queue::Namespace;

fn rabbitmqctl(args: &[&str]) -> Result<String, String> {
    let out = Command::new("rabbitmqctl")
        .env("ERL_EPMD_ADDRESS", "127.0.0.1")
        .args(args)
        .output()
        .map_err(|e| format!("rabbitmqctl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// This test's policy and namespace, removed when it ends, passed or failed.
struct Scratch {
    policy: String,
    amqp: String,
    ns: Namespace,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = rabbitmqctl(&["clear_policy", "-p", "/", &self.policy]);
        let (amqp, ns) = (self.amqp.clone(), self.ns.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let bus = RabbitBus::connect(&amqp, ns.clone()).await?;
                bus.delete_queues(&[ns.results_queue(), ns.dead_letter_queue()])
                    .await?;
                bus.delete_namespace().await?;
                bus.close().await
            })
        })
        .join();
    }
}

fn set_bound(policy: &str, ns: &Namespace, definition: &str) {
    let pattern = format!("^{}\\.dead$", ns.as_str().replace('.', "\\."));
    rabbitmqctl(&[
        "set_policy",
        "-p",
        "/",
        "--apply-to",
        "queues",
        policy,
        &pattern,
        definition,
    ])
    .unwrap_or_else(|e| panic!("rabbitmqctl set_policy (needs root and a local broker): {e}"));
}

/// `shoal dead-letters --json` against the test's namespace, told the test's bound.
fn report(dir: &std::path::Path, amqp: &str, ns: &Namespace, max_length: u64) -> serde_json::Value {
    let out = common::shoal(dir)
        .env("SHOAL_CONFIG", "/dev/null")
        .env("SHOAL_BROKER", amqp)
        .env("SHOAL_NAMESPACE", ns.as_str())
        .env("SHOAL_HMAC_KEY_FILE", dir.join("hmac.key"))
        .env("SHOAL_DEAD_MAX_LENGTH", max_length.to_string())
        .env("SHOAL_DEAD_MAX_AGE_S", "3600")
        .args(["dead-letters", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Polls the dead queue's depth until it has been `want` for a moment, asserting it never
/// goes past `max` meanwhile.
async fn settle_at(bus: &RabbitBus, ns: &Namespace, want: u64, max: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut depth;
    loop {
        depth = bus.queue_depth(&ns.dead_letter_queue()).await.unwrap();
        assert!(
            depth <= max,
            "{depth} dead letters, past the bound of {max}"
        );
        if depth == want || Instant::now() > deadline {
            return depth;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_dead_letter_queue_stays_within_its_bound_and_the_report_says_so() {
    let dir = tempfile::tempdir().unwrap();
    write_key_file(&dir.path().join("hmac.key"));
    let amqp = test_url("SHOAL_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let ns = Namespace::new(&format!("ts-deadbound-{}", std::process::id())).unwrap();
    let scratch = Scratch {
        policy: format!("{}-dead-bound", ns.as_str()),
        amqp: amqp.clone(),
        ns: ns.clone(),
    };
    // At most 5, the oldest dropped: as services-up's policy, smaller.
    set_bound(
        &scratch.policy,
        &ns,
        r#"{"max-length":5,"overflow":"drop-head"}"#,
    );
    let bus = RabbitBus::connect(&amqp, ns.clone()).await.unwrap();
    let q = ns.results_queue();
    bus.declare_queue(&q, &QueueOptions::default())
        .await
        .unwrap();

    // Nothing yet.
    let empty = report(dir.path(), &amqp, &ns, 5);
    assert_eq!(empty["held"], 0, "{empty}");
    assert_eq!(empty["dropping"], false, "{empty}");

    // 20 messages dead-lettered by a consumer, with their reasons, as a worker would.
    let sent: Vec<Vec<u8>> = (0..20)
        .map(|i| format!("poison-{i:02}").into_bytes())
        .collect();
    bus.publish(&q, sent).await.unwrap();
    let mut c = bus.consume(&q, 20).await.unwrap();
    for _ in 0..20 {
        let d = tokio::time::timeout(Duration::from_secs(20), c.next())
            .await
            .expect("a message")
            .expect("not ended")
            .unwrap();
        d.dead_letter("test: undecodable").await.unwrap();
    }
    drop(c);
    assert_eq!(settle_at(&bus, &ns, 5, 5).await, 5, "the bound holds 5");

    // The 5 kept are the newest: the oldest 15 were dropped.
    let mut dead = bus.consume(&ns.dead_letter_queue(), 5).await.unwrap();
    let mut kept = Vec::new();
    for _ in 0..5 {
        let d = tokio::time::timeout(Duration::from_secs(20), dead.next())
            .await
            .expect("a dead letter")
            .expect("not ended")
            .unwrap();
        assert_eq!(d.dead_reason.as_deref(), Some("test: undecodable"));
        kept.push(String::from_utf8_lossy(&d.payload).into_owned());
        d.requeue().await.unwrap();
    }
    drop(dead);
    kept.sort();
    assert_eq!(
        kept,
        (15..20)
            .map(|i| format!("poison-{i:02}"))
            .collect::<Vec<_>>()
    );
    settle_at(&bus, &ns, 5, 5).await;

    let full = report(dir.path(), &amqp, &ns, 5);
    assert_eq!(full["held"], 5, "{full}");
    assert_eq!(full["max_length"], 5, "{full}");
    assert_eq!(full["dropping"], true, "{full}");
    let text = common::shoal(dir.path())
        .env("SHOAL_CONFIG", "/dev/null")
        .env("SHOAL_BROKER", &amqp)
        .env("SHOAL_NAMESPACE", ns.as_str())
        .env("SHOAL_HMAC_KEY_FILE", dir.path().join("hmac.key"))
        .env("SHOAL_DEAD_MAX_LENGTH", "5")
        .arg("dead-letters")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains(&format!("{}: 5 dead letters", ns.dead_letter_queue())),
        "{text}"
    );
    assert!(text.contains("full: the broker drops the oldest"), "{text}");

    // The age bound: with a TTL of one second, a dead letter goes on its own. (A quorum queue
    // expires messages at its head, so the queue is emptied first: messages queued before the
    // policy had a TTL stay, and hold back those behind them.)
    let mut dead = bus.consume(&ns.dead_letter_queue(), 5).await.unwrap();
    for _ in 0..5 {
        let d = tokio::time::timeout(Duration::from_secs(20), dead.next())
            .await
            .expect("a dead letter")
            .expect("not ended")
            .unwrap();
        d.ack().await.unwrap();
    }
    drop(dead);
    settle_at(&bus, &ns, 0, 5).await;
    set_bound(
        &scratch.policy,
        &ns,
        r#"{"max-length":5,"overflow":"drop-head","message-ttl":1000}"#,
    );
    let bus2 = RabbitBus::connect(&amqp, ns.clone()).await.unwrap();
    let mut c = {
        bus2.publish(&q, vec![b"late".to_vec()]).await.unwrap();
        bus2.consume(&q, 1).await.unwrap()
    };
    let d = tokio::time::timeout(Duration::from_secs(20), c.next())
        .await
        .expect("a message")
        .expect("not ended")
        .unwrap();
    d.dead_letter("test: late").await.unwrap();
    drop(c);
    let started = Instant::now();
    assert_eq!(
        settle_at(&bus2, &ns, 1, 5).await,
        1,
        "the late dead letter arrived"
    );
    let left = settle_at(&bus2, &ns, 0, 5).await;
    eprintln!(
        "with a TTL of 1 s: {left} dead letters after {:?}",
        started.elapsed()
    );
    assert_eq!(left, 0, "dead letters older than the TTL are dropped");
    bus2.close().await.unwrap();
    bus.close().await.unwrap();
    drop(scratch);
}
