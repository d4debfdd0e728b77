//! Whether InnoDB's buffer pool can hold the store's hot data: read once a process connects,
//! and said once per process when it cannot.
//!
//! Why it is checked at all: the job table is read and rewritten on every claim and every state
//! change, scattered over the table (jobs are claimed by build, not by id). While its pages fit
//! in the buffer pool the store runs at CPU speed; once they do not, every batch waits on disk
//! reads. Issue 35 measured it: a million jobs started at 4,600 jobs/s and fell to 830 by the
//! 300,000th, with the job table at 382 MB of data and 274 MB of indexes against MariaDB's
//! default 128 MiB pool, while 22 GB of memory sat free. Nothing in Shoal fails when that
//! happens, it only slows down, so an operator would find out by measuring; a line at start
//! names the setting instead.
//!
//! The decision is [`pool_warning`], a pure function of the figures; [`MysqlStore::check_buffer_pool`]
//! reads them. Every role's database user can read both (the pool size is a global variable any
//! user may read; `information_schema.TABLES` lists the tables a user has any grant on, and every
//! role has one on `job`: `scripts/check-privileges` checks it). A server or user that cannot
//! answer makes the check skip in silence (a debug line): it is advice, never a reason to fail.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mysql_async::prelude::Queryable;

use super::MysqlStore;
use crate::{Result, StoreError};

/// The buffer pool's size in bytes (InnoDB's global variable; no privilege needed).
const POOL_SIZE: &str = "SELECT @@innodb_buffer_pool_size";

/// The store's tables with their data and index bytes, as InnoDB's statistics estimate them.
/// Only the tables the user has some grant on are listed.
const TABLE_SIZES: &str = "SELECT TABLE_NAME, DATA_LENGTH, INDEX_LENGTH \
     FROM information_schema.TABLES \
     WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME";

/// The table whose size decides: the one every claim and state change reads and rewrites.
const HOT_TABLE: &str = "job";

/// The warning fires when the pool is smaller than this fraction of the hot table (data plus
/// indexes): below half, most of a batch's pages are not in memory, and the measurements of
/// issue 35 had already lost most of their speed there.
const HOT_SHARE: f64 = 0.5;

/// How long the check may delay a connect before it is given up.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether this process has said it already: once is enough for a log, and every connect of a
/// process (a pool per store, tests with many stores) would otherwise repeat it.
static WARNED: AtomicBool = AtomicBool::new(false);

/// One table of the store and its size on the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableSize {
    pub name: String,
    pub data_bytes: u64,
    pub index_bytes: u64,
}

impl TableSize {
    pub fn bytes(&self) -> u64 {
        self.data_bytes + self.index_bytes
    }
}

/// `n` bytes for a person: MiB below a GiB, GiB above, one decimal.
fn human(n: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let mib = n as f64 / MIB;
    if mib < 1024.0 {
        format!("{mib:.1} MiB")
    } else {
        format!("{:.1} GiB", mib / 1024.0)
    }
}

/// The warning to log when a buffer pool of `pool_bytes` is too small for the store's `tables`,
/// or `None`: when the pool holds at least half of the job table, or when the job table is not
/// among `tables` (a user without a grant on it sees nothing to judge).
pub fn pool_warning(pool_bytes: u64, tables: &[TableSize]) -> Option<String> {
    let job = tables.iter().find(|t| t.name == HOT_TABLE)?;
    if pool_bytes as f64 >= job.bytes() as f64 * HOT_SHARE {
        return None;
    }
    let all: u64 = tables.iter().map(TableSize::bytes).sum();
    Some(format!(
        "InnoDB's buffer pool (innodb_buffer_pool_size = {}) is less than half of the job table \
         ({} of data + {} of indexes = {}; {} in all the store's tables): claims and state \
         changes will wait on disk reads and dispatch slows down as the table grows. Raise \
         innodb_buffer_pool_size on the database server (see deploy/README.md, \"Sizing \
         InnoDB\")",
        human(pool_bytes),
        human(job.data_bytes),
        human(job.index_bytes),
        human(job.bytes()),
        human(all),
    ))
}

impl MysqlStore {
    /// The store's tables (those this user may see) and their sizes, from InnoDB's statistics,
    /// which lag behind recent writes: [`MysqlStore::analyze_tables`] refreshes them.
    pub async fn table_sizes(&self) -> Result<Vec<TableSize>> {
        let mut conn = self.connection().await?;
        let rows: Vec<(String, Option<u64>, Option<u64>)> = conn
            .exec(TABLE_SIZES, (self.database.as_str(),))
            .await
            .map_err(|e| {
                StoreError::backend(format!("reading the tables' sizes ({})", self.location), e)
            })?;
        Ok(rows
            .into_iter()
            .map(|(name, data, index)| TableSize {
                name,
                data_bytes: data.unwrap_or(0),
                index_bytes: index.unwrap_or(0),
            })
            .collect())
    }

