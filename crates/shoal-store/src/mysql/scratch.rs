//! [`ScratchDb`]: a MySQL database of its own for one test, dropped when the test is done.
//!
//! Tests of the cluster mode share one server; each gets a fresh database named
//! `<prefix>_<pid>_<n>` so that parallel tests and parallel test processes never see each
//! other's rows, and a database is dropped even when its test panics (the drop runs during the
//! unwind).

use std::sync::atomic::{AtomicU64, Ordering};

use super::{MysqlOptions, MysqlStore};
use crate::Result;
#[cfg(doc)]
use crate::Store;

/// The environment variable naming the test server, as a URL without a database.
pub const TEST_SERVER_ENV: &str = "SHOAL_TEST_MYSQL";

/// The test server when [`TEST_SERVER_ENV`] is not set: a local MariaDB, root, no password.
pub const DEFAULT_TEST_SERVER: &str = "mysql://root@127.0.0.1:3306";

/// The test server's URL: [`TEST_SERVER_ENV`], or [`DEFAULT_TEST_SERVER`].
pub fn test_server() -> String {
    std::env::var(TEST_SERVER_ENV).unwrap_or_else(|_| DEFAULT_TEST_SERVER.to_string())
}

/// A fresh, empty (not migrated) database and a store connected to it. Dropping it drops the
/// database. It is a [`Store`] itself, delegating to [`ScratchDb::store`].
#[derive(Debug)]
pub struct ScratchDb {
    store: MysqlStore,
    server: String,
    name: String,
}

impl ScratchDb {
    /// A database named `<prefix>_<pid>_<n>` on the test server ([`test_server`]).
    pub async fn new(prefix: &str) -> Result<Self> {
        Self::on(&test_server(), prefix, MysqlOptions::default()).await
    }

    /// A database named `<prefix>_<pid>_<n>` on the server of `server_url`.
    pub async fn on(server_url: &str, prefix: &str, options: MysqlOptions) -> Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}_{}_{n}", std::process::id());
        MysqlStore::create_database(server_url, &name).await?;
        let options = MysqlOptions {
            database: Some(name.clone()),
            ..options
        };
        match MysqlStore::connect_with(server_url, options).await {
            Ok(store) => Ok(ScratchDb {
                store,
                server: server_url.to_string(),
                name,
            }),
            Err(e) => {
                let _ = MysqlStore::drop_database_at(server_url, &name).await;
                Err(e)
            }
        }
    }

    pub fn store(&self) -> &MysqlStore {
        &self.store
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for ScratchDb {
    fn drop(&mut self) {
        // Drop may run inside the test's runtime, whose thread cannot wait on its own futures;
        // a thread of its own with a runtime of its own can.
        let (server, name) = (self.server.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(MysqlStore::drop_database_at(&server, &name))
                .map_err(|e| e.to_string())
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(database = %self.name, "dropping a scratch database: {e}"),
            Err(_) => tracing::warn!(database = %self.name, "dropping a scratch database panicked"),
        }
    }
}

crate::delegating_store! {
    impl Store for ScratchDb {
        delegate to store;
        fn describe(&self) -> String {
            self.store.describe()
        }
        async fn apply(&self, batch: &crate::Batch) -> crate::Result<Vec<bool>> {
            self.store.apply(batch).await
        }
    }
}
