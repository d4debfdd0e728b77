//! `shoal jobs load`: one job per (config with the tag, solver), for a MIOpen session, with the
//! perf steps (`miopen_perf_compile,miopen_perf_eval`: tunable solvers, their perf configs
//! searched) or the find steps (`miopen_find_compile,miopen_find_eval`: every applicable solver,
//! tunable or not — GEMM, naive, direct, Winograd — timed as Find would). Loading is idempotent:
//! jobs that exist are left as they are. The CLI calls it on a local store; in cluster mode the
//! Scheduler calls it for a `LoadJobs` command ([`crate::commands`]).

use std::collections::HashSet;

use shoal_backend::miopen;
use shoal_miopen::ConvConfig;
use shoal_model::{NewJob, Params, SessionId, Solver, Step};
use shoal_store::{Store, StoreError};

/// Why jobs were not loaded: the request itself (told to the operator as it is), or the store.
#[derive(Debug, thiserror::Error)]
pub enum LoadJobsError {
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(LoadJobsError::Refused(format!($($arg)*)))
    };
}

pub struct JobsLoad {
    pub session: SessionId,
    pub tag: String,
    pub fin_steps: Vec<String>,
    pub solvers: Vec<String>,
    pub only_applicable: bool,
    pub reason: String,
}

/// What loading did.
pub struct Loaded {
    pub configs: usize,
    pub candidates: usize,
    pub created: u64,
    pub not_applicable_skipped: usize,
}

pub async fn load(store: &dyn Store, req: &JobsLoad) -> Result<Loaded, LoadJobsError> {
    let Some(session) = store.session(req.session).await? else {
        bail!("session {} is not in the store", req.session);
    };
    if session.info.backend != shoal_model::Backend::Miopen {
        bail!(
            "session {} is a `{}` session; `jobs load` loads MIOpen jobs",
            req.session,
            session.info.backend
        );
    }
    let (compile_step, eval_step) = steps_of(&req.fin_steps)?;
    let find = compile_step == Step::MiopenFindCompile;
    let known = store.solvers().await?;
    if known.is_empty() {
        bail!("the store has no solvers: run `shoal solvers update` first");
    }
    let solvers: Vec<Solver> = if req.solvers.is_empty() {
        // Perf tuning searches performance configs, which only tunable solvers have; Find times
        // every applicable solver.
        known.into_iter().filter(|s| find || s.tunable).collect()
    } else {
        let mut out = Vec::new();
        for name in &req.solvers {
            let Some(s) = known.iter().find(|s| &s.name == name) else {
                bail!("--solvers: unknown solver `{name}` (see `shoal solvers update`)");
            };
            out.push(s.clone());
        }
        out
    };
    let configs = store.configs_with_tag(&req.tag).await?;
    if configs.is_empty() {
        bail!(
            "no config carries the tag `{}` (see `shoal import-configs`)",
            req.tag
        );
    }
    let mut jobs = Vec::new();
    let mut skipped = 0;
    for config in &configs {
        let conv = match ConvConfig::from_params(&config.params) {
            Ok(conv) => conv,
            Err(e) => bail!("config {}: {e}", config.id),
        };
        let applicable: Option<HashSet<_>> = if req.only_applicable {
            Some(
                store
                    .applicable_solvers(req.session, config.id)
                    .await?
                    .into_iter()
                    .collect(),
            )
        } else {
            None
        };
        for solver in &solvers {
            if applicable.as_ref().is_some_and(|a| !a.contains(&solver.id)) {
                skipped += 1;
                continue;
            }
            let mut compile = Params::new();
            compile.push("solver", solver.name.clone());
            jobs.push(NewJob {
                session: req.session,
                config: config.id,
                solver: solver.id,
                compile_step,
                eval_step,
                build_key: miopen::build_key(compile_step, &conv, &solver.name),
                held: false,
                compile_params: compile,
                run_params: Params::new(),
            });
        }
    }
    if req.only_applicable && jobs.is_empty() {
        bail!(
            "no applicable (config, solver) pair for tag `{}` in session {}: run `shoal applicability update --session {}` first",
            req.tag, req.session, req.session
        );
    }
    let mut created = 0;
    for chunk in jobs.chunks(2000) {
        created += store.insert_jobs(chunk).await?;
    }
    tracing::info!(reason = %req.reason, session = %req.session, created, "jobs loaded");
    Ok(Loaded {
        configs: configs.len(),
        candidates: jobs.len(),
        created,
        not_applicable_skipped: skipped,
    })
}

