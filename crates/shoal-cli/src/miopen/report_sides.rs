//! The two sides of `shoal miopen report`, read from where they are named: a golden version
//! (`golden:V`), a session of the store (`session:N`), a store import (`import:N`), or a
//! directory of MIOpen databases; then the comparison of `report.rs`, printed and written.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use shoal_export::files::OutputDir;
use shoal_miopen::export::merge::{session_find_db, session_perf_db, FindDb};
use shoal_miopen::export::read as db_dir;
use shoal_miopen::naming::{db_base_name, split_db_base_name};
use shoal_store::{DbImportId, Store};

use super::report::{self, Version};

/// Configs listed in the terminal summary; the CSV has every row.
const SUMMARY_ROWS: usize = 25;

/// `shoal miopen report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The old version: `golden:V` (a golden version), `session:N` (a session of the --db
    /// store), `import:N` (an import of `shoal import-db --store`), or a directory of MIOpen
    /// databases.
    pub old: String,
    /// The new version, named the same way.
    pub new: String,
    /// Write every (config, solver) row to FILE as CSV: config, solver, status, old_ms, new_ms,
    /// change_pct, old_params, new_params, and the config's old_fastest, old_fastest_ms,
    /// new_fastest, new_fastest_ms.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Replace FILE if it exists.
    #[arg(long, requires = "csv")]
    pub force: bool,
    /// The device to read from a directory holding several devices' databases, e.g. gfx942.
    #[arg(short = 'a', long, requires = "num_cu")]
    pub arch: Option<String>,
    /// That device's compute units, e.g. 304.
    #[arg(short = 'n', long, requires = "arch")]
    pub num_cu: Option<u32>,
    /// Where the golden versions live (default: `<--db>.golden`).
    #[arg(long, value_name = "DIR")]
    pub golden_dir: Option<PathBuf>,
    /// Read `session:N` and `import:N` from the cluster's database (SHOAL_DB or the config
    /// file) instead of --db.
    #[arg(long)]
    pub cluster: bool,
}

/// Where a side is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    Golden(u32),
    Session(i64),
    Import(i64),
    Dir(PathBuf),
}

impl Source {
    fn parse(name: &str) -> anyhow::Result<Source> {
        let number = |what: &str, n: &str| {
            n.parse::<u32>()
                .with_context(|| format!("`{name}`: {what} must be a number"))
        };
        Ok(match name.split_once(':') {
            Some(("golden", v)) => Source::Golden(number("the golden version", v)?),
            Some(("session", n)) => Source::Session(number("the session", n)?.into()),
            Some(("import", n)) => Source::Import(number("the import", n)?.into()),
            _ => Source::Dir(PathBuf::from(name)),
        })
    }
}

/// A side as read: what to call it, its device, its databases.
struct Side {
    name: String,
    device: (String, u32),
    version: Version,
}

pub async fn run(args: ReportArgs, db: &Path) -> anyhow::Result<ExitCode> {
    let golden = super::golden::golden_dir(args.golden_dir.as_deref(), db);
    let device = args.arch.clone().zip(args.num_cu);
    let sources = [Source::parse(&args.old)?, Source::parse(&args.new)?];
    let store = if sources
        .iter()
        .any(|s| matches!(s, Source::Session(_) | Source::Import(_)))
    {
        Some(crate::fleet::store_for_reading(db, args.cluster).await?)
    } else {
        None
    };
    let mut sides = Vec::with_capacity(2);
    for (name, source) in [&args.old, &args.new].into_iter().zip(sources) {
        let side = read(source, store.as_deref(), &golden, device.as_ref())
            .await
            .with_context(|| format!("reading `{name}`"))?;
        sides.push(side);
    }
    let (old, new) = (&sides[0], &sides[1]);
    println!(
        "old: {} ({}, {} CUs); new: {} ({}, {} CUs)",
        old.name, old.device.0, old.device.1, new.name, new.device.0, new.device.1
    );
    if old.device != new.device {
        println!("note: the two versions are for different devices");
    }
    let (rows, fastest) = report::compare(&old.version, &new.version);
    print!(
        "{}",
        report::summary(&old.version, &new.version, &fastest, SUMMARY_ROWS)
    );
    if let Some(file) = &args.csv {
        write_csv(file, &rows, &fastest, args.force)?;
        println!("wrote {} ({} rows)", file.display(), rows.len());
    }
    println!("{}", report::counts(&rows, &fastest));
    Ok(ExitCode::SUCCESS)
}

/// Writes the CSV through [`OutputDir`], so an existing file is replaced only with --force and
/// never left half-written.
fn write_csv(
    file: &Path,
    rows: &[report::Row],
    fastest: &[report::Fastest],
    force: bool,
) -> anyhow::Result<()> {
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("--csv {}: not a file name", file.display()))?;
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let out = OutputDir::prepare(dir, &[name], force)?;
    out.write(name, |p| -> anyhow::Result<()> {
        let f = std::fs::File::create(p)?;
        report::write_csv(rows, fastest, std::io::BufWriter::new(f))?;
        Ok(())
    })?;
    Ok(())
}

