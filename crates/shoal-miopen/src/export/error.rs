//! Why reading, merging or writing MIOpen's databases failed: one error for the whole export
//! tree, from a line of a file that does not follow MIOpen's grammar to a job whose artifact is
//! not in the store. Each says the file, option, job or line at fault in the words the CLI
//! prints (its `--base`, `--tag`, `--user-db`), and carries its cause as its source.

use std::path::PathBuf;

use shoal_model::{ConfigId, JobId};

/// A line of a find or perf db (`KEY=VALUE;VALUE…`) that does not follow MIOpen's grammar.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    /// The last line has no newline: MIOpen and MITuna end every line with one.
    #[error("line {line}: no end of line: the file is truncated")]
    Truncated { line: usize },
    #[error("line {line}: no `=` between key and records")]
    NoEquals { line: usize },
    #[error("line {line}: empty key")]
    EmptyKey { line: usize },
    /// A find-db record that is not `SOLVER:TIME,WORKSPACE,ALGO`.
    #[error("line {line}: record `{record}`: {problem}")]
    Record {
        line: usize,
        record: String,
        problem: RecordProblem,
    },
    /// A perf-db pair that is not `SOLVER:PARAMS`.
    #[error("line {line}: pair `{pair}`: no `:` after the solver")]
    Pair { line: usize, pair: String },
}

/// What is wrong with a find-db record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordProblem {
    #[error("no `:` after the solver")]
    NoSolver,
    #[error("not TIME,WORKSPACE,ALGO")]
    Fields,
    #[error("the algorithm is not a miopenConvolution… name")]
    Algorithm,
    #[error("time is not a number")]
    Time,
    #[error("workspace is not a count")]
    Workspace,
}

/// A MIOpen version the user databases cannot be named for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "MIOpen version `{version}`: user-db names need major.minor.patch and, for a release build, \
     the tweak (e.g. 3.2.0-2a1e2f3, from MIOpen's version.h; 3.2.0 names a BUILD_DEV build's)"
)]
pub struct VersionError {
    pub version: String,
}

/// Why a job's stored artifact gave no kernels (see [`super::ReadKernels`]).
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The stored bytes do not unpack.
    #[error("not a packed artifact: {0}")]
    Unpack(#[source] std::io::Error),
    /// The unpacked bytes are not a MIOpen compile result.
    #[error("not a MIOpen compile result: {0}")]
    Compiled(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Reading, merging or writing MIOpen's databases failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// A perf-db key that does not have the 24 `x`-separated fields of a `config` row.
    #[error("perf-db key {0:?} does not split into the 24 columns of a config row")]
    BadKey(String),
    #[error(transparent)]
    Store(#[from] shoal_store::StoreError),
    /// An output file or directory (`shoal_export::files::OutputDir`).
    #[error(transparent)]
    Output(#[from] shoal_export::files::OutputError),
    #[error("reading {path}: {source}", path = .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}", path = .path.display())]
    Grammar { path: PathBuf, source: GrammarError },
    #[error("{path}: not a readable perf db: sqlite: {source}", path = .path.display())]
    PerfDb {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("{path}: not a readable kernel db: sqlite: {source}", path = .path.display())]
    KernDb {
        path: PathBuf,
        source: rusqlite::Error,
    },
    /// A database of the `--base` directory cannot be read.
    #[error("--base: {0}")]
    Base(#[source] Box<ExportError>),
    #[error("--base {dir}: not a directory", dir = .dir.display())]
    BaseNotADirectory { dir: PathBuf },
    #[error(
        "--base {dir} is the output directory: the base is only read; export into another \
         directory",
        dir = .dir.display()
    )]
    BaseIsOutput { dir: PathBuf },
    /// The `--base` directory holds none of the databases looked for; `system` are MIOpen's
    /// system databases found there when `--user-db` looked for user ones.
    #[error("{}", nothing_in_base(.dir, .looked, .system))]
    NothingInBase {
        dir: PathBuf,
        looked: Vec<String>,
        system: Vec<String>,
    },
    #[error("--user-db: {0}; pass --miopen-version")]
    UserDb(#[source] VersionError),
    #[error("--tag {0}: no config carries this tag")]
    NoConfigWithTag(String),
    #[error("config {config}: {reason}")]
    Config { config: ConfigId, reason: String },
    #[error("job {0} vanished")]
    JobVanished(JobId),
    #[error("artifact {hash} of job {job} is not in the store")]
    ArtifactMissing { hash: String, job: JobId },
    #[error("artifact {hash} of job {job}: {source}")]
    Artifact {
        hash: String,
        job: JobId,
        source: ArtifactError,
    },
    #[error("job {job}: {source}")]
    Kernel {
        job: JobId,
        source: crate::fin::FinError,
    },
}

/// The message of [`ExportError::NothingInBase`].
fn nothing_in_base(dir: &std::path::Path, looked: &[String], system: &[String]) -> String {
    let mut said = format!(
        "--base {}: none of the databases to merge into is there (looked for {})",
        dir.display(),
        looked.join(", ")
    );
    if !system.is_empty() {
        said.push_str(&format!(
            ". It holds MIOpen's system databases ({}), and --user-db writes user \
             databases, which MIOpen reads on top of the system ones (a user find-db line \
             replaces the system line of its key): there is nothing to merge. Merge into \
             the system databases without --user-db, or write the user databases without \
             --base",
            system.join(", ")
        ));
    }
    said
}
