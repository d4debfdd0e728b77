//! The exec backend's two steps, for kernels built and timed from a command line: it execs the
//! spec's build command and its run command.
//!
//! - [`build`] (the compile step) runs the spec's build command once for a compile-time
//!   parameter set, in a fresh temporary directory, and returns the artifact it wrote:
//!   content-addressed ([`Artifact::hash`]) and compressed, ready to be stored and shipped.
//! - [`evaluate`] (the eval step) runs one candidate on one shape: the warm-up runs, then the
//!   timed runs, each a child process with the run timeout (see [`crate::process`]), and turns
//!   what happened into an [`Outcome`].
//!
//! Every fault of the tuned code is an outcome with its [`FailureKind`], never an error of the
//! caller: a build that fails or hangs, a run that crashes, hangs, exits non-zero, prints no
//! time or reports a wrong answer. The first failing run ends an evaluation.
//!
//! This is the process-per-run mode (the most isolated). [`crate::library`] is the second mode,
//! a long-lived runner per device that loads each candidate, with the same inputs and the same
//! [`Outcome`]s.

mod artifact;

pub use artifact::{pack, sha256_hex, unpack, Artifact, ArtifactCache};

use std::path::Path;

use shoal_model::repeats::Next;
use shoal_model::{FailureKind, Measurement, Outcome, Params};

use crate::failure::{failure_kind, missing_output, ChildFate, ChildStep};
use crate::process::{self, ChildEnd, ChildOutput, ChildSpec};
use crate::spec::TuningSpec;

/// Output kept per stream of every child.
const OUTPUT_LIMIT: usize = 64 * 1024;
/// Output quoted in a failure's detail.
const DETAIL_LIMIT: usize = 4000;

/// The last `max` bytes of `text` (on a character boundary), trimmed.
fn tail(text: &str, max: usize) -> &str {
    let text = text.trim_end();
    if text.len() <= max {
        return text.trim_start();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The tail of stderr, or of stdout when stderr is empty, for a failure's detail.
fn quoted_output(out: &ChildOutput) -> String {
    let (name, text) = if out.stderr.trim().is_empty() {
        ("stdout", &out.stdout)
    } else {
        ("stderr", &out.stderr)
    };
    let t = tail(text, DETAIL_LIMIT);
    if t.is_empty() {
        "no output".to_string()
    } else {
        format!("{name}:\n{t}")
    }
}

/// Builds the artifact for one compile-time parameter set.
///
/// The build runs in the spec's directory with `{out}` (and `$SHOAL_OUT`) pointing into a
/// fresh temporary directory under `work_dir`, which is removed afterwards.
pub async fn build(
    spec: &TuningSpec,
    compile: &Params,
    work_dir: &Path,
) -> Result<Artifact, (FailureKind, String)> {
    let infra = |what: &str, e: std::io::Error| {
        (
            FailureKind::Infrastructure,
            format!("{what} {}: {e}", work_dir.display()),
        )
    };
    std::fs::create_dir_all(work_dir).map_err(|e| infra("cannot create", e))?;
    let tmp = tempfile::Builder::new()
        .prefix("build-")
        .tempdir_in(work_dir)
        .map_err(|e| infra("cannot make a temporary directory in", e))?;
    let out = tmp.path().join(&spec.name);
    let argv = spec.build_argv(compile, &out);
    let mut child = ChildSpec::new(argv.clone(), &spec.dir, spec.build.timeout);
    child
        .env
        .push(("SHOAL_OUT".into(), out.display().to_string()));
    child.output_limit = OUTPUT_LIMIT;
    child.readable.extend(spec.tree_roots());
    child.writable.push(tmp.path().to_path_buf());
    tracing::debug!(spec = %spec.name, compile = %compile, ?argv, "build");

    let result = match process::run(&child).await {
        Err(e) => Err((
            failure_kind(ChildStep::Build, ChildFate::NotStarted).expect("a failure"),
            format!("cannot start `{}` on this host: {e}", argv[0]),
        )),
        Ok(o) => match &o.end {
            // Hashing and compressing a large artifact takes milliseconds of CPU: off the
            // async thread, which the Scheduler and the Evaluators share in the embedded mode.
            ChildEnd::Exited(0) => match std::fs::read(&out) {
                Ok(raw) => Ok(tokio::task::spawn_blocking(move || pack(&raw))
                    .await
                    .expect("packing an artifact does not panic")),
                Err(e) => Err((
                    missing_output(ChildStep::Build),
                    format!(
                        "the build succeeded but left no artifact at {{out}} ({}): {e}",
                        out.display()
                    ),
                )),
            },
            end => Err((
                failure_kind(ChildStep::Build, ChildFate::Ended(end)).expect("not a success"),
                build_end(end, spec, &o),
            )),
        },
    };
    drop(tmp); // removes the temporary directory and whatever the build left in it
    result
}

/// What a failed build's end was, with its output.
fn build_end(end: &ChildEnd, spec: &TuningSpec, o: &ChildOutput) -> String {
    match end {
        ChildEnd::Exited(code) => format!("build exited with code {code}; {}", quoted_output(o)),
        ChildEnd::Signaled { name, .. } => format!("build killed by {name}; {}", quoted_output(o)),
        ChildEnd::TimedOut => format!(
            "build ran past its {:?} timeout and was killed with its process group; {}",
            spec.build.timeout,
            quoted_output(o)
        ),
    }
}

/// The line of `text` around byte `at`.
fn line_at(text: &str, at: usize) -> &str {
    let start = text[..at].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let end = text[at..].find('\n').map(|i| at + i).unwrap_or(text.len());
    text[start..end].trim()
}

/// Judges one finished run: its failure, or its time in microseconds (when `need_time`).
fn judge(
    spec: &TuningSpec,
    out: &ChildOutput,
    which: &str,
    need_time: bool,
) -> Result<Option<f64>, (FailureKind, String)> {
    if let Some(kind) = failure_kind(ChildStep::Run, ChildFate::Ended(&out.end)) {
        let detail = match &out.end {
            ChildEnd::Exited(code) => {
                format!("exited with code {code} in {which}; {}", quoted_output(out))
            }
            ChildEnd::Signaled { name, .. } => {
                format!("killed by {name} in {which}; {}", quoted_output(out))
            }
            ChildEnd::TimedOut => format!(
                "ran past its {:?} timeout in {which} and was killed with its process group; {}",
                spec.run.timeout,
                quoted_output(out)
            ),
        };
        return Err((kind, detail));
    }
    let stdout = &out.stdout;
    if let Some(fail) = &spec.output.fail {
        if let Some(m) = fail.find(stdout) {
            return Err((
                FailureKind::WrongAnswer,
                format!(
                    "wrong answer in {which}: output matches the fail pattern `{}`: {}",
                    fail.as_str(),
                    line_at(stdout, m.start())
                ),
            ));
        }
    }
    if let Some(pass) = &spec.output.pass {
        if !pass.is_match(stdout) {
            return Err((
                FailureKind::WrongAnswer,
                format!(
                    "wrong answer in {which}: nothing matches the pass pattern `{}`; {}",
                    pass.as_str(),
                    quoted_output(out)
                ),
            ));
        }
    }
    if !need_time {
        return Ok(None);
    }
    let Some(re) = &spec.output.time else {
        return Ok(Some(out.duration.as_secs_f64() * 1e6));
    };
    let Some(caps) = re.captures_iter(stdout).last() else {
        return Err((
            FailureKind::RunFailed,
            format!(
                "no time in output of {which} (pattern `{}`); {}",
                re.as_str(),
                quoted_output(out)
            ),
        ));
    };
    let text = caps.get(1).map(|m| m.as_str()).unwrap_or("");
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(spec.output.time_unit.to_us(v))),
        _ => Err((
            FailureKind::RunFailed,
            format!("the time `{text}` in {which} is not a non-negative number"),
        )),
    }
}

