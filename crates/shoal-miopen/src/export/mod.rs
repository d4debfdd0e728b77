//! MIOpen's databases, from a session's results to the files MIOpen reads: the one home of
//! MIOpen export in Shoal. `shoal export` calls it for a local store, the exporter role for
//! `shoal export --cluster`, `shoal golden update` to fold a session into a golden version, and
//! `shoal import-db` and `shoal miopen report` to read databases back.
//!
//! | module | what |
//! |---|---|
//! | `find_db`, `perf_db`, `kdb` | the four files, written byte-compatibly with MITuna's `export_db` (below) |
//! | [`merge`] | a session merged into existing databases without losing what they hold |
//! | [`read`] | databases read back and checked: one file, or a directory of several devices' |
//! | [`base`] | the databases of `--base DIR`, read and checked before anything is written |
//! | [`entries`] | a session's find, perf and kernel entries, from its evaluated jobs in the store |
//! | [`writing`] | which files an export writes, and writing them, merged or alone |
//! | [`selected`] | the export with `shoal export`'s options ([`export_selected`]) |
//!
//! The four files, as MIOpen ≥ 3.2 reads them (`docs/miopen-formats.md` §2–§4, §9;
//! `docs/mituna.md` §5):
//!
//! | file | writer | content |
//! |---|---|---|
//! | `<base>.HIP.fdb.txt` | [`find_db_text`] | find db: per Serialize key, the 4 fastest solvers with time, workspace, algorithm |
//! | `<base>.db.txt` | [`perf_db_text`] | text perf db: per x-joined key, `solver:params` of every tuned solver |
//! | `<base>.db` | [`write_perf_db_sqlite`] | the same perf db as SQLite (`config` + `perf_db` tables) |
//! | `<base>.kdb` | [`write_kdb`] | kernel db: bzip2'd code objects keyed by file name and compile options |
//!
//! Inputs are plain records ([`FindDbEntry`], [`PerfDbEntry`], [`KdbEntry`]) so the writers do
//! not care where results came from; [`find_entries`], [`perf_entries`] and
//! [`KdbEntry::from_kernel_object`] build them from fin's eval output, [`entries::Entries`] from
//! a session in the store. When the same (problem, solver) appears twice, the **first** record
//! wins, as in MITuna, whose query lists the newest row first: pass newest first.
//!
//! Everything is deterministic: the text files sort their lines by key (byte order) and the
//! SQLite files assign ids in the order MITuna would (problems in find-db key order).

pub mod base;
pub mod entries;
mod error;
mod find_db;
mod kdb;
pub mod merge;
mod perf_db;
pub mod read;
pub mod selected;
pub mod writing;

pub use entries::{Entries, ReadKernels};
pub use error::{ArtifactError, ExportError, GrammarError, RecordProblem, VersionError};
pub use find_db::{find_db_kept, find_db_text, format_time, FIND_DB_TOP};
pub use kdb::{check_kdb, merge_kdb, write_kdb, KDB_DDL};
pub use perf_db::{
    perf_db_text, write_perf_db_rows, write_perf_db_sqlite, PerfDbCounts, PERF_DB_DDL,
};
pub use selected::{export_selected, Which};

use crate::fin::{decode_blob, EvalResult, FinError, KernelObject};
use crate::problem::ConvConfig;

/// One measured solution of one problem: a find-db entry.
#[derive(Clone, Debug, PartialEq)]
pub struct FindDbEntry {
    pub config: ConvConfig,
    /// `SolverDbId`, e.g. `ConvBinWinogradRxSf3x2`.
    pub solver: String,
    /// Kernel time in milliseconds (fin's `float`).
    pub time_ms: f32,
    /// Workspace in bytes.
    pub workspace: u64,
    /// Directional algorithm name, e.g. `miopenConvolutionFwdAlgoWinograd`.
    pub algorithm: String,
}

/// One tuned perf config of one tunable solver for one problem: a perf-db entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfDbEntry {
    pub config: ConvConfig,
    pub solver: String,
    /// The solver's serialized `PerformanceConfig`, opaque (e.g. `16,64,8,2,2,2,4,4,4,4,8,2,16,1,4,64`).
    pub params: String,
}

/// One compiled kernel for the kernel db.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KdbEntry {
    /// Kernel source file name, with or without the `.o` MIOpen appends.
    pub kernel_file: String,
    /// Compile options without ` -mcpu=…`, bytes exactly as the compiler got them.
    pub comp_options: String,
    /// Architecture for ` -mcpu=` (e.g. `gfx90a`; any `:feature` suffix is dropped).
    pub arch: String,
    /// The **uncompressed** code object.
    pub blob: Vec<u8>,
}

impl KdbEntry {
    /// Decodes one of fin's kernel objects (base64, bzip2, md5 checked).
    pub fn from_kernel_object(obj: &KernelObject, arch: &str) -> Result<KdbEntry, FinError> {
        Ok(KdbEntry {
            kernel_file: obj.kernel_file.clone(),
            comp_options: obj.comp_options.clone(),
            arch: arch.to_string(),
            blob: decode_blob(obj)?,
        })
    }
}

/// The file names MIOpen looks for, for one architecture and CU count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportNames {
    /// `<base>.HIP.fdb.txt`
    pub find_db: String,
    /// `<base>.db`
    pub perf_db_sqlite: String,
    /// `<base>.db.txt`
    pub perf_db_text: String,
    /// `<base>.kdb`
    pub kern_db: String,
}

