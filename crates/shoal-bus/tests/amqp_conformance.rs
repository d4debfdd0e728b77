//! Runs the bus conformance suite against `RabbitBus` on a real broker: a fresh bus in a
//! namespace of its own per case, removed from the broker when the case ends (passed or not).
//!
//! The broker is `SHOAL_TEST_AMQP` (default `amqp://guest:guest@127.0.0.1:5672/%2f`).

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use shoal_bus::{Bus, RabbitBus, RabbitOptions};
use shoal_model::queue::Namespace;

fn broker_url() -> String {
    std::env::var("SHOAL_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_string())
}

/// A bus whose namespace is deleted from the broker when it is dropped, so a failed case leaves
/// nothing behind either.
struct Scratch(Arc<RabbitBus>);

impl Deref for Scratch {
    type Target = RabbitBus;

    fn deref(&self) -> &RabbitBus {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let queues: Vec<String> = self.0.declared_queues().into_keys().collect();
        let ns = self.0.namespace().clone();
        // Drop runs inside the test's runtime, which cannot be blocked on; clean up from a
        // thread with a runtime of its own.
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

async fn fresh_bus() -> Scratch {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let ns = Namespace::new(&format!("t-{}-{n}", std::process::id())).expect("namespace");
    let options = RabbitOptions {
        connection_name: format!("shoal-conformance-{}", ns.as_str()),
        ..RabbitOptions::default()
    };
    let bus = RabbitBus::connect_with(&broker_url(), ns, options)
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ for the tests (set SHOAL_TEST_AMQP): {e}"));
    Scratch(bus)
}

shoal_bus::bus_conformance_tests!(fresh_bus());

/// The same suite through a node list whose first node is down
/// (`amqp://…@127.0.0.1:<nothing>,<the broker>/…`): a list changes where the bus connects,
/// never what it promises.
mod node_list {
    use super::*;

    /// The test broker's URL with a node where nothing listens before its own host.
    fn url_with_a_dead_node_first() -> String {
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let url = broker_url();
        let (scheme, rest) = url.split_once("://").expect("a URL");
        match rest.rsplit_once('@') {
            Some((userinfo, hosts)) => format!("{scheme}://{userinfo}@127.0.0.1:{dead},{hosts}"),
            None => format!("{scheme}://127.0.0.1:{dead},{rest}"),
        }
    }

    async fn fresh_bus() -> Scratch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let ns = Namespace::new(&format!("tl-{}-{n}", std::process::id())).expect("namespace");
        let options = RabbitOptions {
            connection_name: format!("shoal-conformance-{}", ns.as_str()),
            ..RabbitOptions::default()
        };
        let bus = RabbitBus::connect_with(&url_with_a_dead_node_first(), ns, options)
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ for the tests (set SHOAL_TEST_AMQP): {e}"));
        Scratch(bus)
    }

    shoal_bus::bus_conformance_tests!(fresh_bus());
}
