//! The MIOpen backend: drives MIOpen's tuning handle `fin` (`fin -i in.json -o out.json`) for the
//! perf-tuning steps, exactly as MITuna does, with one MIOpen user-db and cache directory per
//! worker slot (never shared between concurrent fin processes) and `HIP_VISIBLE_DEVICES` per
//! Evaluator.
//!
//! A job is one (config, solver). The compile step runs `miopen_perf_compile` for that solver and
//! the artifact is fin's compile result for it (kernel objects included), stored by content hash;
//! the eval step hands that result back to fin with `miopen_perf_eval` and reads the tuned
//! performance config, time and workspace.
//!
//! fin needs ROCm and an AMD GPU. Where it cannot run, tests point `fin` at the stand-in
//! (`crates/shoal-fin-standin`), which answers from recorded fixtures; nothing here knows the
//! difference.

use std::path::{Path, PathBuf};
use std::time::Duration;

use shoal_miopen::fin::{self, CompiledSolver, FinJob};
use shoal_miopen::ConvConfig;
use shoal_model::{FailureKind, Measurement, Outcome, Params, Step};

use crate::context::{EvalInput, RunContext};
use crate::exec::{self, Artifact};
use crate::failure::ChildStep;

/// The build key of a (config, solver) compile: the jobs MIOpen's loader makes carry it.
pub use crate::fin_process::{ask_fin, fin_env, run_fin, AskFinError, FinRunError};
pub use shoal_miopen::load::build_key;

/// The compile and eval steps of MIOpen perf tuning.
/// fin's step names.
pub const PERF_COMPILE: &str = Step::MiopenPerfCompile.as_str();
pub const PERF_EVAL: &str = Step::MiopenPerfEval.as_str();
pub const FIND_COMPILE: &str = Step::MiopenFindCompile.as_str();
pub const FIND_EVAL: &str = Step::MiopenFindEval.as_str();

/// MIOpen through fin, for one session's architecture.
#[derive(Clone, Debug)]
pub struct MiopenBackend {
    pub fin: PathBuf,
    pub arch: String,
    pub num_cu: u32,
    pub compile_timeout: Duration,
    pub eval_timeout: Duration,
}

impl MiopenBackend {
    pub fn new(fin: PathBuf, arch: &str, num_cu: u32) -> Self {
        MiopenBackend {
            fin,
            arch: arch.to_string(),
            num_cu,
            compile_timeout: Duration::from_secs(1800),
            eval_timeout: Duration::from_secs(600),
        }
    }

    /// One build per (step, config, solver): the key hashes the step, the config's find-db key
    /// and the solver name.
    pub fn build_key(
        &self,
        step: Step,
        config: &Params,
        compile: &Params,
    ) -> Result<String, BuildKeyError> {
        let conv = ConvConfig::from_params(config)?;
        let solver = solver_of(compile)?;
        Ok(build_key(step, &conv, solver))
    }

    fn job(&self, conv: ConvConfig, solver: &str, steps: &[&str]) -> FinJob {
        FinJob {
            steps: steps.iter().map(|s| s.to_string()).collect(),
            arch: self.arch.clone(),
            num_cu: self.num_cu,
            config_id: 0,
            config: conv,
            solvers: vec![solver.to_string()],
            dynamic_only: false,
            perf_compile_result: None,
            find_compile_result: None,
        }
    }

    /// A compile step for one solver: `miopen_perf_compile` (every perf config's kernels) or
    /// `miopen_find_compile` (the solution's kernels). The artifact is fin's compile result for
    /// the solver, kernel objects included, as JSON.
    pub async fn build(
        &self,
        step: Step,
        config: &Params,
        compile: &Params,
        ctx: &RunContext<'_>,
    ) -> Result<Artifact, (FailureKind, String)> {
        match step {
            Step::MiopenPerfCompile => self.build_perf(config, compile, ctx).await,
            Step::MiopenFindCompile => self.build_find(config, compile, ctx).await,
            other => Err((
                FailureKind::Infrastructure,
                format!("`{other}` is not a MIOpen compile step"),
            )),
        }
    }

