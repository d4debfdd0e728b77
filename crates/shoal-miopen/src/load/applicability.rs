//! `shoal applicability update`: which solvers apply to each config with a tag, for a session's
//! architecture, as fin's `applicability` step says, recorded for every (config, solver) pair
//! so that `jobs load` loads only applicable pairs.

use std::future::Future;

use shoal_model::SessionId;
use shoal_store::Store;

use super::{conv_of, miopen_session, tagged_configs, LoadError};
use crate::fin::{self, FinJob, FinOutput};

/// Configs per fin call: fin takes a list of jobs and answers all of them.
const APPLICABILITY_BATCH: usize = 64;

/// What an applicability update recorded.
pub struct Applicability {
    pub configs: usize,
    /// (config, solver) pairs asked about, and those applicable.
    pub pairs: usize,
    pub applicable: usize,
}

/// Asks fin which solvers apply to each config with `tag` for `session`'s architecture, and
/// records every (config, solver) pair. `ask_fin` runs fin on an input (fin's JSON) and reads
/// its answer: the CLI's runs the fin of this host, the Scheduler's the fin of its host
/// (`shoal_backend::miopen::ask_fin`).
pub async fn update_applicability<F, Fut, E>(
    store: &dyn Store,
    session: SessionId,
    tag: &str,
    ask_fin: F,
) -> Result<Applicability, LoadError>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<FinOutput, E>>,
    E: std::error::Error + Send + Sync + 'static,
{
    let info = miopen_session(store, session).await?.info;
    let solvers = store.solvers().await?;
    if solvers.is_empty() {
        return Err(LoadError::NoSolvers);
    }
    let configs = tagged_configs(store, tag).await?;
    let (mut pairs, mut applicable) = (0usize, 0usize);
    for chunk in configs.chunks(APPLICABILITY_BATCH) {
        let mut jobs = Vec::with_capacity(chunk.len());
        for c in chunk {
            jobs.push(FinJob {
                steps: vec!["applicability".into()],
                arch: info.arch.clone(),
                num_cu: info.num_cu,
                config_id: c.id.0,
                config: conv_of(c)?,
                solvers: vec![],
                dynamic_only: false,
                perf_compile_result: None,
                find_compile_result: None,
            });
        }
        let out = ask_fin(fin::input_json(&jobs))
            .await
            .map_err(|e| LoadError::Fin(Box::new(e)))?;
        if out.jobs.len() != chunk.len() {
            return Err(LoadError::FinAnswers {
                answered: out.jobs.len(),
                asked: chunk.len(),
            });
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
