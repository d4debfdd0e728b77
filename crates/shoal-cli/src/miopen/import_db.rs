//! `shoal import-db --store DIR` (MITuna's `import_db`): the find and perf databases of DIR as
//! rows of the store, one import per device (base name), each record tied to the config its key
//! describes, so that a shipped database joins to a session's results by config id.
//!
//! The configs are upserted exactly as `import-configs` makes them ([`super::import::new_config`]:
//! keyed by the canonical driver line), so a config already imported, or tuned by a session, is
//! the same row. A key that is not a convolution's is counted and listed as file:line, not fatal:
//! shipped files are large and a few odd lines should not keep the rest out. A file that does not
//! follow MIOpen's grammar at all is refused by name and line, before anything is written.

use std::collections::HashMap;
use std::path::Path;

use shoal_miopen::export::merge::FindDb;
use shoal_miopen::export::read::{self as db_dir, BaseFiles, PerfUnion};
use shoal_miopen::keys::{parse_find_db_key, parse_perf_db_key, perf_db_key};
use shoal_miopen::naming::split_db_base_name;
use shoal_model::{ConfigId, NewConfig};
use shoal_store::{DbImportId, DbRecord, DbValue, NewDbImport, Store};

/// Configs per `upsert_configs` call, as `import-configs` writes them.
const CHUNK: usize = shoal_model::command::MAX_CONFIGS_PER_COMMAND;

/// Rejected keys listed on stderr; the rest are counted.
const LISTED: usize = 20;

/// What one device's import did, as printed.
#[derive(Debug, Default)]
pub struct Imported {
    pub id: Option<DbImportId>,
    pub base: String,
    pub arch: String,
    pub num_cu: u32,
    pub files: Vec<String>,
    pub find_keys: usize,
    pub find_records: usize,
    pub perf_pairs: usize,
    pub configs_created: usize,
    pub configs_present: usize,
    /// Perf pairs stored with no config: their key describes several.
    pub perf_without_config: usize,
    /// Whether the device has both a SQLite and a text perf db, and on how many pairs they
    /// disagree.
    pub both_perf_dbs: bool,
    pub perf_disagreeing: usize,
    /// `file:line: reason` of every key that is not a convolution's.
    pub rejected: Vec<String>,
}

impl std::fmt::Display for Imported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id = self.id.map_or("-".to_string(), |i| i.to_string());
        write!(
            f,
            "import {id}: {} ({}, {} CUs) from {}: find keys {}, find records {}, perf pairs {}, \
             configs created {}, present {}, rejected {}",
            self.base,
            self.arch,
            self.num_cu,
            self.files.join(", "),
            self.find_keys,
            self.find_records,
            self.perf_pairs,
            self.configs_created,
            self.configs_present,
            self.rejected.len()
        )?;
        if self.both_perf_dbs {
            write!(
                f,
                "\n  perf pairs {0}.db and {0}.db.txt disagree on: {1} (the .db's kept)",
                self.base, self.perf_disagreeing
            )?;
        }
        if self.perf_without_config > 0 {
            write!(
                f,
                "\n  perf pairs stored with no config (their key describes several): {}",
                self.perf_without_config
            )?;
        }
        Ok(())
    }
}

/// Imports every device's databases in `dir` into `store`, each as one import labelled
/// `label`, its configs tagged with `tags`. Every file is read and checked before anything is
/// written.
pub async fn import(
    store: &dyn Store,
    dir: &Path,
    label: &str,
    tags: &[String],
) -> anyhow::Result<Vec<Imported>> {
    let (bases, others) = db_dir::scan(dir)?;
    anyhow::ensure!(
        !bases.is_empty(),
        "{}: no MIOpen find or perf database (*.HIP.fdb.txt, *.db, *.db.txt) in it",
        dir.display()
    );
    if !others.is_empty() {
        eprintln!(
            "not imported into the store (only find and perf databases are): {}",
            others.join(", ")
        );
    }
    // Every device's plan first, so that a bad file stops the import before anything is
    // written; each device's parsed files are dropped once its plan is made (a shipped find db
    // is tens of megabytes of text).
    let mut plans = Vec::with_capacity(bases.len());
    for files in &bases {
        let (arch, num_cu) = split_db_base_name(&files.base)
            .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join(&files.base).display()))?;
        let find = match &files.find {
            Some(p) => Some(db_dir::read_find_db(p)?),
            None => None,
        };
        let perf = db_dir::read_perf(files)?;
        let find_ref = find.as_ref().map(|(db, text)| (db, text.as_str()));
        let plan = plan(files, find_ref, &perf, tags);
        let imported = Imported {
            base: files.base.clone(),
            arch,
            num_cu,
            files: files.names(),
            both_perf_dbs: files.perf_sqlite.is_some() && files.perf_text.is_some(),
            perf_disagreeing: perf.disagreeing,
            ..plan.counts
        };
        plans.push((imported, plan.configs, plan.records));
    }
    let mut done = Vec::with_capacity(plans.len());
    for (mut imported, configs, planned) in plans {
        let num_cu = imported.num_cu;
        let ids = upsert(store, &configs, &mut imported).await?;
        let records: Vec<DbRecord> = planned
            .into_iter()
            .map(|(config, key, solver, value)| DbRecord {
                config: config.map(|i| ids[i]),
                key,
                solver,
                value,
            })
            .collect();
        let new = NewDbImport {
            label: label.to_string(),
            arch: imported.arch.clone(),
            num_cu,
            files: imported.files.clone(),
            created_ms: now_ms(),
        };
        imported.id = Some(store.create_db_import(&new, &records).await?);
        for bad in imported.rejected.iter().take(LISTED) {
            eprintln!("rejected: {bad}");
        }
        if imported.rejected.len() > LISTED {
            eprintln!(
                "rejected: … and {} more keys",
                imported.rejected.len() - LISTED
            );
        }
        done.push(imported);
    }
    Ok(done)
}

