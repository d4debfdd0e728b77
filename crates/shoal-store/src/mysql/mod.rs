//! [`MysqlStore`]: the [`Store`] of the cluster, on MySQL or MariaDB through mysql_async.
//!
//! Why it looks the way it does:
//! - **A pool without connection reset.** mysql_async resets a connection returned to its pool
//!   by default, one more round trip that also empties the connection's prepared-statement
//!   cache (docs/rust-stack.md, pitfall P4). The store sets `reset_connection = false`: its
//!   connections carry no session state but the settings of [`SESSION_SETUP`], so each keeps
//!   its statements prepared. Any tokio runtime runs it, a current-thread one (actix's System)
//!   included, as long as the store is used on the runtime that connected it.
//! - **`apply` is a handful of round trips, whatever the batch size.** One transaction: lock the
//!   batch's jobs and read their (state, attempt) (`SELECT … FOR UPDATE`, up to 512 ids a
//!   statement), replay the batch in memory in order (each change sees those before it; exactly
//!   the compare-and-sets that match are kept), then write. Changes that leave the same
//!   (state, attempt) with the same new values go as one `UPDATE … WHERE state = ? AND
//!   attempt = ? AND id IN (…)` (a dispatch of 500 jobs is one statement); the rest go as one
//!   statement executed over all their parameter rows (MariaDB's bulk execution: one round trip,
//!   rows in order), as do the result rows and the builds. A job changed twice in one batch has
//!   its second write in a later "wave", so order holds. Every update repeats the
//!   compare-and-set in its WHERE clause, and the affected rows must add up to the number
//!   predicted, or the batch is rolled back. (MySQL, which lacks bulk execution, gets the same
//!   statements one row per round trip: correct, slower.)
//! - **READ COMMITTED.** Locking reads then see the latest commit and take no gap locks, so a
//!   batch does not block the insertion of new jobs.
//! - **Retries where they are safe.** An operation that fails because its connection broke (a
//!   killed connection, a restarted server) or because InnoDB picked it as a deadlock victim is
//!   run again on a fresh connection, as long as no commit was sent: every write runs in an
//!   explicit transaction, so a failure before the commit wrote nothing. A failure of the commit
//!   itself is reported, never retried: it may have applied.
//! - **Credentials stay in the URL.** Logs and errors name the store as
//!   `mysql://user@host:port/db` ([`Store::describe`]); mysql_async's errors do not contain the
//!   URL either.
//!
//! The SQL lives in [`queries`], row conversions in `rows`, operations in `ops`, migrations in
//! `migrate`; `sizing` checks at connect that InnoDB's buffer pool can hold the job table.

mod apply;
mod carry;
mod db_import;
mod insert_jobs;
mod labels;
mod migrate;
mod migrate_compact;
mod migrate_exec;
mod migrate_lean;
mod ops;
mod presence;
pub mod queries;
mod rows;
#[cfg(feature = "test-support")]
pub mod scratch;
mod sizing;
mod store;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts};
use shoal_model::message::JobRef;
use shoal_model::{
    Config, ConfigId, FinalResult, Job, JobId, JobState, NewConfig, NewJob, NewSession, NewSolver,
    ResultRow, Session, SessionId, Solver, SolverId,
};

use crate::encoding::now_ms;
use crate::{Batch, BuildRecord, Result, Store, StoreError};
pub use migrate::SCHEMA_VERSION;
use ops::Ctx;
#[cfg(feature = "test-support")]
pub use scratch::ScratchDb;
pub use sizing::{pool_warning, TableSize};

/// Statements every new connection runs: strict mode (a value that does not fit is an error,
/// never a truncation) and READ COMMITTED.
pub const SESSION_SETUP: &[&str] = &[
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'",
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
];

/// How many times an operation is tried when its connection breaks or it loses a deadlock.
const ATTEMPTS: u32 = 4;

