//! Library mode of the exec backend: one long-lived runner process per device that loads
//! each candidate's shared object, times it through the entry points of
//! `include/shoal_kernel.h` and unloads it.
//!
//! Process mode pays, for every candidate, a process start, a device context and the problem's
//! set-up (allocating and filling inputs, computing the reference answer); on a GPU that is
//! most of the time, and the GPU idles meanwhile. Here the runner pays them once: the context
//! lives as long as the runner, and each problem is prepared once and kept
//! ([`runner::MAX_PREPARED`] at a time).
//!
//! Isolation is kept where it matters: the tuned code runs in the runner, never in the
//! Evaluator. A candidate that crashes the runner (a segfault, an abort) is recorded as
//! [`FailureKind::Crashed`] with the runner's stderr; one that reports a device fault
//! (`SHOAL_FATAL`, e.g. an illegal memory access) is recorded the same way and the runner
//! exits, since the context is unusable; one that does not answer within the run timeout is
//! recorded as [`FailureKind::Timeout`] and the runner's process group is killed. In each case
//! the next candidate gets a fresh runner ([`RunnerSlot`]), and the tuning goes on.
//!
//! The runner is this same binary (`shoal runner`, [`runner::main`]) unless `SHOAL_RUNNER`
//! names another program.

pub mod protocol;
pub mod runner;

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_model::{FailureKind, Measurement, Outcome, Params};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::context::RunContext;
use crate::failure::{failure_kind, ChildFate, ChildStep};
use crate::process::{self, ChildEnd, GroupGuard, Tail};
use crate::runner_slot::Runner;
pub use crate::runner_slot::{runner_program, RunnerSlot};
use crate::spec::TuningSpec;
use protocol::{Reply, Request, Status};

/// Bytes of the runner's stderr kept for failure details.
const STDERR_LIMIT: usize = 16 * 1024;
/// Stderr quoted in a failure's detail.
const DETAIL_LIMIT: usize = 3000;
/// How long a runner that was asked to stop (stdin closed) may take before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// How long the runner's stderr may stay open after it ended (held by a process that left its
/// group); after that, what was read is what is quoted.
const STDERR_DRAIN: Duration = Duration::from_millis(500);

impl RunnerSlot {
    /// Stops the runner, if one runs (its states are released by it on the way out).
    pub async fn stop(&self) {
        if let Some(r) = self.runner.lock().await.take() {
            r.stop().await;
        }
    }
}

/// How a call to the runner ended, short of a reply.
enum CallError {
    /// The runner closed its reply pipe: it died.
    Died,
    /// The runner did not answer in time.
    TimedOut,
    /// The reply was not a reply.
    Garbled(String),
}

