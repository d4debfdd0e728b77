//! What each command does: [`run`] dispatches a parsed [`Cli`] to the subcommand modules and
//! carries out the small commands itself (check, sessions, status, export, devices, control).
//!
//! The flags live in `args.rs` and the store helpers in `store_open.rs`, so that this module
//! depends on the subcommands and no subcommand depends on it.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use shoal_actors::backends::SessionBackends;
use shoal_model::queue::ControlTarget;
use shoal_model::SessionId;

use crate::args::{spec_limits, Cli, Command, ControlCommand, DbCommand};
use crate::store_open::{open_existing, open_store, session_or_newest};

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let db = cli.db;
    crate::host::set_sandbox_mode(cli.sandbox);
    match cli.command {
        Command::Tune(args) => crate::tune::run(args, &db).await,
        Command::Check {
            spec,
            list_builds,
            max_candidates,
        } => check(&spec, list_builds, max_candidates),
        Command::Db {
            command: DbCommand::Migrate,
        } => migrate(&db).await,
        Command::Serve(args) => crate::web::serve(args, &db).await,
        Command::Workers(args) => crate::fleet::workers(args, &db).await,
        Command::Sessions { json, cluster } => crate::status::sessions(&db, cluster, json).await,
        // A CI gate must tell "regressed" (1) from "could not compare" (2).
        Command::Compare(args) => Ok(match crate::compare::run(args, &db).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("shoal: {}", crate::report(&e));
                ExitCode::from(crate::compare::COULD_NOT_COMPARE)
            }
        }),
        Command::Status {
            session,
            json,
            cluster,
        } => crate::status::status(&db, cluster, session, json).await,
        Command::Failures {
            session,
            json,
            cluster,
        } => crate::status::failures(&db, cluster, session, json).await,
        Command::DeadLetters { json, messages } => {
            crate::dead_letters::dead_letters(json, messages).await
        }
        Command::Export {
            golden_v: Some(v),
            golden_dir,
            out,
            force,
            ..
        } => {
            let golden = crate::miopen::golden::golden_dir(golden_dir.as_deref(), &db);
            crate::miopen::golden::export(&golden, v, &out, force)
        }
        Command::Export {
            session,
            out,
            find_db,
            perf_db,
            kern_db,
            user_db,
            miopen_version,
            base,
            policy,
            tag,
            cluster: true,
            ..
        } => {
            let session = session.context(
                "export --cluster: --session is required (the cluster's store is not read here)",
            )?;
            let options = shoal_model::message::MiopenExportOptions {
                find_db,
                perf_db,
                kern_db,
                user_db: user_db.then(|| miopen_version.unwrap_or_default()),
                base_dir: base.map(|b| b.display().to_string()),
                newer: policy == crate::args::MergePolicy::Newer,
                tag,
            };
            request_export(session, &out, options).await
        }
        Command::Export {
            session,
            out,
            format: crate::args::ExportFormat::T4,
            force,
            ..
        } => export_t4(&db, session, &out, force).await,
        Command::Export {
            session,
            out,
            find_db,
            perf_db,
            kern_db,
            user_db,
            miopen_version,
            base,
            policy,
            tag,
            full_kdb,
            cluster: false,
            force,
            ..
        } => {
            let which = crate::miopen::export::Which {
                find_db,
                perf_db,
                kern_db,
                user_db: user_db.then(|| miopen_version.unwrap_or_default()),
                base: base.map(|b| (b, policy.policy())),
                tag,
                full_kdb,
            };
            export(&db, session, &out, which, force).await
        }
        Command::Devices { json } => Ok(devices(json)),
        Command::ImportConfigs(args) => crate::miopen::import_configs(args, &db).await,
        Command::ImportDb {
            store,
            label,
            tag,
            cluster,
            golden_v,
            dir,
            golden_dir,
            force,
        } => {
            let into = crate::miopen::DbImportInto {
                store: store.then_some(crate::miopen::StoreImport {
                    label,
                    tag,
                    cluster,
                }),
                golden: golden_v.map(|v| {
                    let golden = crate::miopen::golden::golden_dir(golden_dir.as_deref(), &db);
                    (golden, v, force)
                }),
            };
            crate::miopen::import_db(&dir, into, &db).await
        }
        Command::Golden { command } => golden(command, &db).await,
        Command::Miopen { command } => crate::miopen::miopen(command, &db).await,
        Command::Solvers {
            command:
                crate::miopen::SolversCommand::Update {
                    fin,
                    builtin,
                    cluster,
                },
        } => crate::miopen::fin_steps::solvers_update(&db, fin, builtin, cluster).await,
        Command::Session { command } => crate::miopen::session(command, &db).await,
        Command::Applicability {
            command:
                crate::miopen::ApplicabilityCommand::Update {
                    session,
                    tag,
                    fin,
                    cluster,
                },
        } => crate::miopen::fin_steps::applicability_update(&db, session, &tag, fin, cluster).await,
        Command::Jobs { command } => crate::miopen::jobs(command, &db).await,
        Command::Run(args) => crate::miopen::fin_steps::run(args, &db).await,
        Command::Worker(args) => crate::worker::run(args).await,
        Command::Control { command } => control(command).await,
    }
}

