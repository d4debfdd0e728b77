//! MIOpen databases imported into the store (`schemas/*/…_db_import.sql`), the same in both
//! stores: the rows, the rules both check before writing, and how a row's columns read back.
//!
//! Why they are in the store at all: a shipped find db or perf db kept as files can only be
//! compared to a session by reading both into memory; as rows keyed by the config id a session's
//! jobs carry, it joins to the session's results in SQL (MITuna's `import_db` does the same for
//! its golden tables). An import is written whole or not at all, and never changed afterwards:
//! its counts are computed once, from its records, when it is written.

use shoal_model::ConfigId;

use crate::{Result, StoreError};

/// The id of one import of MIOpen databases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DbImportId(pub i64);

impl std::fmt::Display for DbImportId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What an import is of: the device its databases are for and the files they came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewDbImport {
    /// Why it was imported (e.g. `rocm-6.2 shipped`).
    pub label: String,
    /// The device, from the files' base name (`gfx942` for `gfx942130`).
    pub arch: String,
    pub num_cu: u32,
    /// The file names (not paths) its records came from.
    pub files: Vec<String>,
    pub created_ms: i64,
}

/// An import as stored, with counts of its records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbImport {
    pub id: DbImportId,
    pub info: NewDbImport,
    pub find_records: u64,
    pub perf_records: u64,
    /// Distinct configs its records are tied to.
    pub configs: u64,
}

/// What one record of a MIOpen database says.
#[derive(Clone, Debug, PartialEq)]
pub enum DbValue {
    /// A find-db record: `SOLVER:TIME,WORKSPACE,ALGO`.
    Find {
        time_ms: f32,
        workspace: u64,
        algorithm: String,
    },
    /// A perf-db pair: `SOLVER:PARAMS`, the params opaque.
    Perf { params: String },
}

/// One record of an imported database: one (key, solver) of a find db or of a perf db.
#[derive(Clone, Debug, PartialEq)]
pub struct DbRecord {
    /// The config the key describes, when it describes exactly one (a perf key of a strided
    /// backward problem names several; see `shoal_miopen::keys::parse_perf_db_key`).
    pub config: Option<ConfigId>,
    /// The key as the file has it: a find-db key, or an x-joined perf-db key.
    pub key: String,
    pub solver: String,
    pub value: DbValue,
}

impl DbRecord {
    /// The `kind` column: `find` or `perf`.
    pub fn kind(&self) -> &'static str {
        match self.value {
            DbValue::Find { .. } => "find",
            DbValue::Perf { .. } => "perf",
        }
    }

    /// The value columns `(time_ms, workspace, algorithm, params)`, NULL where the kind has none.
    pub(crate) fn columns(&self) -> (Option<f64>, Option<i64>, Option<&str>, Option<&str>) {
        match &self.value {
            DbValue::Find {
                time_ms,
                workspace,
                algorithm,
            } => (
                Some(f64::from(*time_ms)),
                // Checked by `check` before anything is written.
                i64::try_from(*workspace).ok(),
                Some(algorithm),
                None,
            ),
            DbValue::Perf { params } => (None, None, None, Some(params)),
        }
    }
}

/// Refuses, before anything is written, what one of the stores could not keep exactly: a time
/// that is not a finite, non-negative number (MySQL has no NaN; SQLite stores it as NULL), a
/// workspace above `i64::MAX` (SQLite's integers), an empty key or solver. Each names the record.
pub(crate) fn check(import: &NewDbImport, records: &[DbRecord]) -> Result<()> {
    if import.label.is_empty() || import.arch.is_empty() {
        return Err(StoreError::Invalid(
            "a database import needs a label and an arch".into(),
        ));
    }
    for (i, r) in records.iter().enumerate() {
        let bad = |why: &str| {
            StoreError::Invalid(format!(
                "database import record {i} (key `{}`, solver `{}`): {why}",
                r.key, r.solver
            ))
        };
        if r.key.is_empty() || r.solver.is_empty() {
            return Err(bad("empty key or solver"));
        }
        if let DbValue::Find {
            time_ms, workspace, ..
        } = &r.value
        {
            if !time_ms.is_finite() || *time_ms < 0.0 {
                return Err(bad(&format!("time {time_ms} ms is not a duration")));
            }
            if i64::try_from(*workspace).is_err() {
                return Err(bad(&format!("workspace {workspace} is too large")));
            }
        }
    }
    Ok(())
}

