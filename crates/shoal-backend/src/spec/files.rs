//! Reading the files a spec names (the spec itself, its `sources`, its `shapes_csv`) without
//! trusting them: each must be a regular file under a size limit, checked before a byte is
//! read, and read through a bounded reader so that a file that grows meanwhile still cannot
//! exhaust memory. `/dev/zero`, a FIFO (whose `open` would block until a writer comes) or a
//! directory is an error that says what the path is. Also which of them `shoal tune --cluster`
//! ships with the spec ([`super::TuningSpec::named_files`]).

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The largest spec file read.
pub const MAX_SPEC_BYTES: u64 = 16 << 20;
/// The largest `sources` file read (each is hashed into the build identity).
pub const MAX_SOURCE_BYTES: u64 = 64 << 20;
/// The largest `shapes_csv` file read.
pub const MAX_SHAPES_BYTES: u64 = 16 << 20;

/// What a path is, when it is not a regular file.
fn kind(meta: &Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a file")
    }
}

/// Why a file a spec names was not read. Displays without the path (`is a FIFO, not a regular
/// file`): the caller names the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// `kind` says what the path is instead: `a directory`, `a FIFO` …
    #[error("is {kind}, not a regular file")]
    NotRegular { kind: &'static str },
    #[error("is {size} bytes, over the limit of {limit} bytes ({} MiB)", .limit >> 20)]
    TooLarge { size: u64, limit: u64 },
    #[error("cannot be opened: {0}")]
    Open(#[source] std::io::Error),
    #[error("cannot be read: {0}")]
    Read(#[source] std::io::Error),
    #[error("grew past the limit of {limit} bytes ({} MiB) while being read", .limit >> 20)]
    Grew { limit: u64 },
    #[error("is not UTF-8 text: {0}")]
    NotUtf8(#[source] std::str::Utf8Error),
}

fn check(meta: &Metadata, limit: u64) -> Result<(), ReadError> {
    if let Some(kind) = kind(meta) {
        return Err(ReadError::NotRegular { kind });
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge {
            size: meta.len(),
            limit,
        });
    }
    Ok(())
}

/// The content of the regular file at `path`, of at most `limit` bytes.
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    // Checked before opening: opening a FIFO for reading blocks until something writes.
    let meta = std::fs::metadata(path).map_err(ReadError::Read)?;
    check(&meta, limit)?;
    // Non-blocking, and checked again on the open file: the path may have been swapped for a
    // FIFO or a device between the two looks. O_NONBLOCK changes nothing for a regular file.
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(ReadError::Open)?;
    let meta = file.metadata().map_err(ReadError::Read)?;
    check(&meta, limit)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadError::Read)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::Grew { limit });
    }
    Ok(bytes)
}

/// [`read_limited`] as UTF-8 text.
pub fn read_limited_text(path: &Path, limit: u64) -> Result<String, ReadError> {
    String::from_utf8(read_limited(path, limit)?).map_err(|e| ReadError::NotUtf8(e.utf8_error()))
}

impl super::TuningSpec {
    /// The files the spec names by a relative path, as written, resolved against `dir`: its
    /// sources, its shapes CSV and a replay's space. What `shoal tune --cluster` ships with it
    /// (a file named by an absolute path is expected on every host, and is not shipped).
    pub fn named_files(&self) -> Vec<PathBuf> {
        let sources = self
            .source_hashes
            .iter()
            .map(|(name, _)| PathBuf::from(name));
        let csv = self
            .shapes_csv
            .iter()
            .filter_map(|p| p.strip_prefix(&self.dir).ok().map(Path::to_path_buf));
        let mut files: Vec<PathBuf> = sources.chain(csv).filter(|p| p.is_relative()).collect();
        files.sort();
        files.dedup();
        files
    }

    /// What the spec's build and run commands are shown, read-only, in the sandbox (which
    /// hides the rest of `/tmp`: `crate::sandbox`): the deepest directory holding the spec and
    /// every file it names by a relative path as written (`../../include/k.h` included, its
    /// `..` taken lexically from the spec's real directory), and, for each named file that is
    /// a link out of that tree, the file it links to.
    ///
    /// Not the deepest directory holding the links' targets: a spec under `/tmp` whose
    /// sources link to a checkout elsewhere would make that `/`, and a step shown `/` would
    /// see the host's `/tmp`, read-only, instead of its own (where `nvcc` writes its
    /// temporary files: every build failed so).
    pub fn tree_roots(&self) -> Vec<PathBuf> {
        let dir = std::fs::canonicalize(&self.dir).unwrap_or_else(|_| self.dir.clone());
        let files: Vec<PathBuf> = self
            .named_files()
            .iter()
            .map(|f| lexically_normal(&dir.join(f)))
            .collect();
        let mut root = dir.clone();
        for file in &files {
            while !file.starts_with(&root) {
                match root.parent() {
                    Some(up) => root = up.to_path_buf(),
                    None => break,
                }
            }
        }
        let mut roots = vec![root.clone()];
        roots.extend(
            files
                .iter()
                .filter_map(|f| std::fs::canonicalize(f).ok())
                .filter(|real| !real.starts_with(&root)),
        );
        roots.sort();
        roots.dedup();
        roots
    }
}