/// `db migrate`: the cluster's database when one is configured, else the --db file.
async fn migrate(db: &Path) -> anyhow::Result<ExitCode> {
    let settings = crate::connect::Settings::load(None)?;
    let store = match &settings.db {
        Some(url) => crate::connect::open_store_url(&settings.db_from, url, Duration::ZERO).await?,
        None => open_store(db).await?,
    };
    let v = store.migrate().await?;
    println!("{}: schema version {v}", store.describe());
    Ok(ExitCode::SUCCESS)
}

/// `export --cluster`: asks the cluster's exporter to write the tuned table under its own
/// `--export-dir`. The directory is checked here first with the exporter's own rule, so that a bad
/// `-o` is told to the user instead of only logged on the exporter's host.
async fn request_export(
    session: i64,
    out: &Path,
    options: shoal_model::message::MiopenExportOptions,
) -> anyhow::Result<ExitCode> {
    use shoal_actors::exporter::export_dir_under;
    if let Err(e) = export_dir_under(Path::new("."), &out.to_string_lossy()) {
        anyhow::bail!("-o: {e}");
    }
    if let Some(base) = &options.base_dir {
        if let Err(e) = export_dir_under(Path::new("."), base) {
            anyhow::bail!("--base with --cluster: {e}");
        }
    }
    let (session, out_dir) = (SessionId(session), out.display().to_string());
    // The options are MIOpen's; without any, the exporter writes what suits the session.
    let msg = if options == Default::default() {
        shoal_model::message::Control::Export { session, out_dir }
    } else {
        shoal_model::message::Control::ExportMiopen {
            session,
            out_dir,
            options,
        }
    };
    let msg = shoal_model::Message::Control(msg);
    let bus = crate::connect::bus_from_env().await?;
    let key = ControlTarget::any(shoal_model::message::Actor::Exporter).routing_key();
    bus.publish_topic(
        &bus.namespace().control_topic(),
        &key,
        bus.codec().encode(&msg),
    )
    .await?;
    bus.close().await?;
    println!(
        "export of session {session} requested; the exporter writes into <its --export-dir>/{} on its host",
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `export` into a local directory: MIOpen's databases for a MIOpen session, the tuned table
/// otherwise.
async fn export(
    db: &Path,
    session: Option<i64>,
    out: &Path,
    which: crate::miopen::export::Which,
    force: bool,
) -> anyhow::Result<ExitCode> {
    let store = open_existing(db).await?;
    let info = session_or_newest(&*store, session).await?;
    let session = info.id;
    if info.info.backend == shoal_model::Backend::Miopen {
        return crate::miopen::export::export(&*store, &info, out, which, force).await;
    }
    let summary = shoal_actors::exporter::export(
        &*store,
        &SessionBackends::new(crate::host::fin_path(None)),
        session,
        out,
        force,
    )
    .await?;
    print!("{}", summary.table);
    println!(
        "wrote {} and {}",
        summary.csv.display(),
        summary.json.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `export --format t4`: the session's problems as T4 spaces, one file each.
async fn export_t4(
    db: &Path,
    session: Option<i64>,
    out: &Path,
    force: bool,
) -> anyhow::Result<ExitCode> {
    let store = open_existing(db).await?;
    let info = session_or_newest(&*store, session).await?;
    let results = store.final_results(info.id).await?;
    let device = format!("{} ({} units)", info.info.arch, info.info.num_cu);
    let spaces = shoal_export::t4::spaces(&results, &device);
    let names: Vec<&str> = spaces.iter().map(|s| s.file_name.as_str()).collect();
    let dir = shoal_export::files::OutputDir::prepare(out, &names, force)?;
    let mut entries = 0;
    for s in &spaces {
        entries += s.json["results"].as_array().map_or(0, Vec::len);
        dir.write_bytes(
            &s.file_name,
            serde_json::to_string_pretty(&s.json)?.as_bytes(),
        )?;
    }
    println!(
        "wrote {} T4 spaces ({entries} candidates) into {}",
        spaces.len(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `devices`: what the GpuMonitor would find on this host, with each device's health.
fn devices(json: bool) -> ExitCode {
    if json {
        let list: Vec<serde_json::Value> = crate::host::devices()
            .iter()
            .map(|d| {
                let h = shoal_gpu::probe(&shoal_gpu::SystemRoot::default(), d);
                serde_json::json!({
                    "id": d.id, "name": d.name, "arch": d.arch, "units": d.num_cu,
                    "memory_bytes": d.memory_bytes, "healthy": h.healthy, "detail": h.detail,
                    "temperature_c": h.temperature_c, "busy_percent": h.busy_percent,
                    "clock_mhz": h.clock_mhz,
                })
            })
            .collect();
        println!("{}", serde_json::Value::from(list));
        return ExitCode::SUCCESS;
    }
    #[cfg(feature = "hip")]
    match (
        shoal_gpu::hip::runtime_version(),
        shoal_gpu::hip::device_count(),
    ) {
        (Ok(v), Ok(0)) => println!("hip: runtime {v}, no device"),
        (Ok(v), Ok(n)) => println!("hip: runtime {v}, {n} devices"),
        (v, n) => println!("hip: {v:?} {n:?}"),
    }
    for d in crate::host::devices() {
        let h = shoal_gpu::probe(&shoal_gpu::SystemRoot::default(), &d);
        println!(
            "{:<10} {:<8} units={:<5} healthy={:<5} {} ({})",
            d.id, d.arch, d.num_cu, h.healthy, d.name, h.detail
        );
    }
    ExitCode::SUCCESS
}

/// Publishes a control message on the cluster's control topic.
async fn control(cmd: ControlCommand) -> anyhow::Result<ExitCode> {
    use shoal_model::message::Actor;
    use shoal_model::message::Control;
    let (host, actor, msg) = match cmd {
        ControlCommand::Pause { host, device } => (host, Actor::Monitor, Control::Pause { device }),
        ControlCommand::Resume { host, device } => {
            (host, Actor::Monitor, Control::Resume { device })
        }
        ControlCommand::Drain { host } => (host, Actor::Worker, Control::Drain),
        ControlCommand::Restart { actor, host } => (
            host,
            Actor::Worker,
            Control::Restart {
                actor: actor.actor(),
            },
        ),
    };
    let bus = crate::connect::bus_from_env().await?;
    let key = ControlTarget::of(&host, actor).routing_key();
    bus.publish_topic(
        &bus.namespace().control_topic(),
        &key,
        bus.codec().encode(&shoal_model::Message::Control(msg)),
    )
    .await?;
    bus.close().await?;
    println!("sent to {key}");
    Ok(ExitCode::SUCCESS)
}

fn check(spec_path: &Path, list_builds: bool, max_candidates: u64) -> anyhow::Result<ExitCode> {
    use shoal_backend::spec::OutOfMemory;
    let spec = shoal_backend::spec::load_with(spec_path, &spec_limits(max_candidates))?;
    for w in &spec.warnings {
        eprintln!("warning: {w}");
    }
    if list_builds {
        let per_shape = spec
            .shapes
            .iter()
            .map(|shape| {
                let builds = spec.candidates(shape)?.into_iter().map(|(c, _)| c.key());
                Ok((shape.key(), builds.collect()))
            })
            .collect::<Result<Vec<(String, std::collections::HashSet<String>)>, OutOfMemory>>()?;
        let mut out = std::io::stdout().lock();
        for compile in spec.compile_sets()? {
            let key = compile.key();
            let shapes: Vec<&str> = per_shape
                .iter()
                .filter(|(_, builds)| builds.contains(&key))
                .map(|(shape, _)| shape.as_str())
                .collect();
            let argv = spec.build_argv(&compile, Path::new("{out}"));
            // A reader that stops early (`| head`) is not an error.
            if writeln!(out, "{key}\t{}\t{}", shapes.join(";"), argv.join(" ")).is_err() {
                break;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let combinations = spec.combinations();
    let cut = |n: usize| {
        if n == combinations {
            format!("{n} candidates")
        } else {
            format!("{combinations} combinations, {n} candidates after the rules")
        }
    };
    let (mut total, mut tried) = (0, 0);
    for shape in &spec.shapes {
        let n = spec.candidates(shape)?.len();
        total += n;
        match &spec.search {
            Some(search) => {
                let k = search.budget.evaluations(n);
                tried += k;
                println!("{shape}: {}, {k} to try", cut(n));
            }
            None => println!("{shape}: {}", cut(n)),
        }
    }
    let all = combinations.saturating_mul(spec.shapes.len());
    println!(
        "{}: {} shapes, {} distinct builds, {} candidates ({all} combinations before the rules)",
        spec.name,
        spec.shapes.len(),
        spec.compile_sets()?.len(),
        total
    );
    if let Some(search) = &spec.search {
        println!(
            "search: {} (seed {}) tries {tried} of them, {} of each shape's",
            search.strategy, search.seed, search.budget
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `shoal golden …`.
async fn golden(cmd: crate::args::GoldenCommand, db: &Path) -> anyhow::Result<ExitCode> {
    use crate::args::GoldenCommand;
    use crate::miopen::golden;
    match cmd {
        GoldenCommand::Update {
            session,
            golden_v,
            base_golden_v,
            policy,
            golden_dir,
            find_db,
            perf_db,
            kern_db,
            full_kdb,
        } => {
            let store = open_existing(db).await?;
            let info = session_or_newest(&*store, session).await?;
            let session = info.id;
            anyhow::ensure!(
                info.info.backend == shoal_model::Backend::Miopen,
                "session {session} is not a MIOpen session: golden versions hold MIOpen databases"
            );
            let dir = golden::golden_dir(golden_dir.as_deref(), db);
            let which = crate::miopen::export::Which {
                find_db,
                perf_db,
                kern_db,
                full_kdb,
                ..Default::default()
            };
            golden::update(
                &*store,
                &info,
                &dir,
                (golden_v, base_golden_v),
                policy.policy(),
                which,
            )
            .await
        }
        GoldenCommand::List { golden_dir, json } => {
            golden::list(&golden::golden_dir(golden_dir.as_deref(), db), json)
        }
    }
}
