//! The perf db, as text (`<base>.db.txt`, what MIOpen ≥ 3.2 reads by default) and as SQLite
//! (`<base>.db`, MIOpen ≤ 3.1 or `MIOPEN_USE_SQLITE_PERFDB=On`) — `docs/miopen-formats.md`
//! §2.4, §2.5.
//!
//! Text: `KEY=SOLVER:PARAMS;SOLVER:PARAMS…\n` with the x-joined key (§1.2b); lines sorted by key
//! and pairs sorted by solver name, as MITuna's `write_pdb` writes them (MIOpen itself reads
//! pairs in any order).
//!
//! SQLite: the exact DDL of the shipped system databases ([`PERF_DB_DDL`]). A `config` row holds
//! the same 24 values as the text key — they are read back from [`perf_db_key`] so the two
//! files can never disagree — and `perf_db` holds `(solver, config, params)`. Ids are assigned
//! as MITuna's exporter assigns them: problems are visited in find-db key order (its
//! `ORDER BY fdb_key`), each new problem gets the next `config.id`, each pair the next
//! `perf_db.id`.

use super::{remove_existing, ExportError, PerfDbEntry};
use crate::keys::{find_db_key, perf_db_key};
use rusqlite::{params_from_iter, types::Value as SqlValue, Connection};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// `sqlite3 gfx942130.db .schema` of a shipped system perf db (identical to MITuna's
/// `create_sqlite_tables` once SQLite drops `IF NOT EXISTS`), in creation order.
pub const PERF_DB_DDL: [&str; 4] = [
    "CREATE TABLE `config` (`id` INTEGER PRIMARY KEY ASC,`layout` TEXT NOT NULL,`data_type` TEXT NOT NULL,`direction` TEXT NOT NULL,`spatial_dim` INT NOT NULL,`in_channels` INT NOT NULL,`in_h` INT NOT NULL,`in_w` INT NOT NULL,`in_d` INT NOT NULL,`fil_h` INT NOT NULL,`fil_w` INT NOT NULL,`fil_d` INT NOT NULL,`out_channels` INT NOT NULL, `batchsize` INT NOT NULL,`pad_h` INT NOT NULL,`pad_w` INT NOT NULL,`pad_d` INT NOT NULL,`conv_stride_h` INT NOT NULL,`conv_stride_w` INT NOT NULL,`conv_stride_d` INT NOT NULL,`dilation_h` INT NOT NULL,`dilation_w` INT NOT NULL,`dilation_d` INT NOT NULL,`bias` INT NOT NULL,`group_count` INT NOT NULL)",
    "CREATE TABLE `perf_db` (`id` INTEGER PRIMARY KEY ASC,`solver` TEXT NOT NULL,`config` INTEGER NOT NULL, `params` TEXT NOT NULL)",
    "CREATE UNIQUE INDEX `idx_config` ON config( layout,data_type,direction,spatial_dim,in_channels,in_h,in_w,in_d,fil_h,fil_w,fil_d,out_channels,batchsize,pad_h,pad_w,pad_d,conv_stride_h,conv_stride_w,conv_stride_d,dilation_h,dilation_w,dilation_d,bias,group_count )",
    "CREATE UNIQUE INDEX `idx_perf_db` ON perf_db(solver, config)",
];

/// What [`write_perf_db_sqlite`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerfDbCounts {
    /// Rows of `config` (distinct problems).
    pub configs: usize,
    /// Rows of `perf_db` (problem, solver pairs).
    pub perf_rows: usize,
}

/// Entries to export: non-empty params, first record per (problem, solver), in MITuna's
/// visiting order (stable sort by find-db key). Yields `(perf key, entry)`.
fn selected(entries: &[PerfDbEntry]) -> Vec<(String, &PerfDbEntry)> {
    let mut keyed: Vec<(String, String, &PerfDbEntry)> = entries
        .iter()
        .filter(|e| !e.params.is_empty())
        .map(|e| (find_db_key(&e.config), perf_db_key(&e.config), e))
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut seen: HashSet<(String, String)> = HashSet::new();
    keyed
        .into_iter()
        .filter(|(_, pkey, e)| seen.insert((pkey.clone(), e.solver.clone())))
        .map(|(_, pkey, e)| (pkey, e))
        .collect()
}

