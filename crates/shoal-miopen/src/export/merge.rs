//! Merging a session's results into existing databases — MIOpen's shipped ones, or an earlier
//! export — as `shoal export --base DIR` does, without writing DIR.
//!
//! The databases are read as MIOpen's grammar has them (`docs/miopen-formats.md` §2.4, §3.2) and
//! merged per key:
//! - **find db**: per key, the union of both sides' records, one per solver; where both have a
//!   solver, the policy picks (`better`: the lower time; `newer`: the session's); then the
//!   [`FIND_DB_TOP`] fastest, as MITuna keeps them;
//! - **perf db** (text and SQLite alike): per (key, solver), the session's params replace the
//!   base's under `newer`; under `better` they do where the session's time is lower than the
//!   base's, and where the times cannot be compared (the base find db has no time for that
//!   solver) the session's, newer, params win.
//!
//! A file that does not follow the grammar is an error naming its line; nothing is written then.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::find_db::{format_time, FIND_DB_TOP};
use super::{ExportError, FindDbEntry, PerfDbEntry};
use crate::keys::{find_db_key, parse_find_db_key, perf_db_key};

/// Which side wins where both have an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// The faster entry, where times are comparable; else the session's.
    Better,
    /// The session's, always.
    Newer,
}

/// What a merge did, per key (find db) or per (key, solver) pair (perf db).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MergeCounts {
    /// Only in the base, or in both and left as the base had it.
    pub kept: usize,
    /// Only in the session.
    pub added: usize,
    /// The session's replaced the base's and is faster (or, for the perf db, not comparable).
    pub improved: usize,
    /// The session's replaced the base's and is slower (only under [`Policy::Newer`]).
    pub regressed: usize,
}

impl std::fmt::Display for MergeCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "kept {}, added {}, improved {}, regressed {}",
            self.kept, self.added, self.improved, self.regressed
        )
    }
}

/// One record of a find-db line: `SOLVER:TIME,WORKSPACE,ALGO`.
#[derive(Clone, Debug, PartialEq)]
pub struct FindRecord {
    pub solver: String,
    pub time_ms: f32,
    pub workspace: u64,
    pub algorithm: String,
}

/// A find db: per key, its records (one per solver).
pub type FindDb = BTreeMap<String, Vec<FindRecord>>;

/// A perf db: per x-joined key, per solver, the params.
pub type PerfDb = BTreeMap<String, BTreeMap<String, String>>;

/// Times in milliseconds per (perf key, solver).
pub type Times = HashMap<(String, String), f32>;

/// Splits `KEY=VALUE;VALUE…` lines, naming the line at fault. Every line of these files ends
/// with a newline (MIOpen and MITuna write one after each), so a last line without one is a
/// truncated file, refused rather than merged half.
fn lines_of(text: &str) -> impl Iterator<Item = Result<(usize, &str, Vec<&str>), String>> {
    let truncated = (!text.is_empty() && !text.ends_with('\n')).then(|| {
        Err(format!(
            "line {}: no end of line: the file is truncated",
            text.lines().count()
        ))
    });
    truncated.into_iter().chain(
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, line)| {
                let (key, values) = line
                    .split_once('=')
                    .ok_or_else(|| format!("line {}: no `=` between key and records", i + 1))?;
                if key.is_empty() {
                    return Err(format!("line {}: empty key", i + 1));
                }
                Ok((i + 1, key, values.split(';').collect()))
            }),
    )
}

/// Reads a find db (`<base>.HIP.fdb.txt`).
pub fn parse_find_db(text: &str) -> Result<FindDb, String> {
    let mut db = FindDb::new();
    for line in lines_of(text) {
        let (n, key, values) = line?;
        let records = db.entry(key.to_string()).or_default();
        for v in values {
            let bad = |why: &str| format!("line {n}: record `{v}`: {why}");
            let (solver, rest) = v
                .split_once(':')
                .ok_or_else(|| bad("no `:` after the solver"))?;
            let fields: Vec<&str> = rest.split(',').collect();
            let [time, workspace, algorithm] = fields[..] else {
                return Err(bad("not TIME,WORKSPACE,ALGO"));
            };
            if !algorithm.starts_with("miopenConvolution") {
                return Err(bad("the algorithm is not a miopenConvolution… name"));
            }
            let record = FindRecord {
                solver: solver.to_string(),
                time_ms: time.parse().map_err(|_| bad("time is not a number"))?,
                workspace: workspace
                    .parse()
                    .map_err(|_| bad("workspace is not a count"))?,
                algorithm: algorithm.to_string(),
            };
            if !records.iter().any(|r| r.solver == record.solver) {
                records.push(record);
            }
        }
    }
    Ok(db)
}