/// How long taking a connection from the pool (connecting, if need be) may take.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// TLS to the server (needs the `tls` feature: rustls with the ring provider).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MysqlTls {
    /// A PEM file of CA certificates to trust besides the built-in web roots.
    pub root_cert: Option<std::path::PathBuf>,
    /// Accept a certificate for another host name (a server reached by IP, say).
    pub skip_domain_validation: bool,
    /// Accept any certificate. For tests only: it gives up on knowing who the server is.
    pub accept_invalid_certs: bool,
}

/// How [`MysqlStore::connect_with`] connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MysqlOptions {
    /// The most connections the pool opens.
    pub pool_max: usize,
    /// Connections the pool keeps open while idle.
    pub pool_min: usize,
    /// Prepared statements kept per connection.
    pub stmt_cache_size: usize,
    /// TLS to the server; `None` leaves it to the URL (`?require_ssl=true`), plaintext by default.
    pub tls: Option<MysqlTls>,
    /// Use this database instead of the one in the URL.
    pub database: Option<String>,
    /// How long [`MysqlStore::connect_with`] keeps trying while the server cannot be reached
    /// (refused, reset, shutting down). A worker restarted during a database restart then waits
    /// for it instead of exiting; a refused login or a bad URL still fails at once.
    pub connect_wait: Duration,
}

impl Default for MysqlOptions {
    fn default() -> Self {
        MysqlOptions {
            pool_max: 16,
            pool_min: 1,
            stmt_cache_size: 128,
            tls: None,
            database: None,
            connect_wait: Duration::ZERO,
        }
    }
}

/// Why one try of an operation failed, which decides whether it may be tried again.
pub(crate) enum OpError {
    /// A database error before any commit was sent: nothing of the operation was written.
    Db(mysql_async::Error),
    /// The commit itself failed: the transaction may or may not have applied.
    Commit(mysql_async::Error),
    /// Not the database's fault (bad input, a row that does not convert): final.
    Store(StoreError),
}

impl From<mysql_async::Error> for OpError {
    fn from(e: mysql_async::Error) -> Self {
        OpError::Db(e)
    }
}

impl From<StoreError> for OpError {
    fn from(e: StoreError) -> Self {
        OpError::Store(e)
    }
}

/// Errors after which a fresh try may succeed: the connection broke, or InnoDB rolled the
/// transaction back to break a deadlock or a lock wait.
fn retryable(e: &mysql_async::Error) -> bool {
    use mysql_async::{DriverError, Error, IoError};
    match e {
        // A certificate the client refuses (TLS reports it as invalid data) stays refused.
        Error::Io(IoError::Io(io)) => io.kind() != std::io::ErrorKind::InvalidData,
        #[cfg(feature = "tls")]
        Error::Io(IoError::Tls(_)) => false,
        Error::Driver(DriverError::ConnectionClosed | DriverError::PacketOutOfOrder) => true,
        // 1205 lock wait timeout, 1213 deadlock, 1053 server shutdown, 1927 connection killed,
        // 2006/2013 server gone or lost.
        Error::Server(s) => matches!(s.code, 1205 | 1213 | 1053 | 1927 | 2006 | 2013),
        _ => false,
    }
}

/// Whether `e` says the server could not be reached (the connection was refused, reset or lost,
/// the server is shutting down), as opposed to refusing us (a bad password, an unknown
/// database) or losing a lock conflict: only the first is an outage to wait out.
fn connection_lost(e: &mysql_async::Error) -> bool {
    use mysql_async::Error;
    match e {
        Error::Server(s) => matches!(s.code, 1053 | 1927 | 2006 | 2013),
        _ => retryable(e),
    }
}

/// `e` as a [`StoreError`]: [`StoreError::Unreachable`] when the server could not be reached.
fn db_error(what: impl Into<String>, e: mysql_async::Error, uncertain: bool) -> StoreError {
    if connection_lost(&e) {
        StoreError::Unreachable {
            context: what.into(),
            source: Box::new(e),
            uncertain,
        }
    } else if uncertain {
        StoreError::backend(
            format!(
                "{}: the commit failed, so it may or may not have applied",
                what.into()
            ),
            e,
        )
    } else {
        StoreError::backend(what, e)
    }
}

