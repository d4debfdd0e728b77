//! Running a session's actors in this process until its jobs are final: what `shoal tune` does
//! after loading, and what `shoal run` does for a session loaded by other commands (MIOpen).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use shoal_actors::backends::SessionBackends;
use shoal_actors::embedded::{self, Embedded, EmbeddedOptions};
use shoal_actors::scheduler::{requeue_in_flight, SchedulerConfig};
use shoal_actors::shutdown::Signal;
use shoal_bus::MemoryBus;
use shoal_model::queue::Namespace;
use shoal_model::{JobState, SessionId};
use shoal_store::Store;

/// How to run.
pub struct RunOptions {
    /// Concurrent builds (default: one per core).
    pub jobs: Option<usize>,
    /// Builds, MIOpen directories and the artifact cache (default: `<db>.work`).
    pub work_dir: Option<PathBuf>,
    /// Evaluate on at most this many of the host's GPUs (`--devices N`).
    pub max_gpus: Option<usize>,
    /// What the actors are doing, shared with this process's presence writer.
    pub activity: shoal_actors::presence::Activity,
}

/// Starts every actor for `session` over an in-process bus, shows progress until every job is
/// final (returns `false`) or a stop is requested (returns `true`). The caller exports through
/// the returned actors, then shuts them down.
pub async fn run_session(
    store: Arc<dyn Store>,
    backends: SessionBackends,
    session: SessionId,
    db: &Path,
    opts: RunOptions,
    stop: Signal,
) -> anyhow::Result<(bool, Embedded)> {
    crate::host::confine_children(None)?;
    // The previous process may have been killed: nothing can still hold its in-flight jobs.
    let requeued = requeue_in_flight(&*store, session).await?;
    if requeued > 0 {
        eprintln!(
            "{requeued} jobs that were in flight when the last run stopped go back to their queues"
        );
    }
    let work_dir = opts.work_dir.unwrap_or_else(|| {
        let mut p = db.as_os_str().to_owned();
        p.push(".work");
        PathBuf::from(p)
    });
    // Absolute, because builds and runs execute in other directories.
    std::fs::create_dir_all(&work_dir)
        .with_context(|| format!("creating the work directory {}", work_dir.display()))?;
    let work_dir = work_dir.canonicalize()?;
    let devices = crate::host::devices_limited(opts.max_gpus);
    let cpu_only = devices.iter().all(|d| d.kind == shoal_gpu::DeviceKind::Cpu);
    let bus = MemoryBus::new(Namespace::new("shoal").expect("valid namespace"));
    let running = embedded::start(
        store.clone(),
        bus,
        backends,
        EmbeddedOptions {
            session,
            host: crate::host::hostname(),
            work_dir,
            compile_slots: opts.jobs,
            monitor_interval: Duration::from_secs(5),
            devices,
            runner_program: crate::host::runner_program(),
            activity: opts.activity.clone(),
            // One process, a local file: a store that fails for seconds (a full disk, a
            // read-only file) is not coming back by itself, so stop within half a minute.
            scheduler: SchedulerConfig {
                store_retry_for: Duration::from_secs(10),
                give_up_after: Duration::from_secs(30),
                ..SchedulerConfig::default()
            },
        },
    )
    .await?;
    let give_up = running.give_up();
    let interrupted = watch_progress(&*store, session, cpu_only, stop, Some(give_up)).await?;
    Ok((interrupted, running))
}

