//! The MySQL store's imported MIOpen databases (`crate::db_import` holds the rows and the rules
//! both stores share).
//!
//! An import is one transaction: the import row, then every record through [`Ctx::bulk`] (on
//! MariaDB one round trip per megabyte of rows), so a shipped find db of some 500,000 records
//! goes in a few hundred round trips, and a failure part way leaves no half import behind.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row, Value};

use super::ops::{begin, finish, Ctx, OpResult};
use super::queries as q;
use super::rows::{self, int, opt_int, opt_text, text};
use crate::db_import::{self, DbImport, DbImportId, DbRecord, NewDbImport};
use crate::StoreError;

pub(super) async fn create(
    mut conn: Conn,
    ctx: Ctx,
    import: &NewDbImport,
    records: &[DbRecord],
) -> OpResult<DbImportId> {
    db_import::check(import, records)?;
    let (find, perf, configs) = db_import::counts(records);
    let files = db_import::files_json(&import.files)?;
    let mut tx = begin(&mut conn).await?;
    let r: OpResult<DbImportId> = async {
        let params = vec![
            text(&import.label),
            text(&import.arch),
            int(import.num_cu),
            text(&files),
            int(import.created_ms),
            int(rows::to_i64("find records", find)?),
            int(rows::to_i64("perf records", perf)?),
            int(rows::to_i64("configs", configs)?),
        ];
        tx.exec_drop(q::INSERT_DB_IMPORT, params).await?;
        let id = tx.last_insert_id().ok_or_else(|| {
            StoreError::Invalid("the server returned no id for the new database import".into())
        })?;
        let id = rows::to_i64("database import id", id)?;
        let mut values = Vec::with_capacity(records.len());
        for (seq, r) in records.iter().enumerate() {
            let (time_ms, workspace, algorithm, params) = r.columns();
            values.push(vec![
                int(id),
                int(rows::to_i64("record seq", seq as u64)?),
                text(r.kind()),
                opt_int(r.config.map(|c| c.0)),
                text(&r.key),
                text(&r.solver),
                time_ms.map_or(Value::NULL, rows::double),
                opt_int(workspace),
                opt_text(algorithm),
                opt_text(params),
            ]);
        }
        ctx.bulk(&mut tx, q::INSERT_DB_RECORD, values).await?;
        Ok(DbImportId(id))
    }
    .await;
    finish(tx, r).await
}

pub(super) async fn imports(mut conn: Conn) -> OpResult<Vec<DbImport>> {
    let found: Vec<Row> = conn.exec(q::DB_IMPORTS, ()).await?;
    Ok(found
        .into_iter()
        .map(rows::db_import)
        .collect::<crate::Result<_>>()?)
}

pub(super) async fn records(mut conn: Conn, import: DbImportId) -> OpResult<Vec<DbRecord>> {
    let found: Vec<Row> = conn.exec(q::DB_RECORDS, (import.0,)).await?;
    Ok(found
        .into_iter()
        .map(rows::db_record)
        .collect::<crate::Result<_>>()?)
}
