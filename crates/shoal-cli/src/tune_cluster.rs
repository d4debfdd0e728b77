//! `shoal tune --cluster`: the same spec, session and jobs as the embedded mode, loaded into the
//! cluster's store; the running workers do the work, and this process watches and exports.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use shoal_actors::backends::SessionBackends;
use shoal_actors::shutdown::Signal;
use shoal_backend::spec::TuningSpec;
use shoal_backend::SessionBackend;

use crate::args::TuneArgs;

pub async fn run(args: TuneArgs, spec: Arc<TuningSpec>, stop: Signal) -> anyhow::Result<ExitCode> {
    let store = crate::connect::store_from_env().await?;
    let mut device = shoal_gpu::cpu_device(&shoal_gpu::SystemRoot::default());
    if let Some(arch) = &args.arch {
        device.arch = arch.clone();
    }
    if let Some(n) = args.num_cu {
        device.num_cu = n;
    }
    let identity = crate::load::session_for(&spec, &device, &args.reason, args.max_retries);
    let loaded = crate::load::load(&*store, &spec, &identity).await?;
    let session = loaded.session.id;
    eprintln!(
        "session {session} ({}): {} for {} with {} units: {} candidates, {} builds; waiting for the workers",
        if loaded.resumed { "resumed" } else { "new" },
        spec.name,
        device.arch,
        device.num_cu,
        loaded.jobs_total,
        loaded.builds,
    );
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
