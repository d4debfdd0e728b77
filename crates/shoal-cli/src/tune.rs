//! `shoal tune`: one command from a spec to a tuned table, in the embedded mode.

use shoal_model::shipped::SpecLocation;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use shoal_actors::backends::SessionBackends;
use shoal_actors::exporter::Export;
use shoal_backend::SessionBackend;

use crate::args::TuneArgs;
use crate::run::{print_summary, run_session, RunOptions};
use crate::store_open::open_migrated;

pub async fn run(args: TuneArgs, db: &Path) -> anyhow::Result<ExitCode> {
    // Everything about the spec is checked before anything is written.
    let limits = crate::args::spec_limits(args.max_candidates);
    let mut spec = shoal_backend::spec::load_with(&args.spec, &limits)?;
    spec.replay_time = args.replay_time;
    if let Some(prior) = &args.prior {
        with_prior(&mut spec, prior)?;
    }
    let spec = Arc::new(spec);
    for w in &spec.warnings {
        tracing::warn!("{w}");
    }
    let stop = crate::signals::install()?;
    if args.cluster {
        return crate::tune_cluster::run(args, spec, stop).await;
    }
    let store = open_migrated(db).await?;
    let device = choose_device(&spec, args.device.as_deref(), args.devices)?;
    let location = SpecLocation::Path(spec.absolute_path().display().to_string());
    let identity = shoal_commands::spec::session_for(
        &spec,
        &location,
        (&device.arch, device.num_cu),
        &args.reason,
        args.max_retries,
    );
    let loaded = shoal_commands::spec::load(&*store, &spec, &identity).await?;
    let session = loaded.session.id;
    eprintln!(
        "session {session} ({}): {} on {} ({} {}, {} units): {} candidates over {} shapes, from {} builds (one per distinct set of compile-time parameters){}",
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
    if let Some(search) = &spec.search {
        let at_once = search
            .in_flight
            .map(|n| format!(", at most {n} of a shape's out at once"))
            .unwrap_or_default();
        let warm = search
            .prior
            .as_ref()
            .map(|p| format!(", starting from the results of {p}"))
            .unwrap_or_default();
        eprintln!(
            "search: {} tries {} of each shape's candidates (seed {}{at_once}{warm}); the rest are skipped",
            search.strategy, search.budget, search.seed
        );
    }

    let backends = SessionBackends::new(crate::host::fin_path(None));
    backends.insert(session, SessionBackend::Exec(spec.clone()));
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("shoal-out").join(&spec.name));
    let metrics = crate::metrics_endpoint::start(
        args.metrics_addr,
        store.clone(),
        crate::metrics_endpoint::Counted::One(session),
        None,
    )
    .await?;
    // This process is the whole fleet: listed by `shoal workers` like a cluster's workers.
    let activity = shoal_actors::presence::Activity::default();
    let presence = crate::worker::Presence::start(
        store.clone(),
        shoal_actors::presence::Identity {
            activity: activity.clone(),
            host: crate::host::hostname(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").into(),
            roles: crate::worker::role_names(shoal_actors::cluster::Roles {
                scheduler: true,
                compile: true,
                eval: true,
                monitor: true,
                exporter: true,
            }),
            devices: vec![device.clone()],
            started_ms: shoal_actors::now_ms(),
        },
    );
    let (interrupted, running) = run_session(
        store.clone(),
        backends,
        session,
        db,
        RunOptions {
            jobs: args.jobs,
            work_dir: args.work_dir.clone(),
            max_gpus: args.devices.map(|n| n as usize),
            activity,
        },
        stop,
    )
    .await?;
    let summary = running
        .exporter
        .send(Export {
            session,
            out_dir: out.clone(),
            force: true,
        })
        .await
        .context("the exporter stopped")?
        .with_context(|| format!("exporting session {session}"));
    running.shutdown().await?;
    presence.stop().await;
    if let Some(m) = metrics {
        m.stop().await;
    }
    let summary = summary?;
    println!();
    print!("{}", summary.table);
    let counts = store.state_counts(session).await?;
    print_summary(&counts);
    println!(
        "tuned table: {}  (as JSON, with runners-up and failures by kind: {})",
        summary.csv.display(),
        summary.json.display()
    );
    if interrupted {
        eprintln!("interrupted: run the same command again to finish the tuning");
        return Ok(ExitCode::from(130));
    }
    let results = store.final_results(session).await?;
    Ok(verdict(&summary.rows, &results))
}

/// `tune`'s exit status when a shape ends with no valid candidate (documented in `--help`).
pub const NO_VALID_CANDIDATE: u8 = 3;

/// How many failure groups the end of a tuning shows (`shoal failures` shows all).
const GROUPS_SHOWN: usize = 5;

/// Says on stderr what failed, grouped by error, and returns [`NO_VALID_CANDIDATE`] when a
/// shape has no winner: a table with a shape left empty is not a tuning that worked, and a
/// script must be able to tell without reading the CSV.
pub fn verdict(rows: &[shoal_export::TunedRow], results: &[shoal_model::FinalResult]) -> ExitCode {
    let groups = shoal_export::failures::failure_groups(results);
    if !groups.is_empty() {
        let n: usize = groups.iter().map(|g| g.count()).sum();
        eprintln!(
            "{n} candidate{} failed, {} kind{} of error:",
            if n == 1 { "" } else { "s" },
            groups.len(),
            if groups.len() == 1 { "" } else { "s" }
        );
        let shown = &groups[..groups.len().min(GROUPS_SHOWN)];
        for line in shoal_export::failures::failure_text(shown, Some(2)) {
            eprintln!("{line}");
        }
        if groups.len() > GROUPS_SHOWN {
            eprintln!(
                "  … and {} more groups (`shoal failures`)",
                groups.len() - GROUPS_SHOWN
            );
        }
    }
    let empty: Vec<String> = rows
        .iter()
        .filter(|r| r.best.is_none())
        .map(|r| r.shape.to_string())
        .collect();
    if empty.is_empty() {
        return ExitCode::SUCCESS;
    }
    let listed: Vec<&str> = empty.iter().take(5).map(String::as_str).collect();
    eprintln!(
        "shoal: {} of {} shapes have no valid candidate ({}{}): every candidate of them failed \
         (above) or none was made; exit status {NO_VALID_CANDIDATE}",
        empty.len(),
        rows.len(),
        listed.join("; "),
        if empty.len() > listed.len() {
            "; …"
        } else {
            ""
        }
    );
    ExitCode::from(NO_VALID_CANDIDATE)
}

/// The device the session targets: `--device`, else the CPU or the first GPU, as the spec says.
/// Every device of the same architecture and unit count then gets an Evaluator.
fn choose_device(
    spec: &shoal_backend::spec::TuningSpec,
    wanted: Option<&str>,
    max_gpus: Option<u32>,
) -> anyhow::Result<shoal_gpu::Device> {
    use shoal_backend::spec::DeviceClass;
    use shoal_gpu::DeviceKind;
    let devices = crate::host::devices_limited(max_gpus.map(|n| n as usize));
    let listing = || {
        devices
            .iter()
            .map(|d| format!("{} ({} {}, {} units)", d.id, d.name, d.arch, d.num_cu))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(id) = wanted {
        return devices
            .iter()
            .find(|d| d.id == id)
            .cloned()
            .with_context(|| format!("--device {id}: no such device here; found {}", listing()));
    }
    match spec.device {
        DeviceClass::Cpu => Ok(shoal_gpu::cpu_device(&shoal_gpu::SystemRoot::default())),
        DeviceClass::Gpu => devices
            .iter()
            .find(|d| d.kind != DeviceKind::Cpu)
            .cloned()
            .with_context(|| {
                format!(
                    "{} times its candidates on a GPU (`device = \"gpu\"`), and this host has none that Shoal can see (NVIDIA through NVML, AMD through /sys/class/kfd); found {}",
                    spec.path.display(),
                    listing()
                )
            }),
    }
}

/// `--prior`: the spec's search warm-started from `prior` (a file named relative to where the
/// command runs), refused where the spec has no search to start.
fn with_prior(
    spec: &mut shoal_backend::spec::TuningSpec,
    prior: &shoal_model::search::PriorSource,
) -> anyhow::Result<()> {
    use shoal_model::search::PriorSource;
    let Some(search) = spec.search.as_mut() else {
        anyhow::bail!(
            "--prior starts a search from earlier results, but {} has no [search]: add one with \
             a strategy and a budget (strategy = \"forest\", budget = \"2%\")",
            spec.path.display()
        );
    };
    let prior = match prior {
        PriorSource::File(path) => {
            let absolute =
                std::path::absolute(path).with_context(|| format!("--prior {}", path.display()))?;
            anyhow::ensure!(
                absolute.is_file(),
                "--prior {}: no such file (a T4 file, or session:<id> of this store)",
                path.display()
            );
            PriorSource::File(absolute)
        }
        PriorSource::Session(_) => prior.clone(),
    };
    search.prior = Some(prior);
    Ok(())
}
