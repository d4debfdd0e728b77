//! Conversions between MySQL rows and parameters and the domain types of `shoal_model`.
//!
//! What a value is in the columns is `crate::encoding`'s, shared with the SQLite store, so both
//! databases read the same; this file only moves it between those columns and mysql_async's
//! rows and parameters. Anything that does not convert back is an error naming the column,
//! never silently defaulted.
//!
//! Parameters are built as explicit [`Value`]s: integers always as `Value::Int`, so one
//! parameter has one type across the rows of a bulk execution (mixing signed and unsigned would
//! make the server read every row of it as unsigned).

use std::str::FromStr;

use mysql_async::prelude::FromValue;
use mysql_async::{Row, Value};
use serde::de::DeserializeOwned;
use shoal_model::{
    Config, ConfigId, FinalResult, Job, JobId, NewSession, Outcome, ResultRow, Session, SessionId,
    Solver, SolverId, UnknownName,
};

use super::labels::LabelIds;
use crate::db_import::{DbImport, DbImportId, DbRecord, NewDbImport};
use crate::encoding::{decode_outcome, outcome_columns, StoredOutcome};
use crate::{Result, StoreError};

// ---- parameters ---------------------------------------------------------------------------

pub(crate) fn int(v: impl Into<i64>) -> Value {
    Value::Int(v.into())
}

pub(crate) fn opt_int(v: Option<i64>) -> Value {
    v.map_or(Value::NULL, Value::Int)
}

pub(crate) fn text(v: &str) -> Value {
    Value::Bytes(v.as_bytes().to_vec())
}

pub(crate) fn opt_text(v: Option<&str>) -> Value {
    v.map_or(Value::NULL, text)
}

/// MySQL has no NaN or infinity: they are stored as NULL (and read back as NaN).
pub(crate) fn double(v: f64) -> Value {
    if v.is_finite() {
        Value::Double(v)
    } else {
        Value::NULL
    }
}

pub(crate) use crate::encoding::{to_i64, to_json};

// ---- reading ------------------------------------------------------------------------------

fn column_name(row: &Row, idx: usize) -> String {
    row.columns_ref()
        .get(idx)
        .map_or_else(|| format!("#{idx}"), |c| c.name_str().into_owned())
}

fn bad(row: &Row, idx: usize, why: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid(format!("reading column `{}`: {why}", column_name(row, idx)))
}

/// Takes column `idx` as `T` (use `Option<T>` for a nullable column).
pub(crate) fn get<T: FromValue>(row: &mut Row, idx: usize) -> Result<T> {
    match row.take_opt::<T, usize>(idx) {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(bad(row, idx, format!("unexpected value {:?}", e.0))),
        None => Err(bad(row, idx, "missing")),
    }
}

fn json<T: DeserializeOwned>(row: &mut Row, idx: usize) -> Result<T> {
    let text: String = get(row, idx)?;
    serde_json::from_str(&text).map_err(|e| bad(row, idx, e))
}

pub(crate) fn parsed<T: FromStr<Err = UnknownName>>(row: &mut Row, idx: usize) -> Result<T> {
    let text: String = get(row, idx)?;
    text.parse().map_err(|e: UnknownName| bad(row, idx, e))
}

fn opt_parsed<T: FromStr<Err = UnknownName>>(row: &mut Row, idx: usize) -> Result<Option<T>> {
    let text: Option<String> = get(row, idx)?;
    text.map(|t| t.parse().map_err(|e: UnknownName| bad(row, idx, e)))
        .transpose()
}

/// Reads the columns of `queries::job_row_columns!`.
pub(crate) fn job(mut row: Row) -> Result<Job> {
    let r = &mut row;
    Ok(Job {
        id: JobId(get(r, 0)?),
        session: SessionId(get(r, 1)?),
        config: ConfigId(get(r, 2)?),
        solver: SolverId(get(r, 3)?),
        compile_step: get::<String>(r, 4)?.parse().map_err(|e| bad(r, 4, e))?,
        eval_step: get::<String>(r, 5)?.parse().map_err(|e| bad(r, 5, e))?,
        compile_params: json(r, 6)?,
        run_params: json(r, 7)?,
        build_key: get(r, 8)?,
        state: parsed(r, 9)?,
        attempt: get(r, 10)?,
        retries: get(r, 11)?,
        lease_deadline_ms: get(r, 12)?,
        worker: get(r, 13)?,
        artifact: get(r, 14)?,
        failure: opt_parsed(r, 15)?,
        last_error: get(r, 16)?,
        updated_ms: get(r, 17)?,
    })
}

/// Reads the columns of `queries::session_columns!`.
pub(crate) fn session(mut row: Row) -> Result<Session> {
    let r = &mut row;
    Ok(Session {
        id: SessionId(get(r, 0)?),
        created_ms: get(r, 1)?,
        info: NewSession {
            reason: get(r, 2)?,
            arch: get(r, 3)?,
            num_cu: get(r, 4)?,
            backend: get::<String>(r, 5)?.parse().map_err(|e| bad(r, 5, e))?,
            spec: get(r, 6)?,
            spec_path: get(r, 7)?,
            library_version: get(r, 8)?,
            driver_version: get(r, 9)?,
            max_retries: get(r, 10)?,
        },
    })
}

