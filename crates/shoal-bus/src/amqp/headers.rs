//! The AMQP side of the wire contract: queue arguments, message properties and the headers the
//! bus reads back (delivery count, dead-letter reason).

use std::collections::BTreeMap;

use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::BasicProperties;

/// Set on a copy the bus dead-letters itself (`Delivery::dead_letter(reason)`): the reason.
pub const DEAD_REASON: &str = "x-shoal-dead-reason";
/// Set on that copy: the queue it came from.
pub const DEAD_QUEUE: &str = "x-shoal-dead-queue";
/// Header of a dead-lettered copy: the broker user that published the original.
pub const DEAD_PUBLISHER: &str = "x-shoal-dead-publisher";
/// Stamped on every message published to a queue this bus declared: the queue's delivery limit,
/// so that whoever reads a message the broker dead-lettered can name the limit it exceeded.
pub const DELIVERY_LIMIT: &str = "x-shoal-delivery-limit";
/// Set by quorum queues on a redelivery: how often the message came back so far.
const DELIVERY_COUNT: &str = "x-delivery-count";

/// AMQP `delivery-mode` 2: written to disk before it is confirmed.
const PERSISTENT: u8 = 2;
/// AMQP `delivery-mode` 1: kept in memory (topic broadcasts).
const TRANSIENT: u8 = 1;

fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

/// `x-expires`: the broker deletes the queue after it has been unused (no consumer, no
/// redeclaration) for `after` (at least 1 ms).
pub fn expire_unused(args: &mut FieldTable, after: std::time::Duration) {
    let ms = i32::try_from(after.as_millis().max(1)).unwrap_or(i32::MAX);
    args.insert("x-expires".into(), AMQPValue::LongInt(ms));
}

/// The arguments of a work queue: a durable quorum queue that dead-letters through the
/// namespace's dead-letter exchange once a message has been delivered `delivery_limit` times.
///
/// Everything relied on is set explicitly, since broker defaults moved between 3.x and 4.x:
/// - `x-delivery-limit`: a quorum queue dead-letters a message when it comes back while its
///   return count exceeds this. Counting deliveries instead (the bus's contract), `delivery_limit`
///   deliveries are allowed, so the broker's value is one less (0 = dead-letter on the first
///   return; 4.x would read no value as 20).
/// - `x-dead-letter-strategy = at-least-once` (3.10+): the broker keeps a dead letter in the
///   source queue until the dead-letter queue has confirmed it, so none is lost in between. It
///   needs `x-overflow = reject-publish`, which is set too (no length limit is set, so it never
///   rejects anything).
pub fn work_queue_args(
    dead_letter_exchange: &str,
    dead_letter_queue: &str,
    delivery_limit: u32,
) -> FieldTable {
    let broker_limit = i32::try_from(delivery_limit.max(1) - 1).unwrap_or(i32::MAX);
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long("quorum"));
    args.insert("x-delivery-limit".into(), AMQPValue::LongInt(broker_limit));
    args.insert("x-dead-letter-exchange".into(), long(dead_letter_exchange));
    args.insert("x-dead-letter-routing-key".into(), long(dead_letter_queue));
    args.insert("x-dead-letter-strategy".into(), long("at-least-once"));
    args.insert("x-overflow".into(), long("reject-publish"));
    args
}

/// The arguments of the dead-letter queue: a durable quorum queue with no delivery limit and no
/// dead-lettering of its own. Its length and age bound is a broker policy, not an argument
/// (`<ns>-dead-bound`, set by `scripts/services-up`), so that it can change without redeclaring.
pub fn dead_letter_queue_args() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long("quorum"));
    args
}

/// The arguments of a topic subscriber's own queue: bounded like the in-process bus's
/// subscriber buffer, dropping the oldest message when full.
pub fn subscriber_queue_args(max_length: usize) -> FieldTable {
    let mut args = FieldTable::default();
    let max = i32::try_from(max_length).unwrap_or(i32::MAX);
    args.insert("x-max-length".into(), AMQPValue::LongInt(max));
    args.insert("x-overflow".into(), long("drop-head"));
    args
}

/// Properties of a message published to a work queue: persistent, with the queue's delivery
/// limit when this bus knows it.
pub fn queue_message_properties(delivery_limit: Option<u32>) -> BasicProperties {
    let props = BasicProperties::default().with_delivery_mode(PERSISTENT);
    match delivery_limit {
        Some(limit) => {
            let mut headers = FieldTable::default();
            headers.insert(DELIVERY_LIMIT.into(), AMQPValue::LongUInt(limit));
            props.with_headers(headers)
        }
        None => props,
    }
}

/// Properties of a topic broadcast: transient (at-most-once; a newer fact supersedes it).
pub fn topic_message_properties() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(TRANSIENT)
}

