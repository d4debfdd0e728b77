//! Turning a session's results into what people and programs read: the tuned table (best
//! candidate per problem) as CSV (aiter style) and JSON, and a text table for the terminal.
//!
//! Pure functions over [`FinalResult`]s: the Exporter actor reads the store and writes the files;
//! the decisions about what "best" means and what the columns are live here, once.

pub mod compare;
pub mod failures;
pub mod files;
pub mod paired;
pub mod t4;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use shoal_model::{ConfigId, FailureKind, FinalResult, JobState, Outcome, Params};

/// What the table is about: the device and the columns.
pub struct TableContext<'a> {
    pub arch: &'a str,
    pub num_cu: u32,
    pub shape_columns: &'a [String],
    /// FLOPs of one run of a problem, when the spec says how to count them.
    pub flops: &'a dyn Fn(&Params) -> Option<f64>,
}

/// The best candidate of one problem, with what was learned about the rest. Read back from
/// `tuned.json` by `shoal compare`, so every field added later has a default.
///
/// A quantity has one name in both files: `tuned.json` holds these fields and `tuned.csv` the
/// same names, with the shape and the winning parameters spread into columns of their own
/// (older tables that said `num_cu` and `time_us` still read).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TunedRow {
    pub arch: String,
    #[serde(rename = "cu_num", alias = "num_cu")]
    pub num_cu: u32,
    pub config: ConfigId,
    pub shape: Params,
    pub solver: String,
    /// The winning compile-time then run-time parameters; `None` when no candidate was valid.
    pub best: Option<Params>,
    /// The winner's time in microseconds (aiter's `us`).
    #[serde(rename = "us", alias = "time_us")]
    pub time_us: Option<f64>,
    /// The winner's own spread: its slowest timed run over its fastest, less one, in percent.
    /// What a change between two tunings must exceed to be more than noise.
    #[serde(default)]
    pub spread_pct: Option<f64>,
    pub gflops: Option<f64>,
    /// Slowest valid over best: how much the choice of parameters matters for this problem.
    #[serde(default)]
    pub speedup: Option<f64>,
    /// Time of the slowest valid candidate, to show what tuning bought.
    pub slowest_valid_us: Option<f64>,
    pub candidates: u32,
    pub valid: u32,
    /// Candidates that ended in each failure kind.
    pub failures: BTreeMap<String, u32>,
    /// Candidates not finished yet.
    pub pending: u32,
    /// The second-best valid candidate's parameters and time.
    #[serde(default)]
    pub runner_up: Option<Params>,
    #[serde(default)]
    pub runner_up_us: Option<f64>,
    /// The winner's lead over the runner-up is within the noise of their timed runs
    /// ([`shoal_model::repeats::relative_noise`]): another tuning may well pick the runner-up.
    #[serde(default)]
    pub tie: bool,
}