impl Runner {
    async fn start(
        program: &[String],
        spec: &TuningSpec,
        ctx: &RunContext<'_>,
    ) -> std::io::Result<Runner> {
        // In the sandbox it sees its spec's tree and the worker's work directory (the artifact
        // cache is beside the slot's directory), and writes nowhere but a private /tmp.
        let readable: Vec<std::path::PathBuf> = spec
            .tree_roots()
            .into_iter()
            .chain(ctx.work_dir.parent().map(Path::to_path_buf))
            .collect();
        let argv = process::confined_argv(program, &spec.dir, &readable, &[])?;
        let (exe, args) = argv.split_first().expect("not empty");
        let mut cmd = tokio::process::Command::new(exe);
        cmd.args(args)
            .current_dir(&spec.dir)
            .envs(crate::context::device_env(ctx.gpu_index))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        crate::child_env::scrub(&mut cmd);
        process::limit_child(&mut cmd, ctx.cpu)?;
        let mut child = cmd.spawn()?;
        let pid = child
            .id()
            .ok_or_else(|| std::io::Error::other("runner exited before its pid was read"))?;
        let guard = GroupGuard::new(pid as libc::pid_t);
        let stdin = child.stdin.take().expect("piped");
        let replies = BufReader::new(child.stdout.take().expect("piped"));
        let stderr = Arc::new(Mutex::new(Tail::new(STDERR_LIMIT)));
        let mut err_pipe = child.stderr.take().expect("piped");
        let sink = stderr.clone();
        let stderr_reader = tokio::spawn(async move {
            let mut chunk = vec![0u8; 8192];
            while let Ok(n) = err_pipe.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push(&chunk[..n]);
            }
        });
        tracing::debug!(pid, gpu = ?ctx.gpu_index, "runner started");
        Ok(Runner {
            spec_identity: spec.identity(),
            child,
            stdin: Some(stdin),
            replies,
            stderr,
            stderr_reader,
            guard,
            in_call: false,
        })
    }

    async fn call(&mut self, req: &Request, limit: Duration) -> Result<Reply, CallError> {
        let mut line = serde_json::to_string(req).expect("a request serializes");
        line.push('\n');
        let exchange = async {
            let stdin = self.stdin.as_mut().ok_or(CallError::Died)?;
            stdin
                .write_all(line.as_bytes())
                .await
                .map_err(|_| CallError::Died)?;
            stdin.flush().await.map_err(|_| CallError::Died)?;
            let mut answer = String::new();
            match self.replies.read_line(&mut answer).await {
                Ok(0) | Err(_) => Err(CallError::Died),
                Ok(_) => serde_json::from_str::<Reply>(&answer)
                    .map_err(|e| CallError::Garbled(format!("{e}: {}", answer.trim()))),
            }
        };
        self.in_call = true;
        let result = match tokio::time::timeout(limit, exchange).await {
            Ok(r) => r,
            Err(_) => Err(CallError::TimedOut),
        };
        self.in_call = false;
        result
    }

    /// Ends the runner (killing its process group when `kill`, else waiting for it to exit) and
    /// says how it ended, with the tail of everything it wrote to stderr.
    async fn finish(mut self, kill: bool) -> (String, String) {
        if kill {
            self.guard.kill();
            let _ = self.child.start_kill();
        }
        let ended = self.end_text().await;
        // Everything the runner wrote is in the pipe; the reader ends at its close (bounded, in
        // case a process that left the group still holds it).
        let _ = tokio::time::timeout(STDERR_DRAIN, &mut self.stderr_reader).await;
        let text = self.stderr.lock().unwrap().text();
        let text = text.trim();
        let stderr = if text.is_empty() {
            "runner stderr: empty".into()
        } else {
            let cut = text.len().saturating_sub(DETAIL_LIMIT);
            let cut = (cut..text.len())
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(text.len());
            format!("runner stderr:\n{}", &text[cut..])
        };
        (ended, stderr)
    }

    /// Waits for the runner to end (it is dying or was killed) and says how it ended.
    async fn end_text(&mut self) -> String {
        let status = match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            Ok(Ok(s)) => s,
            _ => {
                self.guard.kill();
                match self.child.wait().await {
                    Ok(s) => s,
                    Err(e) => return format!("the runner could not be reaped: {e}"),
                }
            }
        };
        self.guard.kill(); // stray helpers it started
        match process::child_end(status) {
            ChildEnd::Exited(code) => format!("the runner exited with code {code}"),
            ChildEnd::Signaled { name, .. } => format!("the runner was killed by {name}"),
            ChildEnd::TimedOut => "the runner ended".into(),
        }
    }

    async fn stop(mut self) {
        // Closing stdin ends its loop; it releases its states and exits.
        self.stdin = None;
        let _ = self.finish(false).await;
    }
}

/// The argument text of a parameter set for the ABI: its canonical key.
fn abi_params(p: &Params) -> String {
    p.key()
}

