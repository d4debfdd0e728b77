//! `shoal tune --cluster`: the same spec, session and jobs as the embedded mode, loaded by the
//! cluster's Scheduler on this process's command (`LoadSpec`, see `crate::commands`): this
//! process writes nothing to the store. The running workers do the work, and this process
//! watches the store and exports, which only reads it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use shoal_actors::backends::SessionBackends;
use shoal_actors::shutdown::Signal;
use shoal_backend::spec::TuningSpec;
use shoal_backend::SessionBackend;
use shoal_model::command::{Command, CommandOutcome};

use crate::args::TuneArgs;

pub async fn run(args: TuneArgs, spec: Arc<TuningSpec>, stop: Signal) -> anyhow::Result<ExitCode> {
    let bus = crate::connect::bus_from_env().await?;
    let mut device = shoal_gpu::cpu_device(&shoal_gpu::SystemRoot::default());
    if let Some(arch) = &args.arch {
        device.arch = arch.clone();
    }
    if let Some(n) = args.num_cu {
        device.num_cu = n;
    }
    let command = Command::LoadSpec {
        spec_text: spec.source_text.clone(),
        spec_path: spec.absolute_path().display().to_string(),
        arch: device.arch.clone(),
        num_cu: device.num_cu,
        reason: args.reason.clone(),
        max_retries: args.max_retries,
    };
    let wait = Duration::from_secs(args.reply_timeout);
    let outcome = crate::commands::send(&*bus, command, wait).await?;
    let CommandOutcome::SpecLoaded {
        session,
        resumed,
        jobs_total,
        builds,
        ..
    } = outcome
    else {
        anyhow::bail!("the Scheduler answered {outcome:?} to tune --cluster");
    };
    eprintln!(
        "session {session} ({}): {} for {} with {} units: {jobs_total} candidates, {builds} builds; waiting for the workers",
        if resumed { "resumed" } else { "new" },
        spec.name,
        device.arch,
        device.num_cu,
    );
    let store = crate::connect::store_from_env().await?;
    let interrupted = crate::run::watch_progress(&*store, session, stop).await?;
    let backends = SessionBackends::new(crate::host::fin_path(None));
    backends.insert(session, SessionBackend::Command(spec.clone()));
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("shoal-out").join(&spec.name));
    let summary = shoal_actors::exporter::export(&*store, &backends, session, &out, true).await?;
    println!();
    print!("{}", summary.table);
    crate::run::print_summary(&store.state_counts(session).await?);
    println!(
        "tuned table: {}  (all candidates: {})",
        summary.csv.display(),
        summary.json.display()
    );
    if interrupted {
        eprintln!(
            "stopped watching; the workers go on. Run the same command again to wait for them."
        );
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}
