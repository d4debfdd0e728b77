//! A MIOpen session's databases — the find db, the perf db (SQLite and text) and the kernel db,
//! named and laid out as MIOpen reads them — from its evaluated jobs. `shoal export` writes them
//! for a session of a local store (with its options: a tag, user dbs, a base to merge into);
//! the exporter role writes them on `shoal export --cluster` for a MIOpen session
//! ([`crate::exporter::serve_requests`]).

mod base;
mod selected;
mod writing;
pub use selected::{export_selected, Which};
pub use writing::{Asked, Plan};

use shoal_backend::miopen::parse_compiled;
use shoal_miopen::export::{self, FindDbEntry, KdbEntry, PerfDbEntry};
use shoal_miopen::ConvConfig;
use shoal_model::{JobState, Outcome, Session, Step};
use shoal_store::Store;

use crate::ActorError;

/// A session's find and perf entries, from its evaluated jobs: the find db from its find-eval
/// jobs (from its perf-eval jobs when it has none, as a perf-only session always did), the perf
/// db from its perf-eval jobs.
pub struct Entries {
    pub finds: Vec<FindDbEntry>,
    pub perfs: Vec<PerfDbEntry>,
    /// Per find entry: its job, and whether it also made a perf-db entry.
    sources: Vec<(shoal_model::JobId, bool)>,
    /// Jobs with a perf-db entry but no find-db entry (perf jobs of a session with find jobs).
    perf_only: Vec<shoal_model::JobId>,
}

impl Entries {
    pub async fn of(
        store: &dyn Store,
        session: &Session,
        tag: Option<&str>,
    ) -> Result<Entries, ActorError> {
        let tagged: Option<std::collections::HashSet<shoal_model::ConfigId>> = match tag {
            Some(t) => {
                let ids: std::collections::HashSet<_> = store
                    .configs_with_tag(t)
                    .await?
                    .iter()
                    .map(|c| c.id)
                    .collect();
                if ids.is_empty() {
                    return Err(ActorError::Other(format!(
                        "--tag {t}: no config carries this tag"
                    )));
                }
                Some(ids)
            }
            None => None,
        };
        let mut e = Entries {
            finds: Vec::new(),
            perfs: Vec::new(),
            sources: Vec::new(),
            perf_only: Vec::new(),
        };
        let mut measured = Vec::new();
        for r in store.final_results(session.id).await? {
            if tagged.as_ref().is_some_and(|t| !t.contains(&r.config)) {
                continue;
            }
            if let (JobState::Evaluated, Some(Outcome::Measured(_))) = (r.state, &r.outcome) {
                measured.push((r.eval_step, r));
            }
        }
        let find_session = measured.iter().any(|(s, _)| *s == Step::MiopenFindEval);
        for (step, r) in measured {
            let Some(Outcome::Measured(m)) = &r.outcome else {
                continue;
            };
            let (to_find, to_perf) = match step {
                Step::MiopenFindEval => (true, false),
                _ => (!find_session, true),
            };
            let config = ConvConfig::from_params(&r.config_params)
                .map_err(|err| ActorError::Other(format!("config {}: {err}", r.config)))?;
            let detail = |k: &str| m.details.get(k).unwrap_or("").to_string();
            let params = detail("params");
            let to_perf = to_perf && !params.is_empty();
            if to_find {
                e.finds.push(FindDbEntry {
                    config: config.clone(),
                    solver: r.solver.clone(),
                    time_ms: (m.time_us / 1000.0) as f32,
                    workspace: m.workspace,
                    algorithm: detail("algorithm"),
                });
                e.sources.push((r.job, to_perf));
            } else if to_perf {
                e.perf_only.push(r.job);
            }
            if to_perf {
                e.perfs.push(PerfDbEntry {
                    config,
                    solver: r.solver.clone(),
                    params,
                });
            }
        }
        Ok(e)
    }

    /// The kernels for the kernel db. By MITuna's rule, those of each find-db key's fastest
    /// entry: MIOpen runs that one, and compiles any other it picks at run time (961 configs of
    /// a perf session make about 1.6k kernels this way, against 19k for every tuned entry).
    /// With `full`, those of every entry the find db keeps and every perf-db entry.
    pub async fn kernels(
        &self,
        store: &dyn Store,
        arch: &str,
        full: bool,
    ) -> Result<Vec<KdbEntry>, ActorError> {
        let kept = export::find_db_kept(&self.finds);
        let chosen: std::collections::HashSet<usize> = if full {
            kept.into_values().flatten().collect()
        } else {
            kept.into_values()
                .filter_map(|v| v.first().copied())
                .collect()
        };
        let mut kernels = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, &(job, in_perf_db)) in self.sources.iter().enumerate() {
            if chosen.contains(&i) || (full && in_perf_db) {
                kernels_of(store, job, arch, &mut seen, &mut kernels).await?;
            }
        }
        if full {
            for &job in &self.perf_only {
                kernels_of(store, job, arch, &mut seen, &mut kernels).await?;
            }
        }
        Ok(kernels)
    }
}

/// Adds the kernels of `job`'s artifact not yet in `seen` to `kernels`.
async fn kernels_of(
    store: &dyn Store,
    job: shoal_model::JobId,
    arch: &str,
    seen: &mut std::collections::HashSet<(String, String)>,
    kernels: &mut Vec<KdbEntry>,
) -> Result<(), ActorError> {
    let other = |m: String| ActorError::Other(m);
    let found = store
        .job(job)
        .await?
        .ok_or_else(|| other(format!("job {job} vanished")))?;
    let Some(hash) = found.artifact else {
        return Ok(());
    };
    let packed = store
        .artifact(&hash)
        .await?
        .ok_or_else(|| other(format!("artifact {hash} of job {job} is not in the store")))?;
    let raw = shoal_backend::command::unpack(&packed)
        .map_err(|e| other(format!("artifact {hash}: {e}")))?;
    let compiled =
        parse_compiled(&raw).map_err(|e| other(format!("artifact {hash} of job {job}: {e}")))?;
    for obj in &compiled.kernel_objects {
        if seen.insert((obj.kernel_file.clone(), obj.comp_options.clone())) {
            kernels.push(
                KdbEntry::from_kernel_object(obj, arch)
                    .map_err(|e| other(format!("job {job}: {e}")))?,
            );
        }
    }
    Ok(())
}