    /// Recomputes InnoDB's statistics of every table of the store (`ANALYZE TABLE`), so that
    /// [`MysqlStore::table_sizes`] counts what was just written. For benchmarks: it reads each
    /// table's page counts, a few milliseconds a table.
    pub async fn analyze_tables(&self) -> Result<()> {
        let tables = self.table_sizes().await?;
        let mut conn = self.connection().await?;
        for t in tables {
            // An identifier cannot be a bound parameter: the name, read from the server, is
            // checked as the database's name is before it reaches the statement.
            super::check_database_name(&t.name)?;
            conn.query_drop(format!("ANALYZE TABLE `{}`", t.name))
                .await
                .map_err(|e| {
                    StoreError::backend(
                        format!("analyzing table `{}` ({})", t.name, self.location),
                        e,
                    )
                })?;
        }
        Ok(())
    }

    /// Reads the pool's size and the tables' and warns, once per process, when the pool is too
    /// small ([`pool_warning`]). Quiet when it cannot read them; bounded by [`CHECK_TIMEOUT`].
    pub(super) async fn check_buffer_pool(&self) {
        if WARNED.load(Ordering::Relaxed) {
            return;
        }
        let figures = async {
            let mut conn = self.acquire().await?;
            let pool: Option<u64> = conn.query_first(POOL_SIZE).await?;
            let rows: Vec<(String, Option<u64>, Option<u64>)> =
                conn.exec(TABLE_SIZES, (self.database.as_str(),)).await?;
            Ok::<_, mysql_async::Error>((pool, rows))
        };
        let (pool, rows) = match tokio::time::timeout(CHECK_TIMEOUT, figures).await {
            Ok(Ok((Some(pool), rows))) => (pool, rows),
            Ok(Ok((None, _))) => return,
            Ok(Err(e)) => {
                tracing::debug!(location = %self.location, error = %e,
                                "buffer pool size not checked");
                return;
            }
            Err(_) => {
                tracing::debug!(location = %self.location, "buffer pool size not checked: timed out");
                return;
            }
        };
        let tables: Vec<TableSize> = rows
            .into_iter()
            .map(|(name, data, index)| TableSize {
                name,
                data_bytes: data.unwrap_or(0),
                index_bytes: index.unwrap_or(0),
            })
            .collect();
        if let Some(message) = pool_warning(pool, &tables) {
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(location = %self.location, pool_bytes = pool, "{message}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn table(name: &str, data_mib: u64, index_mib: u64) -> TableSize {
        TableSize {
            name: name.into(),
            data_bytes: data_mib * MIB,
            index_bytes: index_mib * MIB,
        }
    }

    #[test]
    fn the_measured_case_of_issue_35_warns_naming_both_figures_and_the_setting() {
        // 382 MB of data and 274 MB of indexes against the default 128 MiB pool.
        let tables = [table("job", 364, 261), table("result", 100, 20)];
        let m = pool_warning(128 * MIB, &tables).expect("a warning");
        assert!(m.contains("innodb_buffer_pool_size = 128.0 MiB"), "{m}");
        assert!(
            m.contains("364.0 MiB of data + 261.0 MiB of indexes = 625.0 MiB"),
            "{m}"
        );
        assert!(m.contains("745.0 MiB in all"), "{m}");
        assert!(m.contains("deploy/README.md"), "{m}");
    }

    #[test]
    fn a_pool_of_half_the_job_table_or_more_is_enough() {
        let tables = [table("job", 300, 100), table("result", 5000, 0)];
        assert_eq!(pool_warning(200 * MIB, &tables), None, "exactly half");
        assert!(
            pool_warning(200 * MIB - 1, &tables).is_some(),
            "just under half"
        );
        assert_eq!(pool_warning(6 * 1024 * MIB, &tables), None);
        // Only the job table decides: a big result table alone does not warn.
        assert_eq!(pool_warning(128 * MIB, &[table("result", 5000, 0)]), None);
    }

    #[test]
    fn without_the_job_table_in_sight_there_is_nothing_to_judge() {
        assert_eq!(pool_warning(0, &[]), None);
        assert_eq!(pool_warning(MIB, &[table("session", 900, 900)]), None);
    }

    #[test]
    fn a_fresh_store_never_warns() {
        // An empty InnoDB table still takes a page of data and a few of index.
        let empty = TableSize {
            name: "job".into(),
            data_bytes: 16 * 1024,
            index_bytes: 6 * 16 * 1024,
        };
        assert_eq!(pool_warning(128 * MIB, &[empty]), None);
    }

    #[test]
    fn sizes_read_in_mib_then_gib() {
        assert_eq!(human(128 * MIB), "128.0 MiB");
        assert_eq!(human(1536 * MIB), "1.5 GiB");
    }
}
