//! `shoal jobs load`: one job per (config with the tag, solver), for a MIOpen session, with the
//! perf steps (`miopen_perf_compile,miopen_perf_eval`: tunable solvers, their perf configs
//! searched) or the find steps (`miopen_find_compile,miopen_find_eval`: every applicable solver,
//! tunable or not — GEMM, naive, direct, Winograd — timed as Find would). Loading is idempotent:
//! jobs that exist are left as they are.

use std::collections::HashSet;

use sha2::{Digest, Sha256};
use shoal_model::{NewJob, Params, SessionId, Solver, Step};
use shoal_store::Store;

use super::{conv_of, miopen_session, tagged_configs, LoadError};
use crate::ConvConfig;

/// What to load: `shoal jobs load`'s arguments, or a `LoadJobs` command's.
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

/// Loads the jobs `req` asks for; those that exist are left as they are.
pub async fn load(store: &dyn Store, req: &JobsLoad) -> Result<Loaded, LoadError> {
    miopen_session(store, req.session).await?;
    let (compile_step, eval_step) = steps_of(&req.fin_steps)?;
    let find = compile_step == Step::MiopenFindCompile;
    let solvers = solvers_of(store, &req.solvers, find).await?;
    let configs = tagged_configs(store, &req.tag).await?;
    let mut jobs = Vec::new();
    let mut skipped = 0;
    for config in &configs {
        let conv = conv_of(config)?;
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
                build_key: build_key(compile_step, &conv, &solver.name),
                held: false,
                compile_params: compile,
                run_params: Params::new(),
            });
        }
    }
    if req.only_applicable && jobs.is_empty() {
        return Err(LoadError::NoneApplicable {
            tag: req.tag.clone(),
            session: req.session,
        });
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

/// The solvers of the jobs: those `named`, or with none named every solver of the store that
/// the steps tune. Perf tuning searches performance configs, which only tunable solvers have;
/// Find (`find`) times every applicable solver.
async fn solvers_of(
    store: &dyn Store,
    named: &[String],
    find: bool,
) -> Result<Vec<Solver>, LoadError> {
    let known = store.solvers().await?;
    if known.is_empty() {
        return Err(LoadError::NoSolvers);
    }
    if named.is_empty() {
        return Ok(known.into_iter().filter(|s| find || s.tunable).collect());
    }
    named
        .iter()
        .map(|name| {
            known
                .iter()
                .find(|s| &s.name == name)
                .cloned()
                .ok_or_else(|| LoadError::UnknownSolver(name.clone()))
        })
        .collect()
}

/// The (compile, eval) steps named by `--fin-steps`: the perf pair or the find pair.
fn steps_of(fin_steps: &[String]) -> Result<(Step, Step), LoadError> {
    let steps: Vec<Option<Step>> = fin_steps.iter().map(|s| s.parse().ok()).collect();
    match steps[..] {
        [Some(Step::MiopenPerfCompile), Some(Step::MiopenPerfEval)] => {
            Ok((Step::MiopenPerfCompile, Step::MiopenPerfEval))
        }
        [Some(Step::MiopenFindCompile), Some(Step::MiopenFindEval)] => {
            Ok((Step::MiopenFindCompile, Step::MiopenFindEval))
        }
        _ => Err(LoadError::FinSteps(fin_steps.join(","))),
    }
}

/// The build key of a (config, solver) compile of `step` (perf or find compile: their
/// artifacts differ): a job's build is shared with every job of the same key. The MIOpen
/// backend keys its builds with it too (`shoal_backend::miopen::build_key`).
pub fn build_key(step: Step, conv: &ConvConfig, solver: &str) -> String {
    let mut h = Sha256::new();
    h.update(step.as_str().as_bytes());
    h.update([0]);
    h.update(crate::keys::find_db_key(conv).as_bytes());
    h.update([0]);
    h.update(crate::driver::driver_line(conv).as_bytes());
    h.update([0]);
    h.update(solver.as_bytes());
    hex::encode(h.finalize())
}
