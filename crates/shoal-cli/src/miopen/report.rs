//! `shoal miopen report OLD NEW` (MITuna's `update_golden --create_perf_table`): two versions of
//! the MIOpen databases compared config by config and solver by solver — times, the change,
//! perf params, and each config's fastest solution on both sides.
//!
//! Times are compared as MIOpen's find db writes them (`%g`, 6 significant digits:
//! [`format_time`]): two times that print the same are the same, whatever the bits of the f32
//! they came from, so a version read back from its own find db equals the session it was
//! exported from. The comparison here is plain functions of two [`Version`]s; where a side comes
//! from (a golden version, a session, an import, a directory) is `report_sides.rs`'s.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use shoal_miopen::export::format_time;
use shoal_miopen::export::merge::{FindDb, PerfDb};
use shoal_miopen::keys::{parse_find_db_key, perf_db_key};
use shoal_store::{DbRecord, DbValue};

/// One version of the databases, as the comparison needs it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Version {
    /// Per find-db key, per solver, the time in ms.
    pub times: BTreeMap<String, BTreeMap<String, f32>>,
    /// Per perf-db key, per solver, the params.
    pub params: PerfDb,
}

impl Version {
    /// From a find db and a perf db (files, or a session's entries made into them).
    pub fn of_dbs(find: &FindDb, perf: &PerfDb) -> Version {
        let mut times: BTreeMap<String, BTreeMap<String, f32>> = BTreeMap::new();
        for (key, records) in find {
            let solvers = times.entry(key.clone()).or_default();
            for r in records {
                solvers.entry(r.solver.clone()).or_insert(r.time_ms);
            }
        }
        Version {
            times,
            params: perf.clone(),
        }
    }

    /// From the records of a store import (the first per key and solver, as files are read).
    pub fn of_records(records: &[DbRecord]) -> Version {
        let mut v = Version::default();
        for r in records {
            match &r.value {
                DbValue::Find { time_ms, .. } => {
                    v.times
                        .entry(r.key.clone())
                        .or_default()
                        .entry(r.solver.clone())
                        .or_insert(*time_ms);
                }
                DbValue::Perf { params } => {
                    v.params
                        .entry(r.key.clone())
                        .or_default()
                        .entry(r.solver.clone())
                        .or_insert_with(|| params.clone());
                }
            }
        }
        v
    }

    /// Perf pairs of a config with no find record of that solver: not compared (a find db keeps
    /// only the fastest few solvers of a config, a perf db every tuned one).
    fn params_only(&self) -> usize {
        let with_times: BTreeSet<(String, &str)> = self
            .times
            .iter()
            .filter_map(|(key, solvers)| Some((perf_key(key)?, solvers)))
            .flat_map(|(pk, solvers)| solvers.keys().map(move |s| (pk.clone(), s.as_str())))
            .collect();
        self.params
            .iter()
            .flat_map(|(pk, pairs)| pairs.keys().map(move |s| (pk, s)))
            .filter(|(pk, s)| !with_times.contains(&((*pk).clone(), s.as_str())))
            .count()
    }
}

/// The perf-db key of a find-db key, when it is a convolution's.
fn perf_key(find_key: &str) -> Option<String> {
    parse_find_db_key(find_key).ok().map(|c| perf_db_key(&c))
}

/// How a (config, solver) changed from the old version to the new.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Faster,
    Slower,
    Same,
    OnlyOld,
    OnlyNew,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Faster => "faster",
            Status::Slower => "slower",
            Status::Same => "same",
            Status::OnlyOld => "only_old",
            Status::OnlyNew => "only_new",
        }
    }
}

/// One (config, solver) of either version.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The find-db key.
    pub config: String,
    pub solver: String,
    pub old_ms: Option<f32>,
    pub new_ms: Option<f32>,
    pub old_params: Option<String>,
    pub new_params: Option<String>,
    pub status: Status,
}

impl Row {
    /// The new time's change from the old, in percent (positive: slower); 0 for times that print
    /// the same.
    pub fn change_pct(&self) -> Option<f64> {
        change_pct(self.old_ms?, self.new_ms?)
    }
}

fn change_pct(old: f32, new: f32) -> Option<f64> {
    if format_time(old) == format_time(new) {
        return Some(0.0);
    }
    (old > 0.0).then(|| (f64::from(new) - f64::from(old)) / f64::from(old) * 100.0)
}

