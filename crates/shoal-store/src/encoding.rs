//! How domain values are spread over columns: the one definition both stores use, so that a row
//! written by the SQLite store and one written by the MySQL store read the same, and a new
//! status, outcome field or timestamp column is added in one place.
//!
//! The database stores names, not Rust discriminants: a state is `compile_queued`, a failure is
//! `build_failed`, a measured result has status `ok`. So a database stays readable from its own
//! shell, and reordering an enum never corrupts old rows. Nothing here touches a driver: each
//! store turns these plain values into its own parameter and row types, and names the column
//! when a value read back does not decode.

use shoal_model::{FailureKind, JobState, Measurement, Outcome, Transition, UnknownName};

use crate::{BuildRecord, Result, StoreError};

/// The columns the SQLite store's `rows::job` reads, in its order (the MySQL store reads its
/// own, with labels: `mysql::queries::job_row_columns!`).
macro_rules! job_columns {
    () => {
        "id, session_id, config_id, solver_id, compile_step, eval_step, compile_params, \
         run_params, build_key, state, attempt, retries, lease_deadline_ms, worker, artifact, \
         failure_kind, last_error, updated_ms"
    };
}

/// The columns `rows::session` of each store reads, in its order.
macro_rules! session_columns {
    () => {
        "id, created_ms, reason, arch, num_cu, backend, spec, spec_path, library_version, \
         driver_version, max_retries"
    };
}

/// Milliseconds since the Unix epoch, the unit of every timestamp in the store.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The `status` of a result row that holds a measurement; any other status is a failure kind.
pub(crate) const STATUS_OK: &str = "ok";

/// Serialises a value stored as JSON text (parameters, samples).
pub(crate) fn to_json<T: serde::Serialize + ?Sized>(what: &str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| StoreError::backend(what, e))
}

/// Converts an unsigned count to the databases' signed 64-bit integer, refusing what does not
/// fit.
pub(crate) fn to_i64(what: &str, value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| StoreError::Invalid(format!("{what}: {value} is too large")))
}

/// The job columns stamped with the time a state is entered (`compile_queued_ms` …
/// `finished_ms`), by index: `None` for `new`, which a retry enters and which stamps nothing.
pub(crate) fn timestamp_slot(to: JobState) -> Option<usize> {
    match to {
        JobState::New | JobState::Held => None,
        JobState::CompileQueued => Some(0),
        JobState::Compiling => Some(1),
        JobState::Compiled => Some(2),
        JobState::EvalQueued => Some(3),
        JobState::Evaluating => Some(4),
        JobState::Evaluated | JobState::Errored | JobState::Skipped => Some(5),
    }
}

/// The six per-state timestamp values of an update: `now` in the column of the state entered,
/// `None` (keep what is there) in the others.
/// What a transition writes into its job's row, the job id and the compare-and-set aside: the
/// one description of a change's new values that both stores use, SQLite to fuse a chain of one
/// job's changes into one `UPDATE`, MySQL to group changes with the same new values into one.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) struct RowWrite<'a> {
    pub to: JobState,
    /// The attempt the row is left at.
    pub attempt: u32,
    /// Retries added to the row's count.
    pub retries: i64,
    pub lease_deadline_ms: Option<i64>,
    pub worker: Option<&'a str>,
    /// `None` keeps the row's artifact.
    pub artifact: Option<&'a str>,
    pub failure: Option<(FailureKind, &'a str)>,
}

impl<'a> RowWrite<'a> {
    pub fn of(t: &'a Transition) -> Self {
        RowWrite {
            to: t.to,
            attempt: t.next_attempt(),
            retries: i64::from(t.count_retry),
            lease_deadline_ms: t.lease_deadline_ms,
            worker: t.worker.as_deref(),
            artifact: t.artifact.as_deref(),
            failure: t.failure.as_ref().map(|(k, e)| (*k, e.as_str())),
        }
    }