/// Runs one candidate (`compile` built into `artifact`, with `run` parameters) on `shape`:
/// the spec's warm-up runs, then its timed runs, each pinned to `cpu` when given and seeing only
/// GPU `gpu_index` when given (see [`device_env`](crate::context::device_env)).
pub async fn evaluate(
    spec: &TuningSpec,
    artifact: &Path,
    shape: &Params,
    compile: &Params,
    run: &Params,
    cpu: Option<usize>,
    gpu_index: Option<u32>,
) -> Outcome {
    if !artifact.is_file() {
        return Outcome::failed(
            FailureKind::Infrastructure,
            format!("artifact {} is missing", artifact.display()),
        );
    }
    let argv = spec.run_argv(compile, run, shape, artifact);
    let mut child = ChildSpec::new(argv.clone(), &spec.dir, spec.run.timeout);
    child
        .env
        .push(("SHOAL_ARTIFACT".into(), artifact.display().to_string()));
    child.env.extend(crate::context::device_env(gpu_index));
    child.cpu = cpu;
    child.output_limit = OUTPUT_LIMIT;
    child.readable.extend(spec.tree_roots());
    child
        .readable
        .extend(artifact.parent().map(Path::to_path_buf));
    tracing::debug!(spec = %spec.name, shape = %shape, compile = %compile, run = %run, ?argv, "evaluate");

    let (warmup, repeat) = (spec.run.warmup, spec.run.repeat);
    // Only adaptive repetitions consult the board: a fixed count costs no lock or key.
    let shape_key = spec.run.adaptive.map(|_| shape.key());
    let best = shape_key.as_deref().and_then(|k| spec.leaders.best(k));
    let mut samples = Vec::with_capacity(repeat as usize);
    let mut stopped = None;
    for i in 0..warmup + repeat {
        let timed = i >= warmup;
        if let (true, Some(adaptive)) = (timed, &spec.run.adaptive) {
            if let Next::Stop(why) = adaptive.next(&samples, best) {
                stopped = Some(why);
                break;
            }
        }
        let which = match (timed, spec.run.adaptive) {
            (true, None) => format!("timed run {} of {repeat}", i - warmup + 1),
            (true, Some(_)) => format!("timed run {} of at most {repeat}", i - warmup + 1),
            (false, _) => format!("warm-up run {} of {warmup}", i + 1),
        };
        let out = match process::run(&child).await {
            Ok(out) => out,
            Err(e) => {
                return Outcome::failed(
                    failure_kind(ChildStep::Run, ChildFate::NotStarted).expect("a failure"),
                    format!("cannot start `{}` on this host: {e}", argv[0]),
                )
            }
        };
        match judge(spec, &out, &which, timed) {
            Ok(Some(us)) => samples.push(us),
            Ok(None) => {}
            Err((kind, detail)) => return Outcome::failed(kind, detail),
        }
    }
    let time_us = spec.run.statistic.apply(&samples);
    let mut details = Params::new();
    if let Some(shape_key) = &shape_key {
        spec.leaders.offer(shape_key, time_us);
        // Why the runs stopped where they did: `cap` when the most runs were spent.
        let why = stopped.unwrap_or(shoal_model::repeats::Stop::Cap);
        details.push("adaptive", why.as_str());
    }
    Outcome::Measured(Measurement {
        time_us,
        samples_us: samples,
        workspace: 0,
        details,
    })
}
