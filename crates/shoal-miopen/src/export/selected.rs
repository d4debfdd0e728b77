//! A MIOpen session's export with the options of `shoal export`: which databases, the user
//! databases' names instead of the system ones, a base directory to merge into and a tag. The
//! CLI calls it for a local store; the exporter role calls it for `shoal export --cluster` with
//! the same options, confined to its export directory.

use std::path::{Path, PathBuf};

use shoal_export::files::OutputDir;
use shoal_model::Session;
use shoal_store::Store;

use super::base::{Base, BaseNames};
use super::merge::Policy;
use super::writing::{Asked, Plan, Writing};
use super::{Entries, ExportError, ExportNames, ReadKernels};

/// Which databases to write; none selected means all of them (with a base: all it has).
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
    /// The kernel db holds the kernels of every tuned entry, not only each key's fastest.
    pub full_kdb: bool,
}

/// Writes the databases `which` selects into `out` (replacing what is there with `force`, else
/// refusing before writing anything), and says what each file holds, a line each.
/// `read_kernels` reads the kernels of a job's artifact, for the kernel db
/// (`shoal_backend::miopen::artifact_kernels`).
pub async fn export_selected(
    store: &dyn Store,
    session: &Session,
    out: &Path,
    which: &Which,
    force: bool,
    read_kernels: ReadKernels,
) -> Result<Vec<String>, ExportError> {
    let asked = Asked {
        find_db: which.find_db,
        perf_db: which.perf_db,
        kern_db: which.kern_db,
    };
    let (names, build_dev) = names_for(session, which.user_db.as_deref())?;
    let mut lines = Vec::new();
    if build_dev {
        lines.push(
            "--user-db: names of a BUILD_DEV build of MIOpen (no tweak in the version); a \
             release build reads HIP.<M>_<m>_<p>_<tweak> names: pass --miopen-version with the \
             tweak for those"
                .to_string(),
        );
    }
    // The base, if any, is read and checked in full before anything is written.
    let (arch, num_cu) = (&session.info.arch, session.info.num_cu);
    let base = match &which.base {
        Some((dir, _)) => {
            let base_names = BaseNames {
                names: &names,
                shipped_kdb: which
                    .user_db
                    .is_none()
                    .then(|| super::shipped_kdb_name(arch)),
                system: which
                    .user_db
                    .is_some()
                    .then(|| super::file_names(arch, num_cu)),
            };
            let base = Base::load(dir, out, &base_names)?;
            lines.push(base.describe(&names));
            Some(base)
        }
        None => None,
    };
    let plan = Plan::new(asked, base.as_ref(), &names);
    // Every file this export may write is checked before any is computed or written.
    let dir = OutputDir::prepare(out, &plan.files(&names), force)?;
    let entries = Entries::of(store, session, which.tag.as_deref()).await?;
    let kernels = if plan.kern_db {
        entries
            .kernels(store, arch, which.full_kdb, read_kernels)
            .await?
    } else {
        Vec::new()
    };
    let writing = Writing {
        base: base.as_ref(),
        names: &names,
        plan: &plan,
        policy: which.base.as_ref().map_or(Policy::Better, |(_, p)| *p),
        finds: &entries.finds,
        perfs: &entries.perfs,
        out: &dir,
    };
    lines.extend(writing.all(&kernels)?);
    Ok(lines)
}

/// The system databases' names, or with `user_db` the user databases' for that MIOpen version
/// (empty: the session's), and whether those are a BUILD_DEV build's.
fn names_for(session: &Session, user_db: Option<&str>) -> Result<(ExportNames, bool), ExportError> {
    let (arch, num_cu) = (&session.info.arch, session.info.num_cu);
    Ok(match user_db {
        None => (super::file_names(arch, num_cu), false),
        Some(v) => {
            let version = if v.is_empty() {
                &session.info.library_version
            } else {
                v
            };
            let n = super::user_db_names_of(arch, num_cu, version).map_err(ExportError::UserDb)?;
            (n.names, n.build_dev)
        }
    })
}
