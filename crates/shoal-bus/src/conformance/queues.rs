//! Conformance cases for one queue and its settlements: order, ack, requeue, redelivery of what
//! a failed consumer held, the delivery limit and dead letters, declaration and depth.

use super::*;

/// Messages come out in the order they went in, first delivery counted 1, and once all are
/// acked the queue is empty.
pub async fn publish_then_consume_in_order(bus: &dyn Bus) {
    let q = declare(bus, "order", 5).await;
    let sent: Vec<Vec<u8>> = (0..20).map(|i| msg("order", i)).collect();
    publish(bus, &q, sent[..10].to_vec()).await;
    for m in &sent[10..] {
        publish(bus, &q, vec![m.clone()]).await;
    }
    let mut c = consume(bus, &q, 50).await;
    for (i, m) in sent.iter().enumerate() {
        let d = recv(&mut *c, "in order").await;
        assert_eq!(text(&d.payload), text(m), "message {i} out of order");
        assert_eq!(d.delivery_count, 1, "first delivery");
        assert_eq!(d.dead_reason, None);
        ack(d).await;
    }
    assert_quiet(&mut *c, "all acked").await;
    wait_depth(bus, &q, 0).await;
}

/// An acked message is gone: a new consumer does not see it again.
pub async fn ack_removes(bus: &dyn Bus) {
    let q = declare(bus, "ack", 5).await;
    publish(bus, &q, (0..3).map(|i| msg("ack", i)).collect()).await;
    let mut c = consume(bus, &q, 10).await;
    for _ in 0..3 {
        ack(recv(&mut *c, "first consumer").await).await;
    }
    drop(c);
    let mut c = consume(bus, &q, 10).await;
    assert_quiet(&mut *c, "acked messages").await;
    wait_depth(bus, &q, 0).await;
}

/// A requeued message is delivered again, counted 2, then 3.
pub async fn requeue_redelivers_with_count_two(bus: &dyn Bus) {
    let q = declare(bus, "requeue", 5).await;
    publish(bus, &q, vec![msg("requeue", 0)]).await;
    let mut c = consume(bus, &q, 1).await;
    let d = recv(&mut *c, "first delivery").await;
    assert_eq!(d.delivery_count, 1);
    d.requeue().await.expect("requeue");
    let d = recv(&mut *c, "after requeue").await;
    assert_eq!(text(&d.payload), "requeue-0");
    assert_eq!(d.delivery_count, 2, "second delivery");
    d.requeue().await.expect("requeue");
    let d = recv(&mut *c, "after second requeue").await;
    assert_eq!(d.delivery_count, 3, "third delivery");
    ack(d).await;
    assert_quiet(&mut *c, "acked").await;
}

/// A delivery dropped unsettled (its consumer failed) comes back.
pub async fn dropped_delivery_is_redelivered(bus: &dyn Bus) {
    let q = declare(bus, "dropped", 5).await;
    publish(bus, &q, vec![msg("dropped", 0), msg("dropped", 1)]).await;
    let mut c = consume(bus, &q, 1).await;
    let d = recv(&mut *c, "first delivery").await;
    assert_eq!(text(&d.payload), "dropped-0");
    drop(d);
    let mut seen = Vec::new();
    for _ in 0..2 {
        let d = recv(&mut *c, "after drop").await;
        seen.push((text(&d.payload), d.delivery_count));
        ack(d).await;
    }
    seen.sort();
    assert_eq!(
        seen,
        [("dropped-0".to_string(), 2), ("dropped-1".to_string(), 1)]
    );
    assert_quiet(&mut *c, "acked").await;
}

/// A consumer that dies holding deliveries: they go to another consumer, acked ones do not.
pub async fn dropped_consumer_returns_unsettled(bus: &dyn Bus) {
    let q = declare(bus, "dead_consumer", 5).await;
    publish(bus, &q, (0..3).map(|i| msg("dc", i)).collect()).await;
    let mut c1 = consume(bus, &q, 10).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(recv(&mut *c1, "first consumer").await);
    }
    ack(held.remove(0)).await;
    // The consumer dies first, then what it held.
    drop(c1);
    drop(held);
    let mut c2 = consume(bus, &q, 10).await;
    let mut back = Vec::new();
    for _ in 0..2 {
        let d = recv(&mut *c2, "second consumer").await;
        back.push((text(&d.payload), d.delivery_count));
        ack(d).await;
    }
    back.sort();
    assert_eq!(back, [("dc-1".to_string(), 2), ("dc-2".to_string(), 2)]);
    assert_quiet(&mut *c2, "nothing else").await;
    wait_depth(bus, &q, 0).await;
}

/// Past the delivery limit a message goes to the dead-letter queue, with a reason naming the
/// limit, however its deliveries ended (requeued or dropped).
pub async fn delivery_limit_dead_letters(bus: &dyn Bus) {
    let q = declare(bus, "limit", 3).await;
    publish(bus, &q, vec![msg("doomed", 0)]).await;
    let mut c = consume(bus, &q, 1).await;
    for count in 1..=3 {
        let d = recv(&mut *c, "within the limit").await;
        assert_eq!(d.delivery_count, count);
        if count == 2 {
            drop(d);
        } else {
            d.requeue().await.expect("requeue");
        }
    }
    assert_quiet(&mut *c, "past the limit").await;
    wait_depth(bus, &q, 0).await;

    let mut dead = consume(bus, &bus.namespace().dead_letter_queue(), 10).await;
    let d = recv(&mut *dead, "dead-letter queue").await;
    assert_eq!(text(&d.payload), "doomed-0");
    assert_eq!(
        d.delivery_count, 1,
        "first delivery from the dead-letter queue"
    );
    let reason = d.dead_reason.clone().expect("a dead letter has a reason");
    assert!(reason.contains("delivery limit 3"), "reason `{reason}`");
    assert!(reason.contains(&q), "reason `{reason}` names the queue");
    ack(d).await;
    assert_quiet(&mut *dead, "one dead letter").await;
}

