//! [`SqliteStore`]: the [`Store`] of the embedded mode, one SQLite file (rusqlite, bundled).
//!
//! Why it looks the way it does:
//! - **One connection behind a mutex, used from tokio's blocking pool.** SQLite calls block (disk
//!   I/O, fsync, `busy_timeout` waits). The actors run on one actix thread, so a blocking call
//!   there would stall every actor; each operation therefore runs in `spawn_blocking`. SQLite
//!   allows one writer at a time anyway, so one connection costs no write throughput, and it
//!   keeps one prepared-statement cache warm.
//! - **WAL with `synchronous=NORMAL`.** A committed transaction survives a crash (SIGKILL) of the
//!   process; only a power loss can drop the last commits, which a rerun redoes (every change
//!   is a compare-and-set). Readers in other processes (`shoal status`) do not block the writer.
//! - **Checkpoints off the writer's path.** A checkpoint copies the WAL into the database file
//!   and fsyncs both; SQLite runs it inside the commit that crosses `wal_autocheckpoint`, so the
//!   one writer would stop for it. A file store has a second connection on its own thread
//!   ([`Checkpointer`]) that checkpoints the WAL every few milliseconds while the writer goes on;
//!   the writer's own automatic checkpoint stays as a backstop at a larger size. Durability is
//!   unchanged: the same commits, the same fsyncs, only on another thread.
//! - **Migrations are explicit.** [`SqliteStore::open`] never changes the schema; `shoal db
//!   migrate` (or the embedded start-up) calls [`Store::migrate`]. A file written by a newer
//!   build is refused with [`StoreError::SchemaTooNew`] rather than misread.
//!
//! The SQL lives in [`queries`], row conversions in [`rows`], the operations in [`ops`].

mod checkpoint;
mod db_import;
mod migrate;
mod ops;
mod queries;
mod rows;
mod shipped;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use shoal_model::{
    Config, ConfigId, FinalResult, Job, JobId, JobState, NewConfig, NewJob, NewSession, NewSolver,
    ResultRow, Session, SessionId, Solver, SolverId,
};

use crate::db_import::{DbImport, DbImportId, DbRecord, NewDbImport};
use crate::encoding::now_ms;
use crate::{Batch, BuildRecord, Result, Store, StoreError};
use checkpoint::Checkpointer;
use migrate::migrate;
pub use migrate::SCHEMA_VERSION;
use ops::Ctx;

/// How long a statement waits for another process's write lock before failing.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Enough for every statement in [`queries`] (rusqlite's default is 16).
const STATEMENT_CACHE: usize = 64;

/// How often the background [`Checkpointer`] copies the WAL into the database file.
pub(super) const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(50);

/// WAL pages after which the writer checkpoints by itself (SQLite's default is 1000): only
/// reached when the background checkpointer falls behind or cannot run.
const WRITER_CHECKPOINT_PAGES: i64 = 16_384;

