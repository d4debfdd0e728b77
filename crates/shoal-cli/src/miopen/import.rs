//! `shoal import-configs` and `shoal miopen key`: MIOpenDriver lines in, configs or keys out.
//!
//! Import is all-or-nothing by default: a line that cannot be parsed is reported as file:line
//! with the reason, and then nothing from the file is written unless `--skip-bad` is given.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use shoal_miopen::driver::{self, LineKind};
use shoal_miopen::keys;
use shoal_model::NewConfig;
use shoal_store::Store;

/// What one import did, as printed.
#[derive(Debug, Default)]
pub struct ImportSummary {
    pub lines: usize,
    pub imported: usize,
    pub already_present: usize,
    pub expanded: usize,
    pub skipped_by_primitive: BTreeMap<String, usize>,
    pub rejected: Vec<String>,
}

impl std::fmt::Display for ImportSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "lines read {}, configs imported {}, already present {}, lines expanded to several directions {}, skipped by primitive {}, rejected {}",
            self.lines,
            self.imported,
            self.already_present,
            self.expanded,
            if self.skipped_by_primitive.is_empty() {
                "0".to_string()
            } else {
                self.skipped_by_primitive
                    .iter()
                    .map(|(p, n)| format!("{p} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            self.rejected.len()
        )
    }
}

/// The config row of one driver-view convolution: keyed by its canonical driver line.
pub fn new_config(c: &shoal_miopen::ConvConfig, tags: &[String]) -> NewConfig {
    NewConfig {
        kind: "conv".into(),
        key: driver::driver_line(c),
        params: c.to_params(),
        tags: tags.to_vec(),
    }
}

/// Reads a file of driver lines and imports its convolutions with `tags`.
pub async fn import(
    store: &dyn Store,
    file: &Path,
    tags: &[String],
    skip_bad: bool,
) -> anyhow::Result<(ImportSummary, ExitCode)> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut summary = ImportSummary::default();
    let mut configs: Vec<NewConfig> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        summary.lines += 1;
        match driver::parse_line(line) {
            Ok(LineKind::Blank) => {}
            Ok(LineKind::Other { primitive }) => {
                *summary.skipped_by_primitive.entry(primitive).or_default() += 1
            }
            Ok(LineKind::Conv {
                configs: cs,
                expanded,
            }) => {
                if expanded {
                    summary.expanded += 1;
                }
                configs.extend(cs.iter().map(|c| new_config(c, tags)));
            }
            Err(e) => summary
                .rejected
                .push(format!("{}:{}: {e}", file.display(), i + 1)),
        }
    }
    if !summary.rejected.is_empty() && !skip_bad {
        for r in &summary.rejected {
            eprintln!("{r}");
        }
        eprintln!(
            "{}: {} bad lines; nothing was imported (pass --skip-bad to import the good lines)",
            file.display(),
            summary.rejected.len()
        );
        return Ok((summary, ExitCode::from(1)));
    }
    for r in &summary.rejected {
        eprintln!("skipped: {r}");
    }
    let mut seen = std::collections::HashSet::new();
    for chunk in configs.chunks(1000) {
        for (created, c) in store.upsert_configs(chunk).await?.iter().zip(chunk) {
            if created.1 && seen.insert(c.key.clone()) {
                summary.imported += 1;
            } else {
                summary.already_present += 1;
            }
        }
    }
    Ok((summary, ExitCode::SUCCESS))
}

/// `shoal miopen key`: one output line per input line. A convolution line prints
/// `<find-db key>\t<perf-db key>`, and when it names several directions their pairs follow one
/// another on the same line, tab-separated. A blank or comment line prints an empty line; any
/// other line prints `error: <source>:<line>: <reason>`.
pub fn keys_of(input: &mut dyn BufRead, source: &str, out: &mut dyn Write) -> anyhow::Result<bool> {
    let mut all_ok = true;
    for (i, line) in input.lines().enumerate() {
        let line = line.with_context(|| format!("reading {source}"))?;
        match driver::parse_line(&line) {
            Ok(LineKind::Blank) => writeln!(out)?,
            Ok(LineKind::Conv { configs, .. }) => {
                let pairs: Vec<String> = configs
                    .iter()
                    .map(|c| format!("{}\t{}", keys::find_db_key(c), keys::perf_db_key(c)))
                    .collect();
                writeln!(out, "{}", pairs.join("\t"))?;
            }
            Ok(LineKind::Other { primitive }) => {
                all_ok = false;
                writeln!(
                    out,
                    "error: {source}:{}: `{primitive}` is not a convolution; MIOpen keys are for convolutions",
                    i + 1
                )?;
            }
            Err(e) => {
                all_ok = false;
                writeln!(out, "error: {source}:{}: {e}", i + 1)?;
            }
        }
    }
    Ok(all_ok)
}
