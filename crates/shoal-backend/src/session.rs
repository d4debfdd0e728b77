//! A session's backend: the one value the actors ask to compute build keys, build, and evaluate,
//! whatever the backend is. The Compiler and Evaluator hold a `SessionBackend` per session and do
//! not know whether it runs a spec's commands or MIOpen's `fin`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use shoal_model::{FailureKind, Outcome, Params};

use crate::command::{self, Artifact};
use crate::spec::{RunMode, TuningSpec};

/// Allowance in a library-mode lease for starting a runner and its device context.
const RUNNER_START: Duration = Duration::from_secs(60);

/// Where and on what a step runs.
#[derive(Clone, Debug)]
pub struct RunContext<'a> {
    /// A directory of this worker slot alone (builds, MIOpen user-db and cache directories).
    pub work_dir: &'a Path,
    /// Pin runs to this CPU core (CPU evaluation).
    pub cpu: Option<usize>,
    /// The GPU to make visible to the child (`HIP_VISIBLE_DEVICES` / `CUDA_VISIBLE_DEVICES`).
    pub gpu_index: Option<u32>,
    /// The device's long-lived runner, for library-mode specs (the Evaluator owns it).
    pub runner: Option<&'a crate::library::RunnerSlot>,
}

/// The environment that makes only GPU `index` visible to a child, by the index the GpuMonitor
/// found it at. CUDA is told to number devices in PCI order, as NVML and the sysfs walk do, not
/// fastest first.
pub fn device_env(gpu_index: Option<u32>) -> Vec<(String, String)> {
    let Some(i) = gpu_index else {
        return Vec::new();
    };
    vec![
        ("HIP_VISIBLE_DEVICES".into(), i.to_string()),
        ("CUDA_VISIBLE_DEVICES".into(), i.to_string()),
        ("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()),
    ]
}

/// One evaluation's inputs, as the Evaluator has them.
#[derive(Clone, Copy, Debug)]
pub struct EvalInput<'a> {
    pub config: &'a Params,
    pub compile: &'a Params,
    pub run: &'a Params,
    /// The compiled artifact, installed as a local file.
    pub artifact: &'a Path,
}

/// The backend of one session.
#[derive(Clone, Debug)]
pub enum SessionBackend {
    /// The command backend, with the spec registered for the session.
    Command(Arc<TuningSpec>),
    /// MIOpen through `fin`.
    Miopen(Arc<crate::miopen::MiopenBackend>),
    /// Does nothing, at once: builds an empty artifact and measures 1 µs. For measuring the
    /// machinery itself (`scripts/bench-dispatch`): every message, lease and commit is real.
    Noop,
}

/// The steps of the no-op backend.
pub const NOOP_BUILD: &str = "noop_build";
pub const NOOP_RUN: &str = "noop_run";

impl SessionBackend {
    /// The build key of a compile-time parameter set for a problem. Jobs with equal keys share
    /// one build; a worker recomputes it to check that its spec or sources match the loader's.
    pub fn build_key(&self, config: &Params, compile: &Params) -> Result<String, String> {
        match self {
            SessionBackend::Command(spec) => Ok(spec.build_key(compile)),
            SessionBackend::Miopen(m) => m.build_key(config, compile),
            SessionBackend::Noop => Ok(noop_build_key(compile)),
        }
    }

    /// Builds one artifact.
    pub async fn build(
        &self,
        config: &Params,
        compile: &Params,
        ctx: &RunContext<'_>,
    ) -> Result<Artifact, (FailureKind, String)> {
        match self {
            SessionBackend::Command(spec) => command::build(spec, compile, ctx.work_dir).await,
            SessionBackend::Miopen(m) => m.build(config, compile, ctx).await,
            SessionBackend::Noop => Ok(command::pack(b"noop")),
        }
    }

    /// Evaluates one candidate on one problem.
    pub async fn evaluate(&self, input: EvalInput<'_>, ctx: &RunContext<'_>) -> Outcome {
        match self {
            SessionBackend::Command(spec) => {
                // When and how long the evaluation held the device, kept with the measurement:
                // what a GPU-busy figure is measured over (scripts/bench-gpu-tune), and where
                // the time beyond the kernel's own went.
                let started_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or(0);
                let clock = std::time::Instant::now();
                let mut outcome = match spec.run.mode {
                    RunMode::Process => {
                        command::evaluate(
                            spec,
                            input.artifact,
                            input.config,
                            input.compile,
                            input.run,
                            ctx.cpu,
                            ctx.gpu_index,
                        )
                        .await
                    }
                    RunMode::Library => {
                        crate::library::evaluate(spec, input.artifact, input.config, input.run, ctx)
                            .await
                    }
                };
                if let Outcome::Measured(m) = &mut outcome {
                    m.details.push("eval_started_ms", started_ms.to_string());
                    m.details.push(
                        "eval_wall_us",
                        format!("{:.0}", clock.elapsed().as_secs_f64() * 1e6),
                    );
                }
                outcome
            }
            SessionBackend::Miopen(m) => m.evaluate(input, ctx).await,
            SessionBackend::Noop => Outcome::Measured(shoal_model::Measurement {
                time_us: 1.0,
                samples_us: vec![1.0],
                workspace: 0,
                details: Params::new(),
            }),
        }
    }

    /// The longest a build and a single evaluation may take, for leases.
    pub fn time_limits(&self) -> (Duration, Duration) {
        match self {
            SessionBackend::Command(spec) => match spec.run.mode {
                RunMode::Process => {
                    let runs = (spec.run.warmup + spec.run.repeat).max(1);
                    (spec.build.timeout, spec.run.timeout * runs)
                }
                // One call to the runner, plus starting a runner and a device context.
                RunMode::Library => (spec.build.timeout, spec.run.timeout + RUNNER_START),
            },
            SessionBackend::Miopen(m) => (m.compile_timeout, m.eval_timeout),
            SessionBackend::Noop => (Duration::from_secs(10), Duration::from_secs(1)),
        }
    }

    /// The (compile, eval) steps of this backend's jobs; queue names are built from them.
    pub fn steps(&self) -> (&'static str, &'static str) {
        match self {
            SessionBackend::Command(_) => (
                shoal_model::steps::COMMAND_BUILD,
                shoal_model::steps::COMMAND_RUN,
            ),
            SessionBackend::Miopen(_) => (crate::miopen::PERF_COMPILE, crate::miopen::PERF_EVAL),
            SessionBackend::Noop => (NOOP_BUILD, NOOP_RUN),
        }
    }

    /// The local path of an installed artifact keeps the name the backend wants (an executable
    /// for commands, a JSON file for fin).
    pub fn artifact_is_executable(&self) -> bool {
        matches!(self, SessionBackend::Command(_))
    }
}

/// The no-op backend's build key: the compile parameters themselves, so jobs that share them
/// share one (empty) build.
pub fn noop_build_key(compile: &Params) -> String {
    format!("noop:{}", compile.key())
}

/// Where to find MIOpen's `fin` on a worker: `--fin`, else `$SHOAL_FIN`, else ROCm's default.
pub fn default_fin_path() -> PathBuf {
    std::env::var_os("SHOAL_FIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/rocm/bin/fin"))
}

#[cfg(test)]
mod tests {
    use super::device_env;

    #[test]
    fn only_the_chosen_gpu_is_visible_numbered_in_pci_order() {
        assert!(device_env(None).is_empty(), "the CPU hides nothing");
        let env = device_env(Some(3));
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("3"));
        assert_eq!(get("HIP_VISIBLE_DEVICES"), Some("3"));
        assert_eq!(get("CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
    }
}