/// Reads `id, kind, key, params`.
pub(crate) fn config(row: &mut Row) -> Result<Config> {
    Ok(Config {
        id: ConfigId(get(row, 0)?),
        kind: get(row, 1)?,
        key: get(row, 2)?,
        params: json(row, 3)?,
    })
}

/// Reads `id, name, tunable`.
pub(crate) fn solver(mut row: Row) -> Result<Solver> {
    let r = &mut row;
    Ok(Solver {
        id: SolverId(get(r, 0)?),
        name: get(r, 1)?,
        tunable: get(r, 2)?,
    })
}

/// Reads the columns of `queries::RESULTS`.
pub(crate) fn result(mut row: Row) -> Result<ResultRow> {
    let r = &mut row;
    let job = JobId(get(r, 0)?);
    let session = SessionId(get(r, 1)?);
    let attempt = get(r, 2)?;
    let worker = get(r, 3)?;
    let device = get(r, 4)?;
    let created_ms = get(r, 5)?;
    let outcome = outcome(r, 6)?.ok_or_else(|| bad(r, 6, "result row without a status"))?;
    Ok(ResultRow {
        job,
        session,
        attempt,
        outcome,
        worker,
        device,
        created_ms,
    })
}

/// Reads the columns of `queries::FINAL_RESULTS`.
pub(crate) fn final_result(mut row: Row) -> Result<FinalResult> {
    let r = &mut row;
    Ok(FinalResult {
        job: JobId(get(r, 0)?),
        config: ConfigId(get(r, 1)?),
        config_params: json(r, 2)?,
        solver: get(r, 3)?,
        compile_params: json(r, 4)?,
        run_params: json(r, 5)?,
        state: parsed(r, 6)?,
        failure: opt_parsed(r, 7)?,
        last_error: get(r, 8)?,
        outcome: outcome(r, 9)?,
        worker: get(r, 14)?,
        device: get(r, 15)?,
        eval_step: get::<String>(r, 16)?.parse().map_err(|e| bad(r, 16, e))?,
    })
}

/// The parameters of `queries::INSERT_RESULT` for one row, with the ids of its labels.
pub(crate) fn result_params(r: &ResultRow, labels: &LabelIds) -> Result<Vec<Value>> {
    let c = outcome_columns(&r.outcome)?;
    Ok(vec![
        int(r.job.0),
        int(r.attempt),
        labels.id(c.status)?,
        c.time_us.map_or(Value::NULL, double),
        opt_text(c.samples.as_deref()),
        opt_int(c.workspace),
        opt_text(c.detail.as_deref()),
        labels.id(&r.worker)?,
        labels.id(&r.device)?,
        int(r.created_ms),
    ])
}

/// Reads `status, time_us, samples, workspace, detail` starting at column `base`; a NULL status
/// (no result row on the outer side of a LEFT JOIN) is `None`. A NULL time or sample (stored for
/// NaN) reads back as NaN, as in the SQLite store ([`decode_outcome`]).
pub(crate) fn outcome(row: &mut Row, base: usize) -> Result<Option<Outcome>> {
    let stored = StoredOutcome {
        status: get(row, base)?,
        time_us: get(row, base + 1)?,
        samples: get(row, base + 2)?,
        workspace: get(row, base + 3)?,
        detail: get(row, base + 4)?,
    };
    decode_outcome(stored).map_err(|(offset, why)| bad(row, base + offset, why))
}

/// Reads the columns of `queries::DB_IMPORTS`.
pub(crate) fn db_import(mut row: Row) -> Result<DbImport> {
    let r = &mut row;
    let files: String = get(r, 4)?;
    Ok(DbImport {
        id: DbImportId(get(r, 0)?),
        info: NewDbImport {
            label: get(r, 1)?,
            arch: get(r, 2)?,
            num_cu: get(r, 3)?,
            files: crate::db_import::files_of(&files)?,
            created_ms: get(r, 5)?,
        },
        find_records: get(r, 6)?,
        perf_records: get(r, 7)?,
        configs: get(r, 8)?,
    })
}

/// Reads the columns of `queries::DB_RECORDS`.
pub(crate) fn db_record(mut row: Row) -> Result<DbRecord> {
    let r = &mut row;
    let kind: String = get(r, 0)?;
    Ok(DbRecord {
        config: get::<Option<i64>>(r, 1)?.map(ConfigId),
        key: get(r, 2)?,
        solver: get(r, 3)?,
        value: crate::db_import::value(&kind, get(r, 4)?, get(r, 5)?, get(r, 6)?, get(r, 7)?)?,
    })
}
