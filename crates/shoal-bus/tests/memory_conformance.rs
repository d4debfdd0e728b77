//! Runs the bus conformance suite against `MemoryBus`, a fresh bus and namespace per case.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use shoal_bus::MemoryBus;
use shoal_model::queue::Namespace;

async fn fresh_bus() -> Arc<MemoryBus> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    MemoryBus::new(Namespace::new(&format!("t{n}")).expect("namespace"))
}

shoal_bus::bus_conformance_tests!(fresh_bus());
