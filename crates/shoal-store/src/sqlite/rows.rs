//! Conversions between SQLite rows and the domain types of `shoal_model`.
//!
//! What a value is in the columns is `crate::encoding`'s, shared with the MySQL store; this file
//! only moves it between those columns and rusqlite's rows. Anything that does not parse back
//! is reported as a conversion error naming the column, never silently defaulted.

use std::str::FromStr;

use rusqlite::types::Type;
use rusqlite::{Error, Row};
use serde::de::DeserializeOwned;
use shoal_model::{
    Config, ConfigId, FinalResult, Job, JobId, NewSession, Outcome, ResultRow, Session, SessionId,
    Solver, SolverId, UnknownName,
};

use crate::db_import::{DbImport, DbImportId, DbRecord, NewDbImport};
use crate::encoding::{decode_outcome, StoredOutcome};

pub(crate) use crate::encoding::{outcome_columns, to_i64, to_json};

fn conversion(idx: usize, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::FromSqlConversionFailure(idx, Type::Text, e.into())
}

fn json<T: DeserializeOwned>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    serde_json::from_str(&text).map_err(|e| conversion(idx, e))
}

pub(crate) fn parsed<T: FromStr<Err = UnknownName>>(
    row: &Row<'_>,
    idx: usize,
) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    text.parse().map_err(|e: UnknownName| conversion(idx, e))
}

fn opt_parsed<T: FromStr<Err = UnknownName>>(
    row: &Row<'_>,
    idx: usize,
) -> rusqlite::Result<Option<T>> {
    let text: Option<String> = row.get(idx)?;
    text.map(|t| t.parse().map_err(|e: UnknownName| conversion(idx, e)))
        .transpose()
}

/// Reads the columns of `queries::job_columns!`.
pub(crate) fn job(row: &Row<'_>) -> rusqlite::Result<Job> {
    Ok(Job {
        id: JobId(row.get(0)?),
        session: SessionId(row.get(1)?),
        config: ConfigId(row.get(2)?),
        solver: SolverId(row.get(3)?),
        compile_step: text_as(row, 4)?,
        eval_step: text_as(row, 5)?,
        compile_params: json(row, 6)?,
        run_params: json(row, 7)?,
        build_key: row.get(8)?,
        state: parsed(row, 9)?,
        attempt: row.get(10)?,
        retries: row.get(11)?,
        lease_deadline_ms: row.get(12)?,
        worker: row.get(13)?,
        artifact: row.get(14)?,
        failure: opt_parsed(row, 15)?,
        last_error: row.get(16)?,
        updated_ms: row.get(17)?,
    })
}

/// A text column read as a name of a typed value (a step, a backend); a name this build does not
/// know is a conversion error that names the column.
fn text_as<T>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let name: String = row.get(idx)?;
    name.parse().map_err(|e: T::Err| {
        rusqlite::Error::FromSqlConversionFailure(
            idx,
            rusqlite::types::Type::Text,
            e.to_string().into(),
        )
    })
}

/// Reads the columns of `queries::session_columns!`.
pub(crate) fn session(row: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        id: SessionId(row.get(0)?),
        created_ms: row.get(1)?,
        info: NewSession {
            reason: row.get(2)?,
            arch: row.get(3)?,
            num_cu: row.get(4)?,
            backend: text_as(row, 5)?,
            spec: row.get(6)?,
            spec_path: row.get(7)?,
            library_version: row.get(8)?,
            driver_version: row.get(9)?,
            max_retries: row.get(10)?,
        },
    })
}

/// Reads `id, kind, key, params`.
pub(crate) fn config(row: &Row<'_>) -> rusqlite::Result<Config> {
    Ok(Config {
        id: ConfigId(row.get(0)?),
        kind: row.get(1)?,
        key: row.get(2)?,
        params: json(row, 3)?,
    })
}

/// Reads `id, name, tunable`.
pub(crate) fn solver(row: &Row<'_>) -> rusqlite::Result<Solver> {
    Ok(Solver {
        id: SolverId(row.get(0)?),
        name: row.get(1)?,
        tunable: row.get(2)?,
    })
}

/// Reads the columns of `queries::RESULTS`.
pub(crate) fn result(row: &Row<'_>) -> rusqlite::Result<ResultRow> {
    let outcome = outcome(row, 6)?.ok_or_else(|| conversion(6, "result row without a status"))?;
    Ok(ResultRow {
        job: JobId(row.get(0)?),
        session: SessionId(row.get(1)?),
        attempt: row.get(2)?,
        worker: row.get(3)?,
        device: row.get(4)?,
        created_ms: row.get(5)?,
        outcome,
    })
}

/// Reads the columns of `queries::FINAL_RESULTS`.
pub(crate) fn final_result(row: &Row<'_>) -> rusqlite::Result<FinalResult> {
    Ok(FinalResult {
        job: JobId(row.get(0)?),
        config: ConfigId(row.get(1)?),
        config_params: json(row, 2)?,
        solver: row.get(3)?,
        compile_params: json(row, 4)?,
        run_params: json(row, 5)?,
        state: parsed(row, 6)?,
        failure: opt_parsed(row, 7)?,
        last_error: row.get(8)?,
        outcome: outcome(row, 9)?,
        worker: row.get(14)?,
        device: row.get(15)?,
        eval_step: text_as(row, 16)?,
    })
}

/// Reads `status, time_us, samples, workspace, detail` starting at column `base`; a NULL status
/// (no result row on the outer side of a LEFT JOIN) is `None`. SQLite stores a NaN REAL as NULL
/// and serde_json writes NaN as `null`; both read back as NaN ([`decode_outcome`]).
pub(crate) fn outcome(row: &Row<'_>, base: usize) -> rusqlite::Result<Option<Outcome>> {
    let stored = StoredOutcome {
        status: row.get(base)?,
        time_us: row.get(base + 1)?,
        samples: row.get(base + 2)?,
        workspace: row.get(base + 3)?,
        detail: row.get(base + 4)?,
    };
    decode_outcome(stored).map_err(|(offset, why)| conversion(base + offset, why))
}

/// Reads the columns of `queries::DB_IMPORTS`.
pub(crate) fn db_import(row: &Row<'_>) -> rusqlite::Result<DbImport> {
    let count = |idx: usize| -> rusqlite::Result<u64> {
        let n: i64 = row.get(idx)?;
        u64::try_from(n).map_err(|e| conversion(idx, e))
    };
    Ok(DbImport {
        id: DbImportId(row.get(0)?),
        info: NewDbImport {
            label: row.get(1)?,
            arch: row.get(2)?,
            num_cu: row.get(3)?,
            files: json(row, 4)?,
            created_ms: row.get(5)?,
        },
        find_records: count(6)?,
        perf_records: count(7)?,
        configs: count(8)?,
    })
}

/// Reads the columns of `queries::DB_RECORDS`; a row whose value columns do not fit its kind
/// is a conversion error of its `kind` column.
pub(crate) fn db_record(row: &Row<'_>) -> rusqlite::Result<DbRecord> {
    let kind: String = row.get(0)?;
    let value = crate::db_import::value(&kind, row.get(4)?, row.get(5)?, row.get(6)?, row.get(7)?)
        .map_err(|e| conversion(0, e))?;
    Ok(DbRecord {
        config: row.get::<_, Option<i64>>(1)?.map(ConfigId),
        key: row.get(2)?,
        solver: row.get(3)?,
        value,
    })
}
