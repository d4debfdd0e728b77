//! Which database files an export writes, and writing them: the session's alone, or merged into
//! a [`Base`]. Two rules keep an export from hiding what MIOpen ships:
//! - **a format the base does not have is written only when asked for** (`--find-db`,
//!   `--perf-db`, `--kern-db`): the session's perf db alone, installed in place of MIOpen's
//!   shipped one, would hide every shipped tuning;
//! - **no database is written empty**: a file with nothing in it says "nothing is tuned".
//!
//! The text perf db goes with the SQLite one: it is generated from the merged SQLite file, as
//! MIOpen's build generates `<arch>.db.txt` from the shipped `.db` (`unpack_db`), so the two
//! agree row for row.

use shoal_export::files::OutputDir;

use super::base::Base;
use super::merge::{self, MergeCounts, Policy};
use super::{ExportError, ExportNames, FindDbEntry, KdbEntry, PerfDbEntry};

/// Which databases the command line asked for; none means every one.
#[derive(Clone, Copy, Debug, Default)]
pub struct Asked {
    pub find_db: bool,
    pub perf_db: bool,
    pub kern_db: bool,
}

impl Asked {
    fn any(&self) -> bool {
        self.find_db || self.perf_db || self.kern_db
    }
}

/// The files an export may write (each still skipped if it would be empty), and why the others
/// are not written.
#[derive(Clone, Debug)]
pub struct Plan {
    pub find_db: bool,
    pub perf_sqlite: bool,
    pub perf_text: bool,
    pub kern_db: bool,
    /// The kernel db's file name: the export's, or the base's shipped name.
    pub kern_db_name: String,
    /// One line per format left out because the base does not have it.
    pub left_out: Vec<String>,
}

impl Plan {
    pub fn new(asked: Asked, base: Option<&Base>, names: &ExportNames) -> Plan {
        let kern_db_name = base
            .and_then(|b| b.kdb.as_ref())
            .map_or_else(|| names.kern_db.clone(), |(_, n)| n.clone());
        let Some(base) = base else {
            let all = !asked.any();
            return Plan {
                find_db: all || asked.find_db,
                perf_sqlite: all || asked.perf_db,
                perf_text: all || asked.perf_db,
                kern_db: all || asked.kern_db,
                kern_db_name,
                left_out: Vec::new(),
            };
        };
        if asked.any() {
            return Plan {
                find_db: asked.find_db,
                perf_sqlite: asked.perf_db,
                perf_text: asked.perf_db,
                kern_db: asked.kern_db,
                kern_db_name,
                left_out: Vec::new(),
            };
        }
        let mut left_out = Vec::new();
        let mut lacks = |has: bool, name: &str, flag: &str| {
            if !has {
                left_out.push(format!(
                    "{name}: not written: the base has no such file, and the session's \
                     entries alone, installed in its place, would hide MIOpen's shipped one; \
                     pass {flag} to write it anyway"
                ));
            }
            has
        };
        let sqlite = base.perf_sqlite.is_some();
        Plan {
            find_db: lacks(base.find.is_some(), &names.find_db, "--find-db"),
            perf_sqlite: lacks(sqlite, &names.perf_db_sqlite, "--perf-db"),
            perf_text: lacks(
                sqlite || base.perf_text.is_some(),
                &names.perf_db_text,
                "--perf-db",
            ),
            kern_db: lacks(base.kdb.is_some(), &names.kern_db, "--kern-db"),
            kern_db_name,
            left_out,
        }
    }

    /// The names of the files this plan may write, for the output directory's check.
    pub fn files<'a>(&'a self, names: &'a ExportNames) -> Vec<&'a str> {
        [
            (self.find_db, names.find_db.as_str()),
            (self.perf_sqlite, names.perf_db_sqlite.as_str()),
            (self.perf_text, names.perf_db_text.as_str()),
            (self.kern_db, self.kern_db_name.as_str()),
        ]
        .into_iter()
        .filter_map(|(w, n)| w.then_some(n))
        .collect()
    }
}

/// The session's entries, merged into the base if there is one, written to `out`.
pub struct Writing<'a> {
    pub base: Option<&'a Base>,
    pub names: &'a ExportNames,
    pub plan: &'a Plan,
    pub policy: Policy,
    pub finds: &'a [FindDbEntry],
    pub perfs: &'a [PerfDbEntry],
    pub out: &'a OutputDir,
}

