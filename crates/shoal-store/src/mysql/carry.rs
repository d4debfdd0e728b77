//! The second half of the migrations that rebuild `job` and `result` (10 and 11): the rows
//! carried into the new tables that the migration's file creates, and those tables swapped in.
//!
//! MySQL commits every DDL statement on its own, and a copy, a rename and a foreign key cannot
//! each be written so that running them twice is harmless. So every step here first asks the
//! catalog whether it is done: a migration cut off anywhere is finished by the next `migrate`,
//! which runs [`carry_forward`] again. The order matters:
//! 1. While `job` is still the old table: empty the new tables (a copy cut off earlier), copy
//!    (each `INSERT … SELECT` is one transaction), check that every job came through, drop the
//!    outbox's foreign key to the old `job` (a RENAME would carry it along to the old table),
//!    then swap with one RENAME of four tables, which is atomic: no reader ever sees a store
//!    without a `job`.
//! 2. Drop the old tables, and point the outbox at the new `job`.
//!
//! Each migration is one [`Rebuild`]: `migrate_lean` (10) and `migrate_compact` (11).

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::OpError;
use crate::StoreError;

/// One migration that rebuilds `job` and `result`.
pub(crate) struct Rebuild {
    pub version: u32,
    /// Counts rows (> 0) while `job` is still the table from before this migration.
    pub job_is_old: &'static str,
    /// Empty the new tables, children first.
    pub clear: &'static [&'static str],
    /// Fill what the copies join on (labels), then the new tables, in order. The statement at
    /// [`Rebuild::jobs_copy`] copies `job`; its row count must equal the old table's.
    pub copies: &'static [&'static str],
    pub jobs_copy: usize,
    /// The one RENAME of four tables.
    pub swap: &'static str,
    /// Drops the old tables, children first (`IF EXISTS`).
    pub drop_old: &'static str,
    /// The outbox's foreign key to the old `job`, and the name of the one to the new.
    pub outbox_fk_old: &'static str,
    pub outbox_fk_new: &'static str,
    /// A query that returns a true value when the server cannot hold the new tables, and why;
    /// a query the server does not know (a variable of another server) passes.
    pub server_check: Option<(&'static str, &'static str)>,
}

/// Whether a table has a foreign key of this name: (table, constraint).
const HAS_FOREIGN_KEY: &str = "SELECT COUNT(*) FROM information_schema.referential_constraints \
     WHERE constraint_schema = DATABASE() AND table_name = ? AND constraint_name = ?";

impl Rebuild {
    /// Whether `job` is still the table from before this migration. Once it is not, the
    /// migration's file must not run again: its new tables' constraint names are the
    /// swapped-in tables' now.
    pub(crate) async fn job_is_old(&self, conn: &mut Conn) -> Result<bool, OpError> {
        let n: Option<i64> = conn.exec_first(self.job_is_old, ()).await?;
        Ok(n.unwrap_or(0) > 0)
    }

    /// Refuses a server that cannot hold the new tables ([`Rebuild::server_check`]), before the
    /// migration's file runs.
    pub(crate) async fn check_server(&self, conn: &mut Conn) -> Result<(), OpError> {
        let Some((sql, why)) = self.server_check else {
            return Ok(());
        };
        match conn.exec_first::<Option<i64>, _, _>(sql, ()).await {
            Ok(Some(Some(v))) if v != 0 => Err(StoreError::Invalid(format!(
                "migration {} cannot run on this server: {why}",
                self.version
            ))
            .into()),
            _ => Ok(()),
        }
    }

    /// Finishes the migration from wherever an earlier run stopped; see the module's doc.
    pub(crate) async fn carry_forward(&self, conn: &mut Conn) -> Result<(), OpError> {
        if self.job_is_old(conn).await? {
            for clear in self.clear {
                conn.query_drop(*clear).await?;
            }
            let before: Option<i64> = conn.exec_first("SELECT COUNT(*) FROM job", ()).await?;
            let mut copied = 0;
            for (i, copy) in self.copies.iter().enumerate() {
                conn.query_drop(*copy).await?;
                if i == self.jobs_copy {
                    copied = conn.affected_rows();
                }
            }
            let before = before.unwrap_or(0);
            if i64::try_from(copied).ok() != Some(before) {
                return Err(StoreError::Invalid(format!(
                    "migration {}: {copied} of {before} jobs were copied into the new table; \
                     nothing was swapped, and the next `migrate` copies again",
                    self.version
                ))
                .into());
            }
            tracing::info!(
                jobs = copied,
                version = self.version,
                "migration: jobs copied into the new table"
            );
            if has_foreign_key(conn, "outbox", self.outbox_fk_old).await? {
                conn.query_drop(format!(
                    "ALTER TABLE outbox DROP FOREIGN KEY {}",
                    self.outbox_fk_old
                ))
                .await?;
            }
            conn.query_drop(self.swap).await?;
        }
        conn.query_drop(self.drop_old).await?;
        if !has_foreign_key(conn, "outbox", self.outbox_fk_new).await? {
            conn.query_drop(format!(
                "ALTER TABLE outbox ADD CONSTRAINT {} FOREIGN KEY (job_id) REFERENCES job (id)",
                self.outbox_fk_new
            ))
            .await?;
        }
        Ok(())
    }
}

async fn has_foreign_key(conn: &mut Conn, table: &str, name: &str) -> Result<bool, OpError> {
    let n: Option<i64> = conn.exec_first(HAS_FOREIGN_KEY, (table, name)).await?;
    Ok(n.unwrap_or(0) > 0)
}