/// A database name the store will put in DDL: letters, digits, `_` and `$`, at most 64.
fn check_database_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if ok {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "database name `{name}`: use 1 to 64 ASCII letters, digits, `_` or `$`"
        )))
    }
}

fn parse_url(url: &str) -> Result<Opts> {
    // UrlError names a parameter or the scheme, never the URL or its password.
    Opts::from_url(url).map_err(|e| StoreError::Invalid(format!("MySQL URL: {e}")))
}

/// `mysql://user@host:port/db`: where the store is, without the password.
fn location(opts: &Opts) -> String {
    let user = opts.user().map(|u| format!("{u}@")).unwrap_or_default();
    format!(
        "mysql://{user}{}:{}/{}",
        opts.ip_or_hostname(),
        opts.tcp_port(),
        opts.db_name().unwrap_or("")
    )
}

#[cfg(feature = "tls")]
fn ssl_opts(tls: &MysqlTls) -> Result<mysql_async::SslOpts> {
    let mut ssl = mysql_async::SslOpts::default()
        .with_danger_skip_domain_validation(tls.skip_domain_validation)
        .with_danger_accept_invalid_certs(tls.accept_invalid_certs);
    if let Some(path) = &tls.root_cert {
        ssl = ssl.with_root_certs(vec![path.clone().into()]);
    }
    Ok(ssl)
}

#[cfg(not(feature = "tls"))]
fn ssl_opts(_tls: &MysqlTls) -> Result<mysql_async::SslOpts> {
    Err(StoreError::Invalid(
        "TLS to MySQL was asked for, but this build of shoal-store lacks its `tls` feature".into(),
    ))
}

/// Where an operation's connection comes from.
#[derive(Clone, Copy, Debug)]
enum Source {
    Pool,
    /// A new connection, closed when dropped.
    Dedicated,
}

/// The MySQL/MariaDB store. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct MysqlStore {
    pool: Pool,
    /// For dedicated connections (migrations). Holds the password: never logged or printed.
    opts: Opts,
    location: String,
    database: String,
    ctx: Ctx,
    /// Texts known to be labels already (`labels`): shared by the store's connections.
    labels: std::sync::Arc<labels::KnownLabels>,
}

impl std::fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlStore")
            .field("location", &self.location)
            .field("bulk", &self.ctx.bulk)
            .finish_non_exhaustive()
    }
}

