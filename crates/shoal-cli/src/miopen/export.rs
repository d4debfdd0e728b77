//! `shoal export` for a MIOpen session: the find db, the perf db (SQLite and text) and the kernel
//! db, named and laid out as MIOpen reads them, from the session's evaluated jobs.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use shoal_backend::miopen::parse_compiled;
use shoal_export::files::OutputDir;
use shoal_miopen::export::{self, FindDbEntry, KdbEntry, PerfDbEntry};
use shoal_miopen::ConvConfig;
use shoal_model::{JobState, Outcome, Session};
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
    let arch = &session.info.arch;
    let names = match &which.user_db {
        None => export::file_names(arch, session.info.num_cu),
        Some(v) => {
            let version = if v.is_empty() {
                &session.info.library_version
            } else {
                v
            };
            export::user_db_names(arch, session.info.num_cu, version)
                .map_err(|e| anyhow::anyhow!("--user-db: {e}; pass --miopen-version"))?
        }
    };
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
    let dir = OutputDir::prepare(out, &writes, force)?;
    let mut finds = Vec::new();
    let mut perfs = Vec::new();
    // Per find entry: its job, and whether it also made a perf-db entry.
    let mut sources: Vec<(shoal_model::JobId, bool)> = Vec::new();
    for r in store.final_results(session.id).await? {
        let (JobState::Evaluated, Some(Outcome::Measured(m))) = (r.state, &r.outcome) else {
            continue;
        };
        let config = ConvConfig::from_params(&r.config_params)
            .map_err(|e| anyhow::anyhow!("config {}: {e}", r.config))?;
        let detail = |k: &str| m.details.get(k).unwrap_or("").to_string();
        finds.push(FindDbEntry {
            config: config.clone(),
            solver: r.solver.clone(),
            time_ms: (m.time_us / 1000.0) as f32,
            workspace: m.workspace,
            algorithm: detail("algorithm"),
        });
        let params = detail("params");
        sources.push((r.job, !params.is_empty()));
        if !params.is_empty() {
            perfs.push(PerfDbEntry {
                config,
                solver: r.solver.clone(),
                params,
            });
        }
    }
    // The kernel db holds the kernels of the entries that made it into the find or perf db,
    // as MITuna's does, not every kernel ever compiled.
    let mut kernels = Vec::new();
    if kern_db {
        let kept: std::collections::HashSet<usize> = export::find_db_kept(&finds)
            .into_values()
            .flatten()
            .collect();
        let mut seen = std::collections::HashSet::new();
        for (i, &(job, in_perf_db)) in sources.iter().enumerate() {
            if kept.contains(&i) || in_perf_db {
                kernels_of(store, job, arch, &mut seen, &mut kernels).await?;
            }
        }
    }
    if find_db {
        let name = &names.find_db;
        dir.write_bytes(name, export::find_db_text(&finds).as_bytes())?;
        println!("{}: {} entries", dir.path(name).display(), finds.len());
    }
    if perf_db {
        let sqlite = &names.perf_db_sqlite;
        let counts = dir.write(sqlite, |p| export::write_perf_db_sqlite(p, &perfs))?;
        println!("{}: {counts:?}", dir.path(sqlite).display());
        let text = &names.perf_db_text;
        dir.write_bytes(text, export::perf_db_text(&perfs).as_bytes())?;
        println!("{}: {} entries", dir.path(text).display(), perfs.len());
    }
    if kern_db {
        let name = &names.kern_db;
        let n = dir.write(name, |p| export::write_kdb(p, &kernels))?;
        println!("{}: {n} kernels", dir.path(name).display());
    }
    Ok(ExitCode::SUCCESS)
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
