//! The perf db's side of a merge, text and SQLite (see the parent module for the rule).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rusqlite::{params_from_iter, types::Value as SqlValue, Connection, OpenFlags};

use super::find::FindDb;
use super::{lines_of, MergeCounts, Policy};
use crate::export::perf_db::key_columns;
use crate::export::{remove_existing, ExportError, GrammarError, PerfDbCounts, PerfDbEntry};
use crate::keys::{parse_find_db_key, perf_db_key};

/// A perf db: per x-joined key, per solver, the params.
pub type PerfDb = BTreeMap<String, BTreeMap<String, String>>;

/// One row of a perf db: `(perf key, solver, params)`.
pub type PerfRow = (String, String, String);

/// Times in milliseconds per (perf key, solver).
pub type Times = HashMap<(String, String), f32>;

/// Reads a text perf db (`<base>.db.txt`).
pub fn parse_perf_db_text(text: &str) -> Result<PerfDb, GrammarError> {
    parse_perf_db_text_lines(text).map(|(db, _)| db)
}

/// Reads a text perf db, and keeps each key's line as it is, so a line a merge leaves alone is
/// written back byte for byte (not for a key on several lines: that one is written anew).
pub fn parse_perf_db_text_lines(
    text: &str,
) -> Result<(PerfDb, BTreeMap<String, String>), GrammarError> {
    let mut db = PerfDb::new();
    let mut lines: BTreeMap<String, String> = BTreeMap::new();
    let mut repeated: Vec<String> = Vec::new();
    for line in lines_of(text) {
        let line = line?;
        if lines
            .insert(line.key.to_string(), line.text.to_string())
            .is_some()
        {
            repeated.push(line.key.to_string());
        }
        let pairs = db.entry(line.key.to_string()).or_default();
        for v in line.items {
            let (solver, params) = v.split_once(':').ok_or_else(|| GrammarError::Pair {
                line: line.number,
                pair: v.to_string(),
            })?;
            pairs
                .entry(solver.to_string())
                .or_insert_with(|| params.to_string());
        }
    }
    for key in repeated {
        lines.remove(&key);
    }
    Ok((db, lines))
}

/// The rows of a SQLite perf db (`<base>.db`, or a user `_1.1.0.udb`) in `perf_db.id` order,
/// read-only, keys as MIOpen's `sqlite2txt` makes them.
pub fn read_perf_db_rows(path: &Path) -> rusqlite::Result<Vec<PerfRow>> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut st = conn.prepare(
        "SELECT c.spatial_dim, c.in_channels, c.in_h, c.in_w, c.in_d, c.fil_h, c.fil_w, \
         c.fil_d, c.out_channels, c.batchsize, c.pad_h, c.pad_w, c.pad_d, c.conv_stride_h, \
         c.conv_stride_w, c.conv_stride_d, c.dilation_h, c.dilation_w, c.dilation_d, c.bias, \
         c.group_count, c.layout, c.data_type, c.direction, p.solver, p.params \
         FROM perf_db p JOIN config c ON c.id = p.config ORDER BY p.id",
    )?;
    let mut out = Vec::new();
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let mut fields: Vec<String> = Vec::with_capacity(24);
        for i in 0..21 {
            fields.push(r.get::<_, i64>(i)?.to_string());
        }
        for i in 21..24 {
            fields.push(r.get::<_, String>(i)?);
        }
        out.push((fields.join("x"), r.get(24)?, r.get(25)?));
    }
    Ok(out)
}

/// Reads a SQLite perf db as a [`PerfDb`] (the first row per key and solver); an error naming
/// the file if it is not one.
pub fn read_perf_db_sqlite(path: &Path) -> Result<PerfDb, ExportError> {
    let rows = read_perf_db_rows(path).map_err(|source| ExportError::PerfDb {
        path: path.to_path_buf(),
        source,
    })?;
    let mut db = PerfDb::new();
    for (key, solver, params) in rows {
        db.entry(key).or_default().entry(solver).or_insert(params);
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

/// `first` with the pairs of `second` it lacks, and how many pairs both have with different
/// params (where `first` is kept): a base's SQLite and text perf dbs read as one.
pub fn union_perf_db(first: &PerfDb, second: &PerfDb) -> (PerfDb, usize) {
    let mut union = first.clone();
    let mut disagree = 0;
    for (key, pairs) in second {
        let into = union.entry(key.clone()).or_default();
        for (solver, params) in pairs {
            match into.get(solver) {
                Some(p) if p != params => disagree += 1,
                Some(_) => {}
                None => {
                    into.insert(solver.clone(), params.clone());
                }
            }
        }
    }
    (union, disagree)
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

/// Merges a session's perf db into a base one (see the parent module for the rule); the times
/// of each side come from its find db.
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
            if old == params {
                continue;
            }
            let at = (key.clone(), solver.clone());
            let times = base_times.get(&at).zip(session_times.get(&at));
            let replace = match (policy, times) {
                (Policy::Better, Some((b, s))) => s < b,
                _ => true,
            };
            if replace {
                *old = params.clone();
                counts.kept -= 1;
                match times {
                    Some((b, s)) if s < b => counts.improved += 1,
                    Some((b, s)) if s > b => counts.worse += 1,
                    _ => counts.updated += 1,
                }
            }
        }
    }
    (merged, counts)
}