/// Times one candidate (its shared object at `artifact`, with `run` parameters) on `shape`
/// through the device's runner in `ctx`.
pub async fn evaluate(
    spec: &TuningSpec,
    artifact: &Path,
    shape: &Params,
    run: &Params,
    ctx: &RunContext<'_>,
) -> Outcome {
    if !artifact.is_file() {
        return Outcome::failed(
            FailureKind::Infrastructure,
            format!("artifact {} is missing", artifact.display()),
        );
    }
    let Some(slot) = ctx.runner else {
        return Outcome::failed(
            FailureKind::Infrastructure,
            "library mode needs the device's runner, and the caller gave none",
        );
    };
    let mut guard = slot.runner.lock().await;
    let identity = spec.identity();
    if guard.as_ref().is_some_and(|r| r.in_call) {
        if let Some(old) = guard.take() {
            old.finish(true).await;
        }
    } else if guard.as_ref().is_some_and(|r| r.spec_identity != identity) {
        if let Some(old) = guard.take() {
            old.stop().await;
        }
    }
    if guard.is_none() {
        match Runner::start(&slot.program, spec, ctx).await {
            Ok(r) => *guard = Some(r),
            Err(e) => {
                return Outcome::failed(
                    failure_kind(ChildStep::Run, ChildFate::NotStarted).expect("a failure"),
                    format!("cannot start the runner `{}`: {e}", slot.program.join(" ")),
                )
            }
        }
    }
    let req = Request {
        library: artifact.display().to_string(),
        problem: abi_params(shape),
        run_params: abi_params(run),
        warmup: spec.run.warmup,
        repeat: spec.run.repeat,
    };
    let runner = guard.as_mut().expect("started above");
    match runner.call(&req, spec.run.timeout).await {
        Ok(reply) => {
            if reply.status == Status::Fatal {
                // The runner exits after a fatal reply; reap it so the next call starts afresh.
                if let Some(r) = guard.take() {
                    r.finish(false).await;
                }
            }
            judge(spec, reply)
        }
        Err(CallError::TimedOut) => {
            let (ended, stderr) = guard.take().expect("present").finish(true).await;
            Outcome::failed(
                failure_kind(ChildStep::Run, ChildFate::Ended(&ChildEnd::TimedOut))
                    .expect("a failure"),
                format!(
                    "no answer within the {:?} run timeout; {ended} (killed with its process group), a fresh one takes the next candidate; {stderr}",
                    spec.run.timeout
                ),
            )
        }
        Err(CallError::Died) => {
            // Not the classifier's exit-code rule: the runner is ours and exits only when a
            // call is over, so ending in the middle of one (by a signal, or by the candidate
            // calling exit) is the candidate crashing it.
            let (ended, stderr) = guard.take().expect("present").finish(false).await;
            Outcome::failed(
                FailureKind::Crashed,
                format!("{ended} while running this candidate; {stderr}"),
            )
        }
        Err(CallError::Garbled(e)) => {
            let (ended, stderr) = guard.take().expect("present").finish(true).await;
            Outcome::failed(
                FailureKind::Infrastructure,
                format!(
                    "the runner answered something that is not a reply ({e}); {ended}; {stderr}"
                ),
            )
        }
    }
}

/// Turns a runner reply into an outcome.
fn judge(spec: &TuningSpec, reply: Reply) -> Outcome {
    let msg = |what: &str| {
        if reply.message.is_empty() {
            what.to_string()
        } else {
            format!("{what}: {}", reply.message)
        }
    };
    match reply.status {
        Status::Pass => {
            let mut details = Params::new();
            if reply.load_us > 0.0 {
                details.push("load_us", format!("{:.0}", reply.load_us));
            }
            if reply.prepare_us > 0.0 {
                details.push("prepare_us", format!("{:.0}", reply.prepare_us));
            }
            Outcome::Measured(Measurement {
                time_us: spec.run.statistic.apply(&reply.samples_us),
                samples_us: reply.samples_us,
                workspace: 0,
                details,
            })
        }
        Status::WrongAnswer => Outcome::failed(FailureKind::WrongAnswer, msg("wrong answer")),
        Status::Fatal => Outcome::failed(
            FailureKind::Crashed,
            msg("device fault reported by shoal_run (the runner restarts)"),
        ),
        Status::NotApplicable => Outcome::failed(
            FailureKind::NotApplicable,
            msg("shoal_run reports the candidate does not apply"),
        ),
        Status::LoadFailed => Outcome::failed(FailureKind::RunFailed, msg("load failed")),
        Status::PrepareFailed => Outcome::failed(FailureKind::RunFailed, msg("prepare failed")),
        Status::Error => Outcome::failed(FailureKind::RunFailed, msg("runner error")),
    }
}

#[cfg(test)]
mod tests;