impl MysqlStore {
    /// Connects to the database named in `url` (`mysql://user:password@host:port/db`) with the
    /// default [`MysqlOptions`], and checks that the server answers. Does not migrate.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, MysqlOptions::default()).await
    }

    /// [`MysqlStore::connect`] with options.
    pub async fn connect_with(url: &str, options: MysqlOptions) -> Result<Self> {
        let mut builder = OptsBuilder::from_opts(parse_url(url)?);
        if let Some(db) = &options.database {
            builder = builder.db_name(Some(db.clone()));
        }
        let constraints =
            PoolConstraints::new(options.pool_min, options.pool_max).ok_or_else(|| {
                StoreError::Invalid(format!(
                    "MySQL pool: pool_min ({}) is above pool_max ({})",
                    options.pool_min, options.pool_max
                ))
            })?;
        builder = builder
            .pool_opts(
                PoolOpts::default()
                    .with_constraints(constraints)
                    .with_reset_connection(false),
            )
            .stmt_cache_size(options.stmt_cache_size)
            .setup(SESSION_SETUP.to_vec())
            .tcp_nodelay(true);
        if let Some(tls) = &options.tls {
            builder = builder.ssl_opts(ssl_opts(tls)?);
        }
        let opts = Opts::from(builder);
        let location = location(&opts);
        let database = opts.db_name().map(str::to_string).ok_or_else(|| {
            StoreError::Invalid(format!("{location}: the MySQL URL names no database"))
        })?;
        let pool = Pool::new(opts.clone());
        let mut store = MysqlStore {
            pool,
            opts,
            location,
            database,
            ctx: Ctx { bulk: false },
            labels: Default::default(),
        };
        let deadline = tokio::time::Instant::now() + options.connect_wait;
        let mut pause = Duration::from_millis(100);
        let (version, mariadb) = loop {
            let first = store
                .run("connecting", |mut conn| async move {
                    let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
                    Ok((version.unwrap_or_default(), conn.server_version()))
                })
                .await;
            match first {
                Ok(found) => {
                    crate::patient::answered();
                    break found;
                }
                Err(e) if e.is_unreachable() && tokio::time::Instant::now() + pause < deadline => {
                    // Recorded as an outage: said once, counted, shown by operators' commands.
                    crate::patient::unanswered(&store.location, &e);
                    tracing::debug!(location = %store.location, error = %e, retry_in = ?pause,
                                    "database unreachable");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(store.located(e)),
            }
        };
        // MariaDB 10.2 and later execute a statement over many parameter rows in one request.
        store.ctx.bulk = version.contains("MariaDB") && mariadb >= (10, 2, 0);
        tracing::info!(location = %store.location, %version, bulk = store.ctx.bulk,
                       "mysql store connected");
        store.check_buffer_pool().await;
        Ok(store)
    }

    /// Creates the database `name` on the server of `url` (whose own database, if any, is
    /// ignored) if it does not exist, with the schema's character set. Needs the privilege.
    pub async fn create_database(url: &str, name: &str) -> Result<()> {
        check_database_name(name)?;
        let opts = Opts::from(OptsBuilder::from_opts(parse_url(url)?).db_name(None::<String>));
        let where_ = location(&opts);
        let what = format!("creating database `{name}` on {where_}");
        let mut conn = Conn::new(opts)
            .await
            .map_err(|e| StoreError::backend(what.clone(), e))?;
        // An identifier cannot be a bound parameter; the name was checked above.
        let sql = format!(
            "CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        );
        let r = conn.query_drop(sql).await;
        let _ = conn.disconnect().await;
        r.map_err(|e| StoreError::backend(what, e))
    }

    /// Drops the database `name` on the server of `url` with everything in it, if it exists.
    pub async fn drop_database_at(url: &str, name: &str) -> Result<()> {
        check_database_name(name)?;
        let opts = Opts::from(OptsBuilder::from_opts(parse_url(url)?).db_name(None::<String>));
        let what = format!("dropping database `{name}` on {}", location(&opts));
        let mut conn = Conn::new(opts)
            .await
            .map_err(|e| StoreError::backend(what.clone(), e))?;
        // An identifier cannot be a bound parameter; the name was checked above.
        let r = conn
            .query_drop(format!("DROP DATABASE IF EXISTS `{name}`"))
            .await;
        let _ = conn.disconnect().await;
        r.map_err(|e| StoreError::backend(what, e))
    }

    /// Drops this store's database with everything in it, and closes the pool. For tests and
    /// for ops tearing down a deployment.
    pub async fn drop_database(self) -> Result<()> {
        check_database_name(&self.database)?;
        let sql = format!("DROP DATABASE IF EXISTS `{}`", self.database);
        let r = self
            .run("dropping the database", |mut conn| {
                let sql = sql.clone();
                async move { Ok(conn.query_drop(sql).await?) }
            })
            .await;
        self.disconnect().await;
        r
    }

    /// Closes every connection of the pool. Clones of the store stop working.
    pub async fn disconnect(self) {
        if let Err(e) = self.pool.disconnect().await {
            tracing::debug!(location = %self.location, error = %e, "closing the mysql pool");
        }
    }

    /// The database this store works in.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// Whether many-row writes go as one bulk request (MariaDB) or one request per row (MySQL).
    pub fn bulk_writes(&self) -> bool {
        self.ctx.bulk
    }

    /// The schema version recorded in the database (0 for a database never migrated).
    pub async fn schema_version(&self) -> Result<u32> {
        self.run("reading the schema version", |mut conn| async move {
            migrate::schema_version(&mut conn).await
        })
        .await
    }

    /// A connection of the pool, for tests and tools that need plain SQL (the EXPLAIN test).
    /// Return it by dropping it.
    pub async fn connection(&self) -> Result<Conn> {
        self.acquire()
            .await
            .map_err(|e| StoreError::backend(format!("connecting to {}", self.location), e))
    }

    /// Adds the location to a connection failure.
    fn located(&self, e: StoreError) -> StoreError {
        match e {
            StoreError::Backend { context, source } => StoreError::Backend {
                context: format!("{context} ({})", self.location),
                source,
            },
            StoreError::Unreachable {
                context,
                source,
                uncertain,
            } => StoreError::Unreachable {
                context: format!("{context} ({})", self.location),
                source,
                uncertain,
            },
            other => other,
        }
    }

    async fn acquire(&self) -> std::result::Result<Conn, mysql_async::Error> {
        self.acquire_from(Source::Pool).await
    }

    async fn acquire_from(&self, source: Source) -> std::result::Result<Conn, mysql_async::Error> {
        let conn = async {
            match source {
                Source::Pool => self.pool.get_conn().await,
                Source::Dedicated => Conn::new(self.opts.clone()).await,
            }
        };
        match tokio::time::timeout(ACQUIRE_TIMEOUT, conn).await {
            Ok(r) => r,
            Err(_) => Err(mysql_async::Error::Io(mysql_async::IoError::Io(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no connection to {} within {} s",
                        self.location,
                        ACQUIRE_TIMEOUT.as_secs()
                    ),
                ),
            ))),
        }
    }

    /// Runs `f` on a connection of the pool; tries again on a fresh one (up to [`ATTEMPTS`]
    /// times) when it failed in a way that wrote nothing and may pass next time.
    async fn run<T, F, Fut>(&self, what: &'static str, f: F) -> Result<T>
    where
        F: Fn(Conn) -> Fut + Send + Sync,
        Fut: Future<Output = std::result::Result<T, OpError>> + Send,
        T: Send,
    {
        self.run_on(Source::Pool, what, f).await
    }

    /// [`MysqlStore::run`] on a connection from `source`.
    async fn run_on<T, F, Fut>(&self, source: Source, what: &'static str, f: F) -> Result<T>
    where
        F: Fn(Conn) -> Fut + Send + Sync,
        Fut: Future<Output = std::result::Result<T, OpError>> + Send,
        T: Send,
    {
        let mut attempt = 1;
        loop {
            let failure = match self.acquire_from(source).await {
                Ok(conn) => match f(conn).await {
                    Ok(v) => return Ok(v),
                    Err(e) => e,
                },
                Err(e) => OpError::Db(e),
            };
            match failure {
                OpError::Db(e) if attempt < ATTEMPTS && retryable(&e) => {
                    tracing::warn!(location = %self.location, error = %e, attempt,
                                   "{what}: trying again on a fresh connection");
                    tokio::time::sleep(Duration::from_millis(20 << attempt)).await;
                    attempt += 1;
                }
                OpError::Db(e) => return Err(db_error(what, e, false)),
                OpError::Commit(e) => return Err(db_error(what, e, true)),
                OpError::Store(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_never_shows_the_password() {
        let opts = parse_url("mysql://shoal:s3cret@db.example:3307/tuning").unwrap();
        assert_eq!(location(&opts), "mysql://shoal@db.example:3307/tuning");
        let e = parse_url("mysql://shoal:s3cret@db.example:notaport/x").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let e = parse_url("postgres://shoal:s3cret@db/x").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn database_names_are_checked_before_reaching_ddl() {
        assert!(check_database_name("shoal_t_1_2").is_ok());
        for bad in ["", "a`b", "a b", "x;DROP", &"a".repeat(65)] {
            assert!(check_database_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn broken_connections_and_deadlocks_are_retried_others_not() {
        let server = |code| {
            mysql_async::Error::Server(mysql_async::ServerError {
                code,
                message: String::new(),
                state: String::new(),
            })
        };
        assert!(retryable(&server(1213)));
        assert!(retryable(&server(1927)));
        assert!(!retryable(&server(1062)), "duplicate key is final");
        assert!(retryable(&mysql_async::Error::Driver(
            mysql_async::DriverError::ConnectionClosed
        )));
    }
}
