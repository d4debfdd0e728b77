//! Conformance cases for consumers at work: prefetch limits, waking waiting consumers, sharing
//! a queue, random settlement under load, and the end of consumers on `close`.

use super::*;

/// A consumer holds at most `prefetch` unsettled deliveries; settling one lets the next come.
pub async fn prefetch_limits_unsettled(bus: &dyn Bus) {
    let q = declare(bus, "prefetch", 5).await;
    publish(bus, &q, (0..5).map(|i| msg("pf", i)).collect()).await;

    let mut one = consume(bus, &q, 1).await;
    let d0 = recv(&mut *one, "prefetch 1").await;
    assert_quiet(&mut *one, "prefetch 1 holding one").await;
    // Settled elsewhere while the consumer waits at its limit: the next one comes.
    let mut waiting = Box::pin(recv(&mut *one, "after ack"));
    park(&mut waiting, "at its prefetch limit").await;
    ack(d0).await;
    let d1 = waiting.await;
    assert_eq!(text(&d1.payload), "pf-1");
    assert_quiet(&mut *one, "prefetch 1 holding one again").await;
    ack(d1).await;
    drop(one);

    // A queue of its own, so nothing the first consumer had prefetched is in the way.
    let q = declare(bus, "prefetch_two", 5).await;
    publish(bus, &q, (0..3).map(|i| msg("pf2", i)).collect()).await;
    let mut two = consume(bus, &q, 2).await;
    let a = recv(&mut *two, "prefetch 2, first").await;
    let b = recv(&mut *two, "prefetch 2, second").await;
    assert_eq!(
        (text(&a.payload), text(&b.payload)),
        ("pf2-0".into(), "pf2-1".into())
    );
    assert_quiet(&mut *two, "prefetch 2 holding two").await;
    ack(a).await;
    let c = recv(&mut *two, "prefetch 2, third").await;
    assert_eq!(text(&c.payload), "pf2-2");
    drop(b);
    let b = recv(&mut *two, "dropped one, back").await;
    assert_eq!((text(&b.payload), b.delivery_count), ("pf2-1".into(), 2));
    ack(b).await;
    ack(c).await;
    assert_quiet(&mut *two, "all settled").await;
}

/// Consumers already waiting in `next()` wake for a single publish, for a batch, and for a
/// message that comes back from a consumer that died.
pub async fn waiting_consumers_wake(bus: &dyn Bus) {
    let q = declare(bus, "wake", 5).await;
    let (mut c1, mut c2) = (consume(bus, &q, 1).await, consume(bus, &q, 1).await);

    // One at a time: each wakes a waiting consumer.
    let (mut w1, mut w2) = (
        Box::pin(recv(&mut *c1, "waiting, first")),
        Box::pin(recv(&mut *c2, "waiting, second")),
    );
    park(&mut w1, "first consumer").await;
    park(&mut w2, "second consumer").await;
    publish(bus, &q, vec![msg("wake", 0)]).await;
    publish(bus, &q, vec![msg("wake", 1)]).await;
    let (d1, d2) = tokio::join!(w1, w2);
    let mut got = [text(&d1.payload), text(&d2.payload)];
    got.sort();
    assert_eq!(got, ["wake-0", "wake-1"]);
    ack(d1).await;
    ack(d2).await;

    // A batch wakes both.
    let (mut w1, mut w2) = (
        Box::pin(recv(&mut *c1, "waiting for a batch, first")),
        Box::pin(recv(&mut *c2, "waiting for a batch, second")),
    );
    park(&mut w1, "first consumer, before the batch").await;
    park(&mut w2, "second consumer, before the batch").await;
    publish(bus, &q, (2..12).map(|i| msg("wake", i)).collect()).await;
    let (d1, d2) = tokio::join!(w1, w2);
    let mut seen = vec![text(&d1.payload), text(&d2.payload)];
    ack(d1).await;
    ack(d2).await;
    // c2 leaves (a broker takes back what it prefetched); c1 takes the rest.
    drop(c2);
    for _ in 2..10 {
        let d = recv(&mut *c1, "rest of the batch").await;
        seen.push(text(&d.payload));
        ack(d).await;
    }
    seen.sort();
    let mut want: Vec<String> = (2..12).map(|i| text(&msg("wake", i))).collect();
    want.sort();
    assert_eq!(seen, want);

    // c1 dies holding a delivery while c3 waits: c3 gets it.
    publish(bus, &q, vec![msg("wake", 12)]).await;
    let held = recv(&mut *c1, "to be orphaned").await;
    let mut c3 = consume(bus, &q, 1).await;
    let mut waiting = Box::pin(recv(&mut *c3, "waiting for an orphan"));
    park(&mut waiting, "third consumer").await;
    drop(c1);
    drop(held);
    let d = waiting.await;
    assert_eq!((text(&d.payload), d.delivery_count), ("wake-12".into(), 2));
    ack(d).await;
    assert_quiet(&mut *c3, "all acked").await;
}

