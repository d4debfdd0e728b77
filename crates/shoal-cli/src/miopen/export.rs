//! `shoal export` for a MIOpen session: the find db, the perf db (SQLite and text) and the kernel
//! db, named and laid out as MIOpen reads them, from the session's evaluated jobs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use shoal_backend::miopen::parse_compiled;
use shoal_export::files::OutputDir;
use shoal_miopen::export::merge::Policy;

use super::merge::{Base, Merging};
use shoal_miopen::export::{self, FindDbEntry, KdbEntry, PerfDbEntry};
use shoal_miopen::ConvConfig;
use shoal_model::{JobState, Outcome, Session, Step};
use shoal_store::Store;

/// Which databases to write; none selected means all of them.
#[derive(Clone, Debug)]
pub struct Which {
    pub find_db: bool,
    pub perf_db: bool,
    pub kern_db: bool,
    /// Write MIOpen's user databases instead of the system ones, named for this MIOpen version
    /// (empty: the session's).
    pub user_db: Option<String>,
    /// Merge into the databases of this directory (`--base`), by this policy.
    pub base: Option<(PathBuf, Policy)>,
    /// Only the results of configs with this tag.
    pub tag: Option<String>,
}

pub async fn export(
    store: &dyn Store,
    session: &Session,
    out: &Path,
    which: Which,
    force: bool,
) -> anyhow::Result<ExitCode> {
    let all = !(which.find_db || which.perf_db || which.kern_db);
    let (find_db, perf_db, kern_db) = (
        all || which.find_db,
        all || which.perf_db,
        all || which.kern_db,
    );
    let names = names_for(session, which.user_db.as_deref())?;
    // Every file this export writes is checked before any is computed or written.
    let mut writes: Vec<&str> = Vec::new();
    if find_db {
        writes.push(&names.find_db);
    }
    if perf_db {
        writes.extend([names.perf_db_sqlite.as_str(), names.perf_db_text.as_str()]);
    }
    if kern_db {
        writes.push(&names.kern_db);
    }
    // The base, if any, is read and checked in full before anything is written.
    let base = match &which.base {
        Some((dir, _)) => {
            let base = Base::load(dir, out, &names)?;
            println!("{}", base.describe(&names));
            Some(base)
        }
        None => None,
    };
    let dir = OutputDir::prepare(out, &writes, force)?;
    let entries = Entries::of(store, session, which.tag.as_deref()).await?;
    let kernels = if kern_db {
        entries.kernels(store, &session.info.arch).await?
    } else {
        Vec::new()
    };
    let (finds, perfs) = (&entries.finds, &entries.perfs);
    if let (Some(base), Some((_, policy))) = (&base, &which.base) {
        let merging = Merging {
            base,
            names: &names,
            policy: *policy,
            finds,
            perfs,
        };
        if find_db {
            merging.find_db(&dir)?;
        }
        if perf_db {
            merging.perf_dbs(&dir)?;
        }
        if kern_db {
            merging.kdb(&dir, &kernels)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if find_db {
        let name = &names.find_db;
        dir.write_bytes(name, export::find_db_text(finds).as_bytes())?;
        println!("{}: {} entries", dir.path(name).display(), finds.len());
    }
    if perf_db {
        let sqlite = &names.perf_db_sqlite;
        let counts = dir.write(sqlite, |p| export::write_perf_db_sqlite(p, perfs))?;
        println!("{}: {counts:?}", dir.path(sqlite).display());
        let text = &names.perf_db_text;
        dir.write_bytes(text, export::perf_db_text(perfs).as_bytes())?;
        println!("{}: {} entries", dir.path(text).display(), perfs.len());
    }
    if kern_db {
        let name = &names.kern_db;
        let n = dir.write(name, |p| export::write_kdb(p, &kernels))?;
        println!("{}: {n} kernels", dir.path(name).display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The system databases' names, or with `user_db` the user databases' for that MIOpen version
/// (empty: the session's).
fn names_for(session: &Session, user_db: Option<&str>) -> anyhow::Result<export::ExportNames> {
    let (arch, num_cu) = (&session.info.arch, session.info.num_cu);
    Ok(match user_db {
        None => export::file_names(arch, num_cu),
        Some(v) => {
            let version = if v.is_empty() {
                &session.info.library_version
            } else {
                v
            };
            export::user_db_names(arch, num_cu, version)
                .map_err(|e| anyhow::anyhow!("--user-db: {e}; pass --miopen-version"))?
        }
    })
}

/// A session's find and perf entries, from its evaluated jobs: the find db from its find-eval
/// jobs (from its perf-eval jobs when it has none, as a perf-only session always did), the perf
/// db from its perf-eval jobs.
struct Entries {
    finds: Vec<FindDbEntry>,
    perfs: Vec<PerfDbEntry>,
    /// Per find entry: its job, and whether it also made a perf-db entry.
    sources: Vec<(shoal_model::JobId, bool)>,
    /// Jobs with a perf-db entry but no find-db entry (perf jobs of a session with find jobs).
    perf_only: Vec<shoal_model::JobId>,
}

impl Entries {
    async fn of(
        store: &dyn Store,
        session: &Session,
        tag: Option<&str>,
    ) -> anyhow::Result<Entries> {
        let tagged: Option<std::collections::HashSet<shoal_model::ConfigId>> = match tag {
            Some(t) => {
                let ids: std::collections::HashSet<_> = store
                    .configs_with_tag(t)
                    .await?
                    .iter()
                    .map(|c| c.id)
                    .collect();
                anyhow::ensure!(!ids.is_empty(), "--tag {t}: no config carries this tag");
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
                .map_err(|err| anyhow::anyhow!("config {}: {err}", r.config))?;
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

    /// The kernels of the entries that made it into the find or perf db, as MITuna's kernel db
    /// holds them, not every kernel ever compiled.
    async fn kernels(&self, store: &dyn Store, arch: &str) -> anyhow::Result<Vec<KdbEntry>> {
        let kept: std::collections::HashSet<usize> = export::find_db_kept(&self.finds)
            .into_values()
            .flatten()
            .collect();
        let mut kernels = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, &(job, in_perf_db)) in self.sources.iter().enumerate() {
            if kept.contains(&i) || in_perf_db {
                kernels_of(store, job, arch, &mut seen, &mut kernels).await?;
            }
        }
        for &job in &self.perf_only {
            kernels_of(store, job, arch, &mut seen, &mut kernels).await?;
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
) -> anyhow::Result<()> {
    let found = store
        .job(job)
        .await?
        .with_context(|| format!("job {job} vanished"))?;
    let Some(hash) = found.artifact else {
        return Ok(());
    };
    let packed = store
        .artifact(&hash)
        .await?
        .with_context(|| format!("artifact {hash} of job {job} is not in the store"))?;
    let raw =
        shoal_backend::command::unpack(&packed).with_context(|| format!("artifact {hash}"))?;
    let compiled =
        parse_compiled(&raw).map_err(|e| anyhow::anyhow!("artifact {hash} of job {job}: {e}"))?;
    for obj in &compiled.kernel_objects {
        if seen.insert((obj.kernel_file.clone(), obj.comp_options.clone())) {
            kernels.push(
                KdbEntry::from_kernel_object(obj, arch).with_context(|| format!("job {job}"))?,
            );
        }
    }
    Ok(())
}