/// `shoal miopen imports`: the store's imports, oldest first.
pub async fn list(store: &dyn Store, json: bool) -> anyhow::Result<std::process::ExitCode> {
    let imports = store.db_imports().await?;
    if json {
        let list: Vec<serde_json::Value> = imports
            .iter()
            .map(|i| {
                serde_json::json!({
                    "id": i.id.0,
                    "label": i.info.label,
                    "arch": i.info.arch,
                    "num_cu": i.info.num_cu,
                    "files": i.info.files,
                    "created_ms": i.info.created_ms,
                    "find_records": i.find_records,
                    "perf_records": i.perf_records,
                    "configs": i.configs,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else if imports.is_empty() {
        println!(
            "no database import in {} (`shoal import-db --store DIR` makes one)",
            store.describe()
        );
    } else {
        let mut lines = vec![[
            "id", "label", "arch", "num_cu", "find", "perf", "configs", "files",
        ]
        .map(String::from)
        .to_vec()];
        for i in &imports {
            lines.push(vec![
                i.id.to_string(),
                i.info.label.clone(),
                i.info.arch.clone(),
                i.info.num_cu.to_string(),
                i.find_records.to_string(),
                i.perf_records.to_string(),
                i.configs.to_string(),
                i.info.files.join(","),
            ]);
        }
        print!(
            "{}",
            shoal_export::text_columns(&lines, shoal_export::Align::Left, true)
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Upserts the configs in chunks; returns their ids in order, counting the created ones.
async fn upsert(
    store: &dyn Store,
    configs: &[NewConfig],
    counts: &mut Imported,
) -> anyhow::Result<Vec<ConfigId>> {
    let mut ids = Vec::with_capacity(configs.len());
    for chunk in configs.chunks(CHUNK) {
        for (id, created) in store.upsert_configs(chunk).await? {
            ids.push(id);
            if created {
                counts.configs_created += 1;
            } else {
                counts.configs_present += 1;
            }
        }
    }
    Ok(ids)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A record before its config has an id: the index of its config in [`Plan::configs`].
type PlannedRecord = (Option<usize>, String, String, DbValue);

/// What an import will write, computed from the databases alone.
#[derive(Debug, Default)]
struct Plan {
    /// Distinct configs, by driver line.
    configs: Vec<NewConfig>,
    /// Find records (keys in order), then perf pairs (keys in order).
    records: Vec<PlannedRecord>,
    counts: Imported,
}

impl Plan {
    /// The index of `config`'s row, added if new.
    fn config(
        &mut self,
        index: &mut HashMap<String, usize>,
        c: &shoal_miopen::ConvConfig,
        tags: &[String],
    ) -> usize {
        let new = super::import::new_config(c, tags);
        *index.entry(new.key.clone()).or_insert_with(|| {
            self.configs.push(new);
            self.configs.len() - 1
        })
    }
}

/// The configs and records of one device's databases. A perf key takes the config of the find
/// key that has it (the two files describe one tuning), else the config it describes itself;
/// when several configs have it, its pairs are kept with none.
fn plan(
    files: &BaseFiles,
    find: Option<(&FindDb, &str)>,
    perf: &PerfUnion,
    tags: &[String],
) -> Plan {
    let mut p = Plan::default();
    let mut index = HashMap::new();
    // Per perf key, the config of the find keys that have it; `None` when they disagree.
    let mut by_perf_key: HashMap<String, Option<usize>> = HashMap::new();
    if let (Some((db, text)), Some(path)) = (find, &files.find) {
        let lines = db_dir::first_lines(text);
        for (key, records) in db {
            let c = match parse_find_db_key(key) {
                Ok(c) => c,
                Err(e) => {
                    let line = lines.get(key).copied().unwrap_or(0);
                    p.counts
                        .rejected
                        .push(format!("{}:{line}: {e}", path.display()));
                    continue;
                }
            };
            let i = p.config(&mut index, &c, tags);
            by_perf_key
                .entry(perf_db_key(&c))
                .and_modify(|had| *had = had.filter(|h| *h == i))
                .or_insert(Some(i));
            p.counts.find_keys += 1;
            for r in records {
                p.counts.find_records += 1;
                let value = DbValue::Find {
                    time_ms: r.time_ms,
                    workspace: r.workspace,
                    algorithm: r.algorithm.clone(),
                };
                p.records
                    .push((Some(i), key.clone(), r.solver.clone(), value));
            }
        }
    }
    for (key, pairs) in &perf.db {
        let config = match by_perf_key.get(key) {
            Some(found) => *found,
            None => match parse_perf_db_key(key) {
                Ok(Some(c)) => Some(p.config(&mut index, &c, tags)),
                Ok(None) => None,
                Err(e) => {
                    let at = match (perf.text_lines.get(key), &files.perf_text) {
                        (Some(line), Some(text)) => format!("{}:{line}", text.display()),
                        _ => format!("{} (key {key})", sqlite_name(files)),
                    };
                    p.counts.rejected.push(format!("{at}: {e}"));
                    continue;
                }
            },
        };
        for (solver, params) in pairs {
            p.counts.perf_pairs += 1;
            p.counts.perf_without_config += usize::from(config.is_none());
            let value = DbValue::Perf {
                params: params.clone(),
            };
            p.records.push((config, key.clone(), solver.clone(), value));
        }
    }
    p
}

fn sqlite_name(files: &BaseFiles) -> String {
    files
        .perf_sqlite
        .as_ref()
        .map_or_else(|| files.base.clone(), |p| p.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_miopen::export::merge;

    const FIND: &str = "\
1000-13-13-1x1-512-13-13-16-0x0-1x1-1x1-0-NCHW-FP16-B=A:0.5,0,miopenConvolutionBwdDataAlgoGEMM;B:0.25,8,miopenConvolutionBwdDataAlgoDirect\n\
not-a-conv-key=C:1,0,miopenConvolutionFwdAlgoDirect\n";

    fn files() -> BaseFiles {
        BaseFiles {
            base: "gfx942130".into(),
            find: Some("d/gfx942130.HIP.fdb.txt".into()),
            perf_sqlite: None,
            perf_text: Some("d/gfx942130.db.txt".into()),
        }
    }

    #[test]
    fn perf_keys_take_the_find_keys_config_and_bad_keys_are_named_by_line() {
        let find = merge::parse_find_db(FIND).unwrap();
        // The first key's perf key (same config), a forward key of its own, a strided backward
        // key that several configs share, and a key that is no perf key.
        let text = "\
2x1000x13x13x1x1x1x1x512x16x0x0x0x1x1x0x1x1x0x0x1xNCHWxFP16xB=A:7\n\
2x1024x14x14x1x3x3x1x1024x16x1x1x0x1x1x0x1x1x0x0x32xNCHWxFP16xF=W:5;X:6\n\
2x128x28x28x1x3x3x1x64x8x1x1x0x2x2x0x1x1x0x0x1xNCHWxFP32xB=S:1\n\
bad=Z:1\n";
        let perf = PerfUnion {
            db: merge::parse_perf_db_text(text).unwrap(),
            text_lines: db_dir::first_lines(text),
            ..PerfUnion::default()
        };
        let p = plan(&files(), Some((&find, FIND)), &perf, &["t".to_string()]);
        let c = &p.counts;
        assert_eq!(
            (
                c.find_keys,
                c.find_records,
                c.perf_pairs,
                c.perf_without_config
            ),
            (1, 2, 4, 1)
        );
        assert_eq!(
            p.configs.len(),
            2,
            "the backward key's config, the forward one's"
        );
        assert!(p.configs.iter().all(|c| c.tags == ["t"]));
        assert_eq!(c.rejected.len(), 2, "{:?}", c.rejected);
        assert!(
            c.rejected[0].starts_with("d/gfx942130.HIP.fdb.txt:2: "),
            "{:?}",
            c.rejected
        );
        assert!(
            c.rejected[1].starts_with("d/gfx942130.db.txt:4: "),
            "{:?}",
            c.rejected
        );
        let tied: Vec<(Option<usize>, &str)> = p
            .records
            .iter()
            .map(|(i, _, s, _)| (*i, s.as_str()))
            .collect();
        assert_eq!(
            tied,
            [
                (Some(0), "A"),
                (Some(0), "B"),
                (Some(0), "A"),
                (Some(1), "W"),
                (Some(1), "X"),
                (None, "S"),
            ]
        );
        assert!(matches!(
            &p.records[1].3,
            DbValue::Find { time_ms, workspace: 8, .. } if *time_ms == 0.25
        ));
    }
}