/// Two consumers of one queue share its messages; with every delivery acked, each message is
/// delivered exactly once.
pub async fn competing_consumers_share(bus: &dyn Bus) {
    const N: usize = 200;
    let q = declare(bus, "compete", 5).await;
    publish(bus, &q, (0..N).map(|i| msg("cc", i)).collect()).await;
    let done = AtomicUsize::new(0);
    let take = |mut c: Box<dyn Consumer>| {
        let done = &done;
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut got = Vec::new();
            while done.load(Ordering::SeqCst) < N {
                assert!(Instant::now() < deadline, "competing consumers stalled");
                let Ok(next) = timeout(Duration::from_millis(100), c.next()).await else {
                    continue;
                };
                let d = next.expect("consumer ended").expect("consumer failed");
                assert_eq!(d.delivery_count, 1, "nothing was requeued");
                got.push(text(&d.payload));
                // Work takes a moment, so the other consumer gets its turn.
                sleep(Duration::from_millis(1)).await;
                ack(d).await;
                done.fetch_add(1, Ordering::SeqCst);
            }
            (c, got)
        }
    };
    let (c1, c2) = (consume(bus, &q, 1).await, consume(bus, &q, 1).await);
    let ((mut c1, got1), (mut c2, got2)) = tokio::join!(take(c1), take(c2));
    assert!(
        !got1.is_empty() && !got2.is_empty(),
        "not shared: {} and {}",
        got1.len(),
        got2.len()
    );
    let mut all: Vec<String> = got1.into_iter().chain(got2).collect();
    all.sort();
    let mut want: Vec<String> = (0..N).map(|i| text(&msg("cc", i))).collect();
    want.sort();
    assert_eq!(all, want, "each message exactly once");
    assert_quiet(&mut *c1, "first consumer, all acked").await;
    assert_quiet(&mut *c2, "second consumer, all acked").await;
}

/// `close` ends waiting and idle consumers and subscribers; publishing afterwards fails.
pub async fn close_ends_consumers(bus: &dyn Bus) {
    let q = declare(bus, "close", 5).await;
    let mut waiting = consume(bus, &q, 1).await;
    let mut idle = consume(bus, &q, 1).await;
    let mut sub = bus
        .subscribe(&bus.namespace().events_topic(), "#")
        .await
        .expect("subscribe");
    let mut ending = Box::pin(timeout(ARRIVES_WITHIN, waiting.next()));
    park(&mut ending, "a consumer of an empty queue").await;
    bus.close().await.expect("close");
    let ended = ending.await;
    assert!(
        matches!(ended, Ok(None)),
        "a waiting consumer ends on close"
    );
    let idle_ended = timeout(ARRIVES_WITHIN, idle.next()).await;
    assert!(matches!(idle_ended, Ok(None)), "an idle consumer ends too");
    let sub_ended = timeout(ARRIVES_WITHIN, sub.next()).await;
    assert!(matches!(sub_ended, Ok(None)), "a subscriber ends too");
    assert!(
        matches!(
            bus.publish(&q, vec![msg("late", 0)]).await,
            Err(BusError::Closed)
        ),
        "publish after close"
    );
    let topic = bus.namespace().events_topic();
    assert!(
        bus.publish_topic(&topic, "a.b", msg("late", 1))
            .await
            .is_err(),
        "publish_topic after close"
    );
}

/// 1000 messages through two consumers that ack, requeue or drop at random and settle in
/// random order: every message is acked exactly once, nothing is lost or dead-lettered.
pub async fn random_settlement_exactly_once(bus: &dyn Bus) {
    const N: usize = 1000;
    let q = declare(bus, "churn", 100).await;
    for batch in 0..10 {
        let payloads = (batch * 100..(batch + 1) * 100).map(|i| msg("churn", i));
        publish(bus, &q, payloads.collect()).await;
    }
    let acked: Mutex<HashMap<String, u32>> = Mutex::new(HashMap::new());
    let done = AtomicUsize::new(0);
    let churn = |mut c: Box<dyn Consumer>, seed: u64, prefetch: usize| {
        let (acked, done) = (&acked, &done);
        async move {
            let mut rng = Rng(seed);
            let mut held: Vec<Delivery> = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(100);
            while done.load(Ordering::SeqCst) < N {
                assert!(Instant::now() < deadline, "churn stalled");
                if held.len() < prefetch {
                    if let Ok(next) = timeout(Duration::from_millis(20), c.next()).await {
                        held.push(next.expect("consumer ended").expect("consumer failed"));
                        continue;
                    }
                }
                if held.is_empty() {
                    continue;
                }
                let d = held.swap_remove(rng.below(held.len() as u64) as usize);
                match rng.below(100) {
                    0..70 => {
                        let payload = text(&d.payload);
                        ack(d).await;
                        *acked.lock().unwrap().entry(payload).or_default() += 1;
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                    70..85 => d.requeue().await.expect("requeue"),
                    _ => drop(d),
                }
            }
            assert!(held.is_empty(), "held deliveries after all were acked");
            c
        }
    };
    let (c1, c2) = (consume(bus, &q, 8).await, consume(bus, &q, 3).await);
    let (mut c1, _c2) = tokio::join!(churn(c1, 0x9e37_79b9_7f4a_7c15, 8), churn(c2, 7, 3));
    let acked = acked.into_inner().unwrap();
    let twice: Vec<_> = acked.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "acked more than once: {twice:?}");
    let mut got: Vec<&String> = acked.keys().collect();
    got.sort();
    let mut want: Vec<String> = (0..N).map(|i| text(&msg("churn", i))).collect();
    want.sort();
    assert_eq!(got, want.iter().collect::<Vec<_>>(), "every message acked");
    assert_quiet(&mut *c1, "all acked").await;
    wait_depth(bus, &q, 0).await;
    wait_depth(bus, &bus.namespace().dead_letter_queue(), 0).await;
}