/// `gfx90a`, 104 → `gfx90a68.HIP.fdb.txt`, `gfx90a68.db`, `gfx90a68.db.txt`, `gfx90a68.kdb`.
pub fn file_names(arch: &str, num_cu: u32) -> ExportNames {
    let base = crate::naming::db_base_name(arch, num_cu);
    ExportNames {
        find_db: format!("{base}.HIP.fdb.txt"),
        perf_db_sqlite: format!("{base}.db"),
        perf_db_text: format!("{base}.db.txt"),
        kern_db: format!("{base}.kdb"),
    }
}

/// The kernel db's other system name: MIOpen falls back from `<base>.kdb` to `<DbId>.kdb`,
/// which is how the shipped kernel dbs are named (`gfx942.kdb`, `gfx90a.kdb`;
/// `docs/miopen-formats.md` §4.3).
pub fn shipped_kdb_name(arch: &str) -> String {
    format!("{}.kdb", crate::naming::db_id(arch))
}

/// The names of the user databases that MIOpen `version` reads from `MIOPEN_USER_DB_PATH`
/// (`docs/miopen-formats.md` §2.2, §3.1, §4.3): `<base>.<suffix>.ufdb.txt` (find db),
/// `<base>.<suffix>.udb.txt` (text perf db, MIOpen 3.2+), `<base>_1.1.0.udb` (SQLite perf db,
/// builds with SQLite perf dbs) and `<base>.ukdb` (kernel cache, read from the cache directory).
/// `version` is the MIOpen version: `3.2.0-2a1e2f3` or `3.2.0.2a1e2f3` for a release, whose
/// suffix `HIP.<major>_<minor>_<patch>_<tweak>` carries the tweak (the git hash), or `3.2.0`
/// for a `BUILD_DEV` build, whose suffix is `HIP.<major>_<minor>_<patch>` ([`UserDbNames`]
/// says which).
pub fn user_db_names(arch: &str, num_cu: u32, version: &str) -> Result<ExportNames, VersionError> {
    user_db_names_of(arch, num_cu, version).map(|n| n.names)
}

/// User-db names, and which kind of MIOpen build reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserDbNames {
    pub names: ExportNames,
    /// The names of a `BUILD_DEV` build (no tweak in the suffix); a release build reads others.
    pub build_dev: bool,
}

/// [`user_db_names`], saying whether the names are a `BUILD_DEV` build's.
pub fn user_db_names_of(
    arch: &str,
    num_cu: u32,
    version: &str,
) -> Result<UserDbNames, VersionError> {
    let parts: Vec<&str> = version.split(['.', '-']).collect();
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (suffix, build_dev) = match parts.as_slice() {
        [major, minor, patch, tweak]
            if numeric(major) && numeric(minor) && numeric(patch) && !tweak.is_empty() =>
        {
            (format!("HIP.{major}_{minor}_{patch}_{tweak}"), false)
        }
        [major, minor, patch] if numeric(major) && numeric(minor) && numeric(patch) => {
            (format!("HIP.{major}_{minor}_{patch}"), true)
        }
        _ => {
            return Err(VersionError {
                version: version.to_string(),
            })
        }
    };
    let base = crate::naming::db_base_name(arch, num_cu);
    Ok(UserDbNames {
        names: ExportNames {
            find_db: format!("{base}.{suffix}.ufdb.txt"),
            perf_db_sqlite: format!("{base}_1.1.0.udb"),
            perf_db_text: format!("{base}.{suffix}.udb.txt"),
            kern_db: format!("{base}.ukdb"),
        },
        build_dev,
    })
}

/// Find-db entries from fin's `miopen_find_eval_result` (or `miopen_perf_eval_result`) of one
/// config: every evaluated solver with a measured, non-negative time (MITuna skips
/// `kernel_time = -1`).
pub fn find_entries(config: &ConvConfig, results: &[EvalResult]) -> Vec<FindDbEntry> {
    results
        .iter()
        .filter(|r| r.evaluated)
        .filter_map(|r| {
            let time = r.time.filter(|t| *t >= 0.0)?;
            Some(FindDbEntry {
                config: config.clone(),
                solver: r.solver_name.clone(),
                time_ms: time as f32,
                workspace: r.workspace.unwrap_or(0),
                algorithm: r.algorithm.clone().unwrap_or_default(),
            })
        })
        .collect()
}

/// Perf-db entries from fin's `miopen_perf_eval_result` (or `miopen_find_eval_result`) of one
/// config: evaluated solvers with a measured time, non-empty `params`, not marked non-tunable
/// (MITuna's `kernel_time != -1`, `params != ''` and `tunable = 1` filters; the solver table
/// decides when fin does not say).
pub fn perf_entries(config: &ConvConfig, results: &[EvalResult]) -> Vec<PerfDbEntry> {
    results
        .iter()
        .filter(|r| r.evaluated && is_tunable(r) != Some(false))
        .filter(|r| r.time.is_some_and(|t| t >= 0.0))
        .filter_map(|r| {
            let params = r.params.as_deref().filter(|p| !p.is_empty())?;
            Some(PerfDbEntry {
                config: config.clone(),
                solver: r.solver_name.clone(),
                params: params.to_string(),
            })
        })
        .collect()
}

/// fin's `tunable` flag, or (older fins send none) the solver table's.
fn is_tunable(r: &EvalResult) -> Option<bool> {
    r.tunable
        .or_else(|| crate::solvers::by_name(&r.solver_name).map(|s| s.tunable))
}

/// Removes a file left by an earlier export (the writers always start from an empty file).
fn remove_existing(path: &std::path::Path) -> Result<(), ExportError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(ExportError::Io {
            path: path.display().to_string(),
            source,
        }),
    }
}
