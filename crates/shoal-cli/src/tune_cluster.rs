//! `shoal tune --cluster`: the same spec, session and jobs as the embedded mode, loaded by the
//! cluster's Scheduler on this process's command (`LoadShippedSpec`, see `crate::commands`),
//! the spec shipped with its files (`crate::ship`) so that no other host needs them: this
//! process writes nothing to the store. The running workers do the work, and this process
//! watches the store and exports, which only reads it.
//!
//! With no database configured (an operator's machine with the cli broker identity only), it
//! follows the Scheduler's progress reports on the events topic instead, and leaves the export
//! to the exporter role (`shoal export --cluster`).

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
    let reads_store = crate::connect::Settings::load(None)?.db.is_some();
    // Subscribed before the command is sent, so that no report of the session is missed.
    let reports = if reads_store {
        None
    } else {
        let topic = bus.namespace().events_topic();
        Some(bus.subscribe(&topic, "progress.*").await?)
    };
    let mut device = shoal_gpu::cpu_device(&shoal_gpu::SystemRoot::default());
    if let Some(arch) = &args.arch {
        device.arch = arch.clone();
    }
    if let Some(n) = args.num_cu {
        device.num_cu = n;
    }
    let shipment = crate::ship::gather(&spec)?;
    let wait = Duration::from_secs(args.reply_timeout);
    let mut client = crate::commands::CommandClient::open(&*bus).await?;
    let command = Command::LoadShippedSpec {
        tree: shipment.tree.address(),
        spec: shipment.spec.clone(),
        arch: device.arch.clone(),
        num_cu: device.num_cu,
        reason: args.reason.clone(),
        max_retries: args.max_retries,
    };
    let (outcome, files, bytes) =
        crate::ship::send_and_load(&mut client, &shipment, command, wait).await?;
    if files > 0 {
        eprintln!(
            "shipped {files} of the spec's {} files ({bytes} bytes) to the cluster",
            shipment.tree.files().len()
        );
    }
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
    if let Some(reports) = reports {
        let interrupted = follow_reports(&*bus, reports, session, jobs_total, stop).await?;
        if interrupted {
            eprintln!(
                "stopped following; the workers go on. Run the same command again to follow them."
            );
            return Ok(ExitCode::from(130));
        }
        println!(
            "session {session} tuned. No database is configured here: the exporter role writes the table, \
             `shoal export --cluster --session {session} -o {}`",
            spec.name
        );
        return Ok(ExitCode::SUCCESS);
    }
    let store = crate::connect::store_from_env().await?;
    // The workers time elsewhere: this process has no timing time to split the ETA with.
    let interrupted = crate::run::watch_progress(&*store, session, false, stop, None).await?;
    let backends = SessionBackends::new(crate::host::fin_path(None));
    backends.insert(session, SessionBackend::Exec(spec.clone()));
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("shoal-out").join(&spec.name));
    let summary = crate::waiting::on_stderr(shoal_actors::exporter::export(
        &*store, &backends, session, &out, true,
    ))
    .await?;
    println!();
    print!("{}", summary.table);
    crate::run::print_summary(&crate::waiting::on_stderr(store.state_counts(session)).await?);
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

/// How long without a report of the session before it is taken as having no open work: the
/// Scheduler reports a session with open work every 2 s, so three periods of silence mean
/// there is none (it finished before this command, with nothing to report since).
const QUIET: Duration = Duration::from_secs(6);

/// Prints the Scheduler's progress reports of `session` until it is done (`Ok(false)`), or
/// until `stop` (`Ok(true)`). A report that counts fewer than the `jobs` the command loaded was
/// read while they were being loaded, and does not end anything.
async fn follow_reports(
    bus: &dyn shoal_bus::Bus,
    mut reports: Box<dyn shoal_bus::Consumer>,
    session: shoal_model::SessionId,
    jobs: u64,
    mut stop: Signal,
) -> anyhow::Result<bool> {
    use shoal_model::message::Event;
    use shoal_model::Message;
    let mut last = None;
    loop {
        let next = tokio::select! {
            _ = stop.triggered() => return Ok(true),
            next = tokio::time::timeout(QUIET, reports.next()) => next,
        };
        let Ok(next) = next else {
            eprintln!(
                "session {session}: no progress reported for {}s: it has no open work",
                QUIET.as_secs()
            );
            return Ok(false);
        };
        let Some(delivery) = next else {
            anyhow::bail!("the events subscription closed");
        };
        let delivery = delivery?;
        let Ok(Message::Event(Event::Progress {
            session: s,
            done,
            total,
        })) = bus
            .codec()
            .open(&delivery.payload, delivery.publisher.as_deref())
            .map(|t| t.message)
        else {
            continue;
        };
        if s != session {
            continue;
        }
        if last != Some((done, total)) {
            eprintln!("session {session}: {done}/{total} candidates done");
            last = Some((done, total));
        }
        if total >= jobs && done >= total {
            return Ok(false);
        }
    }
}