/// The rows of `merged` that `base` does not hold as they are: what a merge writes into a copy
/// of the base's SQLite file. In key and solver order.
pub fn diff_perf_db(base: &PerfDb, merged: &PerfDb) -> Vec<PerfRow> {
    let mut rows = Vec::new();
    for (key, pairs) in merged {
        let theirs = base.get(key);
        for (solver, params) in pairs {
            if theirs.and_then(|t| t.get(solver)) != Some(params) {
                rows.push((key.clone(), solver.clone(), params.clone()));
            }
        }
    }
    rows
}

/// Writes a SQLite perf db at `path`: a copy of `base` (MIOpen's shipped file, say) with `rows`
/// written into it — a pair it has gets its params updated in place, a new pair (and its
/// config) is added after the others — so every row the merge did not change keeps its id and
/// bytes. Without a base, a new file of `rows`.
pub fn write_merged_perf_db(
    base: Option<&Path>,
    path: &Path,
    rows: &[PerfRow],
) -> Result<PerfDbCounts, ExportError> {
    let Some(base) = base else {
        let rows: Vec<(String, &str, &str)> = rows
            .iter()
            .map(|(k, s, p)| (k.clone(), s.as_str(), p.as_str()))
            .collect();
        return crate::export::write_perf_db_rows(path, &rows);
    };
    remove_existing(path)?;
    std::fs::copy(base, path).map_err(|source| ExportError::Io {
        path: base.display().to_string(),
        source,
    })?;
    let mut conn = Connection::open(path)?;
    let tx = conn.transaction()?;
    {
        const COLUMNS: &str = "layout, data_type, direction, spatial_dim, in_channels, in_h, \
             in_w, in_d, fil_h, fil_w, fil_d, out_channels, batchsize, pad_h, pad_w, pad_d, \
             conv_stride_h, conv_stride_w, conv_stride_d, dilation_h, dilation_w, dilation_d, \
             bias, group_count";
        let marks = (1..=24).map(|i| format!("?{i}")).collect::<Vec<_>>();
        let mut insert_config = tx.prepare(&format!(
            "INSERT OR IGNORE INTO config ({COLUMNS}) VALUES ({})",
            marks.join(", ")
        ))?;
        let matching: Vec<String> = COLUMNS
            .split(", ")
            .zip(&marks)
            .map(|(c, m)| format!("{c} = {m}"))
            .collect();
        let mut config_id = tx.prepare(&format!(
            "SELECT id FROM config WHERE {}",
            matching.join(" AND ")
        ))?;
        let mut update =
            tx.prepare("UPDATE perf_db SET params = ?1 WHERE config = ?2 AND solver = ?3")?;
        let mut insert =
            tx.prepare("INSERT INTO perf_db (solver, config, params) VALUES (?1, ?2, ?3)")?;
        for (key, solver, params) in rows {
            let (ints, [layout, data_type, direction]) = key_columns(key)?;
            let mut values: Vec<SqlValue> = vec![
                SqlValue::Text(layout),
                SqlValue::Text(data_type),
                SqlValue::Text(direction),
            ];
            values.extend(ints.into_iter().map(SqlValue::Integer));
            insert_config.execute(params_from_iter(values.iter()))?;
            let id: i64 = config_id.query_row(params_from_iter(values.iter()), |r| r.get(0))?;
            if update.execute(rusqlite::params![params, id, solver])? == 0 {
                insert.execute(rusqlite::params![solver, id, params])?;
            }
        }
    }
    let count = |table: &str| -> Result<usize, rusqlite::Error> {
        tx.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| {
            r.get::<_, i64>(0)
        })
        .map(|n| n as usize)
    };
    let counts = PerfDbCounts {
        configs: count("config")?,
        perf_rows: count("perf_db")?,
    };
    tx.commit()?;
    conn.close().map_err(|(_, e)| ExportError::Sqlite(e))?;
    Ok(counts)
}