    /// This write followed by `t`'s on the same row: `t` sets what it sets, the last artifact
    /// given is kept, and every retry counts.
    pub fn then(self, t: &'a Transition) -> Self {
        let next = RowWrite::of(t);
        RowWrite {
            retries: self.retries + next.retries,
            artifact: next.artifact.or(self.artifact),
            ..next
        }
    }
}

pub(crate) fn timestamps(to: JobState, now: i64) -> [Option<i64>; 6] {
    let slot = timestamp_slot(to);
    std::array::from_fn(|i| (slot == Some(i)).then_some(now))
}

/// How an [`Outcome`] is spread over the result columns `status, time_us, samples, workspace,
/// detail`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct OutcomeColumns {
    pub status: &'static str,
    /// Not finite is possible: a store without NaN writes NULL, which reads back as NaN.
    pub time_us: Option<f64>,
    pub samples: Option<String>,
    pub workspace: Option<i64>,
    /// A failure's detail; for a measurement, the backend's details as JSON (empty: `None`).
    pub detail: Option<String>,
}

/// The `status` column of an outcome: [`STATUS_OK`] or the failure's kind.
pub(crate) fn outcome_status(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Measured(_) => STATUS_OK,
        Outcome::Failed { kind, .. } => kind.as_str(),
    }
}

pub(crate) fn outcome_columns(outcome: &Outcome) -> Result<OutcomeColumns> {
    Ok(match outcome {
        Outcome::Measured(m) => OutcomeColumns {
            status: outcome_status(outcome),
            time_us: Some(m.time_us),
            samples: Some(to_json("result samples", &m.samples_us)?),
            workspace: Some(to_i64("result workspace", m.workspace)?),
            detail: if m.details.is_empty() {
                None
            } else {
                Some(to_json("result details", &m.details)?)
            },
        },
        Outcome::Failed { detail, .. } => OutcomeColumns {
            status: outcome_status(outcome),
            time_us: None,
            samples: None,
            workspace: None,
            detail: Some(detail.clone()),
        },
    })
}

/// The result columns as read back, before decoding.
#[derive(Clone, Debug, Default)]
pub(crate) struct StoredOutcome {
    /// `None` on the outer side of a LEFT JOIN: no result row.
    pub status: Option<String>,
    pub time_us: Option<f64>,
    pub samples: Option<String>,
    pub workspace: Option<i64>,
    pub detail: Option<String>,
}

/// Why stored result columns do not decode: the offset of the column (0 = status … 4 = detail)
/// and the reason, for the store to name the column.
pub(crate) type ColumnError = (usize, String);

/// Decodes the result columns. A NULL time or sample (stored for NaN, which neither database
/// keeps) reads back as NaN rather than making the row unreadable.
pub(crate) fn decode_outcome(
    stored: StoredOutcome,
) -> std::result::Result<Option<Outcome>, ColumnError> {
    let Some(status) = stored.status else {
        return Ok(None);
    };
    if status != STATUS_OK {
        let kind: FailureKind = status
            .parse()
            .map_err(|e: UnknownName| (0, e.to_string()))?;
        return Ok(Some(Outcome::Failed {
            kind,
            detail: stored.detail.unwrap_or_default(),
        }));
    }
    let samples: Vec<Option<f64>> = match &stored.samples {
        Some(text) => serde_json::from_str(text).map_err(|e| (2, e.to_string()))?,
        None => return Err((2, "a measurement without samples".into())),
    };
    let workspace = stored
        .workspace
        .ok_or_else(|| (3, "a measurement without a workspace".to_string()))?;
    let workspace = u64::try_from(workspace).map_err(|e| (3, e.to_string()))?;
    let details = match &stored.detail {
        Some(text) => serde_json::from_str(text).map_err(|e| (4, e.to_string()))?,
        None => Default::default(),
    };
    Ok(Some(Outcome::Measured(Measurement {
        time_us: stored.time_us.unwrap_or(f64::NAN),
        samples_us: samples.into_iter().map(|s| s.unwrap_or(f64::NAN)).collect(),
        workspace,
        details,
    })))
}

