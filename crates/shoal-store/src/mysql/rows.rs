//! Conversions between MySQL rows and parameters and the domain types of `shoal_model`.
//!
//! The database stores names, not Rust discriminants (`compile_queued`, `build_failed`, `ok`),
//! exactly as the SQLite store does, so both databases read the same. Anything that does not
//! convert back is an error naming the column, never silently defaulted.
//!
//! Parameters are built as explicit [`Value`]s: integers always as `Value::Int`, so one
//! parameter has one type across the rows of a bulk execution (mixing signed and unsigned would
//! make the server read every row of it as unsigned).

use std::str::FromStr;

use mysql_async::prelude::FromValue;
use mysql_async::{Row, Value};
use serde::de::DeserializeOwned;
use shoal_model::{
    Config, ConfigId, FailureKind, FinalResult, Job, JobId, Measurement, NewSession, Outcome,
    ResultRow, Session, SessionId, Solver, SolverId,
};

use crate::{Result, StoreError};

/// The `status` of a result row that holds a measurement; any other status is a failure kind.
pub(crate) const STATUS_OK: &str = "ok";

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

/// Serialises a value stored as JSON text (parameters, samples).
pub(crate) fn to_json<T: serde::Serialize + ?Sized>(what: &str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| StoreError::backend(what, e))
}

/// Converts an unsigned count to a signed BIGINT, refusing what does not fit.
pub(crate) fn to_i64(what: &str, value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| StoreError::Invalid(format!("{what}: {value} is too large")))
}

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

pub(crate) fn parsed<T: FromStr<Err = String>>(row: &mut Row, idx: usize) -> Result<T> {
    let text: String = get(row, idx)?;
    text.parse().map_err(|e: String| bad(row, idx, e))
}

fn opt_parsed<T: FromStr<Err = String>>(row: &mut Row, idx: usize) -> Result<Option<T>> {
    let text: Option<String> = get(row, idx)?;
    text.map(|t| t.parse().map_err(|e: String| bad(row, idx, e)))
        .transpose()
}

/// Reads the columns of `queries::job_columns!`.
pub(crate) fn job(mut row: Row) -> Result<Job> {
    let r = &mut row;
    Ok(Job {
        id: JobId(get(r, 0)?),
        session: SessionId(get(r, 1)?),
        config: ConfigId(get(r, 2)?),
        solver: SolverId(get(r, 3)?),
        compile_step: get(r, 4)?,
        eval_step: get(r, 5)?,
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
            backend: get(r, 5)?,
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
    })
}

/// The parameters of `queries::INSERT_RESULT` for one row.
pub(crate) fn result_params(r: &ResultRow) -> Result<Vec<Value>> {
    let (status, time_us, samples, workspace, detail) = match &r.outcome {
        Outcome::Measured(m) => (
            STATUS_OK,
            double(m.time_us),
            text(&to_json("result samples", &m.samples_us)?),
            int(to_i64("result workspace", m.workspace)?),
            // For a measurement, `detail` holds the backend's details as JSON (empty: NULL).
            if m.details.is_empty() {
                Value::NULL
            } else {
                text(&to_json("result details", &m.details)?)
            },
        ),
        Outcome::Failed { kind, detail } => (
            kind.as_str(),
            Value::NULL,
            Value::NULL,
            Value::NULL,
            text(detail),
        ),
    };
    Ok(vec![
        int(r.job.0),
        int(r.session.0),
        int(r.attempt),
        text(status),
        time_us,
        samples,
        workspace,
        detail,
        text(&r.worker),
        text(&r.device),
        int(r.created_ms),
    ])
}

/// Reads `status, time_us, samples, workspace, detail` starting at column `base`; a NULL status
/// (no result row on the outer side of a LEFT JOIN) is `None`. A NULL time or sample (stored for
/// NaN) reads back as NaN, as in the SQLite store.
pub(crate) fn outcome(row: &mut Row, base: usize) -> Result<Option<Outcome>> {
    let Some(status) = get::<Option<String>>(row, base)? else {
        return Ok(None);
    };
    if status == STATUS_OK {
        let time_us: Option<f64> = get(row, base + 1)?;
        let samples: Vec<Option<f64>> = json(row, base + 2)?;
        let workspace: i64 = get(row, base + 3)?;
        let workspace = u64::try_from(workspace).map_err(|e| bad(row, base + 3, e))?;
        let details: Option<String> = get(row, base + 4)?;
        let details = match details {
            Some(text) => serde_json::from_str(&text).map_err(|e| bad(row, base + 4, e))?,
            None => Default::default(),
        };
        Ok(Some(Outcome::Measured(Measurement {
            time_us: time_us.unwrap_or(f64::NAN),
            samples_us: samples.into_iter().map(|s| s.unwrap_or(f64::NAN)).collect(),
            workspace,
            details,
        })))
    } else {
        let kind: FailureKind = status.parse().map_err(|e: String| bad(row, base, e))?;
        let detail: Option<String> = get(row, base + 4)?;
        Ok(Some(Outcome::Failed {
            kind,
            detail: detail.unwrap_or_default(),
        }))
    }
}