/// One row per problem, in config order: the valid candidate with the least time wins (ties go
/// to the lower job id, so the choice is stable). Candidates a search skipped are not counted:
/// `candidates` is what was tried.
pub fn tuned_rows(ctx: &TableContext<'_>, results: &[FinalResult]) -> Vec<TunedRow> {
    let mut by_config: BTreeMap<ConfigId, Vec<&FinalResult>> = BTreeMap::new();
    for r in results.iter().filter(|r| r.state != JobState::Skipped) {
        by_config.entry(r.config).or_default().push(r);
    }
    by_config
        .into_values()
        .map(|rs| {
            let first = rs[0];
            let mut row = TunedRow {
                arch: ctx.arch.to_string(),
                num_cu: ctx.num_cu,
                config: first.config,
                shape: first.config_params.clone(),
                solver: first.solver.clone(),
                best: None,
                time_us: None,
                spread_pct: None,
                gflops: None,
                speedup: None,
                slowest_valid_us: None,
                candidates: rs.len() as u32,
                valid: 0,
                failures: BTreeMap::new(),
                pending: 0,
                runner_up: None,
                runner_up_us: None,
                tie: false,
            };
            // The two fastest, with their runs: the winner and its runner-up.
            let mut top: Vec<(&FinalResult, &shoal_model::Measurement)> = Vec::new();
            for r in &rs {
                match (&r.state, &r.outcome) {
                    (JobState::Evaluated, Some(Outcome::Measured(m))) => {
                        row.valid += 1;
                        let at = top
                            .iter()
                            .position(|(_, t)| m.time_us < t.time_us)
                            .unwrap_or(top.len());
                        if at < 2 {
                            top.insert(at, (r, m));
                            top.truncate(2);
                        }
                        if row.slowest_valid_us.is_none_or(|t| m.time_us > t) {
                            row.slowest_valid_us = Some(m.time_us);
                        }
                    }
                    _ => match failure_of(r) {
                        Some((kind, _)) => *row.failures.entry(kind).or_default() += 1,
                        None => row.pending += 1,
                    },
                }
            }
            if let Some((r, m)) = top.first() {
                row.time_us = Some(m.time_us);
                row.spread_pct = spread_pct(&m.samples_us);
                row.best = Some(r.compile_params.chain(&r.run_params));
            }
            if let [(_, w), (r, m)] = top[..] {
                row.runner_up = Some(r.compile_params.chain(&r.run_params));
                row.runner_up_us = Some(m.time_us);
                row.tie = is_tie(w, m);
            }
            row.speedup = row.slowest_valid_us.zip(row.time_us).map(|(s, t)| s / t);
            row.gflops = match (row.time_us, (ctx.flops)(&row.shape)) {
                (Some(t), Some(f)) if t > 0.0 => Some(f / (t * 1e3)),
                _ => None,
            };
            row
        })
        .collect()
}

/// Whether a winner's lead over its runner-up is within the noise of either's median (the
/// measure adaptive repetitions run to); with a single run each there is no noise to tell, and
/// no tie is claimed.
fn is_tie(winner: &shoal_model::Measurement, runner_up: &shoal_model::Measurement) -> bool {
    use shoal_model::repeats::relative_noise;
    let noise = [&winner.samples_us, &runner_up.samples_us]
        .iter()
        .map(|s| relative_noise(s))
        .filter(|n| n.is_finite())
        .fold(0.0, f64::max);
    winner.time_us > 0.0 && runner_up.time_us / winner.time_us - 1.0 <= noise
}

/// The spread of a candidate's timed runs: slowest over fastest, less one, in percent; `None`
/// with fewer than two runs.
pub fn spread_pct(samples_us: &[f64]) -> Option<f64> {
    let valid = samples_us
        .iter()
        .copied()
        .filter(|s| s.is_finite() && *s > 0.0);
    let (lo, hi, n) = valid.fold((f64::MAX, 0.0f64, 0), |(lo, hi, n), s| {
        (lo.min(s), hi.max(s), n + 1)
    });
    (n >= 2).then(|| 100.0 * (hi / lo - 1.0))
}

/// Names of the winning-parameter columns: the union over rows, in first-seen order.
fn param_columns(rows: &[TunedRow]) -> Vec<String> {
    let mut cols: Vec<String> = Vec::new();
    for r in rows {
        if let Some(best) = &r.best {
            for n in best.names() {
                if !cols.iter().any(|c| c == n) {
                    cols.push(n.to_string());
                }
            }
        }
    }
    cols
}

