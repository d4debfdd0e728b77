//! Opening the local SQLite store, for every command that takes `--db`. Its own module so that
//! the subcommand modules (`tune`, `miopen`) and the dispatcher in `cli.rs` share it without
//! depending on each other. The cluster's store (a URL from the settings) is opened by
//! `connect.rs`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use shoal_store::{SqliteStore, Store};

/// Opens the SQLite store without changing it.
pub async fn open_store(path: &Path) -> anyhow::Result<Arc<dyn Store>> {
    let store =
        SqliteStore::open(path).with_context(|| format!("opening the store {}", path.display()))?;
    Ok(Arc::new(store))
}

/// Opens the store and applies pending migrations.
pub async fn open_migrated(path: &Path) -> anyhow::Result<Arc<dyn Store>> {
    let store = open_store(path).await?;
    store.migrate().await?;
    Ok(store)
}
