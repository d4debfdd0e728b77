//! `shoal export` for a MIOpen session: the find db, the perf db (SQLite and text) and the kernel
//! db, named and laid out as MIOpen reads them, from the session's evaluated jobs.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use shoal_backend::miopen::parse_compiled;
use shoal_miopen::export::{self, FindDbEntry, KdbEntry, PerfDbEntry};
use shoal_miopen::ConvConfig;
use shoal_model::{JobState, Outcome, Session};
use shoal_store::Store;

/// Which databases to write; none selected means all of them.
#[derive(Clone, Copy, Debug)]
pub struct Which {
    pub find_db: bool,
    pub perf_db: bool,
    pub kern_db: bool,
}

pub async fn export(
    store: &dyn Store,
    session: &Session,
    out: &Path,
    which: Which,
) -> anyhow::Result<ExitCode> {
    let all = !(which.find_db || which.perf_db || which.kern_db);
    let (find_db, perf_db, kern_db) = (
        all || which.find_db,
        all || which.perf_db,
        all || which.kern_db,
    );
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let arch = &session.info.arch;
    let names = export::file_names(arch, session.info.num_cu);
    let mut finds = Vec::new();
    let mut perfs = Vec::new();
    let mut kernels = Vec::new();
    let mut seen_kernels = std::collections::HashSet::new();
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
        if !params.is_empty() {
            perfs.push(PerfDbEntry {
                config,
                solver: r.solver.clone(),
                params,
            });
        }
        if kern_db {
            let job = store
                .job(r.job)
                .await?
                .with_context(|| format!("job {} vanished", r.job))?;
            let Some(hash) = job.artifact else { continue };
            let packed = store
                .artifact(&hash)
                .await?
                .with_context(|| format!("artifact {hash} of job {} is not in the store", r.job))?;
            let raw = shoal_backend::command::unpack(&packed)
                .with_context(|| format!("artifact {hash}"))?;
            let compiled = parse_compiled(&raw)
                .map_err(|e| anyhow::anyhow!("artifact {hash} of job {}: {e}", r.job))?;
            for obj in &compiled.kernel_objects {
                if seen_kernels.insert((obj.kernel_file.clone(), obj.comp_options.clone())) {
                    kernels.push(
                        KdbEntry::from_kernel_object(obj, arch)
                            .with_context(|| format!("job {}", r.job))?,
                    );
                }
            }
        }
    }
    if find_db {
        let path = out.join(&names.find_db);
        std::fs::write(&path, export::find_db_text(&finds))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("{}: {} entries", path.display(), finds.len());
    }
    if perf_db {
        let sqlite = out.join(&names.perf_db_sqlite);
        let counts = export::write_perf_db_sqlite(&sqlite, &perfs)
            .with_context(|| format!("writing {}", sqlite.display()))?;
        println!("{}: {counts:?}", sqlite.display());
        let text = out.join(&names.perf_db_text);
        std::fs::write(&text, export::perf_db_text(&perfs))
            .with_context(|| format!("writing {}", text.display()))?;
        println!("{}: {} entries", text.display(), perfs.len());
    }
    if kern_db {
        let path = out.join(&names.kern_db);
        let n = export::write_kdb(&path, &kernels)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("{}: {n} kernels", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