/// Properties of the copy of a delivery that the bus dead-letters itself: the original's, less
/// the redelivery count (a dead letter starts counting afresh), plus the reason and the queue;
/// published by `user` (the broker refuses another `user_id`), with the original's publisher
/// kept in [`DEAD_PUBLISHER`] (who sent what was refused).
pub fn dead_letter_properties(
    original: BasicProperties,
    reason: &str,
    queue: &str,
    user: &str,
) -> BasicProperties {
    let mut headers: BTreeMap<ShortString, AMQPValue> = original
        .headers()
        .as_ref()
        .map(|h| h.inner().clone())
        .unwrap_or_default();
    headers.remove(DELIVERY_COUNT);
    headers.insert(DEAD_REASON.into(), long(reason));
    headers.insert(DEAD_QUEUE.into(), long(queue));
    if let Some(sender) = original.user_id() {
        headers.insert(DEAD_PUBLISHER.into(), long(sender.as_str()));
    }
    original
        .with_headers(FieldTable::from(headers))
        .with_user_id(user.into())
        .with_delivery_mode(PERSISTENT)
}

/// Who published the original of a message read from a queue: a copy the bus dead-lettered
/// itself (it carries [`DEAD_REASON`]) is stamped with the dead-letterer's `user_id` and names the
/// original's publisher in [`DEAD_PUBLISHER`] (absent: the original had none); anything else,
/// a message the broker dead-lettered included (the broker keeps its properties), was published
/// by its own `user_id`.
pub fn original_publisher(headers: Option<&FieldTable>, user_id: Option<&str>) -> Option<String> {
    match headers {
        Some(h) if get(h, DEAD_REASON).is_some() => get(h, DEAD_PUBLISHER).and_then(string),
        _ => user_id.map(str::to_owned),
    }
}

fn int(value: &AMQPValue) -> Option<i64> {
    Some(match *value {
        AMQPValue::ShortShortInt(n) => n.into(),
        AMQPValue::ShortShortUInt(n) => n.into(),
        AMQPValue::ShortInt(n) => n.into(),
        AMQPValue::ShortUInt(n) => n.into(),
        AMQPValue::LongInt(n) => n.into(),
        AMQPValue::LongUInt(n) => n.into(),
        AMQPValue::LongLongInt(n) => n,
        _ => return None,
    })
}

fn string(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

fn get<'a>(headers: &'a FieldTable, key: &str) -> Option<&'a AMQPValue> {
    headers.inner().get(key)
}

/// The bus's delivery count: 1 on the first delivery. A quorum queue sets `x-delivery-count` to
/// the number of times the message came back before this delivery.
pub fn delivery_count(headers: Option<&FieldTable>) -> u32 {
    let returned = headers
        .and_then(|h| get(h, DELIVERY_COUNT))
        .and_then(int)
        .unwrap_or(0);
    u32::try_from(returned.max(0))
        .unwrap_or(u32::MAX)
        .saturating_add(1)
}

