//! What `MemoryBus` promises beyond the conformance suite: details a broker may do differently
//! (requeue to the front, the exact dead-letter reason, the subscriber buffer), settlement from
//! `Drop` without a runtime, and no lost wake-ups under real parallelism.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_bus::memory::SUBSCRIBER_BUFFER;
use shoal_bus::{Bus, BusError, Consumer, Delivery, MemoryBus, QueueOptions};
use shoal_model::queue::Namespace;
use tokio::time::timeout;

fn bus(name: &str) -> Arc<MemoryBus> {
    MemoryBus::new(Namespace::new(name).unwrap())
}

async fn queue(bus: &MemoryBus, delivery_limit: u32) -> String {
    let q = bus
        .namespace()
        .compile_queue(shoal_model::Step::ExecBuild, "a");
    bus.declare_queue(&q, &QueueOptions::limited(delivery_limit))
        .await
        .unwrap();
    q
}

async fn recv(c: &mut Box<dyn Consumer>) -> Delivery {
    timeout(Duration::from_secs(5), c.next())
        .await
        .expect("nothing arrived")
        .expect("consumer ended")
        .expect("consumer failed")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[tokio::test]
async fn requeue_goes_to_the_front() {
    let bus = bus("front");
    let q = queue(&bus, 5).await;
    bus.publish(&q, vec![b"a".to_vec(), b"b".to_vec()])
        .await
        .unwrap();
    let mut c = bus.consume(&q, 1).await.unwrap();
    let a = recv(&mut c).await;
    drop(a); // requeued synchronously, before `drop` returns
    assert_eq!(bus.queue_depth(&q).await.unwrap(), 2);
    let a = recv(&mut c).await;
    assert_eq!((a.payload.as_slice(), a.delivery_count), (&b"a"[..], 2));
}

#[tokio::test]
async fn dead_letter_reason_is_exact() {
    let bus = bus("reason");
    let q = queue(&bus, 1).await;
    bus.publish(&q, vec![b"x".to_vec()]).await.unwrap();
    let mut c = bus.consume(&q, 1).await.unwrap();
    recv(&mut c).await.requeue().await.unwrap();
    let dlq = bus.namespace().dead_letter_queue();
    assert_eq!(bus.queue_depth(&dlq).await.unwrap(), 1);
    let mut dead = bus.consume(&dlq, 1).await.unwrap();
    let d = recv(&mut dead).await;
    assert_eq!(
        d.dead_reason.as_deref(),
        Some("delivery limit 1 exceeded (queue reason.compile.exec_build.a)")
    );
    // The dead-letter queue has no limit: requeued many times, it stays.
    drop(d);
    for _ in 0..20 {
        recv(&mut dead).await.requeue().await.unwrap();
    }
    assert_eq!(recv(&mut dead).await.delivery_count, 22);
}

#[tokio::test]
async fn redeclare_keeps_the_first_options() {
    let bus = bus("redeclare");
    let q = queue(&bus, 1).await;
    queue(&bus, 10).await;
    bus.publish(&q, vec![b"x".to_vec()]).await.unwrap();
    let mut c = bus.consume(&q, 1).await.unwrap();
    drop(recv(&mut c).await);
    let dlq = bus.namespace().dead_letter_queue();
    assert_eq!(bus.queue_depth(&dlq).await.unwrap(), 1, "limit 1 kept");
}

#[tokio::test]
async fn prefetch_zero_is_unlimited() {
    let bus = bus("unlimited");
    let q = queue(&bus, 5).await;
    bus.publish(&q, (0..100u8).map(|i| vec![i]).collect())
        .await
        .unwrap();
    let mut c = bus.consume(&q, 0).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..100 {
        held.push(recv(&mut c).await);
    }
    assert_eq!(bus.queue_depth(&q).await.unwrap(), 0);
}

#[tokio::test]
async fn slow_subscriber_loses_the_oldest() {
    let bus = bus("slow");
    let topic = bus.namespace().events_topic();
    let mut sub = bus.subscribe(&topic, "#").await.unwrap();
    let extra = 6;
    for i in 0..SUBSCRIBER_BUFFER + extra {
        let payload = (i as u32).to_be_bytes().to_vec();
        bus.publish_topic(&topic, "h.a", payload).await.unwrap();
    }
    for i in extra..SUBSCRIBER_BUFFER + extra {
        let d = recv(&mut sub).await;
        assert_eq!(d.payload, (i as u32).to_be_bytes());
    }
    assert!(timeout(Duration::from_millis(50), sub.next())
        .await
        .is_err());
}

#[tokio::test]
async fn dropped_subscriber_is_unregistered() {
    let bus = bus("unsub");
    let topic = bus.namespace().events_topic();
    let sub = bus.subscribe(&topic, "#").await.unwrap();
    drop(sub);
    let mut kept = bus.subscribe(&topic, "a.*").await.unwrap();
    bus.publish_topic(&topic, "a.b", b"1".to_vec())
        .await
        .unwrap();
    assert_eq!(recv(&mut kept).await.payload, b"1");
}

#[tokio::test]
async fn settling_after_close_fails_and_drop_is_quiet() {
    let bus = bus("late");
    let q = queue(&bus, 5).await;
    bus.publish(&q, vec![b"a".to_vec(), b"b".to_vec()])
        .await
        .unwrap();
    let mut c = bus.consume(&q, 2).await.unwrap();
    let (a, b) = (recv(&mut c).await, recv(&mut c).await);
    bus.close().await.unwrap();
    bus.close().await.unwrap();
    assert!(matches!(a.ack().await, Err(BusError::Closed)));
    drop(b);
    assert!(matches!(bus.queue_depth(&q).await, Err(BusError::Closed)));
    assert!(bus.consume(&q, 1).await.is_err());
    assert!(bus.subscribe("x", "#").await.is_err());
}

/// A delivery dropped where there is no runtime is requeued all the same, before `drop` returns.
#[test]
fn drop_outside_a_runtime_requeues() {
    let bus = bus("nort");
    let (q, d) = runtime().block_on(async {
        let q = queue(&bus, 5).await;
        bus.publish(&q, vec![b"a".to_vec()]).await.unwrap();
        let mut c = bus.consume(&q, 1).await.unwrap();
        (q, recv(&mut c).await)
    });
    drop(d);
    runtime().block_on(async {
        assert_eq!(bus.queue_depth(&q).await.unwrap(), 1);
        let mut c = bus.consume(&q, 1).await.unwrap();
        assert_eq!(recv(&mut c).await.delivery_count, 2);
    });
}

/// Consumers on their own threads and runtimes, a publisher on another, real parallelism: every
/// message is acked exactly once and nobody sleeps through a message.
#[test]
fn parallel_consumers_lose_nothing() {
    const N: u32 = 100_000;
    const CONSUMERS: u32 = 4;
    let bus = bus("parallel");
    let q = runtime().block_on(queue(&bus, 1_000));
    let start = Instant::now();
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|k| {
            let (bus, q) = (bus.clone(), q.clone());
            std::thread::spawn(move || {
                runtime().block_on(async move {
                    let mut c = bus.consume(&q, 1 + k as u16 * 4).await.unwrap();
                    let mut acked = Vec::new();
                    while let Ok(Some(d)) = timeout(Duration::from_millis(500), c.next()).await {
                        let d = d.unwrap();
                        // Every 7th first delivery goes back once.
                        let id = u32::from_be_bytes(d.payload[..4].try_into().unwrap());
                        if id % 7 == 0 && d.delivery_count == 1 {
                            drop(d);
                            continue;
                        }
                        acked.push(id);
                        d.ack().await.unwrap();
                    }
                    acked
                })
            })
        })
        .collect();
    let publisher = {
        let (bus, q) = (bus.clone(), q.clone());
        std::thread::spawn(move || {
            runtime().block_on(async move {
                for chunk in (0..N).collect::<Vec<_>>().chunks(100) {
                    for &i in chunk.iter().take(3) {
                        bus.publish(&q, vec![i.to_be_bytes().to_vec()])
                            .await
                            .unwrap();
                    }
                    let rest = chunk[3..].iter().map(|i| i.to_be_bytes().to_vec());
                    bus.publish(&q, rest.collect()).await.unwrap();
                }
            })
        })
    };
    publisher.join().unwrap();
    let mut seen = HashSet::new();
    let mut per_consumer = Vec::new();
    for c in consumers {
        let acked = c.join().unwrap();
        per_consumer.push(acked.len());
        for id in acked {
            assert!(seen.insert(id), "message {id} acked twice");
        }
    }
    assert_eq!(seen.len(), N as usize, "per consumer {per_consumer:?}");
    eprintln!(
        "{N} messages through {CONSUMERS} consumers in {:?} ({per_consumer:?})",
        start.elapsed()
    );
}
