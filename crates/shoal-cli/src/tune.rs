//! `shoal tune`: one command from a spec to a tuned table, in the embedded mode.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use shoal_actors::embedded::{self, EmbeddedOptions};
use shoal_actors::exporter::Export;
use shoal_actors::scheduler::{requeue_in_flight, SchedulerConfig};
use shoal_actors::specs::SessionSpecs;
use shoal_bus::MemoryBus;
use shoal_model::queue::Namespace;
use shoal_model::{JobState, SessionId};
use shoal_store::Store;

use crate::cli::{open_migrated, TuneArgs};

pub async fn run(args: TuneArgs, db: &Path) -> anyhow::Result<ExitCode> {
    // Everything about the spec is checked before anything is written.
    let spec = Arc::new(shoal_backend::spec::load(&args.spec)?);
    for w in &spec.warnings {
        tracing::warn!("{w}");
    }
    let stop = crate::signals::install()?;
    let store = open_migrated(db).await?;
    let device = shoal_gpu::cpu_device(&shoal_gpu::SystemRoot::default());
    let identity = crate::load::session_for(&spec, &device, &args.reason, args.max_retries);
    let loaded = crate::load::load(&*store, &spec, &identity).await?;
    let session = loaded.session.id;
    eprintln!(
        "session {session} ({}): {} on {} ({} {}, {} units): {} candidates over {} shapes, {} builds{}",
        if loaded.resumed { "resumed" } else { "new" },
        spec.name,
        device.name,
        device.id,
        device.arch,
        device.num_cu,
        loaded.jobs_total,
        spec.shapes.len(),
        loaded.builds,
        if loaded.jobs_created < loaded.jobs_total {
            format!(", {} new jobs", loaded.jobs_created)
        } else {
            String::new()
        }
    );
    // The previous process may have been killed: nothing can still hold its in-flight jobs.
    let requeued = requeue_in_flight(&*store, session).await?;
    if requeued > 0 {
        eprintln!(
            "{requeued} jobs that were in flight when the last run stopped go back to their queues"
        );
    }

    let specs = SessionSpecs::new();
    specs.insert(session, spec.clone());
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("shoal-out").join(&spec.name));

    let work_dir = args.work_dir.clone().unwrap_or_else(|| {
        let mut p = db.as_os_str().to_owned();
        p.push(".work");
        PathBuf::from(p)
    });
    // Absolute, because builds and runs execute in the spec's directory.
    std::fs::create_dir_all(&work_dir)
        .with_context(|| format!("creating the work directory {}", work_dir.display()))?;
    let work_dir = work_dir.canonicalize()?;
    let bus = MemoryBus::new(Namespace::new("shoal").expect("valid namespace"));
    let running = embedded::start(
        store.clone(),
        bus,
        specs.clone(),
        EmbeddedOptions {
            session,
            host: hostname(),
            work_dir,
            compile_slots: args.jobs,
            monitor_interval: Duration::from_secs(5),
            scheduler: SchedulerConfig::default(),
        },
    )
    .await?;
    let interrupted = watch_progress(&*store, session, stop).await?;
    let summary = running
        .exporter
        .send(Export {
            session,
            out_dir: out.clone(),
        })
        .await
        .context("the exporter stopped")?
        .with_context(|| format!("exporting session {session}"));
    running.shutdown().await?;
    let summary = summary?;
    println!();
    print!("{}", summary.table);
    let counts = store.state_counts(session).await?;
    print_summary(&counts);
    println!(
        "tuned table: {}  (all candidates: {})",
        summary.csv.display(),
        summary.json.display()
    );
    if interrupted {
        eprintln!("interrupted: run the same command again to finish the tuning");
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}

/// Shows progress until every job is final (false) or a stop is requested (true).
async fn watch_progress(
    store: &dyn Store,
    session: SessionId,
    mut stop: shoal_actors::shutdown::Signal,
) -> anyhow::Result<bool> {
    let counts = store.state_counts(session).await?;
    let total: u64 = counts.values().sum();
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} evaluated  {per_sec}  ETA {eta}  {msg}",
        )
        .expect("valid template"),
    );
    let start = Instant::now();
    let mut last_line = Instant::now();
    loop {
        let counts = store.state_counts(session).await?;
        let done: u64 = counts
            .iter()
            .filter(|(s, _)| s.is_terminal())
            .map(|(_, n)| n)
            .sum();
        let get = |s: JobState| counts.get(&s).copied().unwrap_or(0);
        let msg = format!(
            "compiled {}  failed {}",
            total - get(JobState::New) - get(JobState::CompileQueued) - get(JobState::Compiling),
            get(JobState::Errored)
        );
        bar.set_position(done);
        bar.set_message(msg.clone());
        if bar.is_hidden() && last_line.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "[{:>5.0}s] {done}/{total} evaluated, {msg}",
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
        }
    }
}

fn print_summary(counts: &BTreeMap<JobState, u64>) {
    let line: Vec<String> = counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
    println!("jobs: {}", line.join(", "));
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
