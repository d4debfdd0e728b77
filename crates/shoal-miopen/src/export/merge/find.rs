//! The find db's side of a merge (see the parent module for the rule).

use std::collections::BTreeMap;

use super::{lines_of, MergeCounts, Policy};
use crate::export::find_db::{format_time, FIND_DB_TOP};
use crate::export::{FindDbEntry, GrammarError, RecordProblem};
use crate::keys::find_db_key;

/// One record of a find-db line: `SOLVER:TIME,WORKSPACE,ALGO`.
#[derive(Clone, Debug, PartialEq)]
pub struct FindRecord {
    pub solver: String,
    /// The time as the file holds it (a session's, at the precision it is written with).
    pub time_ms: f32,
    pub workspace: u64,
    pub algorithm: String,
    /// The record exactly as it is (or will be) written, so a record the merge does not touch
    /// is written back byte for byte.
    pub text: String,
}

impl FindRecord {
    /// A record as MIOpen writes it: the time as `ostream << float` prints it, and read back from
    /// that text, so it compares with a file's records at the precision they are written.
    pub fn written(solver: &str, time_ms: f32, workspace: u64, algorithm: &str) -> FindRecord {
        let time = format_time(time_ms);
        FindRecord {
            solver: solver.to_string(),
            time_ms: time.parse().unwrap_or(time_ms),
            workspace,
            algorithm: algorithm.to_string(),
            text: format!("{solver}:{time},{workspace},{algorithm}"),
        }
    }
}

/// A find db: per key, its records (one per solver), in the order of the file.
pub type FindDb = BTreeMap<String, Vec<FindRecord>>;

/// Reads a find db (`<base>.HIP.fdb.txt`). A solver's second record on a line is dropped, as
/// MIOpen's reader drops it; a key's second line adds the solvers the first did not have.
pub fn parse_find_db(text: &str) -> Result<FindDb, GrammarError> {
    let mut db = FindDb::new();
    for line in lines_of(text) {
        let line = line?;
        let records = db.entry(line.key.to_string()).or_default();
        for v in line.items {
            let bad = |problem| GrammarError::Record {
                line: line.number,
                record: v.to_string(),
                problem,
            };
            let (solver, rest) = v
                .split_once(':')
                .ok_or_else(|| bad(RecordProblem::NoSolver))?;
            let fields: Vec<&str> = rest.split(',').collect();
            let [time, workspace, algorithm] = fields[..] else {
                return Err(bad(RecordProblem::Fields));
            };
            if !algorithm.starts_with("miopenConvolution") {
                return Err(bad(RecordProblem::Algorithm));
            }
            let record = FindRecord {
                solver: solver.to_string(),
                time_ms: time.parse().map_err(|_| bad(RecordProblem::Time))?,
                workspace: workspace
                    .parse()
                    .map_err(|_| bad(RecordProblem::Workspace))?,
                algorithm: algorithm.to_string(),
                text: v.to_string(),
            };
            if !records.iter().any(|r| r.solver == record.solver) {
                records.push(record);
            }
        }
    }
    Ok(db)
}

