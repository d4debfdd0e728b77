//! MIOpen's databases read back and checked, with the same parsers a merge uses, so a file that
//! does not follow MIOpen's grammar is refused the same way everywhere, naming its file and
//! line: one file ([`read_find_db`], [`read_perf_db_text`], [`merge::read_perf_db_sqlite`],
//! [`super::check_kdb`], or [`check_database`] by its name), or a directory of several devices'
//! databases grouped by base name (`gfx942130.HIP.fdb.txt`, `gfx942130.db` and
//! `gfx942130.db.txt` are one device's), as `shoal import-db --store` and `shoal miopen report`
//! read it ([`scan`], [`read_perf`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::merge::{self, FindDb, PerfDb};
use super::ExportError;

/// A file's text.
fn text_of(path: &Path) -> Result<String, ExportError> {
    std::fs::read_to_string(path).map_err(|source| ExportError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The error of a file that does not follow the grammar.
fn grammar(path: &Path) -> impl FnOnce(super::GrammarError) -> ExportError + '_ {
    move |source| ExportError::Grammar {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads a find db, and its text as it is.
pub fn read_find_db(path: &Path) -> Result<(FindDb, String), ExportError> {
    let text = text_of(path)?;
    let db = merge::parse_find_db(&text).map_err(grammar(path))?;
    Ok((db, text))
}

/// Reads a text perf db, each key's line as it is ([`merge::parse_perf_db_text_lines`]), and
/// its text.
pub fn read_perf_db_text(
    path: &Path,
) -> Result<(PerfDb, BTreeMap<String, String>, String), ExportError> {
    let text = text_of(path)?;
    let (db, lines) = merge::parse_perf_db_text_lines(&text).map_err(grammar(path))?;
    Ok((db, lines, text))
}

/// Reads one database file in full as a merge base is read, its format told by its name
/// (`*.fdb.txt`, `*.db.txt`, `*.db`, `*.kdb`), so a corrupt one is refused by name. Other files
/// pass.
pub fn check_database(path: &Path) -> Result<(), ExportError> {
    let name = path.to_string_lossy();
    if name.ends_with(".fdb.txt") {
        read_find_db(path)?;
    } else if name.ends_with(".db.txt") {
        read_perf_db_text(path)?;
    } else if name.ends_with(".db") {
        merge::read_perf_db_sqlite(path)?;
    } else if name.ends_with(".kdb") {
        super::check_kdb(path)?;
    }
    Ok(())
}

/// The find db's suffix: MIOpen's HIP backend (the OpenCL one is legacy and not read here).
const FIND_DB: &str = ".HIP.fdb.txt";
const PERF_DB_TEXT: &str = ".db.txt";
const PERF_DB_SQLITE: &str = ".db";

/// One device's databases in a directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BaseFiles {
    /// The base name, e.g. `gfx942130`.
    pub base: String,
    pub find: Option<PathBuf>,
    pub perf_sqlite: Option<PathBuf>,
    pub perf_text: Option<PathBuf>,
}

impl BaseFiles {
    /// The file names, for the record of an import.
    pub fn names(&self) -> Vec<String> {
        [&self.find, &self.perf_sqlite, &self.perf_text]
            .into_iter()
            .flatten()
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect()
    }
}

/// The databases of a directory by base name, and the names of the other files it holds
/// (kernel dbs, OpenCL find dbs, anything else), which are not read.
pub fn scan(dir: &Path) -> Result<(Vec<BaseFiles>, Vec<String>), ExportError> {
    let unreadable = |source| ExportError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut bases: BTreeMap<String, BaseFiles> = BTreeMap::new();
    let mut others = Vec::new();
    for e in std::fs::read_dir(dir).map_err(unreadable)? {
        let e = e.map_err(unreadable)?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !e.path().is_file() {
            continue;
        }
        // `.db.txt` before `.db`: the text perf db's name ends in both.
        let Some((base, slot)) = [FIND_DB, PERF_DB_TEXT, PERF_DB_SQLITE]
            .iter()
            .find_map(|ext| Some((name.strip_suffix(ext)?, *ext)))
        else {
            others.push(name);
            continue;
        };
        let files = bases.entry(base.to_string()).or_insert_with(|| BaseFiles {
            base: base.to_string(),
            ..BaseFiles::default()
        });
        let path = Some(e.path());
        match slot {
            FIND_DB => files.find = path,
            PERF_DB_TEXT => files.perf_text = path,
            _ => files.perf_sqlite = path,
        }
    }
    others.sort();
    Ok((bases.into_values().collect(), others))
}

/// One device's perf db: the union of its SQLite and text files per (key, solver).
#[derive(Debug, Default)]
pub struct PerfUnion {
    pub db: PerfDb,
    /// Each key's line in the text file, to name it in messages.
    pub text_lines: HashMap<String, usize>,
    /// Pairs both files hold with different params.
    pub disagreeing: usize,
}

/// Reads the perf dbs of `files`. Where both the SQLite and the text file hold a (key, solver),
/// the SQLite one wins ([`merge::union_perf_db`], as a merge base is read): MIOpen builds the
/// text file from it (`sqlite2txt`), so a text file that disagrees is the stale one.
pub fn read_perf(files: &BaseFiles) -> Result<PerfUnion, ExportError> {
    let mut union = PerfUnion::default();
    let mut text_db = None;
    if let Some(path) = &files.perf_text {
        let (db, _, text) = read_perf_db_text(path)?;
        union.text_lines = first_lines(&text);
        text_db = Some(db);
    }
    let sqlite = match &files.perf_sqlite {
        Some(path) => Some(merge::read_perf_db_sqlite(path)?),
        None => None,
    };
    (union.db, union.disagreeing) = match (sqlite, text_db) {
        (Some(sqlite), Some(text)) => merge::union_perf_db(&sqlite, &text),
        (Some(db), None) | (None, Some(db)) => (db, 0),
        (None, None) => (PerfDb::new(), 0),
    };
    Ok(union)
}

/// The line (1-based) of each key's first line in a `KEY=…` text database.
pub fn first_lines(text: &str) -> HashMap<String, usize> {
    let mut lines = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        if let Some((key, _)) = line.split_once('=') {
            lines.entry(key.to_string()).or_insert(i + 1);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_group_by_base_and_the_sqlite_perf_db_wins() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(
            d.join("gfx942130.HIP.fdb.txt"),
            "K=A:1,0,miopenConvolutionFwdAlgoDirect\n",
        )
        .unwrap();
        std::fs::write(d.join("gfx942130.db.txt"), "P1=A:1,1;B:2\nP2=C:3\n").unwrap();
        std::fs::write(d.join("gfx90a68.HIP.fdb.txt"), "").unwrap();
        std::fs::write(d.join("gfx942130.kdb"), "").unwrap();
        std::fs::write(d.join(".gfx942130.db.txt.partial"), "").unwrap();
        let conn = rusqlite::Connection::open(d.join("gfx942130.db")).unwrap();
        for ddl in crate::export::PERF_DB_DDL {
            conn.execute_batch(ddl).unwrap();
        }
        conn.execute_batch(
            "INSERT INTO config VALUES (1,'NCHW','FP32','F',2,8,4,4,1,3,3,1,16,2,1,1,0,1,1,0,1,1,0,0,1);
             INSERT INTO perf_db (solver, config, params) VALUES ('A', 1, '9,9');",
        )
        .unwrap();
        drop(conn);
        let (bases, others) = scan(d).unwrap();
        assert_eq!(others, ["gfx942130.kdb"]);
        let names: Vec<&str> = bases.iter().map(|b| b.base.as_str()).collect();
        assert_eq!(names, ["gfx90a68", "gfx942130"]);
        let ours = &bases[1];
        assert_eq!(
            ours.names(),
            ["gfx942130.HIP.fdb.txt", "gfx942130.db", "gfx942130.db.txt"]
        );
        let union = read_perf(ours).unwrap();
        let key = "2x8x4x4x1x3x3x1x16x2x1x1x0x1x1x0x1x1x0x0x1xNCHWxFP32xF";
        assert_eq!(union.db[key]["A"], "9,9");
        assert_eq!(union.db["P1"]["A"], "1,1", "keys only the text has stay");
        assert_eq!(union.disagreeing, 0);
        assert_eq!(union.text_lines["P2"], 2);
        // The same pair in both, with other params: the SQLite one is kept and counted.
        std::fs::write(d.join("gfx942130.db.txt"), format!("{key}=A:1,1;B:2\n")).unwrap();
        let union = read_perf(ours).unwrap();
        assert_eq!(union.db[key]["A"], "9,9");
        assert_eq!(union.db[key]["B"], "2");
        assert_eq!(union.disagreeing, 1);
        // A bad line is named with its file.
        std::fs::write(d.join("gfx942130.db.txt"), "P1=A\n").unwrap();
        let e = read_perf(ours).unwrap_err().to_string();
        assert!(
            e.contains("gfx942130.db.txt") && e.contains("line 1"),
            "{e}"
        );
    }
}
