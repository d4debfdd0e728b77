//! Migrations for SQLite: the files of `schemas/sqlite/`, applied in order and recorded in
//! `schema_version`, all pending ones in one transaction, so a migration is applied whole or not
//! at all.

use rusqlite::{Connection, TransactionBehavior};

use super::ops::Ctx;
use super::queries;
use crate::encoding::now_ms;
use crate::{Result, StoreError};

/// The migrations this build knows, in order: (version, SQL). Never edit a released one.
pub(super) const MIGRATIONS: &[(u32, &str)] = &[
    (1, include_str!("../../../../schemas/sqlite/0001_init.sql")),
    (
        2,
        include_str!("../../../../schemas/sqlite/0002_applicability.sql"),
    ),
    (
        3,
        include_str!("../../../../schemas/sqlite/0003_job_state_check.sql"),
    ),
    (
        4,
        include_str!("../../../../schemas/sqlite/0004_outbox.sql"),
    ),
    (
        5,
        include_str!("../../../../schemas/sqlite/0005_search_states.sql"),
    ),
    (
        6,
        include_str!("../../../../schemas/sqlite/0006_worker.sql"),
    ),
    (
        7,
        include_str!("../../../../schemas/sqlite/0007_command.sql"),
    ),
    (
        8,
        include_str!("../../../../schemas/sqlite/0008_session_cancel.sql"),
    ),
    (
        9,
        include_str!("../../../../schemas/sqlite/0009_shipped_file.sql"),
    ),
    (
        10,
        include_str!("../../../../schemas/sqlite/0010_db_import.sql"),
    ),
    (
        11,
        include_str!("../../../../schemas/sqlite/0011_claim_oldest_first.sql"),
    ),
    (
        12,
        include_str!("../../../../schemas/sqlite/0012_exec_backend.sql"),
    ),
];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: u32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

pub(super) fn migrate(conn: &mut Connection) -> Result<u32> {
    let what = "migrating the schema";
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .ctx(what)?;
    tx.execute_batch(queries::CREATE_SCHEMA_VERSION).ctx(what)?;
    let found: u32 = tx
        .query_row(queries::SCHEMA_VERSION, [], |r| r.get(0))
        .ctx(what)?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found,
            known: SCHEMA_VERSION,
        });
    }
    for &(version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > found) {
        let what = format!("applying migration {version}");
        tx.execute_batch(sql).ctx(&what)?;
        tx.execute(queries::INSERT_SCHEMA_VERSION, (version, now_ms()))
            .ctx(&what)?;
        tracing::debug!(version, "applied sqlite migration");
    }
    tx.commit().ctx(what)?;
    Ok(SCHEMA_VERSION)
}