/// Why a message is in a dead-letter queue, or `None` for a message that was never dead-lettered.
///
/// A copy the bus dead-lettered itself carries [`DEAD_REASON`]. One the broker dead-lettered
/// carries `x-first-death-reason` and `x-first-death-queue` (and the `x-death` list); the
/// broker's `delivery_limit` reads as `delivery limit N exceeded (queue <name>)`, with N from the
/// message's [`DELIVERY_LIMIT`] stamp or else from `known_limit` (the queues this bus declared).
pub fn dead_reason(
    headers: Option<&FieldTable>,
    known_limit: impl Fn(&str) -> Option<u32>,
) -> Option<String> {
    let headers = headers?;
    if let Some(reason) = get(headers, DEAD_REASON).and_then(string) {
        return Some(reason);
    }
    let (reason, queue) = match get(headers, "x-first-death-reason").and_then(string) {
        Some(reason) => (reason, get(headers, "x-first-death-queue").and_then(string)),
        None => {
            // Older brokers set only `x-death`, newest death first; the first death is last.
            let deaths = match get(headers, "x-death")? {
                AMQPValue::FieldArray(deaths) => deaths,
                _ => return None,
            };
            let first = match deaths.as_slice().last()? {
                AMQPValue::FieldTable(first) => first,
                _ => return None,
            };
            (
                get(first, "reason").and_then(string)?,
                get(first, "queue").and_then(string),
            )
        }
    };
    let queue = queue.unwrap_or_else(|| "unknown".to_string());
    Some(match reason.as_str() {
        "delivery_limit" => {
            let stamped = get(headers, DELIVERY_LIMIT)
                .and_then(int)
                .and_then(|n| u32::try_from(n).ok());
            match stamped.or_else(|| known_limit(&queue)) {
                Some(limit) => format!("delivery limit {limit} exceeded (queue {queue})"),
                None => format!("delivery limit exceeded (queue {queue})"),
            }
        }
        // `rejected`, `expired`, `maxlen`: nothing the bus does, but say what the broker said.
        other => format!("{other} (queue {queue})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::FieldArray;

    fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in entries {
            t.insert((*k).into(), v.clone());
        }
        t
    }

    #[test]
    fn delivery_count_is_returns_plus_one() {
        assert_eq!(delivery_count(None), 1);
        assert_eq!(delivery_count(Some(&FieldTable::default())), 1);
        let h = table(&[(DELIVERY_COUNT, AMQPValue::LongInt(2))]);
        assert_eq!(delivery_count(Some(&h)), 3);
        let h = table(&[(DELIVERY_COUNT, AMQPValue::LongLongInt(-4))]);
        assert_eq!(delivery_count(Some(&h)), 1);
    }

    #[test]
    fn broker_limit_is_one_less_than_deliveries() {
        let limit = |n| get(&work_queue_args("x", "y", n), "x-delivery-limit").cloned();
        assert_eq!(limit(3), Some(AMQPValue::LongInt(2)));
        assert_eq!(limit(1), Some(AMQPValue::LongInt(0)));
        assert_eq!(limit(0), Some(AMQPValue::LongInt(0)));
    }

    #[test]
    fn dead_reasons() {
        assert_eq!(dead_reason(None, |_| None), None);
        let own = table(&[(DEAD_REASON, long("undecodable"))]);
        assert_eq!(
            dead_reason(Some(&own), |_| None).as_deref(),
            Some("undecodable")
        );

        let broker = table(&[
            ("x-first-death-reason", long("delivery_limit")),
            ("x-first-death-queue", long("ns.compile.a.b")),
            (DELIVERY_LIMIT, AMQPValue::LongUInt(3)),
        ]);
        assert_eq!(
            dead_reason(Some(&broker), |_| Some(9)).as_deref(),
            Some("delivery limit 3 exceeded (queue ns.compile.a.b)")
        );
        let unstamped = table(&[
            ("x-first-death-reason", long("delivery_limit")),
            ("x-first-death-queue", long("q")),
        ]);
        assert_eq!(
            dead_reason(Some(&unstamped), |q| (q == "q").then_some(7)).as_deref(),
            Some("delivery limit 7 exceeded (queue q)")
        );
        assert_eq!(
            dead_reason(Some(&unstamped), |_| None).as_deref(),
            Some("delivery limit exceeded (queue q)")
        );

        let death = table(&[("reason", long("expired")), ("queue", long("q2"))]);
        let old = table(&[(
            "x-death",
            AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])),
        )]);
        assert_eq!(
            dead_reason(Some(&old), |_| None).as_deref(),
            Some("expired (queue q2)")
        );
    }

    #[test]
    fn dead_letter_copy_drops_the_count_and_keeps_the_rest() {
        let original = BasicProperties::default().with_headers(table(&[
            (DELIVERY_COUNT, AMQPValue::LongInt(4)),
            (DELIVERY_LIMIT, AMQPValue::LongUInt(5)),
        ]));
        let copy = dead_letter_properties(original, "bad", "q", "me");
        let h = copy.headers().clone().unwrap();
        assert!(!h.contains_key(DELIVERY_COUNT));
        assert!(h.contains_key(DELIVERY_LIMIT));
        assert_eq!(dead_reason(Some(&h), |_| None).as_deref(), Some("bad"));
        assert_eq!(*copy.delivery_mode(), Some(PERSISTENT));
    }

    /// A dead letter is counted by who sent the original: a bus's own copy names it in a header
    /// (its `user_id` is the dead-letterer's), a broker's dead letter keeps the original's.
    #[test]
    fn original_publisher_reads_through_a_dead_letter_copy() {
        let sent = BasicProperties::default().with_user_id("shoal_eval.e1".into());
        let copy = dead_letter_properties(sent, "stale result", "q", "shoal_scheduler");
        assert_eq!(copy.user_id().as_ref().unwrap().as_str(), "shoal_scheduler");
        let h = copy.headers().clone().unwrap();
        assert_eq!(
            original_publisher(Some(&h), Some("shoal_scheduler")).as_deref(),
            Some("shoal_eval.e1")
        );
        // The original had no publisher: the copy names none, whoever dead-lettered it.
        let anonymous = dead_letter_properties(BasicProperties::default(), "bad", "q", "me");
        let h = anonymous.headers().clone().unwrap();
        assert_eq!(original_publisher(Some(&h), Some("me")), None);
        // Dead-lettered by the broker (past a delivery limit), or never dead-lettered.
        let broker = table(&[("x-first-death-reason", long("delivery_limit"))]);
        assert_eq!(
            original_publisher(Some(&broker), Some("shoal_compile.c1")).as_deref(),
            Some("shoal_compile.c1")
        );
        assert_eq!(original_publisher(None, Some("u")).as_deref(), Some("u"));
        assert_eq!(original_publisher(None, None), None);
    }
}