/// The text perf db for `entries`.
pub fn perf_db_text(entries: &[PerfDbEntry]) -> String {
    let mut by_key: BTreeMap<String, Vec<&PerfDbEntry>> = BTreeMap::new();
    for (key, e) in selected(entries) {
        by_key.entry(key).or_default().push(e);
    }
    let mut out = String::new();
    for (key, mut list) in by_key {
        list.sort_by(|a, b| a.solver.cmp(&b.solver));
        out.push_str(&key);
        out.push('=');
        for (i, e) in list.iter().enumerate() {
            if i > 0 {
                out.push(';');
            }
            out.push_str(&e.solver);
            out.push(':');
            out.push_str(&e.params);
        }
        out.push('\n');
    }
    out
}

/// The 24 config-row values of a perf-db key, in key order: 21 integers
/// (`spatial_dim … group_count`), then `layout`, `data_type`, `direction`.
pub(crate) fn key_columns(key: &str) -> Result<(Vec<i64>, [String; 3]), ExportError> {
    let fields: Vec<&str> = key.split('x').collect();
    if fields.len() != 24 {
        return Err(ExportError::BadKey(key.to_string()));
    }
    let ints = fields[..21]
        .iter()
        .map(|f| f.parse::<i64>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| ExportError::BadKey(key.to_string()))?;
    Ok((
        ints,
        [
            fields[21].to_string(),
            fields[22].to_string(),
            fields[23].to_string(),
        ],
    ))
}

/// Writes the SQLite perf db to `path` (replacing any file there).
pub fn write_perf_db_sqlite(
    path: &Path,
    entries: &[PerfDbEntry],
) -> Result<PerfDbCounts, ExportError> {
    let rows: Vec<(String, &str, &str)> = selected(entries)
        .into_iter()
        .map(|(key, e)| (key, e.solver.as_str(), e.params.as_str()))
        .collect();
    write_perf_db_rows(path, &rows)
}

/// Writes `(perf key, solver, params)` rows as a SQLite perf db at `path` (replacing any file
/// there), configs numbered in the order their keys first appear.
pub fn write_perf_db_rows(
    path: &Path,
    rows: &[(String, &str, &str)],
) -> Result<PerfDbCounts, ExportError> {
    remove_existing(path)?;
    let mut conn = Connection::open(path)?;
    let tx = conn.transaction()?;
    for ddl in PERF_DB_DDL {
        tx.execute(ddl, [])?;
    }
    let mut config_ids: HashMap<String, i64> = HashMap::new();
    let mut perf_rows = 0;
    {
        let mut insert_config = tx.prepare(
            "INSERT INTO config (layout, data_type, direction, spatial_dim, in_channels, in_h, \
             in_w, in_d, fil_h, fil_w, fil_d, out_channels, batchsize, pad_h, pad_w, pad_d, \
             conv_stride_h, conv_stride_w, conv_stride_d, dilation_h, dilation_w, dilation_d, \
             bias, group_count) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, \
             ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24)",
        )?;
        let mut insert_perf =
            tx.prepare("INSERT INTO perf_db (solver, config, params) VALUES (?1, ?2, ?3)")?;
        for (key, solver, params) in rows {
            let config_id = match config_ids.get(key) {
                Some(id) => *id,
                None => {
                    let (ints, [layout, data_type, direction]) = key_columns(key)?;
                    let mut values: Vec<SqlValue> = vec![
                        SqlValue::Text(layout),
                        SqlValue::Text(data_type),
                        SqlValue::Text(direction),
                    ];
                    values.extend(ints.into_iter().map(SqlValue::Integer));
                    insert_config.execute(params_from_iter(values))?;
                    let id = tx.last_insert_rowid();
                    config_ids.insert(key.clone(), id);
                    id
                }
            };
            insert_perf.execute(rusqlite::params![solver, config_id, params])?;
            perf_rows += 1;
        }
    }
    tx.commit()?;
    conn.close().map_err(|(_, e)| ExportError::Sqlite(e))?;
    Ok(PerfDbCounts {
        configs: config_ids.len(),
        perf_rows,
    })
}
