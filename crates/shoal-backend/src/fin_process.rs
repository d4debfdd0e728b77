//! Running MIOpen's `fin` as a child process: the environment MITuna gives it, one run with its
//! JSON input and output files, and the one-off questions the command inbox asks it (which
//! solvers apply to which configs). The MIOpen backend (`crate::miopen`) builds on these.

use std::path::{Path, PathBuf};
use std::time::Duration;

use shoal_miopen::fin;
use shoal_model::FailureKind;

use crate::context::RunContext;
use crate::failure::{failure_kind, missing_output, ChildFate, ChildStep};
use crate::process::{self, ChildEnd, ChildSpec};

/// Why a fin run produced no output to read.
#[derive(Debug)]
pub struct FinRunError {
    pub kind: FailureKind,
    pub detail: String,
}

/// The environment MITuna gives every fin (`get_envmt`), with this worker slot's own MIOpen
/// user-db and cache directories, and the Evaluator's GPU alone visible.
pub fn fin_env(ctx: &RunContext<'_>) -> std::io::Result<Vec<(String, String)>> {
    let user_db = ctx.work_dir.join("miopen/config/miopen");
    let cache = ctx.work_dir.join("miopen/cache");
    std::fs::create_dir_all(&user_db)?;
    std::fs::create_dir_all(&cache)?;
    let mut env = vec![
        ("MIOPEN_LOG_LEVEL".to_string(), "4".to_string()),
        ("MIOPEN_SQLITE_KERN_CACHE".to_string(), "ON".to_string()),
        (
            "MIOPEN_DEBUG_IMPLICIT_GEMM_FIND_ALL_SOLUTIONS".to_string(),
            "1".to_string(),
        ),
        ("MIOPEN_FIND_MODE".to_string(), "1".to_string()),
        (
            "MIOPEN_USER_DB_PATH".to_string(),
            user_db.display().to_string(),
        ),
        (
            "MIOPEN_CUSTOM_CACHE_DIR".to_string(),
            cache.display().to_string(),
        ),
    ];
    if let Some(gpu) = ctx.gpu_index {
        env.push(("HIP_VISIBLE_DEVICES".to_string(), gpu.to_string()));
    }
    Ok(env)
}

/// Runs `fin -i in.json -o out.json` in its own process group with a timeout, in a fresh
/// directory under the worker slot's directory, and returns the output file's text.
pub async fn run_fin(
    fin: &Path,
    input: &str,
    ctx: &RunContext<'_>,
    timeout: Duration,
    step: ChildStep,
) -> Result<String, FinRunError> {
    let infra = |detail: String| FinRunError {
        kind: FailureKind::Infrastructure,
        detail,
    };
    std::fs::create_dir_all(ctx.work_dir)
        .map_err(|e| infra(format!("creating {}: {e}", ctx.work_dir.display())))?;
    let dir = tempfile::Builder::new()
        .prefix("fin-")
        .tempdir_in(ctx.work_dir)
        .map_err(|e| {
            infra(format!(
                "temporary directory in {}: {e}",
                ctx.work_dir.display()
            ))
        })?;
    let in_path = dir.path().join("in.json");
    let out_path = dir.path().join("out.json");
    std::fs::write(&in_path, input)
        .map_err(|e| infra(format!("writing {}: {e}", in_path.display())))?;
    let mut spec = ChildSpec::new(
        vec![
            fin.display().to_string(),
            "-i".into(),
            in_path.display().to_string(),
            "-o".into(),
            out_path.display().to_string(),
        ],
        dir.path(),
        timeout,
    );
    spec.env = fin_env(ctx).map_err(|e| infra(format!("MIOpen directories: {e}")))?;
    spec.cpu = ctx.cpu;
    // Its input and output, the slot's MIOpen user-db and cache directories: all under it.
    spec.writable.push(ctx.work_dir.to_path_buf());
    let out = process::run(&spec).await.map_err(|e| FinRunError {
        kind: failure_kind(step, ChildFate::NotStarted).expect("a failure"),
        detail: format!("cannot start fin `{}` on this host: {e}", fin.display()),
    })?;
    let tail = |s: &str| -> String {
        let s = s.trim();
        let start = s.len().saturating_sub(2000);
        let start = (start..=s.len())
            .find(|i| s.is_char_boundary(*i))
            .unwrap_or(s.len());
        s[start..].to_string()
    };
    if let Some(kind) = failure_kind(step, ChildFate::Ended(&out.end)) {
        let detail = match &out.end {
            ChildEnd::TimedOut => format!("fin ran past {} s and was killed", timeout.as_secs()),
            ChildEnd::Signaled { name, .. } => {
                format!("fin was killed by {name}; stderr: {}", tail(&out.stderr))
            }
            ChildEnd::Exited(code) => {
                format!("fin exited with code {code}; stderr: {}", tail(&out.stderr))
            }
        };
        return Err(FinRunError { kind, detail });
    }
    std::fs::read_to_string(&out_path).map_err(|e| FinRunError {
        kind: missing_output(step),
        detail: format!(
            "fin wrote no readable output ({e}); stderr: {}",
            tail(&out.stderr)
        ),
    })
}

/// Why fin gave no answer to read ([`ask_fin`]).
#[derive(Debug, thiserror::Error)]
pub enum AskFinError {
    #[error("creating {path}: {source}", path = .path.display())]
    Scratch {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{fin} ({kind}): {detail}", fin = .fin.display())]
    Run {
        fin: PathBuf,
        kind: FailureKind,
        detail: String,
    },
    #[error("reading the output of {fin}: {source}", fin = .fin.display())]
    Output { fin: PathBuf, source: fin::FinError },
}

/// Runs `fin` on `input` in `scratch` (created if missing), with no GPU of its own and an hour
/// to answer, and reads its answer: for the steps that ask fin about configs rather than tune
/// them (`get_solvers`, `applicability`).
pub async fn ask_fin(
    fin: &Path,
    scratch: &Path,
    input: &str,
) -> Result<fin::FinOutput, AskFinError> {
    std::fs::create_dir_all(scratch).map_err(|source| AskFinError::Scratch {
        path: scratch.to_path_buf(),
        source,
    })?;
    let ctx = RunContext {
        work_dir: scratch,
        cpu: None,
        gpu_index: None,
        runner: None,
    };
    let text = run_fin(fin, input, &ctx, Duration::from_secs(3600), ChildStep::Run)
        .await
        .map_err(|e| AskFinError::Run {
            fin: fin.to_path_buf(),
            kind: e.kind,
            detail: e.detail,
        })?;
    fin::parse_output(&text).map_err(|source| AskFinError::Output {
        fin: fin.to_path_buf(),
        source,
    })
}
