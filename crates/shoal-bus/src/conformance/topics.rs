//! Conformance cases for topics: broadcasts routed by AMQP-style patterns.

use super::*;

/// A subscriber gets what matches its pattern, in order, and nothing else; topic deliveries
/// need no settling and are not redelivered.
pub async fn topic_patterns_route(bus: &dyn Bus) {
    let control = bus.namespace().control_topic();
    let events = bus.namespace().events_topic();
    let sub = |topic: String, pattern: &'static str| async move {
        bus.subscribe(&topic, pattern)
            .await
            .unwrap_or_else(|e| panic!("subscribe {topic} {pattern}: {e}"))
    };
    let mut host1 = sub(control.clone(), "host1.*").await;
    let mut host2 = sub(control.clone(), "host2.x").await;
    let mut all = sub(control.clone(), "#").await;
    let mut other_topic = sub(events.clone(), "#").await;

    let put = |key: &'static str, payload: Vec<u8>| {
        let control = control.clone();
        async move {
            bus.publish_topic(&control, key, payload)
                .await
                .expect("publish_topic")
        }
    };
    put("host1.evaluator", msg("t", 1)).await;
    put("host2.x", msg("t", 2)).await;
    put("host1.evaluator.extra", msg("t", 3)).await;
    put("host1.compiler", msg("t", 4)).await;

    let d = recv(&mut *host1, "host1.*").await;
    assert_eq!(text(&d.payload), "t-1");
    d.ack().await.expect("ack of a topic delivery");
    let d = recv(&mut *host1, "host1.*").await;
    assert_eq!(text(&d.payload), "t-4");
    drop(d);
    assert_quiet(&mut *host1, "host1.* (a dropped topic delivery is gone)").await;

    let d = recv(&mut *host2, "host2.x").await;
    assert_eq!(text(&d.payload), "t-2");
    drop(d);
    assert_quiet(&mut *host2, "host2.x").await;

    for want in 1..=4 {
        let d = recv(&mut *all, "#").await;
        assert_eq!(text(&d.payload), text(&msg("t", want)), "in order");
        assert_eq!(d.dead_reason, None);
    }
    assert_quiet(&mut *all, "#").await;
    assert_quiet(&mut *other_topic, "another topic").await;

    // Many in a row arrive in order.
    for i in 0..50 {
        put("host2.x", msg("burst", i)).await;
    }
    for i in 0..50 {
        let d = recv(&mut *host2, "burst").await;
        assert_eq!(text(&d.payload), text(&msg("burst", i)));
    }
    assert_quiet(&mut *host1, "host1.* during the burst").await;
}