async fn read(
    source: Source,
    store: Option<&dyn Store>,
    golden: &Path,
    device: Option<&(String, u32)>,
) -> anyhow::Result<Side> {
    let store = || store.context("no store open");
    match source {
        Source::Golden(v) => {
            let dir = golden.join(format!("v{v}"));
            anyhow::ensure!(
                dir.is_dir(),
                "golden version {v} does not exist ({}); `shoal golden list` shows those there are",
                dir.display()
            );
            let mut side = read_dir(&dir, device)?;
            side.name = format!("golden version {v}");
            Ok(side)
        }
        Source::Dir(dir) => read_dir(&dir, device),
        Source::Session(n) => {
            let session = crate::store_open::session_or_newest(store()?, Some(n)).await?;
            let entries = shoal_miopen::export::Entries::of(store()?, &session, None).await?;
            Ok(Side {
                name: format!("session {n}"),
                device: (session.info.arch.clone(), session.info.num_cu),
                version: Version::of_dbs(
                    &session_find_db(&entries.finds),
                    &session_perf_db(&entries.perfs),
                ),
            })
        }
        Source::Import(n) => {
            let imports = store()?.db_imports().await?;
            let Some(import) = imports.iter().find(|i| i.id == DbImportId(n)) else {
                let known: Vec<String> = imports.iter().map(|i| i.id.to_string()).collect();
                anyhow::bail!(
                    "import {n} is not in the store {} (imports there: {}); `shoal miopen \
                     imports` lists them",
                    store()?.describe(),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                );
            };
            let records = store()?.db_records(import.id).await?;
            Ok(Side {
                name: format!("import {n} \"{}\"", import.info.label),
                device: (import.info.arch.clone(), import.info.num_cu),
                version: Version::of_records(&records),
            })
        }
    }
}

/// A directory's databases for one device: the only one it has, or the one `device` names.
fn read_dir(dir: &Path, device: Option<&(String, u32)>) -> anyhow::Result<Side> {
    let (bases, _) = db_dir::scan(dir)?;
    let names: Vec<&str> = bases.iter().map(|b| b.base.as_str()).collect();
    let files = match (device, &bases[..]) {
        (_, []) => anyhow::bail!(
            "{}: no MIOpen find or perf database (*.HIP.fdb.txt, *.db, *.db.txt) in it",
            dir.display()
        ),
        (None, [only]) => only,
        (None, _) => anyhow::bail!(
            "{} holds the databases of several devices ({}): say which with --arch and --num-cu",
            dir.display(),
            names.join(", ")
        ),
        (Some((arch, cu)), _) => {
            let base = db_base_name(arch, *cu);
            bases.iter().find(|b| b.base == base).with_context(|| {
                format!(
                    "{} has no database of {arch} with {cu} CUs ({base}); it has {}",
                    dir.display(),
                    names.join(", ")
                )
            })?
        }
    };
    let device = split_db_base_name(&files.base)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join(&files.base).display()))?;
    let find = match &files.find {
        Some(p) => db_dir::read_find_db(p)?.0,
        None => FindDb::new(),
    };
    let perf = db_dir::read_perf(files)?;
    Ok(Side {
        name: dir.display().to_string(),
        device,
        version: Version::of_dbs(&find, &perf.db),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_are_named_by_kind_or_are_directories() {
        assert_eq!(Source::parse("golden:3").unwrap(), Source::Golden(3));
        assert_eq!(Source::parse("session:12").unwrap(), Source::Session(12));
        assert_eq!(Source::parse("import:1").unwrap(), Source::Import(1));
        assert_eq!(
            Source::parse("shipped/db").unwrap(),
            Source::Dir("shipped/db".into())
        );
        let e = format!("{:#}", Source::parse("golden:x").unwrap_err());
        assert!(e.contains("`golden:x`") && e.contains("number"), "{e}");
    }

    #[test]
    fn a_directory_of_several_devices_needs_the_device_named() {
        let dir = tempfile::tempdir().unwrap();
        let line = "K=A:1,0,miopenConvolutionFwdAlgoDirect\n";
        std::fs::write(dir.path().join("gfx942130.HIP.fdb.txt"), line).unwrap();
        let one = read_dir(dir.path(), None).unwrap();
        assert_eq!(one.device, ("gfx942".to_string(), 304));
        std::fs::write(dir.path().join("gfx90a6e.HIP.fdb.txt"), line).unwrap();
        let e = read_dir(dir.path(), None).err().unwrap().to_string();
        assert!(
            e.contains("gfx90a6e, gfx942130") && e.contains("--arch and --num-cu"),
            "{e}"
        );
        let picked = read_dir(dir.path(), Some(&("gfx90a".to_string(), 110))).unwrap();
        assert_eq!(picked.device, ("gfx90a".to_string(), 110));
        let e = read_dir(dir.path(), Some(&("gfx908".to_string(), 120)))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("gfx90878") && e.contains("it has gfx90a6e"),
            "{e}"
        );
    }
}
