//! Writing output files so that nothing already on disk is ever lost: what `shoal export` writes.
//!
//! A tuning team keeps MIOpen's shipped databases and its own earlier exports in the directories
//! it exports into; an export that replaced them without a word once turned 9,393 perf-db
//! configs into 59. So:
//! - **Nothing is replaced unless asked.** [`OutputDir::prepare`] checks every file an export
//!   will write before it writes any: if one exists and `force` is not set, the export stops with
//!   the list of them, and nothing on disk has changed.
//! - **Nothing is ever half-written.** [`OutputDir::write`] writes a temporary file beside the
//!   target (`.<name>.partial`), flushes it to disk, and renames it into place, which is atomic on
//!   one filesystem: an export killed at any moment (even by SIGKILL) leaves the old file whole,
//!   or the new one whole. A partial file left by a killed export is simply written over by the
//!   next.
//! - **A directory that cannot be written is named** before anything is computed into it.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why an output could not be written. Each names the file or directory.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error(
        "{dir} already holds {list}; nothing was written (pass --force to replace {them})",
        dir = .dir.display(),
        list = .names.join(", "),
        them = if .names.len() == 1 { "it" } else { "them" }
    )]
    Exists { dir: PathBuf, names: Vec<String> },
    #[error("cannot write into {dir}: {source}", dir = .dir.display())]
    Unwritable {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {path}: {source}", path = .path.display())]
    Write {
        path: PathBuf,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A directory an export writes named files into, checked first (see the module's
/// documentation).
pub struct OutputDir {
    dir: PathBuf,
}

impl fmt::Debug for OutputDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OutputDir({})", self.dir.display())
    }
}

impl OutputDir {
    /// Creates `dir` if missing and checks, before anything is written, that it can be written
    /// and that none of `names` is there already (unless `force`).
    pub fn prepare(dir: &Path, names: &[&str], force: bool) -> Result<OutputDir, OutputError> {
        let unwritable = |source| OutputError::Unwritable {
            dir: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(unwritable)?;
        if !force {
            let existing: Vec<String> = names
                .iter()
                .filter(|n| dir.join(n).symlink_metadata().is_ok())
                .map(|n| n.to_string())
                .collect();
            if !existing.is_empty() {
                return Err(OutputError::Exists {
                    dir: dir.to_path_buf(),
                    names: existing,
                });
            }
        }
        // Permission bits do not tell (root ignores them; a read-only mount does not show in
        // them): try.
        let probe = dir.join(".shoal-write-probe");
        std::fs::File::create(&probe).map_err(unwritable)?;
        let _ = std::fs::remove_file(&probe);
        Ok(OutputDir {
            dir: dir.to_path_buf(),
        })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Writes `name` through a temporary file: `write` gets the temporary path and must leave
    /// the whole file there (and close it); then it is flushed to disk and renamed over `name`.
    /// If `write` fails, the temporary file is removed and `name` is untouched.
    pub fn write<T, E>(
        &self,
        name: &str,
        write: impl FnOnce(&Path) -> Result<T, E>,
    ) -> Result<T, OutputError>
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = self.dir.join(name);
        let partial = self.dir.join(format!(".{name}.partial"));
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| {
            let _ = std::fs::remove_file(&partial);
            OutputError::Write {
                path: path.clone(),
                source,
            }
        };
        // A partial file of a killed export, or a file a writer would append to or refuse.
        match std::fs::remove_file(&partial) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(failed(e.into())),
            _ => {}
        }
        let value = write(&partial).map_err(|e| failed(e.into()))?;
        let synced = std::fs::File::open(&partial).and_then(|f| f.sync_all());
        synced.map_err(|e| failed(e.into()))?;
        std::fs::rename(&partial, &path).map_err(|e| failed(e.into()))?;
        // The rename itself reaches the disk with the directory.
        if let Ok(d) = std::fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(value)
    }

    /// [`Self::write`] for a file made of bytes.
    pub fn write_bytes(&self, name: &str, bytes: &[u8]) -> Result<(), OutputError> {
        self.write(name, |p| -> std::io::Result<()> {
            let mut f = std::fs::File::create(p)?;
            f.write_all(bytes)?;
            f.flush()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names_in(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn an_existing_file_stops_the_export_before_anything_is_written() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("b.db"), "shipped").unwrap();
        let e = OutputDir::prepare(d.path(), &["a.txt", "b.db"], false).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("b.db") && !msg.contains("a.txt") && msg.contains("--force"),
            "{msg}"
        );
        assert_eq!(names_in(d.path()), ["b.db"]);
        assert_eq!(
            std::fs::read_to_string(d.path().join("b.db")).unwrap(),
            "shipped"
        );
    }

    #[test]
    fn force_replaces_whole_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("b.db"), "shipped").unwrap();
        let out = OutputDir::prepare(d.path(), &["b.db"], true).unwrap();
        out.write_bytes("b.db", b"new").unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path().join("b.db")).unwrap(),
            "new"
        );
        assert_eq!(
            names_in(d.path()),
            ["b.db"],
            "no partial or probe file left"
        );
    }

    #[test]
    fn a_writer_that_fails_leaves_the_old_file_whole_and_no_partial() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("b.db"), "shipped").unwrap();
        let out = OutputDir::prepare(d.path(), &["b.db"], true).unwrap();
        let e = out
            .write("b.db", |p| -> std::io::Result<()> {
                std::fs::write(p, "half")?;
                Err(std::io::Error::other("interrupted"))
            })
            .unwrap_err();
        assert!(e.to_string().contains("b.db") && e.to_string().contains("interrupted"));
        assert_eq!(
            std::fs::read_to_string(d.path().join("b.db")).unwrap(),
            "shipped"
        );
        assert_eq!(names_in(d.path()), ["b.db"]);
    }

    #[test]
    fn a_partial_file_of_a_killed_export_is_written_over() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(".b.db.partial"), "left by SIGKILL").unwrap();
        let out = OutputDir::prepare(d.path(), &["b.db"], false).unwrap();
        out.write("b.db", |p| {
            // A writer that refuses an existing file (as SQLite exports would append to one).
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p)?
                .write_all(b"new")
        })
        .unwrap();
        assert_eq!(names_in(d.path()), ["b.db"]);
    }

    #[test]
    fn a_directory_that_cannot_be_made_is_named() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("file"), "").unwrap();
        let bad = d.path().join("file").join("out");
        let e = OutputDir::prepare(&bad, &["b.db"], false).unwrap_err();
        assert!(
            matches!(e, OutputError::Unwritable { .. }) && e.to_string().contains("file/out"),
            "{e}"
        );
    }
}
