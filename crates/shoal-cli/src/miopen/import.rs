//! `shoal import-configs` and `shoal miopen key`: MIOpenDriver lines in, configs or keys out.
//!
//! Import takes every line that parses, as MITuna does, and lists each rejected line on stderr
//! as file:line with the reason; `--strict` is all-or-nothing instead: the first bad line stops
//! the import before anything is written. The file is streamed, line by line, and written in
//! chunks, so a 58 MB shipped find db imports in bounded memory.

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

/// Configs written per store call, or sent per command.
const CHUNK: usize = shoal_model::command::MAX_CONFIGS_PER_COMMAND;

/// Where imported configs go.
pub enum ConfigSink<'a> {
    /// Written to a store (the local one).
    Store(&'a dyn Store),
    /// Sent to the cluster's Scheduler, `ImportConfigs` commands of at most [`CHUNK`] configs,
    /// each applied on its own: a file of any size goes in bounded messages.
    Cluster(crate::commands::CommandClient<'a>),
}

/// How `import` treats lines that cannot be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadLines {
    /// Import the rest; list each bad line on stderr.
    Skip,
    /// Stop at the first bad line, before anything is written.
    Stop,
}

/// Reads a file of driver lines, streaming, and imports its convolutions with `tags`.
pub async fn import(
    mut sink: ConfigSink<'_>,
    file: &Path,
    tags: &[String],
    bad_lines: BadLines,
) -> anyhow::Result<(ImportSummary, ExitCode)> {
    if bad_lines == BadLines::Stop {
        if let Some(bad) = first_bad_line(file)? {
            eprintln!("{bad}");
            eprintln!(
                "{}: stopped at the first bad line (--strict); nothing was imported",
                file.display()
            );
            return Ok((
                ImportSummary {
                    rejected: vec![bad],
                    ..ImportSummary::default()
                },
                ExitCode::from(1),
            ));
        }
    }
    let mut summary = ImportSummary::default();
    let mut chunk: Vec<NewConfig> = Vec::with_capacity(CHUNK);
    // Keys created by this import, hashed: a key repeated in the file counts as present.
    let mut seen = std::collections::HashSet::new();
    for (i, line) in lines_of(file)?.enumerate() {
        let line = line.with_context(|| format!("reading {}", file.display()))?;
        summary.lines += 1;
        match driver::parse_line(&line) {
            Ok(LineKind::Blank) => {}
            Ok(LineKind::Other { primitive }) => {
                *summary.skipped_by_primitive.entry(primitive).or_default() += 1
            }
            Ok(LineKind::Conv {
                configs: cs,
                expanded,
            }) => {
                summary.expanded += usize::from(expanded);
                chunk.extend(cs.iter().map(|c| new_config(c, tags)));
                if chunk.len() >= CHUNK {
                    write_chunk(&mut sink, &mut chunk, &mut seen, &mut summary).await?;
                }
            }
            Err(e) => {
                let bad = format!("{}:{}: {e}", file.display(), i + 1);
                eprintln!("rejected: {bad}");
                summary.rejected.push(bad);
            }
        }
    }
    write_chunk(&mut sink, &mut chunk, &mut seen, &mut summary).await?;
    Ok((summary, ExitCode::SUCCESS))
}

/// The file's lines, read as they are needed.
fn lines_of(file: &Path) -> anyhow::Result<std::io::Lines<std::io::BufReader<std::fs::File>>> {
    let f = std::fs::File::open(file).with_context(|| format!("reading {}", file.display()))?;
    Ok(std::io::BufReader::new(f).lines())
}

/// The first line that cannot be parsed, as `file:line: reason`.
fn first_bad_line(file: &Path) -> anyhow::Result<Option<String>> {
    for (i, line) in lines_of(file)?.enumerate() {
        let line = line.with_context(|| format!("reading {}", file.display()))?;
        if let Err(e) = driver::parse_line(&line) {
            return Ok(Some(format!("{}:{}: {e}", file.display(), i + 1)));
        }
    }
    Ok(None)
}

/// Writes a chunk of configs and counts them as imported or already present.
async fn write_chunk(
    sink: &mut ConfigSink<'_>,
    chunk: &mut Vec<NewConfig>,
    seen: &mut std::collections::HashSet<u64>,
    summary: &mut ImportSummary,
) -> anyhow::Result<()> {
    use std::hash::{Hash, Hasher};
    if chunk.is_empty() {
        return Ok(());
    }
    let hash = |c: &NewConfig| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        c.key.hash(&mut h);
        h.finish()
    };
    match sink {
        ConfigSink::Store(store) => {
            for (created, c) in store.upsert_configs(chunk).await?.iter().zip(chunk.iter()) {
                if created.1 && seen.insert(hash(c)) {
                    summary.imported += 1;
                } else {
                    summary.already_present += 1;
                }
            }
        }
        ConfigSink::Cluster(client) => {
            // A key met before in this file is present: the command that carried it made it.
            let before = chunk.len();
            chunk.retain(|c| seen.insert(hash(c)));
            summary.already_present += before - chunk.len();
            if !chunk.is_empty() {
                let command = shoal_model::command::Command::ImportConfigs {
                    configs: std::mem::take(chunk),
                };
                match client.send(command, crate::commands::WAIT).await? {
                    shoal_model::command::CommandOutcome::ConfigsImported { created, present } => {
                        summary.imported += created as usize;
                        summary.already_present += present as usize;
                    }
                    other => anyhow::bail!("the Scheduler answered {other:?} to import-configs"),
                }
            }
        }
    }
    chunk.clear();
    Ok(())
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
