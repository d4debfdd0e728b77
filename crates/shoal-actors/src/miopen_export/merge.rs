//! `shoal export --base DIR` (and the exporter role's export with a base): the session's results merged into the databases found in DIR
//! (MIOpen's shipped files, or an earlier export, under the same names), written to the output
//! directory. DIR is only read, and every base file is read and checked before anything is
//! written, so a corrupt or truncated base stops the export with its name and changes nothing.

use std::path::{Path, PathBuf};

use shoal_export::files::OutputDir;
use shoal_miopen::export::merge::{self, FindDb, PerfDb, Policy};
use shoal_miopen::export::{self, ExportNames, FindDbEntry, KdbEntry, PerfDbEntry};

use crate::ActorError;

/// A failure, said as the CLI says it.
fn failed(e: impl std::fmt::Display) -> ActorError {
    ActorError::Other(e.to_string())
}

/// The databases found in the base directory, read and checked.
pub struct Base {
    dir: PathBuf,
    find: Option<FindDb>,
    perf_text: Option<PerfDb>,
    perf_sqlite: Option<PerfDb>,
    kdb: Option<PathBuf>,
}

impl Base {
    /// Reads the files of `names` that are in `dir`. Refuses `dir` as the output directory: the
    /// base is never written.
    pub fn load(dir: &Path, out: &Path, names: &ExportNames) -> Result<Base, ActorError> {
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        if !dir.is_dir() {
            return Err(failed(format!("--base {}: not a directory", dir.display())));
        }
        if canonical(dir) == canonical(out) {
            return Err(failed(format!(
                "--base {} is the output directory: the base is only read; export into another \
                 directory",
                dir.display()
            )));
        }
        let present = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
        let text = |p: &Path| {
            std::fs::read_to_string(p)
                .map_err(|e| failed(format!("--base: reading {}: {e}", p.display())))
        };
        let find = match present(&names.find_db) {
            Some(p) => Some(
                merge::parse_find_db(&text(&p)?)
                    .map_err(|e| failed(format!("--base: {}: {e}", p.display())))?,
            ),
            None => None,
        };
        let perf_text = match present(&names.perf_db_text) {
            Some(p) => Some(
                merge::parse_perf_db_text(&text(&p)?)
                    .map_err(|e| failed(format!("--base: {}: {e}", p.display())))?,
            ),
            None => None,
        };
        let perf_sqlite = match present(&names.perf_db_sqlite) {
            Some(p) => Some(merge::read_perf_db_sqlite(&p).map_err(|e| {
                failed(format!(
                    "--base: {}: not a readable perf db: {e}",
                    p.display()
                ))
            })?),
            None => None,
        };
        Ok(Base {
            dir: dir.to_path_buf(),
            find,
            perf_text,
            perf_sqlite,
            kdb: present(&names.kern_db),
        })
    }

    /// Says which base files were found.
    pub fn describe(&self, names: &ExportNames) -> String {
        let found: Vec<&str> = [
            (self.find.is_some(), names.find_db.as_str()),
            (self.perf_sqlite.is_some(), names.perf_db_sqlite.as_str()),
            (self.perf_text.is_some(), names.perf_db_text.as_str()),
            (self.kdb.is_some(), names.kern_db.as_str()),
        ]
        .into_iter()
        .filter_map(|(f, n)| f.then_some(n))
        .collect();
        format!(
            "--base {}: {}",
            self.dir.display(),
            if found.is_empty() {
                "none of the databases is there; exporting the session alone".to_string()
            } else {
                format!("merging into {}", found.join(", "))
            }
        )
    }
}

/// The session's entries, merged into the base where it has the file, written to `out`.
pub struct Merging<'a> {
    pub base: &'a Base,
    pub names: &'a ExportNames,
    pub policy: Policy,
    pub finds: &'a [FindDbEntry],
    pub perfs: &'a [PerfDbEntry],
}

impl Merging<'_> {
    pub fn find_db(&self, out: &OutputDir, lines: &mut Vec<String>) -> Result<(), ActorError> {
        let name = &self.names.find_db;
        let session = merge::session_find_db(self.finds);
        let (db, counts) = match &self.base.find {
            Some(base) => {
                let (db, counts) = merge::merge_find_db(base, &session, self.policy);
                (db, Some(counts))
            }
            None => (session, None),
        };
        out.write_bytes(name, merge::find_db_text_of(&db).as_bytes())
            .map_err(failed)?;
        lines.push(report(out, name, db.len(), "keys", counts));
        Ok(())
    }

    pub fn perf_dbs(&self, out: &OutputDir, lines: &mut Vec<String>) -> Result<(), ActorError> {
        let session = merge::session_perf_db(self.perfs);
        let base_times = self
            .base
            .find
            .as_ref()
            .map(merge::times_by_perf_key)
            .unwrap_or_default();
        let session_times = merge::times_by_perf_key(&merge::session_find_db(self.finds));
        let merged = |base: &Option<PerfDb>| match base {
            Some(b) => {
                let times = (&base_times, &session_times);
                let (db, counts) = merge::merge_perf_db(b, &session, times, self.policy);
                (db, Some(counts))
            }
            None => (session.clone(), None),
        };
        let (db, counts) = merged(&self.base.perf_sqlite);
        let sqlite = &self.names.perf_db_sqlite;
        out.write(sqlite, |p| {
            export::write_perf_db_rows(p, &merge::perf_db_rows(&db))
        })
        .map_err(failed)?;
        lines.push(report(
            out,
            sqlite,
            pairs(&db),
            "(config, solver) pairs",
            counts,
        ));
        let (db, counts) = merged(&self.base.perf_text);
        let text = &self.names.perf_db_text;
        out.write_bytes(text, merge::perf_db_text_of(&db).as_bytes())
            .map_err(failed)?;
        lines.push(report(
            out,
            text,
            pairs(&db),
            "(config, solver) pairs",
            counts,
        ));
        Ok(())
    }

    pub fn kdb(
        &self,
        out: &OutputDir,
        kernels: &[KdbEntry],
        lines: &mut Vec<String>,
    ) -> Result<(), ActorError> {
        let name = &self.names.kern_db;
        let n = match &self.base.kdb {
            Some(base) => out
                .write(name, |p| export::merge_kdb(base, p, kernels))
                .map_err(failed)?,
            None => out
                .write(name, |p| export::write_kdb(p, kernels))
                .map_err(failed)?,
        };
        let from = if self.base.kdb.is_some() {
            " (added to or replacing the base's)"
        } else {
            ""
        };
        lines.push(format!(
            "{}: {n} kernels of this session{from}",
            out.path(name).display()
        ));
        Ok(())
    }
}

fn pairs(db: &PerfDb) -> usize {
    db.values().map(|p| p.len()).sum()
}

fn report(
    out: &OutputDir,
    name: &str,
    n: usize,
    what: &str,
    counts: Option<merge::MergeCounts>,
) -> String {
    match counts {
        Some(c) => format!("{}: {n} {what}; {c}", out.path(name).display()),
        None => format!("{}: {n} {what}", out.path(name).display()),
    }
}