/// Decodes `(state, count)` rows of a per-state count.
pub(crate) fn decode_state_counts(
    pairs: Vec<(String, i64)>,
) -> Result<std::collections::BTreeMap<JobState, u64>> {
    pairs
        .into_iter()
        .map(|(state, n)| {
            let state = state.parse()?;
            Ok((state, n.max(0) as u64))
        })
        .collect()
}

/// How a [`BuildRecord`]'s result is spread over `artifact, failure_kind, detail`.
pub(crate) fn build_columns(b: &BuildRecord) -> (Option<&str>, Option<&'static str>, Option<&str>) {
    match &b.result {
        Ok(artifact) => (Some(artifact.as_str()), None, None),
        Err((kind, detail)) => (None, Some(kind.as_str()), Some(detail.as_str())),
    }
}

/// Decodes `artifact, failure_kind, detail` of the build `key`.
pub(crate) fn decode_build(
    session: shoal_model::SessionId,
    key: &str,
    artifact: Option<String>,
    kind: Option<String>,
    detail: Option<String>,
) -> Result<std::result::Result<String, (FailureKind, String)>> {
    match (artifact, kind) {
        (Some(a), _) => Ok(Ok(a)),
        (None, Some(k)) => {
            let k: FailureKind = k.parse()?;
            Ok(Err((k, detail.unwrap_or_default())))
        }
        (None, None) => Err(StoreError::Invalid(format!(
            "build `{key}` of session {session} has neither artifact nor failure"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_read_back_as_written() {
        let mut details = shoal_model::Params::new();
        details.push("params", "16,16");
        for outcome in [
            Outcome::Measured(Measurement {
                time_us: 12.5,
                samples_us: vec![12.0, 13.0],
                workspace: 64,
                details,
            }),
            Outcome::Measured(Measurement {
                time_us: 1.0,
                samples_us: vec![1.0],
                workspace: 0,
                details: Default::default(),
            }),
            Outcome::failed(FailureKind::Crashed, "killed by SIGSEGV"),
        ] {
            let c = outcome_columns(&outcome).unwrap();
            let back = decode_outcome(StoredOutcome {
                status: Some(c.status.to_string()),
                time_us: c.time_us,
                samples: c.samples,
                workspace: c.workspace,
                detail: c.detail,
            })
            .unwrap();
            assert_eq!(back, Some(outcome));
        }
    }

    #[test]
    fn bad_columns_are_named_never_defaulted() {
        assert_eq!(decode_outcome(StoredOutcome::default()).unwrap(), None);
        let bad = |s: StoredOutcome| decode_outcome(s).unwrap_err().0;
        let ok = || StoredOutcome {
            status: Some("ok".into()),
            samples: Some("[1.0]".into()),
            workspace: Some(0),
            ..Default::default()
        };
        assert_eq!(
            bad(StoredOutcome {
                status: Some("melted".into()),
                ..ok()
            }),
            0
        );
        assert_eq!(
            bad(StoredOutcome {
                samples: Some("[".into()),
                ..ok()
            }),
            2
        );
        assert_eq!(
            bad(StoredOutcome {
                workspace: Some(-1),
                ..ok()
            }),
            3
        );
        // NaN, stored as NULL, reads back as NaN.
        let Some(Outcome::Measured(m)) = decode_outcome(StoredOutcome {
            samples: Some("[null]".into()),
            ..ok()
        })
        .unwrap() else {
            panic!("a measurement")
        };
        assert!(m.time_us.is_nan() && m.samples_us[0].is_nan());
    }

    #[test]
    fn each_state_stamps_its_own_column() {
        assert_eq!(timestamps(JobState::New, 5), [None; 6]);
        assert_eq!(timestamps(JobState::Compiling, 5)[1], Some(5));
        assert_eq!(timestamps(JobState::Errored, 5)[5], Some(5));
        assert_eq!(
            timestamps(JobState::EvalQueued, 5)
                .iter()
                .filter(|t| t.is_some())
                .count(),
            1
        );
    }
}