/// Writes the tuned table as CSV: `arch,cu_num,<shape…>,<params…>,us,gflops,speedup,spread_pct,
/// tie,runner_up,runner_up_us` (named as in [`TunedRow`]; `runner_up` as `name=value` pairs
/// separated by spaces). Problems with no valid candidate are left out (as aiter does); they are
/// in the JSON with their failures.
pub fn write_csv(
    ctx: &TableContext<'_>,
    rows: &[TunedRow],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let params = param_columns(rows);
    let mut w = csv::Writer::from_writer(out);
    let mut header: Vec<String> = vec!["arch".into(), "cu_num".into()];
    header.extend(ctx.shape_columns.iter().cloned());
    header.extend(params.iter().cloned());
    header.extend(
        [
            "us",
            "gflops",
            "speedup",
            "spread_pct",
            "tie",
            "runner_up",
            "runner_up_us",
        ]
        .map(String::from),
    );
    w.write_record(&header)?;
    for r in rows {
        let Some(best) = &r.best else { continue };
        let mut rec: Vec<String> = vec![r.arch.clone(), r.num_cu.to_string()];
        for c in ctx.shape_columns {
            rec.push(r.shape.get(c).unwrap_or("").to_string());
        }
        for p in &params {
            rec.push(best.get(p).unwrap_or("").to_string());
        }
        rec.push(format!("{:.3}", r.time_us.unwrap_or(f64::NAN)));
        rec.push(r.gflops.map(|g| format!("{g:.3}")).unwrap_or_default());
        rec.push(r.speedup.map(|s| format!("{s:.2}")).unwrap_or_default());
        rec.push(r.spread_pct.map(|s| format!("{s:.2}")).unwrap_or_default());
        rec.push(r.tie.to_string());
        rec.push(r.runner_up.as_ref().map_or(String::new(), |p| {
            p.iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        }));
        rec.push(
            r.runner_up_us
                .map(|t| format!("{t:.3}"))
                .unwrap_or_default(),
        );
        w.write_record(&rec)?;
    }
    w.flush()?;
    Ok(())
}

/// Writes every row (failures and pending counts included) as pretty JSON.
pub fn write_json(rows: &[TunedRow], out: &mut dyn Write) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, rows)?;
    out.write_all(b"\n")
}

/// The files [`write_files`] writes.
pub const TABLE_FILES: [&str; 2] = ["tuned.csv", "tuned.json"];

/// Writes `tuned.csv` and `tuned.json` into `dir` (created if missing), each through a temporary
/// file renamed into place; returns their paths. Existing files are replaced only with `force`
/// (see [`files`]): `shoal tune` replaces its own table, `shoal export` asks first.
pub fn write_files(
    ctx: &TableContext<'_>,
    rows: &[TunedRow],
    dir: &Path,
    force: bool,
) -> Result<(std::path::PathBuf, std::path::PathBuf), files::OutputError> {
    let out = files::OutputDir::prepare(dir, &TABLE_FILES, force)?;
    let [csv, json] = TABLE_FILES;
    out.write(csv, |p| write_with(p, |f| write_csv(ctx, rows, f)))?;
    out.write(json, |p| write_with(p, |f| write_json(rows, f)))?;
    Ok((out.path(csv), out.path(json)))
}

/// Creates `path` and writes it through a buffer.
fn write_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    write(&mut f)?;
    f.flush()
}

