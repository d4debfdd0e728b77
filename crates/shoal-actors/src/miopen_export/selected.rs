//! A MIOpen session's export with the options of `shoal export`: which databases, the user
//! databases' names instead of the system ones, a base directory to merge into and a tag. The
//! CLI calls it for a local store; the exporter role calls it for `shoal export --cluster` with
//! the same options, confined to its export directory.

use std::path::{Path, PathBuf};

use shoal_export::files::OutputDir;
use shoal_miopen::export::{self, merge::Policy};
use shoal_model::Session;
use shoal_store::Store;

use super::merge::{Base, Merging};
use super::{write, Databases, Entries};
use crate::ActorError;

/// Which databases to write; none selected means all of them.
#[derive(Clone, Debug, Default)]
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

/// Writes the databases `which` selects into `out` (replacing what is there with `force`, else
/// refusing before writing anything), and says what each file holds, a line each.
pub async fn export_selected(
    store: &dyn Store,
    session: &Session,
    out: &Path,
    which: &Which,
    force: bool,
) -> Result<Vec<String>, ActorError> {
    let failed = |e: shoal_export::files::OutputError| ActorError::Other(e.to_string());
    let all = !(which.find_db || which.perf_db || which.kern_db);
    let databases = Databases {
        find_db: all || which.find_db,
        perf_db: all || which.perf_db,
        kern_db: all || which.kern_db,
    };
    let names = names_for(session, which.user_db.as_deref())?;
    // Every file this export writes is checked before any is computed or written.
    let writes = databases.files(&names);
    let mut lines = Vec::new();
    // The base, if any, is read and checked in full before anything is written.
    let base = match &which.base {
        Some((dir, _)) => {
            let base = Base::load(dir, out, &names)?;
            lines.push(base.describe(&names));
            Some(base)
        }
        None => None,
    };
    let dir = OutputDir::prepare(out, &writes, force).map_err(failed)?;
    let entries = Entries::of(store, session, which.tag.as_deref()).await?;
    let (Some(base), Some((_, policy))) = (&base, &which.base) else {
        lines.extend(write(store, session, &entries, &names, databases, &dir).await?);
        return Ok(lines);
    };
    let kernels = if databases.kern_db {
        entries.kernels(store, &session.info.arch).await?
    } else {
        Vec::new()
    };
    let merging = Merging {
        base,
        names: &names,
        policy: *policy,
        finds: &entries.finds,
        perfs: &entries.perfs,
    };
    if databases.find_db {
        merging.find_db(&dir, &mut lines)?;
    }
    if databases.perf_db {
        merging.perf_dbs(&dir, &mut lines)?;
    }
    if databases.kern_db {
        merging.kdb(&dir, &kernels, &mut lines)?;
    }
    Ok(lines)
}

/// The system databases' names, or with `user_db` the user databases' for that MIOpen version
/// (empty: the session's).
fn names_for(session: &Session, user_db: Option<&str>) -> Result<export::ExportNames, ActorError> {
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
                .map_err(|e| ActorError::Other(format!("--user-db: {e}; pass --miopen-version")))?
        }
    })
}
