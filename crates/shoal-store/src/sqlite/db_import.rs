//! The SQLite store's imported MIOpen databases (`crate::db_import` holds the rows and the
//! rules both stores share).
//!
//! An import is one `IMMEDIATE` transaction: the import row, then every record through one
//! prepared statement. A shipped find db is some 500,000 records; SQLite inserts them in a few
//! seconds this way, and a failure (or a kill) part way leaves no half import behind.

use rusqlite::{params, Connection, TransactionBehavior};

use super::ops::Ctx;
use super::queries as q;
use super::rows;
use crate::db_import::{self, DbImport, DbImportId, DbRecord, NewDbImport};
use crate::Result;

pub(super) fn create(
    conn: &mut Connection,
    import: &NewDbImport,
    records: &[DbRecord],
) -> Result<DbImportId> {
    let what = "storing a database import";
    db_import::check(import, records)?;
    let (find, perf, configs) = db_import::counts(records);
    let files = db_import::files_json(&import.files)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .ctx(what)?;
    tx.execute(
        q::INSERT_DB_IMPORT,
        params![
            import.label,
            import.arch,
            import.num_cu,
            files,
            import.created_ms,
            find as i64,
            perf as i64,
            configs as i64
        ],
    )
    .ctx(what)?;
    let id = tx.last_insert_rowid();
    {
        let mut insert = tx.prepare_cached(q::INSERT_DB_RECORD).ctx(what)?;
        for (seq, r) in records.iter().enumerate() {
            let (time_ms, workspace, algorithm, params) = r.columns();
            insert
                .execute(params![
                    id,
                    seq as i64,
                    r.kind(),
                    r.config.map(|c| c.0),
                    r.key,
                    r.solver,
                    time_ms,
                    workspace,
                    algorithm,
                    params
                ])
                .ctx(what)?;
        }
    }
    tx.commit().ctx(what)?;
    Ok(DbImportId(id))
}

pub(super) fn imports(conn: &Connection) -> Result<Vec<DbImport>> {
    conn.prepare_cached(q::DB_IMPORTS)
        .and_then(|mut st| st.query_map([], rows::db_import)?.collect())
        .ctx("listing database imports")
}

pub(super) fn records(conn: &Connection, import: DbImportId) -> Result<Vec<DbRecord>> {
    conn.prepare_cached(q::DB_RECORDS)
        .and_then(|mut st| st.query_map([import.0], rows::db_record)?.collect())
        .ctx("reading a database import's records")
}