/// `path` with its `.` and `..` components taken away lexically (a `..` drops the component
/// before it), without looking at the file system.
fn lexically_normal(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a spec's commands are shown: the tree holding the spec and what it names as
    /// written, and, where a named file links out of that tree, the file it links to; never the
    /// common ancestor of the links' targets (which was `/` for a spec under `/tmp` whose sources
    /// link to a checkout, and showed the host's `/tmp` in place of the sandbox's own).
    #[test]
    fn a_spec_is_shown_its_tree_and_the_files_its_links_point_to() {
        let spec_text = |sources: &str| {
            format!(
                "name = \"t\"\nsources = {sources}\n[build]\ncommand = \"cc -o {{out}} gemm.c\"\n\
                 [run]\ncommand = \"{{artifact}}\"\n[[shapes]]\nN = 1\n"
            )
        };
        let checkout = tempfile::tempdir().unwrap();
        std::fs::create_dir(checkout.path().join("include")).unwrap();
        std::fs::write(checkout.path().join("include/k.h"), "#define K 1\n").unwrap();
        std::fs::write(checkout.path().join("gemm.c"), "int main(){}").unwrap();
        let bench = tempfile::tempdir().unwrap();
        let spec_dir = bench.path().join("space/gemm");
        std::fs::create_dir_all(&spec_dir).unwrap();
        let link = std::os::unix::fs::symlink;
        link(
            checkout.path().join("include"),
            bench.path().join("include"),
        )
        .unwrap();
        link(checkout.path().join("gemm.c"), spec_dir.join("gemm.c")).unwrap();
        let text = spec_text(r#"["gemm.c", "../../include/k.h"]"#);
        std::fs::write(spec_dir.join("spec.toml"), text).unwrap();
        let spec = crate::spec::load(&spec_dir.join("spec.toml")).unwrap();

        let real = |p: &Path| std::fs::canonicalize(p).unwrap();
        let mut expected = vec![
            real(bench.path()),
            real(&checkout.path().join("gemm.c")),
            real(&checkout.path().join("include/k.h")),
        ];
        expected.sort();
        assert_eq!(spec.tree_roots(), expected);

        // Without links the tree alone is shown.
        let plain = tempfile::tempdir().unwrap();
        std::fs::write(plain.path().join("gemm.c"), "int main(){}").unwrap();
        std::fs::write(plain.path().join("spec.toml"), spec_text(r#"["gemm.c"]"#)).unwrap();
        let spec = crate::spec::load(&plain.path().join("spec.toml")).unwrap();
        assert_eq!(spec.tree_roots(), vec![real(plain.path())]);
    }

    #[test]
    fn a_small_regular_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.c");
        std::fs::write(&p, "int x;").unwrap();
        assert_eq!(read_limited(&p, 100).unwrap(), b"int x;");
        assert_eq!(read_limited_text(&p, 6).unwrap(), "int x;");
        let e = read_limited(&p, 5).unwrap_err();
        assert!(
            matches!(e, ReadError::TooLarge { size: 6, limit: 5 }),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("6 bytes, over the limit of 5 bytes"),
            "{e}"
        );
    }

    #[test]
    fn devices_directories_and_fifos_are_refused_before_reading() {
        let e = read_limited(Path::new("/dev/zero"), MAX_SOURCE_BYTES).unwrap_err();
        assert!(
            e.to_string()
                .contains("a character device, not a regular file"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let e = read_limited(dir.path(), MAX_SOURCE_BYTES).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Would block forever if the FIFO were opened for reading.
        let e = read_limited(&fifo, MAX_SOURCE_BYTES).unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        let e = read_limited(&dir.path().join("missing"), 10).unwrap_err();
        assert!(e.to_string().contains("cannot be read"), "{e}");
    }

    #[test]
    fn a_sparse_file_over_the_limit_is_refused_without_reading_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("huge.c");
        let f = File::create(&p).unwrap();
        f.set_len(MAX_SOURCE_BYTES + 1).unwrap();
        let e = read_limited(&p, MAX_SOURCE_BYTES).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{} bytes", MAX_SOURCE_BYTES + 1)),
            "{e}"
        );
        assert!(e.contains("64 MiB"), "{e}");
    }
}
