//! A session's backend: the one value the actors ask to compute build keys, build, and evaluate,
//! whatever the backend is. The Compiler and Evaluator hold a `SessionBackend` per session and do
//! not know whether it runs a spec's commands or MIOpen's `fin`.

use std::sync::Arc;
use std::time::Duration;

use shoal_model::{FailureKind, Outcome, Params, Step};

use crate::context::{EvalInput, RunContext};
use crate::exec::{self, Artifact};
use crate::miopen::{BuildKeyError, NoSolver};
use crate::spec::{shown, CandidateError, RunMode, TuningSpec};

/// Allowance in a library-mode lease for starting a runner and its device context.
const RUNNER_START: Duration = Duration::from_secs(60);

/// Why a bus message's parameters are refused before anything is built or run from them
/// ([`SessionBackend::check_request`]). `kind` is which parameters: `config`, `compile` or `run`.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Not a candidate of the exec backend's spec.
    #[error(transparent)]
    Candidate(#[from] CandidateError),
    #[error("{kind} parameter name {} is not an identifier", shown(.name))]
    NotAnIdentifier { kind: &'static str, name: String },
    #[error(
        "{kind} parameter {name}={} has a character a MIOpen parameter cannot have (allowed: \
         letters, digits, `_ . - + : , < >`)",
        shown(.value)
    )]
    MiopenCharacter {
        kind: &'static str,
        name: String,
        value: String,
    },
    /// The config parameters describe no convolution.
    #[error("config parameters: {0}")]
    Config(#[source] shoal_miopen::ConfigError),
    #[error(transparent)]
    NoSolver(#[from] NoSolver),
}

/// The backend of one session.
#[derive(Clone, Debug)]
pub enum SessionBackend {
    /// The exec backend, with the spec registered for the session (a replay spec's too: it
    /// answers from its recorded space instead of running anything).
    Exec(Arc<TuningSpec>),
    /// MIOpen through `fin`.
    Miopen(Arc<crate::miopen::MiopenBackend>),
    /// Does nothing, at once: builds an empty artifact and measures 1 µs. For measuring the
    /// machinery itself (`scripts/bench-dispatch`): every message, lease and commit is real.
    /// Its jobs may ask it to sleep instead, to simulate a fleet (`crate::noop`).
    Noop,
}

impl SessionBackend {
    /// Checks a request from a bus message before anything is built or run from it: the
    /// parameters must be ones this session's backend could have produced, so that a forged or
    /// corrupted message cannot put its own text into a command line. For the exec backend
    /// (`config_params` a shape, `run_params` absent for a build) that is exactly a candidate of
    /// the spec ([`TuningSpec::check_candidate`]); for MIOpen, names that are identifiers,
    /// values of the characters a driver flag or perf config has, a configuration that parses
    /// and a solver named. The error names the parameter and the value at fault.
    pub fn check_request(
        &self,
        config_params: &Params,
        compile_params: &Params,
        run_params: Option<&Params>,
    ) -> Result<(), RequestError> {
        match self {
            SessionBackend::Exec(spec) => {
                Ok(spec.check_candidate(config_params, compile_params, run_params)?)
            }
            SessionBackend::Miopen(_) => {
                let none = Params::new();
                for (kind, params) in [
                    ("config", config_params),
                    ("compile", compile_params),
                    ("run", run_params.unwrap_or(&none)),
                ] {
                    check_miopen_params(kind, params)?;
                }
                shoal_miopen::ConvConfig::from_params(config_params)
                    .map_err(RequestError::Config)?;
                crate::miopen::solver_of(compile_params)?;
                Ok(())
            }
            SessionBackend::Noop => Ok(()),
        }
    }

    /// The build key of a compile-time parameter set for a problem. Jobs with equal keys share
    /// one build; a worker recomputes it to check that its spec or sources match the loader's.
    pub fn build_key(
        &self,
        step: Step,
        config: &Params,
        compile: &Params,
    ) -> Result<String, BuildKeyError> {
        match self {
            SessionBackend::Exec(spec) => Ok(spec.build_key(compile)),
            SessionBackend::Miopen(m) => m.build_key(step, config, compile),
            SessionBackend::Noop => Ok(noop_build_key(compile)),
        }
    }

    /// Builds one artifact.
    pub async fn build(
        &self,
        step: Step,
        config: &Params,
        compile: &Params,
        ctx: &RunContext<'_>,
    ) -> Result<Artifact, (FailureKind, String)> {
        match self {
            SessionBackend::Exec(spec) => match &spec.replay {
                Some(space) => crate::replay::build(space, compile, spec.replay_time).await,
                None => exec::build(spec, compile, ctx.work_dir).await,
            },
            SessionBackend::Miopen(m) => m.build(step, config, compile, ctx).await,
            SessionBackend::Noop => Ok(crate::noop::build(compile).await),
        }
    }

    /// Evaluates one candidate on one problem.
    pub async fn evaluate(&self, input: EvalInput<'_>, ctx: &RunContext<'_>) -> Outcome {
        match self {
            SessionBackend::Exec(spec) => {
                if let Some(space) = &spec.replay {
                    return crate::replay::evaluate(space, input.compile, spec.replay_time).await;
                }
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
                        exec::evaluate(
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
            SessionBackend::Noop => crate::noop::evaluate(input.run).await,
        }
    }

    /// The longest a build and a single evaluation may take, for leases.
    pub fn time_limits(&self) -> (Duration, Duration) {
        match self {
            SessionBackend::Exec(spec) => match (&spec.replay, spec.run.mode) {
                (Some(space), _) => space.time_limits(spec.replay_time),
                (None, RunMode::Process) => {
                    let runs = (spec.run.warmup + spec.run.repeat).max(1);
                    (spec.build.timeout, spec.run.timeout * runs)
                }
                // One call to the runner, plus starting a runner and a device context.
                (None, RunMode::Library) => (spec.build.timeout, spec.run.timeout + RUNNER_START),
            },
            SessionBackend::Miopen(m) => (m.compile_timeout, m.eval_timeout),
            SessionBackend::Noop => (
                Duration::from_secs(10) + crate::noop::MAX_SLEEP,
                Duration::from_secs(1) + crate::noop::MAX_SLEEP,
            ),
        }
    }

    /// The (compile, eval) step pairs this backend's jobs may have; queue names are built from
    /// them. A MIOpen session tunes the perf db and the find db, each job with one pair.
    pub fn steps(&self) -> &'static [(Step, Step)] {
        match self {
            SessionBackend::Exec(_) => &[(Step::ExecBuild, Step::ExecRun)],
            SessionBackend::Miopen(_) => &[
                (Step::MiopenPerfCompile, Step::MiopenPerfEval),
                (Step::MiopenFindCompile, Step::MiopenFindEval),
            ],
            SessionBackend::Noop => &[(Step::NoopBuild, Step::NoopRun)],
        }
    }

    /// The local path of an installed artifact keeps the name the backend wants (an executable
    /// for commands, a JSON file for fin).
    pub fn artifact_is_executable(&self) -> bool {
        matches!(self, SessionBackend::Exec(_))
    }
}

/// Checks MIOpen parameters character by character: a name is an identifier and a value has
/// only letters, digits and `_ . - + : , < >` (enough for a driver flag, a layout, a data type,
/// a solver such as `ConvOclBwdWrW2<8>`, or a perf config's comma-separated values), so no
/// quote, space, newline, `$`, `;`, backtick or parenthesis gets through to fin's input. (fin
/// reads its input from a JSON file, never a shell.)
fn check_miopen_params(kind: &'static str, params: &Params) -> Result<(), RequestError> {
    let name_ok = |n: &str| {
        let mut c = n.chars();
        c.next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let value_ok = |v: &str| {
        !v.is_empty()
            && v.chars().all(|c| {
                c.is_ascii_alphanumeric()
                    || matches!(c, '_' | '.' | '-' | '+' | ':' | ',' | '<' | '>')
            })
    };
    for (name, value) in params.iter() {
        if !name_ok(name) {
            return Err(RequestError::NotAnIdentifier {
                kind,
                name: name.to_string(),
            });
        }
        if !value_ok(value) {
            return Err(RequestError::MiopenCharacter {
                kind,
                name: name.to_string(),
                value: value.to_string(),
            });
        }
    }
    Ok(())
}

/// The no-op backend's build key: the compile parameters themselves, so jobs that share them
/// share one (empty) build.
pub fn noop_build_key(compile: &Params) -> String {
    format!("noop:{}", compile.key())
}

/// Where ROCm installs MIOpen's `fin`: used when neither `--fin` nor `SHOAL_FIN` (read by the
/// CLI) says otherwise.
pub const DEFAULT_FIN: &str = "/opt/rocm/bin/fin";

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn params(pairs: &[(&str, &str)]) -> Params {
        let mut p = Params::new();
        for (n, v) in pairs {
            p.push(*n, *v);
        }
        p
    }

    fn exec_backend() -> SessionBackend {
        let text = r#"name = "t"
rules = ["BM * BN <= 2048"]
[build]
command = "cc -DBM={BM} -DBN={BN} -o {out} x.c"
[run]
command = "{artifact} {M} {SPLIT}"
[params.compile]
BM = [16, 32, 64]
BN = [16, 64]
[params.run]
SPLIT = [1, 2]
[[shapes]]
M = 128
"#;
        let spec = crate::spec::parse(text, Path::new("/nonexistent/spec.toml")).unwrap();
        SessionBackend::Exec(Arc::new(spec))
    }

    #[test]
    fn exec_requests_must_be_candidates_of_the_spec() {
        let b = exec_backend();
        let shape = params(&[("M", "128")]);
        let run = params(&[("SPLIT", "2")]);
        let good = params(&[("BM", "32"), ("BN", "64")]);
        b.check_request(&shape, &good, None).unwrap();
        b.check_request(&shape, &good, Some(&run)).unwrap();
        let injected = params(&[("BM", "(system(\"id\")*0)"), ("BN", "16")]);
        let e = b
            .check_request(&shape, &injected, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("BM=") && e.contains("(system("), "{e}");
        let outside = params(&[("BM", "128"), ("BN", "16")]);
        let e = b
            .check_request(&shape, &outside, Some(&run))
            .unwrap_err()
            .to_string();
        assert!(e.contains("BM=\"128\""), "{e}");
        let excluded = params(&[("BM", "64"), ("BN", "64")]);
        let e = b
            .check_request(&shape, &excluded, Some(&run))
            .unwrap_err()
            .to_string();
        assert!(e.contains("rules exclude"), "{e}");
        let e = b
            .check_request(&params(&[("M", "129")]), &good, Some(&run))
            .unwrap_err()
            .to_string();
        assert!(e.contains("M=129"), "{e}");
    }

    #[test]
    fn miopen_requests_carry_no_metacharacters() {
        let b = SessionBackend::Miopen(Arc::new(crate::miopen::MiopenBackend::new(
            PathBuf::from("/nonexistent/fin"),
            "gfx90a",
            110,
        )));
        let line = "./bin/MIOpenDriver conv -n 1 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 \
                    -u 1 -v 1 -l 1 -j 1 -F 1 -t 1";
        let shoal_miopen::driver::LineKind::Conv { mut configs, .. } =
            shoal_miopen::driver::parse_line(line).unwrap()
        else {
            panic!("not a convolution line");
        };
        let conv = configs.remove(0);
        let config = conv.to_params();
        let solver = params(&[("solver", "ConvBinWinograd3x3U")]);
        b.check_request(&config, &solver, None).unwrap();
        for bad in [
            "(system(\"id\")*0)",
            "a;b",
            "$(id)",
            "a b",
            "x\ny",
            "`id`",
            "'q'",
        ] {
            let e = b
                .check_request(&config, &params(&[("solver", bad)]), None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("compile parameter solver="), "{bad}: {e}");
        }
        let mut tampered = config.clone();
        tampered.0[0].1 = "conv;rm".into();
        let e = b
            .check_request(&tampered, &solver, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("config parameter cmd="), "{e}");
        let e = b
            .check_request(&config, &Params::new(), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("solver"), "{e}");
    }
}