impl Writing<'_> {
    /// Writes every file of the plan, a line each saying what it holds (or why it was not
    /// written).
    pub fn all(&self, kernels: &[KdbEntry]) -> Result<Vec<String>, ExportError> {
        let mut lines = self.plan.left_out.clone();
        if self.plan.find_db {
            lines.push(self.find_db()?);
        }
        if self.plan.perf_sqlite || self.plan.perf_text {
            lines.extend(self.perf_dbs()?);
        }
        if self.plan.kern_db {
            lines.push(self.kdb(kernels)?);
        }
        Ok(lines)
    }

    fn find_db(&self) -> Result<String, ExportError> {
        let name = &self.names.find_db;
        let (text, keys, counts) = match self.base.and_then(|b| b.find.as_ref()) {
            Some(base) => {
                let session = merge::session_find_db(self.finds);
                let (db, counts) = merge::merge_find_db(base, &session, self.policy);
                (merge::find_db_text_of(&db), db.len(), Some(counts))
            }
            None => {
                let text = super::find_db_text(self.finds);
                let keys = text.lines().count();
                (text, keys, None)
            }
        };
        if text.is_empty() {
            return Ok(format!(
                "{name}: not written: the session has no find-db entries"
            ));
        }
        self.out.write_bytes(name, text.as_bytes())?;
        Ok(report(self.out, name, keys, "keys", counts))
    }

    fn perf_dbs(&self) -> Result<Vec<String>, ExportError> {
        let (sqlite, text) = (&self.names.perf_db_sqlite, &self.names.perf_db_text);
        let base = self.base.and_then(Base::perf);
        let Some((base_db, disagree)) = base else {
            return self.session_perf_dbs();
        };
        let mut lines = Vec::new();
        if disagree > 0 {
            lines.push(format!(
                "--base: {disagree} (config, solver) pairs have other params in {text} than in \
                 {sqlite}; the SQLite file's are kept, in both outputs"
            ));
        }
        let session = merge::session_perf_db(self.perfs);
        let base_times = self
            .base
            .and_then(|b| b.find.as_ref())
            .map(merge::times_by_perf_key)
            .unwrap_or_default();
        let session_times = merge::times_by_perf_key(&merge::session_find_db(self.finds));
        let (merged, counts) = merge::merge_perf_db(
            &base_db,
            &session,
            (&base_times, &session_times),
            self.policy,
        );
        let pairs: usize = merged.values().map(|p| p.len()).sum();
        if pairs == 0 {
            lines.push(format!("{sqlite}, {text}: not written: nothing to write"));
            return Ok(lines);
        }
        let base = self.base.expect("a base perf db has a base");
        let keep = base
            .perf_text
            .as_ref()
            .map(|(_, l)| l.clone())
            .unwrap_or_default();
        let rows = if self.plan.perf_sqlite {
            let (from, changed) = match &base.perf_sqlite {
                Some((path, db)) => (Some(path.as_path()), merge::diff_perf_db(db, &merged)),
                None => (None, merge::perf_db_rows(&merged)),
            };
            self.out
                .write(sqlite, |p| merge::write_merged_perf_db(from, p, &changed))?;
            lines.push(report(
                self.out,
                sqlite,
                pairs,
                "(config, solver) pairs",
                Some(counts),
            ));
            merge::read_perf_db_rows(&self.out.path(sqlite))?
        } else {
            merge::perf_db_rows(&merged)
        };
        if self.plan.perf_text {
            let generated = merge::perf_db_text_from_rows(&rows, &keep);
            self.out.write_bytes(text, generated.as_bytes())?;
            let from = if self.plan.perf_sqlite {
                format!(" (generated from {sqlite})")
            } else {
                String::new()
            };
            lines.push(format!(
                "{}{from}",
                report(
                    self.out,
                    text,
                    pairs,
                    "(config, solver) pairs",
                    Some(counts)
                )
            ));
        }
        Ok(lines)
    }

    /// The session's perf dbs alone, as MITuna writes them.
    fn session_perf_dbs(&self) -> Result<Vec<String>, ExportError> {
        let (sqlite, text) = (&self.names.perf_db_sqlite, &self.names.perf_db_text);
        if self.perfs.is_empty() {
            return Ok(vec![format!(
                "{sqlite}, {text}: not written: the session has no perf-db entries"
            )]);
        }
        let mut lines = Vec::new();
        if self.plan.perf_sqlite {
            let counts = self
                .out
                .write(sqlite, |p| super::write_perf_db_sqlite(p, self.perfs))?;
            lines.push(format!(
                "{}: {} (config, solver) pairs of {} configs",
                self.out.path(sqlite).display(),
                counts.perf_rows,
                counts.configs
            ));
        }
        if self.plan.perf_text {
            let body = super::perf_db_text(self.perfs);
            self.out.write_bytes(text, body.as_bytes())?;
            let pairs: usize = body.lines().map(|l| l.matches(';').count() + 1).sum();
            lines.push(format!(
                "{}: {pairs} (config, solver) pairs",
                self.out.path(text).display()
            ));
        }
        Ok(lines)
    }

    fn kdb(&self, kernels: &[KdbEntry]) -> Result<String, ExportError> {
        let name = &self.plan.kern_db_name;
        match self.base.and_then(|b| b.kdb.as_ref()) {
            Some((base, _)) => {
                let n = self
                    .out
                    .write(name, |p| super::merge_kdb(base, p, kernels))?;
                Ok(format!(
                    "{}: {n} kernels of this session (added to or replacing the base's)",
                    self.out.path(name).display()
                ))
            }
            None if kernels.is_empty() => Ok(format!(
                "{name}: not written: no kernel of the session's entries is in the store"
            )),
            None => {
                let n = self.out.write(name, |p| super::write_kdb(p, kernels))?;
                Ok(format!("{}: {n} kernels", self.out.path(name).display()))
            }
        }
    }
}

fn report(
    out: &OutputDir,
    name: &str,
    n: usize,
    what: &str,
    counts: Option<MergeCounts>,
) -> String {
    match counts {
        Some(c) => format!("{}: {n} {what}; {c}", out.path(name).display()),
        None => format!("{}: {n} {what}", out.path(name).display()),
    }
}