/// A terminal table of the winners, in the spirit of tune.py's summary: one line per problem.
pub fn render_table(ctx: &TableContext<'_>, rows: &[TunedRow]) -> String {
    let params = param_columns(rows);
    let mut header: Vec<String> = ctx.shape_columns.to_vec();
    header.extend(params.iter().cloned());
    header.extend(
        [
            "time (us)",
            "GFLOP/s",
            "speedup vs slowest",
            "valid",
            "failed",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let mut lines: Vec<Vec<String>> = vec![header];
    for r in rows {
        let mut l: Vec<String> = ctx
            .shape_columns
            .iter()
            .map(|c| r.shape.get(c).unwrap_or("").to_string())
            .collect();
        for p in &params {
            l.push(
                r.best
                    .as_ref()
                    .and_then(|b| b.get(p))
                    .unwrap_or("-")
                    .to_string(),
            );
        }
        l.push(
            r.time_us
                .map(|t| format!("{t:.1}{}", if r.tie { " (tie)" } else { "" }))
                .unwrap_or("-".into()),
        );
        l.push(r.gflops.map(|g| format!("{g:.2}")).unwrap_or("-".into()));
        l.push(r.speedup.map(|s| format!("{s:.1}")).unwrap_or("-".into()));
        l.push(format!("{}/{}", r.valid, r.candidates));
        l.push(if r.failures.is_empty() {
            "0".into()
        } else {
            r.failures
                .iter()
                .map(|(k, n)| format!("{k}:{n}"))
                .collect::<Vec<_>>()
                .join(" ")
        });
        lines.push(l);
    }
    text_columns(&lines, Align::Right, true)
}

/// Why a job ended without a time: its failure kind (the job's, else its outcome's, else its
/// final state's name) and the message recorded with it. `None` for a job that was measured,
/// skipped by a search, or is not final yet. The one definition of "failed" that the tuned
/// table, `shoal status` and the dashboard count by.
pub fn failure_of(r: &FinalResult) -> Option<(String, Option<String>)> {
    match (&r.state, &r.failure, &r.outcome) {
        (JobState::Evaluated, _, Some(Outcome::Measured(_))) | (JobState::Skipped, _, _) => None,
        (s, _, _) if !s.is_terminal() => None,
        (_, Some(k), _) => Some((k.as_str().to_string(), r.last_error.clone())),
        (_, None, Some(Outcome::Failed { kind, detail })) => {
            Some((kind.to_string(), Some(detail.clone())))
        }
        (s, None, _) => Some((s.as_str().to_string(), r.last_error.clone())),
    }
}

/// How [`text_columns`] pads a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// Lines of cells as text columns, each as wide as its widest cell, two spaces apart; the first
/// line is the header, underlined when `header_rule`.
pub fn text_columns(lines: &[Vec<String>], align: Align, header_rule: bool) -> String {
    let Some(header) = lines.first() else {
        return String::new();
    };
    let widths: Vec<usize> = (0..header.len())
        .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (n, l) in lines.iter().enumerate() {
        let cells: Vec<String> = l
            .iter()
            .zip(&widths)
            .map(|(c, w)| match align {
                Align::Left => format!("{c:<w$}"),
                Align::Right => format!("{c:>w$}"),
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
        if n == 0 && header_rule {
            out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)));
            out.push('\n');
        }
    }
    out
}

/// Counts of final failure kinds over a session, for summaries.
pub fn failure_counts(results: &[FinalResult]) -> BTreeMap<FailureKind, u32> {
    let mut m = BTreeMap::new();
    for r in results {
        if let Some(k) = r.failure {
            *m.entry(k).or_default() += 1;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_model::{JobId, Measurement};

    /// A time written to `tuned.json` reads back as the same number: `shoal compare` and the
    /// tests compare times read back with measured ones. serde_json's default float parser is
    /// off by one unit in the last place for about 9 % of values (`42.6985` read back as
    /// `42.698499999999996`); the workspace turns on its `float_roundtrip` feature.
    #[test]
    fn times_survive_a_json_round_trip() {
        let mut x: f64 = 42.6985;
        for _ in 0..10_000 {
            let back: f64 = serde_json::from_str(&serde_json::to_string(&x).unwrap()).unwrap();
            assert_eq!(back.to_bits(), x.to_bits(), "{x}");
            x = (x * 1.000_731 + 0.013_7) % 10_000.0;
        }
    }

    fn params(pairs: &[(&str, &str)]) -> Params {
        let mut p = Params::new();
        for (n, v) in pairs {
            p.push(*n, *v);
        }
        p
    }

    fn result(
        job: i64,
        cfg: i64,
        bm: &str,
        t: Option<f64>,
        fail: Option<FailureKind>,
    ) -> FinalResult {
        FinalResult {
            job: JobId(job),
            config: ConfigId(cfg),
            config_params: params(&[("M", &(cfg * 100).to_string()), ("N", "64")]),
            solver: "gemm".into(),
            compile_params: params(&[("BM", bm)]),
            run_params: Params::new(),
            state: if t.is_some() {
                JobState::Evaluated
            } else if fail.is_some() {
                JobState::Errored
            } else {
                JobState::Compiled
            },
            outcome: t.map(|t| {
                Outcome::Measured(Measurement {
                    time_us: t,
                    samples_us: vec![t],
                    workspace: 0,
                    details: Default::default(),
                })
            }),
            failure: fail,
            last_error: None,
            worker: None,
            device: None,
            eval_step: shoal_model::Step::ExecRun,
        }
    }

    #[test]
    fn best_is_the_fastest_valid_candidate_per_problem() {
        let cols = vec!["M".to_string(), "N".to_string()];
        let flops = |p: &Params| Some(2.0 * p.get_i64("M")? as f64 * p.get_i64("N")? as f64);
        let ctx = TableContext {
            arch: "x86_64",
            num_cu: 2,
            shape_columns: &cols,
            flops: &flops,
        };
        let results = vec![
            result(1, 1, "16", Some(40.0), None),
            result(2, 1, "32", Some(10.0), None),
            result(3, 1, "64", None, Some(FailureKind::Crashed)),
            result(4, 2, "16", None, Some(FailureKind::WrongAnswer)),
            result(5, 2, "32", None, None),
        ];
        let rows = tuned_rows(&ctx, &results);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].best.as_ref().unwrap().get("BM"), Some("32"));
        assert_eq!(rows[0].time_us, Some(10.0));
        assert_eq!(rows[0].speedup, Some(4.0));
        assert_eq!(rows[0].failures.get("crashed"), Some(&1));
        // 2*100*64 flops in 10 us = 1.28 GFLOP/s
        assert!((rows[0].gflops.unwrap() - 1.28).abs() < 1e-9);
        assert_eq!(rows[1].best, None);
        assert_eq!(rows[1].pending, 1);

        let mut csv = Vec::new();
        write_csv(&ctx, &rows, &mut csv).unwrap();
        let csv = String::from_utf8(csv).unwrap();
        assert_eq!(
            csv,
            "arch,cu_num,M,N,BM,us,gflops,speedup,spread_pct,tie,runner_up,runner_up_us\nx86_64,2,100,64,32,10.000,1.280,4.00,,false,BM=16,40.000\n"
        );
        let table = render_table(&ctx, &rows);
        assert!(table.contains("wrong_answer:1"), "{table}");

        // Every CSV column that is not a shape or parameter column is a field of tuned.json,
        // under the same name.
        let mut json = Vec::new();
        write_json(&rows, &mut json).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let header = csv.lines().next().unwrap();
        for col in header.split(',').filter(|c| !["M", "N", "BM"].contains(c)) {
            assert!(
                json[0].get(col).is_some(),
                "{col} is not in tuned.json: {json}"
            );
        }
        // Tables written before the names were aligned still read.
        let old = json
            .to_string()
            .replace("\"cu_num\"", "\"num_cu\"")
            .replace("\"us\"", "\"time_us\"");
        let back: Vec<TunedRow> = serde_json::from_str(&old).unwrap();
        assert_eq!(back, rows);
    }

    #[test]
    fn a_winner_within_the_noise_of_its_runner_up_is_a_tie() {
        let cols = vec!["M".to_string()];
        let ctx = TableContext {
            arch: "x86_64",
            num_cu: 2,
            shape_columns: &cols,
            flops: &|_| None,
        };
        let with_runs = |job, bm: &str, runs: &[f64]| {
            let mut r = result(job, 1, bm, Some(0.0), None);
            r.outcome = Some(Outcome::Measured(Measurement {
                time_us: shoal_model::repeats::median(runs),
                samples_us: runs.to_vec(),
                workspace: 0,
                details: Default::default(),
            }));
            r
        };
        // 100 ± 4 against 101 ± 4: a 1 % lead inside the noise.
        let noisy = [
            with_runs(1, "64", &[101.0, 105.0, 97.0]),
            with_runs(2, "32", &[100.0, 104.0, 96.0]),
            with_runs(3, "16", &[150.0, 151.0, 149.0]),
        ];
        let rows = tuned_rows(&ctx, &noisy);
        assert_eq!(rows[0].best, Some(params(&[("BM", "32")])));
        assert_eq!(rows[0].runner_up, Some(params(&[("BM", "64")])));
        assert_eq!(rows[0].runner_up_us, Some(101.0));
        assert!(rows[0].tie);
        let mut csv = Vec::new();
        write_csv(&ctx, &rows, &mut csv).unwrap();
        let csv = String::from_utf8(csv).unwrap();
        assert!(csv.ends_with(",8.33,true,BM=64,101.000\n"), "{csv}");
        // The same lead with steady runs is a win.
        let steady = [
            with_runs(1, "64", &[101.0, 101.1, 100.9]),
            with_runs(2, "32", &[100.0, 100.1, 99.9]),
        ];
        assert!(!tuned_rows(&ctx, &steady)[0].tie);
    }
}
