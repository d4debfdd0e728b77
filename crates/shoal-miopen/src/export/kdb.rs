//! The kernel db, `<base>.kdb` (`docs/miopen-formats.md` §4; MITuna `export_db.py write_kdb`): one
//! SQLite table of code objects, looked up by MIOpen with
//! `kernel_name = <file>.o AND kernel_args = <options> -mcpu=<arch>`.
//!
//! Row rules: `kernel_name` gets `.o` appended unless present; `kernel_args` gets
//! ` -mcpu=<arch>` appended unless it already has a `-mcpu=` or the kernel is an MLIR one
//! (`*.mlir.o`, MIOpen's `WORKAROUND_ISSUE_3001`); `kernel_blob` is bzip2 level 9 of the code
//! object, or the raw bytes with `uncompressed_size = 0` when bzip2 would not fit in the
//! object's own size (`BZ_OUTBUFF_FULL`); `kernel_hash` is the md5 of the uncompressed object.
//! The first row per (name, args) wins; ids follow input order.

use super::{remove_existing, ExportError, KdbEntry};
use crate::fin::blob::{bz2_compress, md5_hex};
use rusqlite::Connection;
use std::collections::HashSet;
use std::path::Path;

/// The kernel db DDL as MITuna creates the system file (MIOpen's user-db DDL minus
/// `IF NOT EXISTS`), in creation order.
pub const KDB_DDL: [&str; 2] = [
    "CREATE TABLE `kern_db` (`id` INTEGER PRIMARY KEY ASC,`kernel_name` TEXT NOT NULL,`kernel_args` TEXT NOT NULL,`kernel_blob` BLOB NOT NULL,`kernel_hash` TEXT NOT NULL,`uncompressed_size` INT NOT NULL)",
    "CREATE UNIQUE INDEX `idx_kern_db` ON kern_db(kernel_name, kernel_args)",
];

/// `(kernel_name, kernel_args)` as MIOpen looks the kernel up.
fn kdb_name_args(e: &KdbEntry) -> (String, String) {
    let mut name = e.kernel_file.clone();
    if !name.ends_with(".o") {
        name.push_str(".o");
    }
    let mut args = e.comp_options.clone();
    if !args.contains("-mcpu=") && !name.ends_with(".mlir.o") {
        args.push_str(" -mcpu=");
        args.push_str(crate::naming::base_arch(&e.arch));
    }
    (name, args)
}

/// Writes the kernel db to `path` (replacing any file there); returns the number of rows.
pub fn write_kdb(path: &Path, entries: &[KdbEntry]) -> Result<usize, ExportError> {
    remove_existing(path)?;
    insert_kdb(path, entries, true)
}

/// Writes a copy of the kernel db `base` to `path` with `entries` added, each replacing a
/// kernel of the same name and arguments (a merge; `base` is only read). Returns the rows
/// written from `entries`.
pub fn merge_kdb(base: &Path, path: &Path, entries: &[KdbEntry]) -> Result<usize, ExportError> {
    remove_existing(path)?;
    // Reading it first proves it is a kernel db, not a file by that name.
    check_kdb(base)?;
    std::fs::copy(base, path).map_err(|source| ExportError::Io {
        path: base.display().to_string(),
        source,
    })?;
    insert_kdb(path, entries, false)
}

/// The number of kernels in the kernel db at `path`, read-only: an error naming the file if it
/// is not one.
pub fn check_kdb(path: &Path) -> Result<usize, ExportError> {
    let count = || -> rusqlite::Result<i64> {
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        conn.query_row(
            "SELECT COUNT(*) FROM kern_db WHERE kernel_name IS NOT NULL",
            [],
            |r| r.get(0),
        )
    };
    match count() {
        Ok(n) => Ok(n as usize),
        Err(source) => Err(ExportError::KernDb {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Inserts `entries` into the kernel db at `path`, creating its tables first if `create`.
fn insert_kdb(path: &Path, entries: &[KdbEntry], create: bool) -> Result<usize, ExportError> {
    let mut conn = Connection::open(path)?;
    let tx = conn.transaction()?;
    if create {
        for ddl in KDB_DDL {
            tx.execute(ddl, [])?;
        }
    }
    let mut rows = 0;
    {
        let mut insert = tx.prepare(
            "INSERT OR REPLACE INTO kern_db (kernel_name, kernel_args, kernel_blob, kernel_hash, \
             uncompressed_size) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let mut seen: HashSet<(String, String)> = HashSet::new();
        for e in entries {
            let (name, args) = kdb_name_args(e);
            if !seen.insert((name.clone(), args.clone())) {
                continue;
            }
            let (blob, size) = match bz2_compress(&e.blob) {
                Some(z) => (z, e.blob.len() as i64),
                None => (e.blob.clone(), 0),
            };
            insert.execute(rusqlite::params![name, args, blob, md5_hex(&e.blob), size])?;
            rows += 1;
        }
    }
    tx.commit()?;
    conn.close().map_err(|(_, e)| ExportError::Sqlite(e))?;
    Ok(rows)
}
