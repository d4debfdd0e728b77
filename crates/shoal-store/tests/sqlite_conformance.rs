//! The shared Store conformance suite, run against a fresh in-memory `SqliteStore` per case.

use shoal_store::{SqliteStore, Store};

shoal_store::store_conformance_tests!(async {
    let store = SqliteStore::open_in_memory().expect("open in-memory sqlite");
    store.migrate().await.expect("migrate");
    store
});