/// A config's fastest (solver, time) on each side.
#[derive(Clone, Debug, PartialEq)]
pub struct Fastest {
    pub config: String,
    pub old: Option<(String, f32)>,
    pub new: Option<(String, f32)>,
}

impl Fastest {
    /// Whether the fastest solver, or its time as printed, differs (both sides having one).
    pub fn changed(&self) -> bool {
        match (&self.old, &self.new) {
            (Some((os, ot)), Some((ns, nt))) => os != ns || format_time(*ot) != format_time(*nt),
            _ => false,
        }
    }

    pub fn change_pct(&self) -> Option<f64> {
        change_pct(self.old.as_ref()?.1, self.new.as_ref()?.1)
    }
}

/// The fastest solver of a config: the lowest time, then the solver's name (MITuna's order).
fn fastest(solvers: Option<&BTreeMap<String, f32>>) -> Option<(String, f32)> {
    solvers?
        .iter()
        .min_by(|a, b| a.1.total_cmp(b.1).then_with(|| a.0.cmp(b.0)))
        .map(|(s, t)| (s.clone(), *t))
}

/// Every (config, solver) of either version with a time, in key then solver order, and every
/// config's fastest on both sides.
pub fn compare(old: &Version, new: &Version) -> (Vec<Row>, Vec<Fastest>) {
    let configs: BTreeSet<&String> = old.times.keys().chain(new.times.keys()).collect();
    let mut rows = Vec::new();
    let mut fastest_of = Vec::with_capacity(configs.len());
    for config in configs {
        let (o, n) = (old.times.get(config), new.times.get(config));
        let pk = perf_key(config);
        let params = |v: &Version, solver: &str| v.params.get(pk.as_ref()?)?.get(solver).cloned();
        let solvers: BTreeSet<&String> = o.into_iter().chain(n).flat_map(|s| s.keys()).collect();
        for solver in solvers {
            let old_ms = o.and_then(|s| s.get(solver)).copied();
            let new_ms = n.and_then(|s| s.get(solver)).copied();
            let status = match (old_ms, new_ms) {
                (Some(a), Some(b)) if format_time(a) == format_time(b) => Status::Same,
                (Some(a), Some(b)) if b < a => Status::Faster,
                (Some(_), Some(_)) => Status::Slower,
                (Some(_), None) => Status::OnlyOld,
                _ => Status::OnlyNew,
            };
            rows.push(Row {
                config: config.clone(),
                solver: solver.clone(),
                old_ms,
                new_ms,
                old_params: params(old, solver),
                new_params: params(new, solver),
                status,
            });
        }
        fastest_of.push(Fastest {
            config: config.clone(),
            old: fastest(o),
            new: fastest(n),
        });
    }
    (rows, fastest_of)
}

/// The counts of the report's last line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub configs: usize,
    pub faster: usize,
    pub slower: usize,
    pub same: usize,
    pub only_old: usize,
    pub only_new: usize,
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "report configs={} faster={} slower={} same={} only_old={} only_new={}",
            self.configs, self.faster, self.slower, self.same, self.only_old, self.only_new
        )
    }
}

/// Configs, and (config, solver) rows by status.
pub fn counts(rows: &[Row], fastest: &[Fastest]) -> Counts {
    let mut c = Counts {
        configs: fastest.len(),
        ..Counts::default()
    };
    for r in rows {
        *match r.status {
            Status::Faster => &mut c.faster,
            Status::Slower => &mut c.slower,
            Status::Same => &mut c.same,
            Status::OnlyOld => &mut c.only_old,
            Status::OnlyNew => &mut c.only_new,
        } += 1;
    }
    c
}