/// A session's find entries as a find db (the first record per key and solver).
pub fn session_find_db(entries: &[FindDbEntry]) -> FindDb {
    let mut db = FindDb::new();
    for e in entries {
        let records = db.entry(find_db_key(&e.config)).or_default();
        if !records.iter().any(|r| r.solver == e.solver) {
            records.push(FindRecord {
                solver: e.solver.clone(),
                time_ms: e.time_ms,
                workspace: e.workspace,
                algorithm: e.algorithm.clone(),
            });
        }
    }
    db
}

fn by_time(a: &FindRecord, b: &FindRecord) -> std::cmp::Ordering {
    a.time_ms
        .partial_cmp(&b.time_ms)
        .unwrap_or(std::cmp::Ordering::Equal)
        .then_with(|| a.solver.cmp(&b.solver))
}

fn best_time(records: &[FindRecord]) -> Option<f32> {
    records
        .iter()
        .map(|r| r.time_ms)
        .min_by(|a, b| a.total_cmp(b))
}

/// Merges a session's find db into a base one (see the module's documentation).
pub fn merge_find_db(base: &FindDb, session: &FindDb, policy: Policy) -> (FindDb, MergeCounts) {
    let mut merged = FindDb::new();
    let mut counts = MergeCounts::default();
    for (key, records) in base {
        if !session.contains_key(key) {
            counts.kept += 1;
            merged.insert(key.clone(), records.clone());
        }
    }
    for (key, theirs) in session {
        let Some(ours) = base.get(key) else {
            counts.added += 1;
            merged.insert(key.clone(), theirs.clone());
            continue;
        };
        let mut records = ours.clone();
        for t in theirs {
            match records.iter_mut().find(|r| r.solver == t.solver) {
                Some(r) if policy == Policy::Newer || t.time_ms < r.time_ms => *r = t.clone(),
                Some(_) => {}
                None => records.push(t.clone()),
            }
        }
        records.sort_by(by_time);
        records.truncate(FIND_DB_TOP);
        match (best_time(&records), best_time(ours)) {
            (Some(new), Some(old)) if new < old => counts.improved += 1,
            (Some(new), Some(old)) if new > old => counts.regressed += 1,
            _ => counts.kept += 1,
        }
        merged.insert(key.clone(), records);
    }
    (merged, counts)
}

/// A find db as MIOpen's text (lines sorted by key, records by time then solver, at most
/// [`FIND_DB_TOP`] per key), exactly as [`super::find_db_text`] writes a session's.
pub fn find_db_text_of(db: &FindDb) -> String {
    let mut out = String::new();
    for (key, records) in db {
        let mut records: Vec<&FindRecord> = records.iter().collect();
        records.sort_by(|a, b| by_time(a, b));
        records.truncate(FIND_DB_TOP);
        let line: Vec<String> = records
            .iter()
            .map(|r| {
                format!(
                    "{}:{},{},{}",
                    r.solver,
                    format_time(r.time_ms),
                    r.workspace,
                    r.algorithm
                )
            })
            .collect();
        out.push_str(&format!("{key}={}\n", line.join(";")));
    }
    out
}

/// Reads a text perf db (`<base>.db.txt`).
pub fn parse_perf_db_text(text: &str) -> Result<PerfDb, String> {
    let mut db = PerfDb::new();
    for line in lines_of(text) {
        let (n, key, values) = line?;
        let pairs = db.entry(key.to_string()).or_default();
        for v in values {
            let (solver, params) = v
                .split_once(':')
                .ok_or_else(|| format!("line {n}: pair `{v}`: no `:` after the solver"))?;
            pairs
                .entry(solver.to_string())
                .or_insert_with(|| params.to_string());
        }
    }
    Ok(db)
}

