//! [`ScratchDb`]: a MySQL database of its own for one test, dropped when the test is done.
//!
//! Tests of the cluster mode share one server; each gets a fresh database named
//! `<prefix>_<pid>_<n>` so that parallel tests and parallel test processes never see each
//! other's rows, and a database is dropped even when its test panics (the drop runs during the
//! unwind).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use shoal_model::{
    Config, ConfigId, FinalResult, Job, JobId, JobState, NewConfig, NewJob, NewSession, NewSolver,
    ResultRow, Session, SessionId, Solver, SolverId,
};

use super::{MysqlOptions, MysqlStore};
use crate::{Batch, BuildRecord, Result, Store};

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

#[async_trait]
impl Store for ScratchDb {
    fn describe(&self) -> String {
        self.store.describe()
    }
    async fn migrate(&self) -> Result<u32> {
        self.store.migrate().await
    }
    async fn create_session(&self, session: &NewSession) -> Result<SessionId> {
        self.store.create_session(session).await
    }
    async fn session(&self, id: SessionId) -> Result<Option<Session>> {
        self.store.session(id).await
    }
    async fn sessions(&self) -> Result<Vec<Session>> {
        self.store.sessions().await
    }
    async fn find_session(&self, session: &NewSession) -> Result<Option<Session>> {
        self.store.find_session(session).await
    }
    async fn upsert_configs(&self, configs: &[NewConfig]) -> Result<Vec<(ConfigId, bool)>> {
        self.store.upsert_configs(configs).await
    }
    async fn config(&self, id: ConfigId) -> Result<Option<Config>> {
        self.store.config(id).await
    }
    async fn configs_with_tag(&self, tag: &str) -> Result<Vec<Config>> {
        self.store.configs_with_tag(tag).await
    }
    async fn upsert_solvers(&self, solvers: &[NewSolver]) -> Result<Vec<Solver>> {
        self.store.upsert_solvers(solvers).await
    }
    async fn solvers(&self) -> Result<Vec<Solver>> {
        self.store.solvers().await
    }
    async fn set_applicability(
        &self,
        session: SessionId,
        rows: &[(ConfigId, SolverId, bool)],
    ) -> Result<()> {
        self.store.set_applicability(session, rows).await
    }
    async fn applicable_solvers(
        &self,
        session: SessionId,
        config: ConfigId,
    ) -> Result<Vec<SolverId>> {
        self.store.applicable_solvers(session, config).await
    }
    async fn insert_jobs(&self, jobs: &[NewJob]) -> Result<u64> {
        self.store.insert_jobs(jobs).await
    }
    async fn job(&self, id: JobId) -> Result<Option<Job>> {
        self.store.job(id).await
    }
    async fn jobs_in_state(
        &self,
        session: SessionId,
        state: JobState,
        limit: u32,
    ) -> Result<Vec<Job>> {
        self.store.jobs_in_state(session, state, limit).await
    }
    async fn in_flight(&self, session: SessionId) -> Result<Vec<Job>> {
        self.store.in_flight(session).await
    }
    async fn expired_leases(&self, now_ms: i64, limit: u32) -> Result<Vec<Job>> {
        self.store.expired_leases(now_ms, limit).await
    }
    async fn state_counts(&self, session: SessionId) -> Result<BTreeMap<JobState, u64>> {
        self.store.state_counts(session).await
    }
    async fn apply(&self, batch: &Batch) -> Result<Vec<bool>> {
        self.store.apply(batch).await
    }
    async fn builds(&self, session: SessionId, keys: &[String]) -> Result<Vec<BuildRecord>> {
        self.store.builds(session, keys).await
    }
    async fn put_artifact(&self, hash: &str, bytes: &[u8]) -> Result<bool> {
        self.store.put_artifact(hash, bytes).await
    }
    async fn artifact(&self, hash: &str) -> Result<Option<Vec<u8>>> {
        self.store.artifact(hash).await
    }
    async fn results(&self, job: JobId) -> Result<Vec<ResultRow>> {
        self.store.results(job).await
    }
    async fn final_results(&self, session: SessionId) -> Result<Vec<FinalResult>> {
        self.store.final_results(session).await
    }
}