    async fn build_perf(
        &self,
        config: &Params,
        compile: &Params,
        ctx: &RunContext<'_>,
    ) -> Result<Artifact, (FailureKind, String)> {
        let (conv, solver) = problem(config, compile)?;
        let job = self.job(conv, solver, &[PERF_COMPILE]);
        let out = self.run_job(job, ctx, ChildStep::Build).await?;
        let result = of_solver(&out.perf_compile, |r| &r.solver_name, solver, PERF_COMPILE)?;
        compile_verdict(result.perf_compiled, &result.reason, solver)?;
        artifact(serde_json::json!({
            "solver_name": result.solver_name,
            "perf_compiled": result.perf_compiled,
            "kernel_objects": result.kernel_objects,
        }))
    }

    /// `miopen_find_compile` for one solver (any applicable solver, tunable or not): the kernels
    /// of the solution Find would run, with its algorithm and workspace.
    async fn build_find(
        &self,
        config: &Params,
        compile: &Params,
        ctx: &RunContext<'_>,
    ) -> Result<Artifact, (FailureKind, String)> {
        let (conv, solver) = problem(config, compile)?;
        let job = self.job(conv, solver, &[FIND_COMPILE]);
        let out = self.run_job(job, ctx, ChildStep::Build).await?;
        let result = of_solver(&out.find_compile, |r| &r.solver_name, solver, FIND_COMPILE)?;
        compile_verdict(result.find_compiled, &result.reason, solver)?;
        artifact(serde_json::json!({
            "solver_name": result.solver_name,
            "find_compiled": result.find_compiled,
            "algorithm": result.algorithm.clone().unwrap_or_default(),
            "workspace": result.workspace.unwrap_or(0),
            "kernel_objects": result.kernel_objects,
        }))
    }

    /// `alloc_buf, fill_buf, miopen_perf_eval` (or `miopen_find_eval`) with the compiled
    /// kernels; the measurement carries the tuned performance config (`params`), the algorithm
    /// and the solver.
    pub async fn evaluate(&self, input: EvalInput<'_>, ctx: &RunContext<'_>) -> Outcome {
        let result = match input.step {
            Step::MiopenPerfEval => self.try_evaluate(input, ctx).await,
            Step::MiopenFindEval => self.evaluate_find(input, ctx).await,
            other => Err((
                FailureKind::Infrastructure,
                format!("`{other}` is not a MIOpen eval step"),
            )),
        };
        match result {
            Ok(m) => Outcome::Measured(m),
            Err((kind, detail)) => Outcome::failed(kind, detail),
        }
    }

