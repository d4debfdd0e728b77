//! The bus conformance suite: one set of cases every [`Bus`] implementation must pass.
//!
//! The embedded mode runs on [`crate::MemoryBus`] and the cluster on RabbitMQ; actors are tested
//! on the first and deployed on the second. That is only sound if the two behave alike, so the
//! behaviour actors rely on is written down here once, as executable cases, and every
//! implementation runs all of them unchanged through
//! [`bus_conformance_tests!`](crate::bus_conformance_tests):
//!
//! ```no_run
//! # use shoal_model::queue::Namespace;
//! # fn fresh_namespace() -> Namespace { Namespace::new("doc").unwrap() }
//! shoal_bus::bus_conformance_tests!(async { shoal_bus::MemoryBus::new(fresh_namespace()) });
//! # fn main() {}
//! ```
//!
//! Each case gets a fresh bus with a namespace of its own and names its queues through
//! [`Bus::namespace`]. Nothing here assumes in-process timing: what should arrive is awaited for
//! up to [`ARRIVES_WITHIN`], and "nothing arrives" means nothing within [`QUIET_FOR`]. Every
//! payload is distinct, so a case can tell a lost message from a duplicated one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::{sleep, timeout, Instant};

use crate::{Bus, BusError, Consumer, Delivery, QueueOptions};

mod consumers;
mod queues;
mod topics;

pub use consumers::*;
pub use queues::*;
pub use topics::*;

/// How long a case waits for something that should arrive.
pub const ARRIVES_WITHIN: Duration = Duration::from_secs(5);
/// How long a case waits to conclude that nothing arrives.
pub const QUIET_FOR: Duration = Duration::from_millis(300);

/// Expands to one `#[tokio::test]` per conformance case. `$make` is an expression, evaluated
/// afresh for each test, giving a future of a fresh bus in a namespace of its own: anything that
/// dereferences to a [`Bus`] (`Arc<MemoryBus>`, `Box<dyn Bus>`, `Arc<dyn Bus>`). The calling
/// crate needs `tokio` as a (dev-)dependency.
#[macro_export]
macro_rules! bus_conformance_tests {
    ($make:expr) => {
        $crate::bus_conformance_tests!(@cases $make;
            publish_then_consume_in_order,
            ack_removes,
            requeue_redelivers_with_count_two,
            dropped_delivery_is_redelivered,
            dropped_consumer_returns_unsettled,
            delivery_limit_dead_letters,
            explicit_dead_letter_carries_reason,
            prefetch_limits_unsettled,
            waiting_consumers_wake,
            competing_consumers_share,
            undeclared_queue_errors,
            declare_is_idempotent,
            queue_depth_counts_waiting,
            consumer_count_follows_consumers,
            topic_patterns_route,
            close_ends_consumers,
            random_settlement_exactly_once,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test]
            async fn $case() {
                let bus = $make.await;
                let run = $crate::conformance::$case(&*bus);
                ::tokio::time::timeout(::std::time::Duration::from_secs(120), run)
                    .await
                    .expect(concat!("conformance case `", stringify!($case), "` hung"));
                let _ = $crate::Bus::close(&*bus).await;
            }
        )*
    };
}

// ----- helpers -----

/// A payload no other message in the case has.
fn msg(tag: &str, i: usize) -> Vec<u8> {
    format!("{tag}-{i}").into_bytes()
}

fn text(payload: &[u8]) -> String {
    String::from_utf8_lossy(payload).into_owned()
}

/// Declares a queue named after `name` in the bus's namespace (a compile queue whose
/// architecture is the name, so every case has a queue of its own).
async fn declare(bus: &dyn Bus, name: &str, delivery_limit: u32) -> String {
    let q = bus
        .namespace()
        .compile_queue(shoal_model::Step::ExecBuild, name);
    bus.declare_queue(&q, &QueueOptions::limited(delivery_limit))
        .await
        .unwrap_or_else(|e| panic!("declare {q}: {e}"));
    q
}

async fn publish(bus: &dyn Bus, q: &str, payloads: Vec<Vec<u8>>) {
    bus.publish(q, payloads)
        .await
        .unwrap_or_else(|e| panic!("publish to {q}: {e}"));
}

async fn consume(bus: &dyn Bus, q: &str, prefetch: u16) -> Box<dyn Consumer> {
    bus.consume(q, prefetch)
        .await
        .unwrap_or_else(|e| panic!("consume {q}: {e}"))
}

/// The next delivery, which must come within [`ARRIVES_WITHIN`].
async fn recv(c: &mut dyn Consumer, what: &str) -> Delivery {
    match timeout(ARRIVES_WITHIN, c.next()).await {
        Ok(Some(Ok(d))) => d,
        Ok(Some(Err(e))) => panic!("{what}: consumer failed: {e}"),
        Ok(None) => panic!("{what}: consumer ended"),
        Err(_) => panic!("{what}: nothing arrived within {ARRIVES_WITHIN:?}"),
    }
}

/// Polls `waiting` (a pinned `next()` or [`recv`]) once and asserts that it waits: the consumer
/// behind it is now parked in `next()`, the state a "wake" case needs before it publishes or
/// settles what should wake it. A sleep before publishing would only make that likely.
async fn park<F: std::future::Future + Unpin>(waiting: &mut F, what: &str) {
    let pending = std::future::poll_fn(|cx| {
        std::task::Poll::Ready(std::pin::Pin::new(&mut *waiting).poll(cx).is_pending())
    })
    .await;
    assert!(
        pending,
        "{what}: something arrived before anything was sent"
    );
}

/// Nothing may arrive within [`QUIET_FOR`].
async fn assert_quiet(c: &mut dyn Consumer, what: &str) {
    match timeout(QUIET_FOR, c.next()).await {
        Err(_) => {}
        Ok(None) => panic!("{what}: consumer ended"),
        Ok(Some(Ok(d))) => panic!("{what}: expected nothing, got `{}`", text(&d.payload)),
        Ok(Some(Err(e))) => panic!("{what}: consumer failed: {e}"),
    }
}

async fn ack(d: Delivery) {
    d.ack().await.expect("ack");
}

/// Waits until `probe` reads `want` (a broker's counts may lag a little: a cancel, say, is
/// processed after the consumer is gone here); panics with `what` past [`ARRIVES_WITHIN`].
async fn wait_for<T, F, Fut>(what: &str, want: T, mut probe: F)
where
    T: PartialEq + std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let deadline = Instant::now() + ARRIVES_WITHIN;
    loop {
        let got = probe().await;
        if got == want {
            return;
        }
        if Instant::now() >= deadline {
            panic!("{what}: {got:?}, expected {want:?}");
        }
        sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the queue's depth is `want`.
async fn wait_depth(bus: &dyn Bus, q: &str, want: u64) {
    let what = format!("depth of queue {q}");
    wait_for(&what, want, || async {
        bus.queue_depth(q).await.expect("queue_depth")
    })
    .await
}

/// Waits until the queue has `want` consumers.
async fn wait_consumers(bus: &dyn Bus, q: &str, want: u32) {
    let what = format!("consumers of queue {q}");
    wait_for(&what, want, || async {
        bus.consumer_count(q).await.expect("consumer_count")
    })
    .await
}

/// A small deterministic random number generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) % n
    }
}