/// The (compile, eval) steps named by `--fin-steps`: the perf pair or the find pair.
fn steps_of(fin_steps: &[String]) -> Result<(Step, Step), LoadJobsError> {
    let steps: Vec<Option<Step>> = fin_steps.iter().map(|s| s.parse().ok()).collect();
    Ok(match steps[..] {
        [Some(Step::MiopenPerfCompile), Some(Step::MiopenPerfEval)] => {
            (Step::MiopenPerfCompile, Step::MiopenPerfEval)
        }
        [Some(Step::MiopenFindCompile), Some(Step::MiopenFindEval)] => {
            (Step::MiopenFindCompile, Step::MiopenFindEval)
        }
        _ => bail!(
            "--fin-steps {}: a job has a compile and an eval step: \
             `miopen_perf_compile,miopen_perf_eval` or `miopen_find_compile,miopen_find_eval`",
            fin_steps.join(",")
        ),
    })
}

/// Configs per fin call for `applicability`: fin takes a list of jobs and answers all of them.
const APPLICABILITY_BATCH: usize = 64;

/// What an applicability update recorded.
pub struct Applicability {
    pub configs: usize,
    /// (config, solver) pairs asked about, and those applicable.
    pub pairs: usize,
    pub applicable: usize,
}

/// `shoal applicability update`: asks `fin` (run in `scratch`) which solvers apply to each
/// config with `tag`, for `session`'s architecture, and records every (config, solver) pair.
/// The CLI calls it on a local store; the Scheduler for an `UpdateApplicability` command, with
/// the fin of its host.
pub async fn update_applicability(
    store: &dyn Store,
    session: SessionId,
    tag: &str,
    fin: &std::path::Path,
    scratch: &std::path::Path,
) -> Result<Applicability, LoadJobsError> {
    use shoal_miopen::fin::{self, FinJob};
    let Some(info) = store.session(session).await? else {
        bail!("session {session} is not in the store");
    };
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
    let (mut pairs, mut applicable) = (0usize, 0usize);
    for chunk in configs.chunks(APPLICABILITY_BATCH) {
        let mut jobs = Vec::with_capacity(chunk.len());
        for c in chunk {
            let conv = match ConvConfig::from_params(&c.params) {
                Ok(conv) => conv,
                Err(e) => bail!("config {}: {e}", c.id),
            };
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
        let out = ask_fin(fin, scratch, &fin::input_json(&jobs)).await?;
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
        store.set_applicability(session, &rows).await?;
    }
    Ok(Applicability {
        configs: configs.len(),
        pairs,
        applicable,
    })
}

/// Runs `fin` on `input` in `scratch` (created if missing) and reads its answer.
pub async fn ask_fin(
    fin: &std::path::Path,
    scratch: &std::path::Path,
    input: &str,
) -> Result<shoal_miopen::fin::FinOutput, LoadJobsError> {
    if let Err(e) = std::fs::create_dir_all(scratch) {
        bail!("creating {}: {e}", scratch.display());
    }
    let ctx = shoal_backend::RunContext {
        work_dir: scratch,
        cpu: None,
        gpu_index: None,
        runner: None,
    };
    let text = match shoal_backend::miopen::run_fin(
        fin,
        input,
        &ctx,
        std::time::Duration::from_secs(3600),
        shoal_backend::failure::ChildStep::Run,
    )
    .await
    {
        Ok(text) => text,
        Err(e) => bail!("{} ({}): {}", fin.display(), e.kind, e.detail),
    };
    match shoal_miopen::fin::parse_output(&text) {
        Ok(out) => Ok(out),
        Err(e) => bail!("reading the output of {}: {e}", fin.display()),
    }
}
