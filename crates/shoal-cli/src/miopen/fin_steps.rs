//! The commands that ask fin directly rather than through jobs: `solvers update`
//! (`get_solvers`) and `applicability update` (`applicability`), plus `shoal run`, which runs a
//! session's jobs through the actors.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use shoal_actors::backends::SessionBackends;
use shoal_backend::miopen::run_fin;
use shoal_backend::RunContext;
use shoal_miopen::fin::{self, FinJob};
use shoal_miopen::ConvConfig;
use shoal_model::NewSolver;

use super::{fin_path, RunArgs};
use crate::run::{run_session, RunOptions};
use crate::store_open::{open_existing, open_migrated, session_or_newest};

/// Configs per fin call for `applicability`: fin takes a list of jobs and answers all of them.
const APPLICABILITY_BATCH: usize = 64;

fn scratch(db: &Path) -> anyhow::Result<std::path::PathBuf> {
    let mut p = db.as_os_str().to_owned();
    p.push(".work/fin");
    let p = std::path::PathBuf::from(p);
    std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
    Ok(p.canonicalize()?)
}

async fn ask_fin(fin: &Path, db: &Path, input: &str) -> anyhow::Result<fin::FinOutput> {
    let dir = scratch(db)?;
    let ctx = RunContext {
        work_dir: &dir,
        cpu: None,
        gpu_index: None,
        runner: None,
    };
    let text = run_fin(
        fin,
        input,
        &ctx,
        Duration::from_secs(3600),
        shoal_backend::failure::ChildStep::Run,
    )
    .await
    .map_err(|e| anyhow::anyhow!("{} ({}): {}", fin.display(), e.kind, e.detail))?;
    fin::parse_output(&text).with_context(|| format!("reading the output of {}", fin.display()))
}

pub async fn solvers_update(
    db: &Path,
    fin_flag: Option<std::path::PathBuf>,
    builtin: bool,
    cluster: bool,
) -> anyhow::Result<ExitCode> {
    let solvers: Vec<NewSolver> = if builtin {
        shoal_miopen::solvers::all()
            .iter()
            .map(|s| NewSolver {
                name: s.name.to_string(),
                tunable: s.tunable,
            })
            .collect()
    } else {
        let fin = fin_path(fin_flag);
        let out = ask_fin(&fin, db, r#"[{"steps": ["get_solvers"]}]"#).await?;
        let all = out
            .jobs
            .first()
            .and_then(|j| j.all_solvers.clone())
            .context("fin answered get_solvers without all_solvers")?;
        all.into_iter()
            .filter(|s| s.kind.as_deref().unwrap_or("convolution") == "convolution")
            .map(|s| NewSolver {
                tunable: s.tunable.unwrap_or_else(|| {
                    shoal_miopen::solvers::by_name(&s.name).is_some_and(|i| i.tunable)
                }),
                name: s.name,
            })
            .collect()
    };
    let (count, tunable, created) = if cluster {
        let bus = crate::connect::bus_from_env().await?;
        let command = shoal_model::command::Command::UpdateSolvers { solvers };
        match crate::commands::send(&*bus, command, crate::commands::WAIT).await? {
            shoal_model::command::CommandOutcome::SolversUpdated {
                solvers,
                tunable,
                created,
            } => (solvers as usize, tunable as usize, created as usize),
            other => anyhow::bail!("the Scheduler answered {other:?} to solvers update"),
        }
    } else {
        let store = open_migrated(db).await?;
        let before = store.solvers().await?.len();
        let stored = store.upsert_solvers(&solvers).await?;
        let after = store.solvers().await?.len();
        (
            stored.len(),
            stored.iter().filter(|s| s.tunable).count(),
            after - before,
        )
    };
    println!("{count} solvers ({tunable} tunable), {created} new");
    Ok(ExitCode::SUCCESS)
}

pub async fn applicability_update(
    db: &Path,
    session: Option<i64>,
    tag: &str,
    fin_flag: Option<std::path::PathBuf>,
) -> anyhow::Result<ExitCode> {
    let store = open_existing(db).await?;
    let info = session_or_newest(&*store, session).await?;
    let (session, session_id) = (info.id, info.id);
    if info.info.backend != shoal_model::Backend::Miopen {
        bail!("session {session} is not a MIOpen session");
    }
    let solvers = store.solvers().await?;
    if solvers.is_empty() {
        bail!("the store has no solvers: run `shoal solvers update` first");
    }
    let configs = store.configs_with_tag(tag).await?;
    if configs.is_empty() {
        bail!("no config carries the tag `{tag}`");
    }
    let fin = fin_path(fin_flag);
    let (mut pairs, mut applicable) = (0usize, 0usize);
    for chunk in configs.chunks(APPLICABILITY_BATCH) {
        let mut jobs = Vec::with_capacity(chunk.len());
        for c in chunk {
            let conv = ConvConfig::from_params(&c.params)
                .map_err(|e| anyhow::anyhow!("config {}: {e}", c.id))?;
            jobs.push(FinJob {
                steps: vec!["applicability".into()],
                arch: info.info.arch.clone(),
                num_cu: info.info.num_cu,
                config_id: c.id.0,
                config: conv,
                solvers: vec![],
                dynamic_only: false,
                perf_compile_result: None,
                find_compile_result: None,
            });
        }
        let out = ask_fin(&fin, db, &fin::input_json(&jobs)).await?;
        if out.jobs.len() != chunk.len() {
            bail!(
                "fin answered {} of {} applicability jobs",
                out.jobs.len(),
                chunk.len()
            );
        }
        let mut rows = Vec::new();
        for (c, answer) in chunk.iter().zip(&out.jobs) {
            let names = answer.applicable_solvers.clone().unwrap_or_default();
            for s in &solvers {
                let yes = names.iter().any(|n| n == &s.name);
                applicable += yes as usize;
                pairs += 1;
                rows.push((c.id, s.id, yes));
            }
        }
        store.set_applicability(session_id, &rows).await?;
    }
    println!(
        "session {session}: {} configs, {applicable} of {pairs} (config, solver) pairs applicable",
        configs.len()
    );
    Ok(ExitCode::SUCCESS)
}

pub async fn run(args: RunArgs, db: &Path) -> anyhow::Result<ExitCode> {
    let stop = crate::signals::install()?;
    let store = open_existing(db).await?;
    let session = session_or_newest(&*store, args.session).await?.id;
    let backends = SessionBackends::new(fin_path(args.fin));
    let (interrupted, running) = run_session(
        store.clone(),
        backends,
        session,
        db,
        RunOptions {
            jobs: args.jobs,
            work_dir: args.work_dir,
            max_gpus: None,
        },
        stop,
    )
    .await?;
    running.shutdown().await?;
    crate::run::print_summary(&store.state_counts(session).await?);
    if interrupted {
        eprintln!("interrupted: run the same command again to finish");
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}
