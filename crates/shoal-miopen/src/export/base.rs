//! The base of `shoal export --base DIR` and of `shoal golden update`: the databases found in
//! DIR (MIOpen's shipped files, an earlier export or a golden version, under the names this
//! export writes), read and checked in full before anything is written, so a corrupt or
//! truncated base stops the export with its name and changes nothing. DIR is only read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::merge::{self, FindDb, PerfDb};
use super::{read, ExportError, ExportNames};

/// The databases found in the base directory, read and checked.
pub struct Base {
    pub(super) dir: PathBuf,
    pub(super) find: Option<FindDb>,
    /// The SQLite perf db's path and rows.
    pub(super) perf_sqlite: Option<(PathBuf, PerfDb)>,
    /// The text perf db, and its lines as they are, per key.
    pub(super) perf_text: Option<(PerfDb, BTreeMap<String, String>)>,
    /// The kernel db's path and name: the export's name, or MIOpen's shipped name
    /// (`gfx942.kdb`), which MIOpen falls back to.
    pub(super) kdb: Option<(PathBuf, String)>,
}

/// The names a base is looked for under.
pub struct BaseNames<'n> {
    /// The names this export writes.
    pub names: &'n ExportNames,
    /// MIOpen's shipped kernel-db name (system databases only).
    pub shipped_kdb: Option<String>,
    /// With `--user-db`: the system databases' names, to tell a user who pointed at those.
    pub system: Option<ExportNames>,
}

impl Base {
    /// Reads the files of `names` that are in `dir`. Refuses `dir` as the output directory (the
    /// base is never written), and a `dir` that holds none of them (a merge that would merge
    /// nothing is a mistake in its arguments, not an export of the session alone).
    pub fn load(dir: &Path, out: &Path, names: &BaseNames<'_>) -> Result<Base, ExportError> {
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        if !dir.is_dir() {
            return Err(ExportError::BaseNotADirectory {
                dir: dir.to_path_buf(),
            });
        }
        if canonical(dir) == canonical(out) {
            return Err(ExportError::BaseIsOutput {
                dir: dir.to_path_buf(),
            });
        }
        let base = Self::read(dir, names).map_err(|e| ExportError::Base(Box::new(e)))?;
        if base.is_empty() {
            return Err(nothing_there(dir, names));
        }
        Ok(base)
    }

    /// Reads the files of `names` that are in `dir`, each checked in full.
    fn read(dir: &Path, names: &BaseNames<'_>) -> Result<Base, ExportError> {
        let n = names.names;
        let present = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
        let find = match present(&n.find_db) {
            Some(p) => Some(read::read_find_db(&p)?.0),
            None => None,
        };
        let perf_text = match present(&n.perf_db_text) {
            Some(p) => {
                let (db, lines, _) = read::read_perf_db_text(&p)?;
                Some((db, lines))
            }
            None => None,
        };
        let perf_sqlite = match present(&n.perf_db_sqlite) {
            Some(p) => {
                let db = merge::read_perf_db_sqlite(&p)?;
                Some((p, db))
            }
            None => None,
        };
        let kdb_names = std::iter::once(n.kern_db.clone()).chain(names.shipped_kdb.clone());
        let mut kdb = None;
        for name in kdb_names {
            if let Some(p) = present(&name) {
                super::check_kdb(&p)?;
                kdb = Some((p, name));
                break;
            }
        }
        Ok(Base {
            dir: dir.to_path_buf(),
            find,
            perf_sqlite,
            perf_text,
            kdb,
        })
    }

    fn is_empty(&self) -> bool {
        self.find.is_none()
            && self.perf_sqlite.is_none()
            && self.perf_text.is_none()
            && self.kdb.is_none()
    }

    /// The base's SQLite and text perf dbs read as one (the SQLite file's params where they
    /// disagree), and how many pairs disagreed.
    pub(super) fn perf(&self) -> Option<(PerfDb, usize)> {
        match (&self.perf_sqlite, &self.perf_text) {
            (Some((_, sqlite)), Some((text, _))) => Some(merge::union_perf_db(sqlite, text)),
            (Some((_, db)), None) | (None, Some((db, _))) => Some((db.clone(), 0)),
            (None, None) => None,
        }
    }

    /// Says which base files were found.
    pub fn describe(&self, names: &ExportNames) -> String {
        let kdb = self.kdb.as_ref().map(|(_, n)| n.as_str());
        let found: Vec<&str> = [
            self.find.as_ref().map(|_| names.find_db.as_str()),
            self.perf_sqlite
                .as_ref()
                .map(|_| names.perf_db_sqlite.as_str()),
            self.perf_text.as_ref().map(|_| names.perf_db_text.as_str()),
            kdb,
        ]
        .into_iter()
        .flatten()
        .collect();
        format!(
            "--base {}: merging into {}",
            self.dir.display(),
            found.join(", ")
        )
    }
}

/// The error for a base directory that holds none of the databases looked for.
fn nothing_there(dir: &Path, names: &BaseNames<'_>) -> ExportError {
    let n = names.names;
    let mut looked = vec![
        n.find_db.clone(),
        n.perf_db_sqlite.clone(),
        n.perf_db_text.clone(),
        n.kern_db.clone(),
    ];
    looked.extend(names.shipped_kdb.clone());
    let system = match &names.system {
        Some(system) => [
            &system.find_db,
            &system.perf_db_sqlite,
            &system.perf_db_text,
            &system.kern_db,
        ]
        .into_iter()
        .filter(|name| dir.join(name).is_file())
        .cloned()
        .collect(),
        None => Vec::new(),
    };
    ExportError::NothingInBase {
        dir: dir.to_path_buf(),
        looked,
        system,
    }
}