/// The terminal summary: the configs whose fastest solution changed, worst slowdown first, at
/// most `limit` of them, and what is not compared.
pub fn summary(old: &Version, new: &Version, fastest: &[Fastest], limit: usize) -> String {
    let mut changed: Vec<&Fastest> = fastest.iter().filter(|f| f.changed()).collect();
    changed.sort_by(|a, b| {
        let pct = |f: &Fastest| f.change_pct().unwrap_or(0.0);
        pct(b)
            .total_cmp(&pct(a))
            .then_with(|| a.config.cmp(&b.config))
    });
    let mut out = String::new();
    if changed.is_empty() {
        out.push_str("no config's fastest solution changed\n");
    } else {
        out.push_str(&format!(
            "configs whose fastest solution changed: {} (worst slowdown first)\n",
            changed.len()
        ));
        let side = |s: &Option<(String, f32)>| {
            s.as_ref().map_or(("-".into(), "-".into()), |(n, t)| {
                (n.clone(), format_time(*t))
            })
        };
        let mut lines = vec![vec![
            "config".to_string(),
            "old fastest".into(),
            "old ms".into(),
            "new fastest".into(),
            "new ms".into(),
            "change".into(),
        ]];
        for f in changed.iter().take(limit) {
            let ((os, ot), (ns, nt)) = (side(&f.old), side(&f.new));
            let pct = f.change_pct().map_or("-".into(), |p| format!("{p:+.1}%"));
            lines.push(vec![f.config.clone(), os, ot, ns, nt, pct]);
        }
        out.push_str(&shoal_export::text_columns(
            &lines,
            shoal_export::Align::Left,
            true,
        ));
        if changed.len() > limit {
            out.push_str(&format!(
                "… and {} more (every row is in --csv)\n",
                changed.len() - limit
            ));
        }
    }
    let only =
        |a: &Version, b: &Version| a.times.keys().filter(|k| !b.times.contains_key(*k)).count();
    out.push_str(&format!(
        "configs only in old: {}, only in new: {}; perf pairs with no find record (not \
         compared): old {}, new {}\n",
        only(old, new),
        only(new, old),
        old.params_only(),
        new.params_only()
    ));
    out
}

