//! Golden versions, as MITuna's `update_golden` and `export --golden_v` keep them: a cumulative
//! baseline of tuned databases that each new session is compared against and folded into.
//!
//! A golden version is a directory of MIOpen databases in MIOpen's own formats
//! (`<golden dir>/v<V>/gfx942130.HIP.fdb.txt`, `gfx942130.db`, …), so it can be read with MIOpen's
//! tools, copied into an install, or diffed, and several architectures share a version:
//! - `shoal import-db --golden-v V DIR` starts a version from existing databases (MIOpen's
//!   shipped files), each checked as a merge base is;
//! - `shoal golden update --session N --golden-v V` merges a session into it, exactly as
//!   `shoal export --base` merges (nothing the version holds is lost; `--policy`), printing
//!   what was kept, added, improved, worse and updated; `--base-golden-v N` builds V as a new
//!   version from N and the session (MITuna's `update_golden --base_golden_v`). The new version
//!   is written beside the old and renamed into place, so an interrupted update leaves the old
//!   version whole;
//! - `shoal export --golden-v V -o OUT` writes it out, never replacing files without `--force`.
//!
//! The golden directory is `<store file>.golden` unless `--golden-dir` says otherwise.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use shoal_export::files::OutputDir;
use shoal_miopen::export::merge::Policy;

use super::export::Which;

/// Where the golden versions live: `--golden-dir`, else beside the store file.
pub fn golden_dir(explicit: Option<&Path>, db: &Path) -> PathBuf {
    match explicit {
        Some(d) => d.to_path_buf(),
        None => {
            let mut name = db.as_os_str().to_owned();
            name.push(".golden");
            PathBuf::from(name)
        }
    }
}

fn version_dir(golden: &Path, v: u32) -> PathBuf {
    golden.join(format!("v{v}"))
}

/// The MIOpen database files in a directory (what a golden version or a base holds).
fn database_files(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let name = e?.file_name().to_string_lossy().into_owned();
        let db = [".fdb.txt", ".db", ".db.txt", ".kdb"]
            .iter()
            .any(|ext| name.ends_with(ext));
        if db && !name.starts_with('.') {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// `shoal import-db --golden-v V DIR`: a new golden version from the databases in DIR.
pub fn import(golden: &Path, v: u32, from: &Path, force: bool) -> anyhow::Result<ExitCode> {
    let names = database_files(from)?;
    anyhow::ensure!(
        !names.is_empty(),
        "{}: no MIOpen database (*.fdb.txt, *.db, *.db.txt, *.kdb) in it",
        from.display()
    );
    // Each file is checked as a merge base is, before anything is copied.
    for name in &names {
        shoal_miopen::export::read::check_database(&from.join(name))?;
    }
    let dir = version_dir(golden, v);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let out = OutputDir::prepare(&dir, &refs, force)?;
    for name in &names {
        out.write(name, |p| std::fs::copy(from.join(name), p))?;
    }
    println!(
        "golden version {v} ({}): {}",
        dir.display(),
        names.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

/// `shoal golden update`: the session merged into version V (created if missing), or with
/// `--base-golden-v N` into a copy of version N as the new version V; written beside it and
/// renamed into place.
pub async fn update(
    store: &dyn shoal_store::Store,
    session: &shoal_model::Session,
    golden: &Path,
    (v, base_v): (u32, Option<u32>),
    policy: Policy,
    which: Which,
) -> anyhow::Result<ExitCode> {
    let dir = version_dir(golden, v);
    let from = match base_v {
        Some(n) => {
            anyhow::ensure!(
                n != v,
                "--base-golden-v {n} is --golden-v {v}: to fold the session into version {v}, \
                 drop --base-golden-v"
            );
            let from = version_dir(golden, n);
            anyhow::ensure!(
                from.is_dir(),
                "golden version {n} does not exist ({}); `shoal golden list` shows the versions",
                from.display()
            );
            anyhow::ensure!(
                !dir.exists(),
                "golden version {v} exists already ({}): --base-golden-v builds a new version; \
                 pick an unused number, or drop --base-golden-v to fold the session into {v}",
                dir.display()
            );
            from
        }
        None => dir.clone(),
    };
    let staging = golden.join(format!(".v{v}.staging"));
    if staging.exists() {
        std::fs::remove_dir_all(&staging)
            .with_context(|| format!("removing {}", staging.display()))?;
    }
    std::fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
    let existing = if from.is_dir() {
        database_files(&from)?
    } else {
        Vec::new()
    };
    let (arch, num_cu) = (&session.info.arch, session.info.num_cu);
    let names = shoal_miopen::export::file_names(arch, num_cu);
    let ours = [
        names.find_db.clone(),
        names.perf_db_sqlite.clone(),
        names.perf_db_text.clone(),
        names.kern_db.clone(),
        shoal_miopen::export::shipped_kdb_name(arch),
    ];
    // The version's files for other architectures are carried over as they are; this
    // architecture's are the base the session is merged into.
    for name in existing.iter().filter(|n| !ours.contains(n)) {
        std::fs::copy(from.join(name), staging.join(name))
            .with_context(|| format!("copying {}", from.join(name).display()))?;
    }
    let has_ours = existing.iter().any(|n| ours.contains(n));
    let which = Which {
        base: has_ours.then(|| (from.clone(), policy)),
        ..which
    };
    if let Some(n) = base_v {
        println!("golden version {v}: built from version {n}");
    }
    super::export::export(store, session, &staging, which, false).await?;
    // Swap: the old version aside, the new one in, the old one gone.
    let old = golden.join(format!(".v{v}.old"));
    if dir.exists() {
        if old.exists() {
            std::fs::remove_dir_all(&old)?;
        }
        std::fs::rename(&dir, &old).with_context(|| format!("moving {}", dir.display()))?;
    }
    std::fs::rename(&staging, &dir).with_context(|| format!("renaming into {}", dir.display()))?;
    if old.exists() {
        std::fs::remove_dir_all(&old)?;
    }
    println!(
        "golden version {v} updated with session {}: {}",
        session.id,
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `shoal export --golden-v V`: the version's files, written to `out`.
pub fn export(golden: &Path, v: u32, out: &Path, force: bool) -> anyhow::Result<ExitCode> {
    let dir = version_dir(golden, v);
    anyhow::ensure!(
        dir.is_dir(),
        "golden version {v} does not exist ({}): `shoal golden update` or `shoal import-db` make one",
        dir.display()
    );
    let names = database_files(&dir)?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let target = OutputDir::prepare(out, &refs, force)?;
    for name in &names {
        target.write(name, |p| std::fs::copy(dir.join(name), p))?;
        println!("{}", target.path(name).display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `shoal golden list`: the versions and their files.
pub fn list(golden: &Path, json: bool) -> anyhow::Result<ExitCode> {
    if !golden.is_dir() {
        if json {
            println!("[]");
        } else {
            println!("no golden version ({} does not exist)", golden.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(golden)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let v = name.strip_prefix('v')?.parse().ok()?;
            Some((v, e.path()))
        })
        .collect();
    versions.sort();
    if json {
        let mut list = Vec::new();
        for (v, dir) in versions {
            list.push(serde_json::json!({
                "version": v,
                "dir": dir.display().to_string(),
                "files": database_files(&dir)?,
            }));
        }
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    for (v, dir) in versions {
        println!("{v}\t{}", database_files(&dir)?.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}