/// The SQLite store. Cheap to clone: clones share the one connection.
#[derive(Clone)]
pub struct SqliteStore {
    /// Stopped when the last clone is dropped, before the connection closes (declared first, so
    /// dropped first: the writer's connection is then the last one, which checkpoints and
    /// removes the WAL); `None` for an in-memory database.
    _checkpointer: Option<Arc<Checkpointer>>,
    conn: Arc<Mutex<Connection>>,
    location: String,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path`. Does not migrate.
    pub fn open(path: &Path) -> Result<Self> {
        let location = path.display().to_string();
        let conn = Connection::open(path).ctx(&format!("opening {location}"))?;
        conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)
            .ctx(&format!("configuring {location}"))?;
        let mut store = Self::configure(conn, location)?;
        store._checkpointer = Some(Arc::new(Checkpointer::start(path, &store.location)?));
        Ok(store)
    }

    /// A private in-memory database, for tests. Does not migrate.
    pub fn open_in_memory() -> Result<Self> {
        let conn = Connection::open_in_memory().ctx("opening an in-memory database")?;
        Self::configure(conn, ":memory:".to_string())
    }

    fn configure(conn: Connection, location: String) -> Result<Self> {
        let what = format!("configuring {location}");
        conn.busy_timeout(BUSY_TIMEOUT).ctx(&what)?;
        // `journal_mode` answers with the mode in force (`memory` for an in-memory database).
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .ctx(&what)?;
        tracing::debug!(%location, journal_mode = %mode, "sqlite store opened");
        conn.pragma_update(None, "synchronous", "NORMAL")
            .ctx(&what)?;
        conn.pragma_update(None, "foreign_keys", true).ctx(&what)?;
        // The job table of a large session does not fit SQLite's default 2 MiB page cache, and
        // every miss is a read system call; 64 MiB of cache and a memory map keep the hot pages
        // in process (measured: the embedded dispatch benchmark spent a third of its time in
        // the kernel copying pages before this).
        conn.pragma_update(None, "cache_size", -65536).ctx(&what)?;
        conn.pragma_update(None, "mmap_size", 1i64 << 30)
            .ctx(&what)?;
        conn.pragma_update(None, "temp_store", "MEMORY")
            .ctx(&what)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            location,
            _checkpointer: None,
        })
    }

    /// The schema version recorded in the database (0 for a database never migrated).
    pub async fn schema_version(&self) -> Result<u32> {
        self.run("reading the schema version", |conn| {
            let what = "reading the schema version";
            let has: i64 = conn
                .query_row(queries::HAS_SCHEMA_VERSION, [], |r| r.get(0))
                .ctx(what)?;
            if has == 0 {
                return Ok(0);
            }
            conn.query_row(queries::SCHEMA_VERSION, [], |r| r.get(0))
                .ctx(what)
        })
        .await
    }

    /// The database's size in bytes, `page_count × page_size` (the file's size once the WAL is
    /// checkpointed into it): what `shoal-bench dispatch` divides by its jobs.
    pub async fn database_bytes(&self) -> Result<u64> {
        self.run("reading the database size", |conn| {
            let what = "reading the database size";
            let pages: i64 = conn
                .query_row("PRAGMA page_count", [], |r| r.get(0))
                .ctx(what)?;
            let size: i64 = conn
                .query_row("PRAGMA page_size", [], |r| r.get(0))
                .ctx(what)?;
            Ok(u64::try_from(pages * size).unwrap_or(0))
        })
        .await
    }

    /// Runs `f` with the connection on tokio's blocking pool.
    ///
    /// A panic inside `f` poisons the mutex, but the connection is still sound: an open
    /// transaction was rolled back when its guard dropped during the unwind. So the poison is
    /// cleared rather than turning one bug into a store that fails forever.
    async fn run<T, F>(&self, what: &'static str, f: F) -> Result<T>
    where
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut guard)
        })
        .await
        .map_err(|e| StoreError::backend(what, e))?
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn describe(&self) -> String {
        format!("sqlite:{}", self.location)
    }

    async fn migrate(&self) -> Result<u32> {
        self.run("migrating the schema", migrate).await
    }

    async fn create_session(&self, session: &NewSession) -> Result<SessionId> {
        let s = session.clone();
        self.run("creating a session", move |c| {
            ops::create_session(c, &s, now_ms())
        })
        .await
    }

    async fn session(&self, id: SessionId) -> Result<Option<Session>> {
        self.run("reading a session", move |c| ops::session(c, id))
            .await
    }

    async fn sessions(&self) -> Result<Vec<Session>> {
        self.run("listing sessions", |c| ops::sessions(c)).await
    }

    async fn find_session(&self, session: &NewSession) -> Result<Option<Session>> {
        let s = session.clone();
        self.run("finding a session", move |c| ops::find_session(c, &s))
            .await
    }

    async fn upsert_configs(&self, configs: &[NewConfig]) -> Result<Vec<(ConfigId, bool)>> {
        let configs = configs.to_vec();
        self.run("upserting configs", move |c| {
            ops::upsert_configs(c, &configs)
        })
        .await
    }

    async fn config(&self, id: ConfigId) -> Result<Option<Config>> {
        self.run("reading a config", move |c| ops::config(c, id))
            .await
    }

    async fn configs_with_tag(&self, tag: &str) -> Result<Vec<Config>> {
        let tag = tag.to_string();
        self.run("listing configs by tag", move |c| {
            ops::configs_with_tag(c, &tag)
        })
        .await
    }

    async fn upsert_solvers(&self, solvers: &[NewSolver]) -> Result<Vec<Solver>> {
        let solvers = solvers.to_vec();
        self.run("upserting solvers", move |c| {
            ops::upsert_solvers(c, &solvers)
        })
        .await
    }

    async fn solvers(&self) -> Result<Vec<Solver>> {
        self.run("listing solvers", |c| ops::solvers(c)).await
    }

    async fn set_applicability(
        &self,
        session: SessionId,
        rows: &[(ConfigId, SolverId, bool)],
    ) -> Result<()> {
        let rows = rows.to_vec();
        let now = now_ms();
        self.run("recording applicability", move |c| {
            ops::set_applicability(c, session, &rows, now)
        })
        .await
    }

    async fn applicable_solvers(
        &self,
        session: SessionId,
        config: ConfigId,
    ) -> Result<Vec<SolverId>> {
        self.run("reading applicability", move |c| {
            ops::applicable_solvers(c, session, config)
        })
        .await
    }

    async fn insert_jobs(&self, jobs: &[NewJob]) -> Result<u64> {
        let jobs = jobs.to_vec();
        self.run("inserting jobs", move |c| {
            ops::insert_jobs(c, &jobs, now_ms())
        })
        .await
    }

    async fn job(&self, id: JobId) -> Result<Option<Job>> {
        self.run("reading a job", move |c| ops::job(c, id)).await
    }

    async fn job_progress(&self, id: JobId) -> Result<Option<(JobState, u32)>> {
        self.run("reading a job's state", move |c| ops::job_progress(c, id))
            .await
    }

    async fn jobs_in_state(
        &self,
        session: SessionId,
        state: JobState,
        limit: u32,
    ) -> Result<Vec<Job>> {
        self.run("listing jobs by state", move |c| {
            ops::jobs_in_state(c, session, state, limit)
        })
        .await
    }

    async fn in_flight(&self, session: SessionId) -> Result<Vec<Job>> {
        self.run("listing in-flight jobs", move |c| {
            ops::in_flight(c, session)
        })
        .await
    }

    async fn expired_leases(&self, now_ms: i64, limit: u32) -> Result<Vec<Job>> {
        self.run("listing expired leases", move |c| {
            ops::expired_leases(c, now_ms, limit)
        })
        .await
    }

    async fn state_counts(&self, session: SessionId) -> Result<BTreeMap<JobState, u64>> {
        self.run("counting jobs by state", move |c| {
            ops::state_counts(c, session)
        })
        .await
    }

    async fn apply(&self, batch: &Batch) -> Result<Vec<bool>> {
        let batch = batch.clone();
        self.run("applying a batch", move |c| ops::apply(c, &batch, now_ms()))
            .await
    }

    async fn renew_leases(&self, renewals: &[crate::LeaseRenewal]) -> Result<u64> {
        if renewals.is_empty() {
            return Ok(0);
        }
        let renewals = renewals.to_vec();
        self.run("renewing leases", move |c| ops::renew_leases(c, &renewals))
            .await
    }

    async fn extend_leases(&self, by_ms: i64, changed_before_ms: i64) -> Result<u64> {
        self.run("extending leases", move |c| {
            ops::extend_leases(c, by_ms, changed_before_ms)
        })
        .await
    }

    async fn unsent(&self, before_ms: i64, limit: u32) -> Result<Vec<Job>> {
        self.run("reading the outbox", move |c| {
            ops::unsent(c, before_ms, limit)
        })
        .await
    }

    async fn mark_sent(&self, sent: &[shoal_model::message::JobRef]) -> Result<()> {
        if sent.is_empty() {
            return Ok(());
        }
        let sent = sent.to_vec();
        self.run("clearing sent requests from the outbox", move |c| {
            ops::mark_sent(c, &sent)
        })
        .await
    }

    async fn builds(&self, session: SessionId, keys: &[String]) -> Result<Vec<BuildRecord>> {
        let keys = keys.to_vec();
        self.run("reading builds", move |c| ops::builds(c, session, &keys))
            .await
    }

    async fn put_artifact(&self, hash: &str, bytes: &[u8]) -> Result<bool> {
        let (hash, bytes) = (hash.to_string(), bytes.to_vec());
        self.run("storing an artifact", move |c| {
            ops::put_artifact(c, &hash, &bytes, now_ms())
        })
        .await
    }

    async fn artifact(&self, hash: &str) -> Result<Option<Vec<u8>>> {
        let hash = hash.to_string();
        self.run("reading an artifact", move |c| ops::artifact(c, &hash))
            .await
    }

    async fn results(&self, job: JobId) -> Result<Vec<ResultRow>> {
        self.run("reading results", move |c| ops::results(c, job))
            .await
    }

    async fn final_results(&self, session: SessionId) -> Result<Vec<FinalResult>> {
        self.run("reading final results", move |c| {
            ops::final_results(c, session)
        })
        .await
    }

    async fn finish_times(&self, session: SessionId, since_ms: i64) -> Result<Vec<i64>> {
        self.run("reading finish times", move |c| {
            c.prepare_cached(queries::FINISH_TIMES)
                .and_then(|mut st| {
                    st.query_map(rusqlite::params![session.0, since_ms], |r| r.get(0))?
                        .collect()
                })
                .map_err(|e| StoreError::backend("reading finish times", e))
        })
        .await
    }

    async fn put_worker(&self, worker: &shoal_model::WorkerPresence) -> Result<()> {
        let worker = worker.clone();
        self.run("writing a worker's presence", move |c| {
            ops::put_worker(c, &worker)
        })
        .await
    }

    async fn workers(&self) -> Result<Vec<shoal_model::WorkerPresence>> {
        self.run("listing workers", |c| ops::workers(c)).await
    }

    async fn command_reply(&self, id: &str) -> Result<Option<shoal_model::command::CommandReply>> {
        let id = id.to_string();
        self.run("reading a command's reply", move |c| {
            let json: Option<String> = c
                .prepare_cached(crate::commands::SELECT_REPLY)
                .and_then(|mut st| st.query_row(params![id], |r| r.get(0)).optional())
                .ctx("reading a command's reply")?;
            json.map(|j| crate::commands::decode(&id, &j)).transpose()
        })
        .await
    }

    async fn cancel_session(&self, session: SessionId, cancelled_ms: i64) -> Result<bool> {
        self.run("cancelling a session", move |c| {
            let n = c
                .prepare_cached(crate::commands::CANCEL_SQLITE)
                .and_then(|mut st| st.execute(params![session.0, cancelled_ms]))
                .ctx("cancelling a session")?;
            Ok(n > 0)
        })
        .await
    }

    async fn cancelled_sessions(&self) -> Result<Vec<SessionId>> {
        self.run("listing cancelled sessions", |c| {
            c.prepare_cached(crate::commands::CANCELLED)
                .and_then(|mut st| {
                    st.query_map([], |r| r.get::<_, i64>(0))?
                        .map(|r| r.map(SessionId))
                        .collect()
                })
                .ctx("listing cancelled sessions")
        })
        .await
    }

    async fn put_command_reply(
        &self,
        reply: &shoal_model::command::CommandReply,
        applied_ms: i64,
    ) -> Result<()> {
        let json = crate::commands::encode(reply)?;
        let id = reply.id.clone();
        self.run("recording a command's reply", move |c| {
            c.prepare_cached(crate::commands::INSERT_SQLITE)
                .and_then(|mut st| st.execute(params![id, json, applied_ms]))
                .ctx("recording a command's reply")?;
            Ok(())
        })
        .await
    }

    async fn put_file_part(&self, sha256: &str, size: u64, part: u32, bytes: &[u8]) -> Result<()> {
        let (sha256, bytes) = (sha256.to_string(), bytes.to_vec());
        self.run("storing a part of a shipped file", move |c| {
            shipped::put_part(c, &sha256, size, part, &bytes)
        })
        .await
    }

    async fn file_parts_stored(&self, sha256: &str) -> Result<u32> {
        let sha256 = sha256.to_string();
        self.run("counting a shipped file's parts", move |c| {
            shipped::parts_stored(c, &sha256)
        })
        .await
    }

    async fn shipped_file(&self, sha256: &str) -> Result<Option<Vec<u8>>> {
        let sha256 = sha256.to_string();
        self.run("reading a shipped file", move |c| shipped::file(c, &sha256))
            .await
    }

    async fn forget_file(&self, sha256: &str) -> Result<()> {
        let sha256 = sha256.to_string();
        self.run("forgetting a shipped file", move |c| {
            shipped::forget(c, &sha256)
        })
        .await
    }

    async fn create_db_import(
        &self,
        import: &NewDbImport,
        records: &[DbRecord],
    ) -> Result<DbImportId> {
        let (import, records) = (import.clone(), records.to_vec());
        self.run("storing a database import", move |c| {
            db_import::create(c, &import, &records)
        })
        .await
    }

    async fn db_imports(&self) -> Result<Vec<DbImport>> {
        self.run("listing database imports", |c| db_import::imports(c))
            .await
    }

    async fn db_records(&self, import: DbImportId) -> Result<Vec<DbRecord>> {
        self.run("reading a database import's records", move |c| {
            db_import::records(c, import)
        })
        .await
    }
}
