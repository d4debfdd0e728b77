//! `shoal export` for a MIOpen session: the find db, the perf db (SQLite and text) and the kernel
//! db, named and laid out as MIOpen reads them, from the session's evaluated jobs
//! (`shoal_actors::miopen_export`, which the exporter role shares), with this command's options:
//! a tag, user dbs, a base to merge into.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use shoal_actors::miopen_export::{write, Databases, Entries};
use shoal_export::files::OutputDir;
use shoal_miopen::export::merge::Policy;

use super::merge::{Base, Merging};
use shoal_miopen::export;
use shoal_model::Session;
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
    let databases = Databases {
        find_db: all || which.find_db,
        perf_db: all || which.perf_db,
        kern_db: all || which.kern_db,
    };
    let (find_db, perf_db, kern_db) = (databases.find_db, databases.perf_db, databases.kern_db);
    let names = names_for(session, which.user_db.as_deref())?;
    // Every file this export writes is checked before any is computed or written.
    let writes = databases.files(&names);
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
    let (finds, perfs) = (&entries.finds, &entries.perfs);
    if let (Some(base), Some((_, policy))) = (&base, &which.base) {
        let kernels = if kern_db {
            entries.kernels(store, &session.info.arch).await?
        } else {
            Vec::new()
        };
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
    for line in write(store, session, &entries, &names, databases, &dir).await? {
        println!("{line}");
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