/// A session's find entries as a find db: the first record per key and solver (pass newest
/// first), every one of them, each as it would be written.
pub fn session_find_db(entries: &[FindDbEntry]) -> FindDb {
    let mut db = FindDb::new();
    for e in entries {
        let records = db.entry(find_db_key(&e.config)).or_default();
        if !records.iter().any(|r| r.solver == e.solver) {
            records.push(FindRecord::written(
                &e.solver,
                e.time_ms,
                e.workspace,
                &e.algorithm,
            ));
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

/// What a session contributes to a key: its [`FIND_DB_TOP`] fastest records, as MITuna's
/// `build_miopen_fdb` cuts a session's.
fn contribution(records: &[FindRecord]) -> Vec<FindRecord> {
    let mut top = records.to_vec();
    top.sort_by(by_time);
    top.truncate(FIND_DB_TOP);
    top
}

/// Merges a session's find db into a base one (see the parent module for the rule).
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
        let theirs = contribution(theirs);
        let Some(ours) = base.get(key) else {
            counts.added += 1;
            merged.insert(key.clone(), theirs);
            continue;
        };
        let mut records = ours.clone();
        let mut changed = false;
        for t in theirs {
            match records.iter_mut().find(|r| r.solver == t.solver) {
                Some(r) if r.text == t.text => {}
                Some(r) if policy == Policy::Newer || t.time_ms < r.time_ms => {
                    *r = t;
                    changed = true;
                }
                Some(_) => {}
                None => {
                    records.push(t);
                    changed = true;
                }
            }
        }
        if !changed {
            counts.kept += 1;
            merged.insert(key.clone(), records);
            continue;
        }
        records.sort_by(by_time);
        match (best_time(&records), best_time(ours)) {
            (Some(new), Some(old)) if new < old => counts.improved += 1,
            (Some(new), Some(old)) if new > old => counts.worse += 1,
            _ => counts.updated += 1,
        }
        merged.insert(key.clone(), records);
    }
    (merged, counts)
}

/// A find db as MIOpen's text: lines in key order, each record as its `text` holds it, in the
/// order the db has them (a merge has already ordered the lines it changed).
pub fn find_db_text_of(db: &FindDb) -> String {
    let mut out = String::new();
    for (key, records) in db {
        out.push_str(key);
        out.push('=');
        for (i, r) in records.iter().enumerate() {
            if i > 0 {
                out.push(';');
            }
            out.push_str(&r.text);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "\
K1=A:1,0,miopenConvolutionFwdAlgoDirect;B:2,0,miopenConvolutionFwdAlgoGEMM\n\
K2=C:5,8,miopenConvolutionFwdAlgoWinograd\n";

    fn rec(solver: &str, time_ms: f32) -> FindRecord {
        FindRecord::written(solver, time_ms, 0, "miopenConvolutionFwdAlgoDirect")
    }

    #[test]
    fn the_find_db_reads_back_byte_for_byte() {
        let db = parse_find_db(BASE).unwrap();
        assert_eq!(find_db_text_of(&db), BASE);
        // Records out of time order, more than four, times with trailing zeros: as they were.
        let odd = "K=B:2.50,0,miopenConvolutionFwdAlgoGEMM;A:1,0,miopenConvolutionFwdAlgoDirect;\
C:3,0,miopenConvolutionFwdAlgoDirect;D:4,0,miopenConvolutionFwdAlgoDirect;\
E:5,0,miopenConvolutionFwdAlgoDirect;F:6,0,miopenConvolutionFwdAlgoDirect\n";
        assert_eq!(find_db_text_of(&parse_find_db(odd).unwrap()), odd);
        let e = parse_find_db("K1=A:1,0\n").unwrap_err().to_string();
        assert!(
            e.contains("line 1") && e.contains("TIME,WORKSPACE,ALGO"),
            "{e}"
        );
        let e = parse_find_db("K1=A:1,0,miopenConvolutionFwdAlgoDirect\nnot a line\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2"), "{e}");
        let cut = &BASE[..BASE.len() - 10];
        let e = parse_find_db(cut).unwrap_err();
        assert_eq!(e, GrammarError::Truncated { line: 2 });
        let e = e.to_string();
        assert!(e.contains("line 2") && e.contains("truncated"), "{e}");
        let e = parse_find_db("K1=A:1,0,miopenConv\n")
            .unwrap_err()
            .to_string();
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
                ..MergeCounts::default()
            }
        );
        let k1: Vec<(&str, f32)> = better["K1"]
            .iter()
            .map(|r| (r.solver.as_str(), r.time_ms))
            .collect();
        assert_eq!(k1, [("A", 0.5), ("B", 2.0)], "B keeps its faster base time");
        let (newer, counts) = merge_find_db(&base, &session, Policy::Newer);
        assert_eq!(newer["K1"][1].time_ms, 3.0, "newer takes the session's B");
        assert_eq!(newer["K2"], base["K2"]);
        assert_eq!((counts.improved, counts.worse), (1, 0));
    }

    /// A tuned key keeps every base record the session does not supersede, beyond four.
    #[test]
    fn a_tuned_key_loses_no_base_record() {
        let six = "K=A:1,0,miopenConvolutionFwdAlgoDirect;B:2,0,miopenConvolutionFwdAlgoDirect;\
C:3,0,miopenConvolutionFwdAlgoDirect;D:4,0,miopenConvolutionFwdAlgoDirect;\
E:5,0,miopenConvolutionFwdAlgoDirect;F:6.000,0,miopenConvolutionFwdAlgoDirect\n";
        let base = parse_find_db(six).unwrap();
        let mut session = FindDb::new();
        // Five records: only its four fastest are its contribution; G is faster than them all.
        session.insert(
            "K".into(),
            vec![
                rec("G", 0.5),
                rec("B", 1.5),
                rec("H", 7.0),
                rec("I", 8.0),
                rec("J", 9.0),
            ],
        );
        let (merged, counts) = merge_find_db(&base, &session, Policy::Better);
        let solvers: Vec<&str> = merged["K"].iter().map(|r| r.solver.as_str()).collect();
        assert_eq!(solvers, ["G", "A", "B", "C", "D", "E", "F", "H", "I"]);
        assert!(merged["K"]
            .iter()
            .any(|r| r.text == "F:6.000,0,miopenConvolutionFwdAlgoDirect"));
        assert_eq!(counts.improved, 1);
    }

    /// Folding the same session in twice: the second time nothing changes, and nothing is
    /// counted as improved, although the session's exact times are not the written ones.
    #[test]
    fn a_second_merge_of_the_same_session_changes_nothing() {
        let entries: Vec<FindDbEntry> = [("A", 0.123_456_78_f32), ("B", 2.345_678_9)]
            .iter()
            .map(|(s, t)| FindDbEntry {
                config: crate::keys::parse_find_db_key(
                    "256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP32-F",
                )
                .unwrap(),
                solver: s.to_string(),
                time_ms: *t,
                workspace: 0,
                algorithm: "miopenConvolutionFwdAlgoDirect".into(),
            })
            .collect();
        let session = session_find_db(&entries);
        let (once, counts) = merge_find_db(&FindDb::new(), &session, Policy::Better);
        assert_eq!(counts.added, 1);
        let text = find_db_text_of(&once);
        let (twice, counts) =
            merge_find_db(&parse_find_db(&text).unwrap(), &session, Policy::Better);
        assert!(!counts.changed(), "{counts}");
        assert_eq!(find_db_text_of(&twice), text);
        let (_, counts) = merge_find_db(&parse_find_db(&text).unwrap(), &session, Policy::Newer);
        assert!(!counts.changed(), "newer, too: {counts}");
    }
}