/// The text perf db of `rows` (a SQLite perf db's, in `perf_db.id` order) as MIOpen's
/// `sqlite2txt` makes it: one line per key, its pairs in row order (the first per solver), in
/// key order. A key whose pairs are exactly those of a line in `keep` (the base's text file) is
/// written as that line, byte for byte.
pub fn perf_db_text_from_rows(rows: &[PerfRow], keep: &BTreeMap<String, String>) -> String {
    let mut by_key: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
    for (key, solver, params) in rows {
        let pairs = by_key.entry(key.as_str()).or_default();
        if !pairs.iter().any(|(s, _)| *s == solver.as_str()) {
            pairs.push((solver.as_str(), params.as_str()));
        }
    }
    let mut out = String::new();
    for (key, pairs) in by_key {
        let unchanged = keep.get(key).filter(|line| {
            let kept = parse_perf_db_text(&format!("{line}\n")).ok();
            let kept = kept.as_ref().and_then(|db| db.get(key));
            kept.is_some_and(|k| {
                k.len() == pairs.len()
                    && pairs
                        .iter()
                        .all(|(s, p)| k.get(*s).map(String::as_str) == Some(*p))
            })
        });
        match unchanged {
            Some(line) => out.push_str(line),
            None => {
                out.push_str(key);
                out.push('=');
                let items: Vec<String> = pairs.iter().map(|(s, p)| format!("{s}:{p}")).collect();
                out.push_str(&items.join(";"));
            }
        }
        out.push('\n');
    }
    out
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

/// The rows of a perf db, in key and solver order.
pub fn perf_db_rows(db: &PerfDb) -> Vec<PerfRow> {
    db.iter()
        .flat_map(|(key, pairs)| {
            pairs
                .iter()
                .map(move |(s, p)| (key.clone(), s.clone(), p.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "2x1024x14x14x1x3x3x1x1024x16x1x1x0x1x1x0x1x1x0x0x32xNCHWxFP16xF";
    const K2: &str = "2x1000x13x13x1x1x1x1x512x16x0x0x0x1x1x0x1x1x0x0x1xNCHWxFP16xB";

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
        assert_eq!(counts.worse, 1);
        // The merged db merged again: nothing changes.
        let (_, again) = merge_perf_db(&newer, &session, times, Policy::Newer);
        assert!(!again.changed(), "{again}");
        let e = parse_perf_db_text("P1=A\n").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("`A`"), "{e}");
    }

    /// The merged SQLite file is the base's with only the changed rows written, and the text
    /// generated from it keeps the base's unchanged lines byte for byte.
    #[test]
    fn the_sqlite_merge_writes_only_what_changed() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base.db");
        let rows: Vec<PerfRow> = vec![
            (K2.into(), "ConvBinWinogradRxSf3x2".into(), "215".into()),
            (K1.into(), "ConvBinWinogradRxSf2x3".into(), "5".into()),
            (K1.into(), "ConvBinWinogradRxSf3x2".into(), "7".into()),
        ];
        write_merged_perf_db(None, &base, &rows).unwrap();
        let before = read_perf_db_rows(&base).unwrap();
        let db = read_perf_db_sqlite(&base).unwrap();
        let mut merged = db.clone();
        merged
            .get_mut(K1)
            .unwrap()
            .insert("ConvBinWinogradRxSf3x2".into(), "9".into());
        let k3 = K1.replace("x32x", "x1x");
        merged
            .entry(k3.clone())
            .or_default()
            .insert("S".into(), "1".into());
        let diff = diff_perf_db(&db, &merged);
        assert_eq!(diff.len(), 2, "{diff:?}");
        let out = dir.path().join("out.db");
        let counts = write_merged_perf_db(Some(&base), &out, &diff).unwrap();
        assert_eq!((counts.configs, counts.perf_rows), (3, 4));
        let after = read_perf_db_rows(&out).unwrap();
        assert_eq!(after[..2], before[..2], "untouched rows keep their place");
        assert_eq!(after[2].2, "9", "updated in place");
        assert_eq!(after[3], (k3, "S".to_string(), "1".to_string()));
        assert_eq!(
            read_perf_db_rows(&base).unwrap(),
            before,
            "the base is only read"
        );
        // The text: K2's base line (pairs in another order) is kept byte for byte.
        let keep = BTreeMap::from([(K2.to_string(), format!("{K2}=ConvBinWinogradRxSf3x2:215"))]);
        let text = perf_db_text_from_rows(&after, &keep);
        assert_eq!(text.lines().count(), 3);
        assert!(text.contains(&format!(
            "{K1}=ConvBinWinogradRxSf2x3:5;ConvBinWinogradRxSf3x2:9\n"
        )));
        assert_eq!(
            parse_perf_db_text(&text).unwrap(),
            read_perf_db_sqlite(&out).unwrap()
        );
    }
}