/// `dead_letter(reason)` moves the message, reason attached; requeued from the dead-letter
/// queue it keeps the reason.
pub async fn explicit_dead_letter_carries_reason(bus: &dyn Bus) {
    let q = declare(bus, "explicit", 5).await;
    publish(bus, &q, vec![msg("poison", 0), msg("fine", 0)]).await;
    let mut c = consume(bus, &q, 1).await;
    let d = recv(&mut *c, "poison").await;
    assert_eq!(text(&d.payload), "poison-0");
    d.dead_letter("undecodable: envelope version 9")
        .await
        .expect("dead_letter");
    let d = recv(&mut *c, "fine").await;
    assert_eq!(text(&d.payload), "fine-0");
    ack(d).await;
    assert_quiet(&mut *c, "original queue").await;

    let dlq = bus.namespace().dead_letter_queue();
    let mut dead = consume(bus, &dlq, 1).await;
    let d = recv(&mut *dead, "dead letter").await;
    assert_eq!(text(&d.payload), "poison-0");
    let reason = d.dead_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("undecodable: envelope version 9"),
        "reason `{reason}`"
    );
    d.requeue().await.expect("requeue a dead letter");
    let d = recv(&mut *dead, "requeued dead letter").await;
    assert_eq!(text(&d.payload), "poison-0");
    let again = d.dead_reason.clone().unwrap_or_default();
    assert!(again.contains("envelope version 9"), "reason `{again}`");
    ack(d).await;
    assert_quiet(&mut *dead, "dead letters").await;
    wait_depth(bus, &dlq, 0).await;
}

/// Using a queue nobody declared is an error; the dead-letter queue always exists.
pub async fn undeclared_queue_errors(bus: &dyn Bus) {
    let q = bus
        .namespace()
        .compile_queue(shoal_model::Step::ExecBuild, "never_declared");
    match bus.publish(&q, vec![msg("lost", 0)]).await {
        Err(BusError::NoSuchQueue(name)) => assert_eq!(name, q),
        other => panic!("publish to an undeclared queue: {other:?}"),
    }
    assert!(bus.consume(&q, 1).await.is_err(), "consume undeclared");
    assert!(bus.queue_depth(&q).await.is_err(), "depth of undeclared");

    let dlq = bus.namespace().dead_letter_queue();
    assert_eq!(bus.queue_depth(&dlq).await.expect("dead-letter queue"), 0);
    let mut dead = consume(bus, &dlq, 1).await;
    assert_quiet(&mut *dead, "fresh dead-letter queue").await;
}

/// Declaring again changes nothing: the messages waiting stay.
pub async fn declare_is_idempotent(bus: &dyn Bus) {
    let q = declare(bus, "idem", 5).await;
    publish(bus, &q, vec![msg("idem", 0), msg("idem", 1)]).await;
    assert_eq!(declare(bus, "idem", 5).await, q);
    let dlq = bus.namespace().dead_letter_queue();
    bus.declare_queue(&dlq, &QueueOptions::default())
        .await
        .expect("declaring the dead-letter queue");
    wait_depth(bus, &q, 2).await;
    let mut c = consume(bus, &q, 10).await;
    for i in 0..2 {
        let d = recv(&mut *c, "after redeclare").await;
        assert_eq!(text(&d.payload), text(&msg("idem", i)));
        ack(d).await;
    }
}

/// `queue_depth` counts waiting messages, not unsettled deliveries. (A broker pushes messages to
/// a consumer with free prefetch slots, where they stop counting as waiting; the memory bus keeps
/// them queued until `next()`. The case only looks at the depth where the two agree.)
pub async fn queue_depth_counts_waiting(bus: &dyn Bus) {
    let q = declare(bus, "depth", 5).await;
    wait_depth(bus, &q, 0).await;
    publish(bus, &q, (0..5).map(|i| msg("depth", i)).collect()).await;
    wait_depth(bus, &q, 5).await;
    // At its prefetch limit a consumer holds two; a broker pushes it no more.
    let mut c = consume(bus, &q, 2).await;
    let a = recv(&mut *c, "first").await;
    let b = recv(&mut *c, "second").await;
    wait_depth(bus, &q, 3).await;
    // (Settling one would let a broker push the consumer another, so settle as it goes away.)
    ack(a).await;
    drop(c);
    drop(b);
    wait_depth(bus, &q, 4).await;
    let mut c = consume(bus, &q, 10).await;
    for _ in 0..4 {
        ack(recv(&mut *c, "the rest").await).await;
    }
    wait_depth(bus, &q, 0).await;
}

pub async fn consumer_count_follows_consumers(bus: &dyn Bus) {
    let q = declare(bus, "consumers", 5).await;
    wait_consumers(bus, &q, 0).await;
    let a = consume(bus, &q, 1).await;
    let b = consume(bus, &q, 1).await;
    wait_consumers(bus, &q, 2).await;
    drop(a);
    wait_consumers(bus, &q, 1).await;
    drop(b);
    wait_consumers(bus, &q, 0).await;
    assert!(
        bus.consumer_count(
            &bus.namespace()
                .compile_queue(shoal_model::Step::NoopBuild, "nowhere")
        )
        .await
        .is_err(),
        "a queue never declared has no count"
    );
}