/// Reads a SQLite perf db (`<base>.db`, or a user `_1.1.0.udb`), read-only.
pub fn read_perf_db_sqlite(path: &Path) -> Result<PerfDb, ExportError> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut st = conn.prepare(
        "SELECT c.spatial_dim, c.in_channels, c.in_h, c.in_w, c.in_d, c.fil_h, c.fil_w, \
         c.fil_d, c.out_channels, c.batchsize, c.pad_h, c.pad_w, c.pad_d, c.conv_stride_h, \
         c.conv_stride_w, c.conv_stride_d, c.dilation_h, c.dilation_w, c.dilation_d, c.bias, \
         c.group_count, c.layout, c.data_type, c.direction, p.solver, p.params \
         FROM perf_db p JOIN config c ON c.id = p.config ORDER BY p.id",
    )?;
    let mut db = PerfDb::new();
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let mut fields: Vec<String> = Vec::with_capacity(24);
        for i in 0..21 {
            fields.push(r.get::<_, i64>(i)?.to_string());
        }
        for i in 21..24 {
            fields.push(r.get::<_, String>(i)?);
        }
        db.entry(fields.join("x"))
            .or_default()
            .entry(r.get(24)?)
            .or_insert(r.get(25)?);
    }
    Ok(db)
}

/// A session's perf entries as a perf db (the first per key and solver).
pub fn session_perf_db(entries: &[PerfDbEntry]) -> PerfDb {
    let mut db = PerfDb::new();
    for e in entries.iter().filter(|e| !e.params.is_empty()) {
        db.entry(perf_db_key(&e.config))
            .or_default()
            .entry(e.solver.clone())
            .or_insert_with(|| e.params.clone());
    }
    db
}

/// Times per (perf key, solver), from a find db: what makes perf entries comparable.
pub fn times_by_perf_key(find: &FindDb) -> Times {
    let mut times = HashMap::new();
    for (key, records) in find {
        let Ok(config) = parse_find_db_key(key) else {
            continue;
        };
        let perf_key = perf_db_key(&config);
        for r in records {
            times.insert((perf_key.clone(), r.solver.clone()), r.time_ms);
        }
    }
    times
}

/// Merges a session's perf db into a base one (see the module's documentation); the times of
/// each side come from its find db.
pub fn merge_perf_db(
    base: &PerfDb,
    session: &PerfDb,
    (base_times, session_times): (&Times, &Times),
    policy: Policy,
) -> (PerfDb, MergeCounts) {
    let mut merged = base.clone();
    let mut counts = MergeCounts {
        kept: base.values().map(BTreeMap::len).sum(),
        ..MergeCounts::default()
    };
    for (key, pairs) in session {
        let into = merged.entry(key.clone()).or_default();
        for (solver, params) in pairs {
            let Some(old) = into.get_mut(solver) else {
                counts.added += 1;
                into.insert(solver.clone(), params.clone());
                continue;
            };
            let at = (key.clone(), solver.clone());
            let times = base_times.get(&at).zip(session_times.get(&at));
            let replace = match (policy, times) {
                (Policy::Better, Some((b, s))) => s < b,
                _ => true,
            };
            if replace && old != params {
                *old = params.clone();
                counts.kept -= 1;
                match times {
                    Some((b, s)) if s > b => counts.regressed += 1,
                    _ => counts.improved += 1,
                }
            }
        }
    }
    (merged, counts)
}

/// A perf db as MIOpen's text (lines sorted by key, pairs by solver).
pub fn perf_db_text_of(db: &PerfDb) -> String {
    let mut out = String::new();
    for (key, pairs) in db {
        let line: Vec<String> = pairs.iter().map(|(s, p)| format!("{s}:{p}")).collect();
        out.push_str(&format!("{key}={}\n", line.join(";")));
    }
    out
}