    /// `alloc_buf, fill_buf, miopen_perf_eval` with the perf compile's kernels.
    async fn try_evaluate(
        &self,
        input: EvalInput<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<Measurement, (FailureKind, String)> {
        let (conv, solver) = problem(input.config, input.compile)?;
        let compiled = read_compiled(input.artifact).map_err(|e| infra(e.to_string()))?;
        let mut job = self.job(conv, solver, &["alloc_buf", "fill_buf", PERF_EVAL]);
        job.perf_compile_result = Some(vec![compiled]);
        let out = self.run_job(job, ctx, ChildStep::Run).await?;
        measurement(
            of_solver(&out.perf_eval, |r| &r.solver_name, solver, PERF_EVAL)?,
            solver,
        )
    }

    /// `alloc_buf, fill_buf, miopen_find_eval` with the solution's kernels.
    async fn evaluate_find(
        &self,
        input: EvalInput<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<Measurement, (FailureKind, String)> {
        let (conv, solver) = problem(input.config, input.compile)?;
        let at = |e: &dyn std::fmt::Display| {
            infra(format!("artifact {}: {e}", input.artifact.display()))
        };
        let bytes = std::fs::read(input.artifact).map_err(|e| at(&e))?;
        let compiled = parse_find_compiled(&bytes).map_err(|e| at(&e))?;
        let mut job = self.job(conv, solver, &["alloc_buf", "fill_buf", FIND_EVAL]);
        job.find_compile_result = Some(vec![compiled]);
        let out = self.run_job(job, ctx, ChildStep::Run).await?;
        measurement(
            of_solver(&out.find_eval, |r| &r.solver_name, solver, FIND_EVAL)?,
            solver,
        )
    }

    /// Runs fin on one job and returns its answer for that job. A build's fin that answers
    /// nonsense failed the build; a run's, the run.
    async fn run_job(
        &self,
        job: FinJob,
        ctx: &RunContext<'_>,
        step: ChildStep,
    ) -> Result<fin::FinJobOutput, (FailureKind, String)> {
        let (timeout, bad) = match step {
            ChildStep::Build => (self.compile_timeout, FailureKind::BuildFailed),
            ChildStep::Run => (self.eval_timeout, FailureKind::RunFailed),
        };
        let input = fin::input_json(&[job]);
        let text = run_fin(&self.fin, &input, ctx, timeout, step)
            .await
            .map_err(|e| (e.kind, e.detail))?;
        let out = fin::parse_output(&text).map_err(|e| (bad, format!("fin output: {e}")))?;
        out.jobs
            .into_iter()
            .next()
            .ok_or_else(|| (bad, "fin output: no job in it".to_string()))
    }
}

fn infra(e: String) -> (FailureKind, String) {
    (FailureKind::Infrastructure, e)
}

/// A job's problem and solver, from its parameters.
fn problem<'a>(
    config: &Params,
    compile: &'a Params,
) -> Result<(ConvConfig, &'a str), (FailureKind, String)> {
    let conv = ConvConfig::from_params(config).map_err(|e| infra(e.to_string()))?;
    Ok((conv, solver_of(compile).map_err(|e| infra(e.to_string()))?))
}

/// `solver`'s entry of one of fin's `<step>_result` lists, or the failure of a fin that gave
/// none (a compile step's failure is the build's, an eval step's the run's).
fn of_solver<'a, T>(
    list: &'a Option<Vec<T>>,
    name: impl Fn(&T) -> &String,
    solver: &str,
    step: &str,
) -> Result<&'a T, (FailureKind, String)> {
    let kind = if step.ends_with("_compile") {
        FailureKind::BuildFailed
    } else {
        FailureKind::RunFailed
    };
    list.iter()
        .flatten()
        .find(|r| name(r) == solver)
        .ok_or_else(|| (kind, format!("fin returned no {step}_result for {solver}")))
}

/// A compile result that did not compile: not applicable, or a failed build.
fn compile_verdict(
    compiled: bool,
    reason: &Option<String>,
    solver: &str,
) -> Result<(), (FailureKind, String)> {
    if compiled {
        return Ok(());
    }
    let reason = reason.clone().unwrap_or_default();
    let kind = if reason == "Not Applicable" {
        FailureKind::NotApplicable
    } else {
        FailureKind::BuildFailed
    };
    Err((kind, format!("{solver}: {reason}")))
}

/// A compile result as the artifact stored for its job.
fn artifact(json: serde_json::Value) -> Result<Artifact, (FailureKind, String)> {
    let raw = serde_json::to_vec(&json).map_err(|e| infra(e.to_string()))?;
    Ok(exec::pack(&raw))
}

/// The measurement of an evaluated solver, or why there is none.
fn measurement(
    result: &fin::EvalResult,
    solver: &str,
) -> Result<Measurement, (FailureKind, String)> {
    let reason = result.reason.clone().unwrap_or_default();
    match (result.evaluated, result.time) {
        (true, Some(ms)) if ms > 0.0 => {
            let mut details = Params::new();
            details.push("solver", solver);
            details.push("params", result.params.clone().unwrap_or_default());
            details.push("algorithm", result.algorithm.clone().unwrap_or_default());
            Ok(Measurement {
                time_us: ms * 1000.0,
                samples_us: vec![ms * 1000.0],
                workspace: result.workspace.unwrap_or(0),
                details,
            })
        }
        _ => Err((
            if reason == "Not Applicable" {
                FailureKind::NotApplicable
            } else {
                FailureKind::RunFailed
            },
            format!("{solver} was not evaluated: {reason}"),
        )),
    }
}

