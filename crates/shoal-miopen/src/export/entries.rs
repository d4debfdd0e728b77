//! A session's entries for MIOpen's databases, from its evaluated jobs in the store: find and
//! perf entries from their measurements, kernels from their compile artifacts. The store is read
//! through `dyn Store` only, so a local store and the cluster's export alike.

use shoal_model::{JobState, Outcome, Session, Step};
use shoal_store::Store;

use super::{ArtifactError, ExportError, FindDbEntry, KdbEntry, PerfDbEntry};
use crate::fin::KernelObject;
use crate::ConvConfig;

/// Reads the kernels out of a MIOpen job's artifact as the store holds it (packed). The
/// artifact's format is the MIOpen backend's, which writes it: that crate (`shoal-backend`,
/// `miopen::artifact_kernels`) depends on this one, so an export is handed its reader.
pub type ReadKernels = fn(&[u8]) -> Result<Vec<KernelObject>, ArtifactError>;

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
    /// The entries of `session`'s evaluated jobs (with `tag`, of the configs carrying it only).
    pub async fn of(
        store: &dyn Store,
        session: &Session,
        tag: Option<&str>,
    ) -> Result<Entries, ExportError> {
        let tagged: Option<std::collections::HashSet<shoal_model::ConfigId>> = match tag {
            Some(t) => {
                let ids: std::collections::HashSet<_> = store
                    .configs_with_tag(t)
                    .await?
                    .iter()
                    .map(|c| c.id)
                    .collect();
                if ids.is_empty() {
                    return Err(ExportError::NoConfigWithTag(t.to_string()));
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
            let config =
                ConvConfig::from_params(&r.config_params).map_err(|err| ExportError::Config {
                    config: r.config,
                    reason: err.to_string(),
                })?;
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
    /// `read_kernels` reads them out of each job's artifact.
    pub async fn kernels(
        &self,
        store: &dyn Store,
        arch: &str,
        full: bool,
        read_kernels: ReadKernels,
    ) -> Result<Vec<KdbEntry>, ExportError> {
        let kept = super::find_db_kept(&self.finds);
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
                kernels_of(store, job, (arch, read_kernels), &mut seen, &mut kernels).await?;
            }
        }
        if full {
            for &job in &self.perf_only {
                kernels_of(store, job, (arch, read_kernels), &mut seen, &mut kernels).await?;
            }
        }
        Ok(kernels)
    }
}

/// Adds the kernels of `job`'s artifact not yet in `seen` to `kernels`.
async fn kernels_of(
    store: &dyn Store,
    job: shoal_model::JobId,
    (arch, read_kernels): (&str, ReadKernels),
    seen: &mut std::collections::HashSet<(String, String)>,
    kernels: &mut Vec<KdbEntry>,
) -> Result<(), ExportError> {
    let found = store.job(job).await?.ok_or(ExportError::JobVanished(job))?;
    let Some(hash) = found.artifact else {
        return Ok(());
    };
    let Some(packed) = store.artifact(&hash).await? else {
        return Err(ExportError::ArtifactMissing { hash, job });
    };
    let objects = match read_kernels(&packed) {
        Ok(objects) => objects,
        Err(source) => return Err(ExportError::Artifact { hash, job, source }),
    };
    for obj in &objects {
        if seen.insert((obj.kernel_file.clone(), obj.comp_options.clone())) {
            kernels.push(
                KdbEntry::from_kernel_object(obj, arch)
                    .map_err(|source| ExportError::Kernel { job, source })?,
            );
        }
    }
    Ok(())
}