/// Every row as CSV, with a header: times as the find db prints them, the change in percent,
/// and beside each row its config's fastest solver and time on both sides (the same on every row
/// of a config, so that one file answers both questions).
pub fn write_csv(rows: &[Row], fastest: &[Fastest], out: impl Write) -> csv::Result<()> {
    let by_config: BTreeMap<&str, &Fastest> =
        fastest.iter().map(|f| (f.config.as_str(), f)).collect();
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "config",
        "solver",
        "status",
        "old_ms",
        "new_ms",
        "change_pct",
        "old_params",
        "new_params",
        "old_fastest",
        "old_fastest_ms",
        "new_fastest",
        "new_fastest_ms",
    ])?;
    let time = |t: Option<f32>| t.map(format_time).unwrap_or_default();
    let best = |b: Option<&(String, f32)>| {
        b.map_or((String::new(), String::new()), |(s, t)| {
            (s.clone(), format_time(*t))
        })
    };
    for r in rows {
        let f = by_config.get(r.config.as_str());
        let (old_best, old_best_ms) = best(f.and_then(|f| f.old.as_ref()));
        let (new_best, new_best_ms) = best(f.and_then(|f| f.new.as_ref()));
        w.write_record([
            r.config.as_str(),
            &r.solver,
            r.status.as_str(),
            &time(r.old_ms),
            &time(r.new_ms),
            &r.change_pct()
                .map(|p| format!("{p:.2}"))
                .unwrap_or_default(),
            r.old_params.as_deref().unwrap_or(""),
            r.new_params.as_deref().unwrap_or(""),
            &old_best,
            &old_best_ms,
            &new_best,
            &new_best_ms,
        ])?;
    }
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_miopen::export::merge;

    /// A backward key and its perf key (docs/miopen-formats.md §2.4), and a forward key.
    const B: &str = "1000-13-13-1x1-512-13-13-16-0x0-1x1-1x1-0-NCHW-FP16-B";
    const B_PERF: &str = "2x1000x13x13x1x1x1x1x512x16x0x0x0x1x1x0x1x1x0x0x1xNCHWxFP16xB";
    const F: &str = "1024-14-14-3x3-1024-14-14-16-1x1-1x1-1x1-0-NCHW-FP16-F_g32";

    fn version(find: &str, perf: &str) -> Version {
        Version::of_dbs(
            &merge::parse_find_db(find).unwrap(),
            &merge::parse_perf_db_text(perf).unwrap(),
        )
    }

    fn old() -> Version {
        version(
            &format!(
                "{B}=A:0.051639,0,miopenConvolutionBwdDataAlgoGEMM;B:0.2,0,miopenConvolutionBwdDataAlgoGEMM;C:1,0,miopenConvolutionBwdDataAlgoGEMM\n\
                 {F}=W:0.044061,0,miopenConvolutionFwdAlgoWinograd\n"
            ),
            &format!("{B_PERF}=A:1,2;B:3;Z:9\n"),
        )
    }

    fn new() -> Version {
        // A: the same time in more digits; B: slower; C: gone; D: new and now the fastest.
        version(
            &format!(
                "{B}=A:0.0516390001,0,miopenConvolutionBwdDataAlgoGEMM;B:0.3,0,miopenConvolutionBwdDataAlgoGEMM;D:0.05,0,miopenConvolutionBwdDataAlgoGEMM\n"
            ),
            &format!("{B_PERF}=A:1,2;B:4\n"),
        )
    }

    #[test]
    fn rows_compare_times_as_the_find_db_prints_them() {
        let (rows, fastest) = compare(&old(), &new());
        let got: Vec<(&str, &str, Status)> = rows
            .iter()
            .map(|r| (r.config.as_str(), r.solver.as_str(), r.status))
            .collect();
        assert_eq!(
            got,
            [
                (B, "A", Status::Same),
                (B, "B", Status::Slower),
                (B, "C", Status::OnlyOld),
                (B, "D", Status::OnlyNew),
                (F, "W", Status::OnlyOld),
            ]
        );
        let b = &rows[1];
        assert_eq!(
            (b.old_params.as_deref(), b.new_params.as_deref()),
            (Some("3"), Some("4"))
        );
        assert!(
            (b.change_pct().unwrap() - 50.0).abs() < 1e-4,
            "{:?}",
            b.change_pct()
        );
        assert_eq!(rows[0].change_pct(), Some(0.0));
        assert_eq!(rows[2].change_pct(), None);
        let c = counts(&rows, &fastest);
        assert_eq!(
            c.to_string(),
            "report configs=2 faster=0 slower=1 same=1 only_old=2 only_new=1"
        );
        // The backward config's fastest moved from A to D; the forward one is only old.
        assert!(fastest[0].changed() && !fastest[1].changed());
        assert_eq!(fastest[0].new, Some(("D".to_string(), 0.05)));
        // The reverse comparison is the mirror image.
        let (back, _) = compare(&new(), &old());
        assert_eq!(back[1].status, Status::Faster);
        assert_eq!(back[2].status, Status::OnlyNew);
    }

    #[test]
    fn the_summary_puts_the_worst_slowdown_first_and_the_csv_quotes_params() {
        let mut slower = new();
        slower
            .times
            .insert(F.into(), BTreeMap::from([("W".to_string(), 0.5f32)]));
        let (rows, fastest) = compare(&old(), &slower);
        let text = summary(&old(), &slower, &fastest, 10);
        let f_at = text.find(F).unwrap();
        let b_at = text.find(B).unwrap();
        assert!(f_at < b_at, "F (+1034.8%) before B (-3.2%):\n{text}");
        assert!(
            text.contains("+1034.8%") && text.contains("-3.2%"),
            "{text}"
        );
        assert!(
            text.contains("not compared): old 1, new 0"),
            "Z has no time:\n{text}"
        );
        let short = summary(&old(), &slower, &fastest, 1);
        assert!(short.contains("… and 1 more"), "{short}");

        let mut csv = Vec::new();
        write_csv(&rows, &fastest, &mut csv).unwrap();
        let csv = String::from_utf8(csv).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "config,solver,status,old_ms,new_ms,change_pct,old_params,new_params,old_fastest,\
             old_fastest_ms,new_fastest,new_fastest_ms"
        );
        assert_eq!(
            lines[1],
            format!("{B},A,same,0.051639,0.051639,0.00,\"1,2\",\"1,2\",A,0.051639,D,0.05")
        );
        assert_eq!(lines.len(), 1 + rows.len());
    }

    #[test]
    fn an_import_reads_as_the_files_it_came_from() {
        let records: Vec<DbRecord> = vec![
            DbRecord {
                config: None,
                key: B.into(),
                solver: "A".into(),
                value: DbValue::Find {
                    time_ms: 0.051639,
                    workspace: 0,
                    algorithm: "miopenConvolutionBwdDataAlgoGEMM".into(),
                },
            },
            DbRecord {
                config: None,
                key: B_PERF.into(),
                solver: "A".into(),
                value: DbValue::Perf {
                    params: "1,2".into(),
                },
            },
        ];
        let from_files = version(
            &format!("{B}=A:0.051639,0,miopenConvolutionBwdDataAlgoGEMM\n"),
            &format!("{B_PERF}=A:1,2\n"),
        );
        assert_eq!(Version::of_records(&records), from_files);
    }
}