/// Shows progress until every job is final (false) or a stop is requested (true).
///
/// `timings_take_turns`: this process times candidates on the CPU, where timings never overlap
/// a build, so the ETA adds the two steps' costs (`shoal_model::progress::estimate_eta`).
pub async fn watch_progress(
    store: &dyn Store,
    session: SessionId,
    timings_take_turns: bool,
    mut stop: Signal,
    give_up: Option<shoal_actors::shutdown::GiveUp>,
) -> anyhow::Result<bool> {
    // Where this process's actors say they gave up; none runs here when only watching.
    let give_up = give_up.unwrap_or_default();
    let counts = crate::waiting::on_stderr(store.state_counts(session)).await?;
    let total: u64 = counts.values().sum();
    let (built_at_start, done_at_start) = built_and_done(&counts);
    let busy_at_start = shoal_metrics::metrics().evaluator_busy_total();
    let bar = ProgressBar::new(total);
    // Not indicatif's own rate and ETA: they follow the bar's position alone, which early in a
    // run moves only as fast as the first builds allow (shoal_model::progress::estimate_eta).
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} candidates done  {msg}",
        )
        .expect("valid template"),
    );
    let start = Instant::now();
    let mut last_line = Instant::now();
    loop {
        // While the database does not answer, the bar says so (or a line every few seconds
        // without one), and a stop still stops.
        let read = crate::waiting::telling(store.state_counts(session), |m| {
            if bar.is_hidden() {
                eprintln!("shoal: {m}");
            } else {
                bar.set_message(m.to_string());
            }
        });
        let counts = tokio::select! {
            counts = read => counts?,
            _ = stop.triggered() => {
                bar.abandon();
                return Ok(true);
            }
        };
        let get = |s: JobState| counts.get(&s).copied().unwrap_or(0);
        let (built, done) = built_and_done(&counts);
        let pipeline = shoal_model::progress::Pipeline {
            elapsed_s: start.elapsed().as_secs_f64(),
            total,
            built,
            built_at_start,
            done,
            done_at_start,
            timing_busy_s: timings_take_turns.then(|| {
                (shoal_metrics::metrics().evaluator_busy_total() - busy_at_start).as_secs_f64()
            }),
        };
        let eta = shoal_model::progress::estimate_eta(&pipeline);
        // The estimator's inputs, as a run can be recorded and replayed through it
        // (`RUST_LOG=shoal::progress=debug`; shoal-model's tests/eta_recorded.rs).
        tracing::debug!(
            target: "shoal::progress",
            elapsed_s = pipeline.elapsed_s,
            total,
            built,
            built_at_start,
            done,
            done_at_start,
            timing_busy_s = pipeline.timing_busy_s,
            eta_s = eta,
            "progress"
        );
        let eta = eta.map_or("ETA …".to_string(), |s| {
            format!("ETA {}", shoal_model::progress::human_duration(s))
        });
        // Counted in candidates, like the bar: one build serves every candidate that shares
        // its compile-time parameters, so this is candidates whose build is done and worked.
        let compiled = built - done + get(JobState::Evaluated);
        let mut msg = format!(
            "{eta}  {compiled} candidates compiled, {} failed",
            get(JobState::Errored)
        );
        if get(JobState::Skipped) > 0 {
            msg.push_str(&format!(
                ", {} skipped by the search",
                get(JobState::Skipped)
            ));
        }
        bar.set_position(done);
        bar.set_message(msg.clone());
        if bar.is_hidden() && last_line.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "[{:>5.0}s] candidates: {done}/{total} done, {msg}",
                start.elapsed().as_secs_f64()
            );
            last_line = Instant::now();
        }
        if done >= total {
            bar.finish();
            return Ok(false);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = stop.triggered() => {
                bar.abandon();
                return Ok(true);
            }
            reason = give_up.gave_up() => {
                bar.abandon();
                anyhow::bail!("stopped: {reason}; committed work is kept, run the same command again once this is fixed");
            }
        }
    }
}

/// Candidates whose build is done (including those final), and candidates final.
fn built_and_done(counts: &std::collections::BTreeMap<JobState, u64>) -> (u64, u64) {
    let get = |s: JobState| counts.get(&s).copied().unwrap_or(0);
    let done: u64 = counts
        .iter()
        .filter(|(s, _)| s.is_terminal())
        .map(|(_, n)| n)
        .sum();
    let in_eval: u64 = [
        JobState::Compiled,
        JobState::EvalQueued,
        JobState::Evaluating,
    ]
    .map(get)
    .iter()
    .sum();
    (in_eval + done, done)
}

/// The one-line count of a session's jobs per state, printed at the end of a tuning in either
/// mode.
pub fn print_summary(counts: &std::collections::BTreeMap<shoal_model::JobState, u64>) {
    let line: Vec<String> = counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
    println!("jobs: {}", line.join(", "));
}