/// Why a MIOpen job has no build key: its parameters name no convolution or no solver.
#[derive(Debug, thiserror::Error)]
pub enum BuildKeyError {
    #[error(transparent)]
    Config(#[from] shoal_miopen::ConfigError),
    #[error(transparent)]
    NoSolver(#[from] NoSolver),
}

/// Compile parameters without the `solver` a MIOpen job tunes; `compile` is their text.
#[derive(Debug, thiserror::Error)]
#[error("compile parameters `{compile}` name no solver")]
pub struct NoSolver {
    pub compile: String,
}

/// Why a stored compile result could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("artifact {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("artifact {}: {source}", .path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// Parses the JSON written by [`MiopenBackend::build`] for a find compile.
pub fn parse_find_compiled(bytes: &[u8]) -> Result<fin::FindCompiledSolver, serde_json::Error> {
    #[derive(serde::Deserialize)]
    struct Stored {
        solver_name: String,
        find_compiled: bool,
        algorithm: String,
        workspace: u64,
        kernel_objects: Vec<fin::KernelObject>,
    }
    let s: Stored = serde_json::from_slice(bytes)?;
    Ok(fin::FindCompiledSolver {
        algorithm: s.algorithm,
        find_compiled: s.find_compiled,
        solver_name: s.solver_name,
        workspace: s.workspace,
        kernel_objects: s.kernel_objects,
    })
}

/// The compile result stored as a MIOpen job's artifact.
pub fn read_compiled(path: &Path) -> Result<CompiledSolver, ArtifactError> {
    let text = std::fs::read(path).map_err(|source| ArtifactError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_compiled(&text).map_err(|source| ArtifactError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses the JSON written by [`MiopenBackend::build`].
pub fn parse_compiled(bytes: &[u8]) -> Result<CompiledSolver, serde_json::Error> {
    // A find compile's artifact has `find_compiled` instead (its kernels are read the same way,
    // e.g. for the kernel db).
    #[derive(serde::Deserialize)]
    struct Stored {
        solver_name: String,
        #[serde(alias = "find_compiled")]
        perf_compiled: bool,
        kernel_objects: Vec<fin::KernelObject>,
    }
    let s: Stored = serde_json::from_slice(bytes)?;
    Ok(CompiledSolver {
        solver_name: s.solver_name,
        perf_compiled: s.perf_compiled,
        kernel_objects: s.kernel_objects,
    })
}

/// The solver a job tunes, from its compile parameters (`solver=<name>`).
pub fn solver_of(compile: &Params) -> Result<&str, NoSolver> {
    compile.get("solver").ok_or_else(|| NoSolver {
        compile: compile.to_string(),
    })
}

/// The kernels of a MIOpen job's artifact as the store holds it (packed): what an export reads
/// for the kernel db (`shoal_miopen::export::ReadKernels`).
pub fn artifact_kernels(
    packed: &[u8],
) -> Result<Vec<fin::KernelObject>, shoal_miopen::export::ArtifactError> {
    use shoal_miopen::export::ArtifactError;
    let raw = exec::unpack(packed).map_err(ArtifactError::Unpack)?;
    let compiled = parse_compiled(&raw).map_err(|e| ArtifactError::Compiled(e.into()))?;
    Ok(compiled.kernel_objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_worker_slot_gets_its_own_miopen_directories_and_gpu() {
        let dir = tempfile::tempdir().unwrap();
        let env_of = |slot: &str, gpu: Option<u32>| {
            let work = dir.path().join(slot);
            let ctx = RunContext {
                work_dir: &work,
                cpu: None,
                gpu_index: gpu,
                runner: None,
            };
            fin_env(&ctx).unwrap()
        };
        let get = |env: &[(String, String)], k: &str| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        };
        let a = env_of("compile-0", None);
        let b = env_of("compile-1", None);
        let e = env_of("eval-gpu3", Some(3));
        assert_ne!(
            get(&a, "MIOPEN_USER_DB_PATH"),
            get(&b, "MIOPEN_USER_DB_PATH")
        );
        assert_ne!(
            get(&a, "MIOPEN_CUSTOM_CACHE_DIR"),
            get(&b, "MIOPEN_CUSTOM_CACHE_DIR")
        );
        assert_eq!(get(&a, "HIP_VISIBLE_DEVICES"), None, "compiles see no GPU");
        assert_eq!(get(&e, "HIP_VISIBLE_DEVICES").as_deref(), Some("3"));
        assert_eq!(get(&a, "MIOPEN_FIND_MODE").as_deref(), Some("1"));
        assert!(std::path::Path::new(&get(&e, "MIOPEN_USER_DB_PATH").unwrap()).is_dir());
    }
}