/// `(find records, perf records, distinct configs)` of an import's records.
pub(crate) fn counts(records: &[DbRecord]) -> (u64, u64, u64) {
    let find = records.iter().filter(|r| r.kind() == "find").count();
    let configs: std::collections::HashSet<ConfigId> =
        records.iter().filter_map(|r| r.config).collect();
    (
        find as u64,
        (records.len() - find) as u64,
        configs.len() as u64,
    )
}

/// The value of a row from its columns `(kind, time_ms, workspace, algorithm, params)`; a row
/// whose columns do not fit its kind is an error naming it, never a default.
pub(crate) fn value(
    kind: &str,
    time_ms: Option<f64>,
    workspace: Option<i64>,
    algorithm: Option<String>,
    params: Option<String>,
) -> Result<DbValue> {
    match (kind, time_ms, workspace, algorithm, params) {
        ("find", Some(t), Some(w), Some(algorithm), None) => Ok(DbValue::Find {
            // Written from an f32, so exact.
            time_ms: t as f32,
            workspace: u64::try_from(w)
                .map_err(|_| StoreError::Invalid(format!("db_record: negative workspace {w}")))?,
            algorithm,
        }),
        ("perf", None, None, None, Some(params)) => Ok(DbValue::Perf { params }),
        (kind, ..) => Err(StoreError::Invalid(format!(
            "db_record: a `{kind}` row whose value columns do not fit its kind"
        ))),
    }
}

/// The `files` column: the file names as a JSON list.
pub(crate) fn files_json(files: &[String]) -> Result<String> {
    serde_json::to_string(files)
        .map_err(|e| StoreError::Invalid(format!("database import files: {e}")))
}

pub(crate) fn files_of(json: &str) -> Result<Vec<String>> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::Invalid(format!("db_import.files `{json}`: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(key: &str, time_ms: f32, workspace: u64) -> DbRecord {
        DbRecord {
            config: Some(ConfigId(1)),
            key: key.into(),
            solver: "S".into(),
            value: DbValue::Find {
                time_ms,
                workspace,
                algorithm: "miopenConvolutionFwdAlgoDirect".into(),
            },
        }
    }

    fn import() -> NewDbImport {
        NewDbImport {
            label: "l".into(),
            arch: "gfx942".into(),
            num_cu: 304,
            files: vec![],
            created_ms: 0,
        }
    }

    #[test]
    fn what_a_store_cannot_keep_exactly_is_refused_by_record() {
        assert!(check(&import(), &[find("K", 0.5, 0)]).is_ok());
        for (r, why) in [
            (find("K", f32::NAN, 0), "not a duration"),
            (find("K", -1.0, 0), "not a duration"),
            (find("K", 1.0, u64::MAX), "too large"),
            (find("", 1.0, 0), "empty key"),
        ] {
            let e = check(&import(), &[find("K", 1.0, 0), r]).unwrap_err();
            assert!(
                e.to_string().contains("record 1") && e.to_string().contains(why),
                "{e}"
            );
        }
    }

    #[test]
    fn rows_read_back_only_as_their_kind() {
        let r = find("K", 0.051639, 7);
        let (t, w, a, p) = r.columns();
        let back = value("find", t, w, a.map(String::from), p.map(String::from)).unwrap();
        assert_eq!(back, r.value, "an f32 time survives the f64 column exactly");
        assert!(value("find", None, Some(0), Some("a".into()), None).is_err());
        assert!(value("perf", Some(1.0), None, None, Some("p".into())).is_err());
        assert!(value("kernel", None, None, None, Some("p".into())).is_err());
        assert_eq!(
            counts(&[
                r.clone(),
                r,
                DbRecord {
                    config: None,
                    ..find("P", 1.0, 0)
                }
            ]),
            (3, 0, 1)
        );
    }
}