/// The `(perf key, solver, params)` rows of a perf db, for [`super::write_perf_db_rows`].
pub fn perf_db_rows(db: &PerfDb) -> Vec<(String, &str, &str)> {
    db.iter()
        .flat_map(|(key, pairs)| {
            pairs
                .iter()
                .map(move |(s, p)| (key.clone(), s.as_str(), p.as_str()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "\
K1=A:1,0,miopenConvolutionFwdAlgoDirect;B:2,0,miopenConvolutionFwdAlgoGEMM\n\
K2=C:5,8,miopenConvolutionFwdAlgoWinograd\n";

    fn rec(solver: &str, time_ms: f32) -> FindRecord {
        FindRecord {
            solver: solver.into(),
            time_ms,
            workspace: 0,
            algorithm: "miopenConvolutionFwdAlgoDirect".into(),
        }
    }

    #[test]
    fn the_find_db_reads_back_byte_for_byte() {
        let db = parse_find_db(BASE).unwrap();
        assert_eq!(find_db_text_of(&db), BASE);
        let e = parse_find_db("K1=A:1,0\n").unwrap_err();
        assert!(
            e.contains("line 1") && e.contains("TIME,WORKSPACE,ALGO"),
            "{e}"
        );
        let e = parse_find_db("K1=A:1,0,miopenConvolutionFwdAlgoDirect\nnot a line\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let cut = &BASE[..BASE.len() - 10];
        let e = parse_find_db(cut).unwrap_err();
        assert!(e.contains("line 2") && e.contains("truncated"), "{e}");
        let e = parse_find_db("K1=A:1,0,miopenConv\n").unwrap_err();
        assert!(e.contains("miopenConvolution"), "{e}");
    }

    #[test]
    fn find_db_merge_by_policy() {
        let base = parse_find_db(BASE).unwrap();
        let mut session = FindDb::new();
        session.insert("K1".into(), vec![rec("A", 0.5), rec("B", 3.0)]);
        session.insert("K3".into(), vec![rec("D", 1.0)]);
        let (better, counts) = merge_find_db(&base, &session, Policy::Better);
        assert_eq!(
            counts,
            MergeCounts {
                kept: 1,
                added: 1,
                improved: 1,
                regressed: 0
            }
        );
        let k1: Vec<(&str, f32)> = better["K1"]
            .iter()
            .map(|r| (r.solver.as_str(), r.time_ms))
            .collect();
        assert_eq!(k1, [("A", 0.5), ("B", 2.0)], "B keeps its faster base time");
        let (newer, _) = merge_find_db(&base, &session, Policy::Newer);
        assert_eq!(newer["K1"][1].time_ms, 3.0, "newer takes the session's B");
        assert_eq!(newer["K2"], base["K2"]);
    }

    #[test]
    fn perf_db_merge_compares_times_where_it_can() {
        let base = parse_perf_db_text("P1=A:1,1;B:2,2\nP2=C:9\n").unwrap();
        let session = parse_perf_db_text("P1=A:7,7;B:8,8\nP3=D:4\n").unwrap();
        let key = |k: &str, s: &str| (k.to_string(), s.to_string());
        // A is faster in the session, B slower; neither side knows P3's time.
        let base_times = HashMap::from([(key("P1", "A"), 2.0), (key("P1", "B"), 1.0)]);
        let session_times = HashMap::from([(key("P1", "A"), 1.0), (key("P1", "B"), 3.0)]);
        let times = (&base_times, &session_times);
        let (better, counts) = merge_perf_db(&base, &session, times, Policy::Better);
        assert_eq!(perf_db_text_of(&better), "P1=A:7,7;B:2,2\nP2=C:9\nP3=D:4\n");
        assert_eq!((counts.kept, counts.added, counts.improved), (2, 1, 1));
        let (newer, counts) = merge_perf_db(&base, &session, times, Policy::Newer);
        assert_eq!(perf_db_text_of(&newer), "P1=A:7,7;B:8,8\nP2=C:9\nP3=D:4\n");
        assert_eq!(counts.regressed, 1);
        let e = parse_perf_db_text("P1=A\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("`A`"), "{e}");
    }
}
