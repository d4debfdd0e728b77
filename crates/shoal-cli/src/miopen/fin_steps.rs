//! The commands that ask fin directly rather than through jobs: `solvers update`
//! (`get_solvers`) and `applicability update` (`applicability`), plus `shoal run`, which runs a
//! session's jobs through the actors.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use shoal_actors::backends::SessionBackends;
use shoal_miopen::fin;
use shoal_model::NewSolver;

use super::{fin_path, RunArgs};
use crate::run::{run_session, RunOptions};
use crate::store_open::{open_existing, open_migrated, session_or_newest};

fn scratch(db: &Path) -> anyhow::Result<std::path::PathBuf> {
    let mut p = db.as_os_str().to_owned();
    p.push(".work/fin");
    let p = std::path::PathBuf::from(p);
    std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
    Ok(p.canonicalize()?)
}

async fn ask_fin(fin: &Path, db: &Path, input: &str) -> anyhow::Result<fin::FinOutput> {
    Ok(shoal_backend::miopen::ask_fin(fin, &scratch(db)?, input).await?)
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
        crate::host::confine_children(None)?;
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
    cluster: bool,
) -> anyhow::Result<ExitCode> {
    let (session, configs, pairs, applicable) = if cluster {
        // fin runs on the Scheduler's host, with its fin: --fin names this machine's.
        if fin_flag.is_some() {
            bail!("applicability update --cluster: fin runs on the Scheduler's host (its `fin` setting); drop --fin");
        }
        let bus = crate::connect::bus_from_env().await?;
        let command = shoal_model::command::Command::UpdateApplicability {
            session: session.map(shoal_model::SessionId),
            tag: tag.to_string(),
        };
        match crate::commands::send(&*bus, command, APPLICABILITY_WAIT).await? {
            shoal_model::command::CommandOutcome::ApplicabilityUpdated {
                session,
                configs,
                pairs,
                applicable,
            } => (session, configs, pairs, applicable),
            other => bail!("the Scheduler answered {other:?} to applicability update"),
        }
    } else {
        let store = open_existing(db).await?;
        let session = session_or_newest(&*store, session).await?.id;
        crate::host::confine_children(None)?;
        let fin = fin_path(fin_flag);
        let scratch = scratch(db)?;
        let ask_fin = |input: String| {
            let (fin, scratch) = (&fin, &scratch);
            async move { shoal_backend::miopen::ask_fin(fin, scratch, &input).await }
        };
        let done = shoal_miopen::load::update_applicability(&*store, session, tag, ask_fin).await?;
        (
            session,
            done.configs as u64,
            done.pairs as u64,
            done.applicable as u64,
        )
    };
    println!(
        "session {session}: {configs} configs, {applicable} of {pairs} (config, solver) pairs applicable"
    );
    Ok(ExitCode::SUCCESS)
}

/// How long `applicability update --cluster` waits: fin answers every config of the tag first.
const APPLICABILITY_WAIT: Duration = Duration::from_secs(600);

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
            activity: Default::default(),
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
