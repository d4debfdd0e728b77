//! Files shipped with a spec: how `shoal tune --cluster` carries a spec's kernel sources, shapes
//! CSV and recorded space to the cluster, so that the Scheduler's host and the workers' hosts
//! need no copy of the operator's checkout.
//!
//! Every file travels content-addressed (named by the hex sha256 of its bytes) in parts of at
//! most [`PART_BYTES`], each part one command (`shoal_model::command::Command::PutFilePart`),
//! and the Scheduler stores the parts in the store. A [`Tree`] lists the files by their path
//! relative to the tree's root; the tree is itself shipped as a file, and its hash names it.
//! A session loaded from a tree records [`SpecLocation::Shipped`] as its spec path, and every
//! process that needs the spec (the Scheduler, the workers, `shoal export`) writes the tree
//! from the store into a directory of its own, checking every hash, and reads the spec there.
//! So the same bytes are built and run everywhere, and a second tuning of the same spec sends
//! nothing but its command: the CLI first asks which files the store lacks.
//!
//! A tree's root is the deepest directory that holds the spec and every file it names, so a
//! source named `../../include/kernel.h` keeps its place relative to the spec.
//!
//! Limits, checked by the CLI before sending and by the Scheduler on arrival: a file at most
//! [`MAX_FILE_BYTES`], a tree at most [`MAX_TREE_FILES`] files and [`MAX_TREE_BYTES`] in all.
//!
//! Pure data and checks; the I/O is `shoal_actors::shipped` and the CLI's `ship` module.

use sha2::{Digest, Sha256};

/// The largest part of a file one command carries: far below the envelope's
/// [`crate::envelope::MAX_MESSAGE_BYTES`], and below MySQL's default packet limit.
pub const PART_BYTES: usize = 1 << 20;

/// The largest file a tree may hold (as large as a spec's source may be).
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// The most files in one tree.
pub const MAX_TREE_FILES: usize = 1000;

/// The most bytes in one tree, all its files together.
pub const MAX_TREE_BYTES: u64 = 256 << 20;

/// The longest path in a tree.
pub const MAX_PATH_BYTES: usize = 1024;

/// The prefix of a shipped spec's location in a session's `spec_path`.
const SHIPPED: &str = "shipped:";

/// The lowercase hex sha256 of `bytes`: a file's address.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Whether `s` is a file's address: 64 lowercase hex digits.
pub fn is_address(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// How many parts a file of `size` bytes travels in (an empty file is one empty part).
pub fn parts(size: u64) -> u32 {
    size.div_ceil(PART_BYTES as u64).max(1) as u32
}

/// The length of part `part` of a file of `size` bytes, if the file has such a part.
pub fn part_len(size: u64, part: u32) -> Option<usize> {
    if part >= parts(size) {
        return None;
    }
    let start = part as u64 * PART_BYTES as u64;
    Some((size - start).min(PART_BYTES as u64) as usize)
}

/// Why a tree of files, or one of its paths, may not be written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTree {
    #[error("a path is 1 to {max} bytes", max = MAX_PATH_BYTES)]
    PathLength { path: String },
    #[error("path {path:?} has a control character or a backslash")]
    PathCharacter { path: String },
    #[error(
        "path {path:?} is not relative and normal (no leading `/`, no empty, `.` or `..` part)"
    )]
    PathNotNormal { path: String },
    #[error("{count} files; a tree holds at most {max}", max = MAX_TREE_FILES)]
    TooManyFiles { count: usize },
    #[error("{path}: {sha256:?} is not a sha256 address")]
    NotAnAddress { path: String, sha256: String },
    #[error("{path} has {size} bytes; a shipped file has at most {max}", max = MAX_FILE_BYTES)]
    FileTooLarge { path: String, size: u64 },
    /// `file` is listed, and so is `under`, a path below it.
    #[error("{file} is both a file and {under}")]
    FileAndDirectory { file: String, under: String },
    #[error("the files have {total} bytes in all; a tree holds at most {max}", max = MAX_TREE_BYTES)]
    TooLarge { total: u64 },
    #[error("a tree is UTF-8 text")]
    NotUtf8,
    /// A line of a tree's encoding that is not `<sha256> <size> <x|-> <path>` (1-based).
    #[error("tree line {line}: expected `<sha256> <size> <x|-> <path>`")]
    BadLine { line: usize },
    /// Lines out of path order, or a byte [`Tree::encode`] would not write.
    #[error("a tree lists its files in path order, one line each")]
    NotCanonical,
}

/// Why `path` may not name a file in a tree, if it may not: it must be relative, `/`-separated,
/// with no empty, `.` or `..` component, no control character or backslash, and at most
/// [`MAX_PATH_BYTES`]. So writing a tree can never leave its directory.
pub fn path_problem(path: &str) -> Option<InvalidTree> {
    let path_of = || path.to_string();
    if path.is_empty() || path.len() > MAX_PATH_BYTES {
        return Some(InvalidTree::PathLength { path: path_of() });
    }
    if path.chars().any(|c| c.is_control() || c == '\\') {
        return Some(InvalidTree::PathCharacter { path: path_of() });
    }
    if path
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Some(InvalidTree::PathNotNormal { path: path_of() });
    }
    None
}

/// One file of a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeFile {
    /// Relative to the tree's root, `/`-separated.
    pub path: String,
    /// The address of its content.
    pub sha256: String,
    pub size: u64,
    /// Written executable (a build script named in `sources`).
    pub executable: bool,
}

/// The files shipped with a spec, in path order, each path once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    files: Vec<TreeFile>,
}

impl Tree {
    /// A tree of `files`, checked ([`Tree::problem`]).
    pub fn new(mut files: Vec<TreeFile>) -> Result<Tree, InvalidTree> {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let tree = Tree { files };
        match tree.problem() {
            Some(p) => Err(p),
            None => Ok(tree),
        }
    }

    pub fn files(&self) -> &[TreeFile] {
        &self.files
    }

    /// Why this tree may not be written, if it may not: a bad path or address, a path twice or
    /// a path under another file's path, or a limit passed.
    fn problem(&self) -> Option<InvalidTree> {
        if self.files.len() > MAX_TREE_FILES {
            return Some(InvalidTree::TooManyFiles {
                count: self.files.len(),
            });
        }
        let mut total = 0u64;
        for (i, f) in self.files.iter().enumerate() {
            if let Some(p) = path_problem(&f.path) {
                return Some(p);
            }
            if !is_address(&f.sha256) {
                return Some(InvalidTree::NotAnAddress {
                    path: f.path.clone(),
                    sha256: f.sha256.clone(),
                });
            }
            if f.size > MAX_FILE_BYTES {
                return Some(InvalidTree::FileTooLarge {
                    path: f.path.clone(),
                    size: f.size,
                });
            }
            total += f.size;
            if let Some(next) = self.files.get(i + 1) {
                if next.path == f.path || next.path.starts_with(&format!("{}/", f.path)) {
                    return Some(InvalidTree::FileAndDirectory {
                        file: f.path.clone(),
                        under: next.path.clone(),
                    });
                }
            }
        }
        if total > MAX_TREE_BYTES {
            return Some(InvalidTree::TooLarge { total });
        }
        None
    }

    /// The tree as the bytes that are shipped and hashed: one line per file,
    /// `<sha256> <size> <x|-> <path>`, in path order. Deterministic, so the same files make the
    /// same address.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::new();
        for f in &self.files {
            let mode = if f.executable { 'x' } else { '-' };
            out.push_str(&format!("{} {} {mode} {}\n", f.sha256, f.size, f.path));
        }
        out.into_bytes()
    }

    /// A tree from its shipped bytes, checked like [`Tree::new`]; it must be in the form
    /// [`Tree::encode`] writes.
    pub fn decode(bytes: &[u8]) -> Result<Tree, InvalidTree> {
        let text = std::str::from_utf8(bytes).map_err(|_| InvalidTree::NotUtf8)?;
        let mut files = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let bad = || InvalidTree::BadLine { line: n + 1 };
            let mut fields = line.splitn(4, ' ');
            let (Some(sha256), Some(size), Some(mode), Some(path)) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                return Err(bad());
            };
            let size: u64 = size.parse().map_err(|_| bad())?;
            let executable = match mode {
                "x" => true,
                "-" => false,
                _ => return Err(bad()),
            };
            files.push(TreeFile {
                path: path.to_string(),
                sha256: sha256.to_string(),
                size,
                executable,
            });
        }
        let tree = Tree::new(files)?;
        if tree.encode() != bytes {
            return Err(InvalidTree::NotCanonical);
        }
        Ok(tree)
    }

    /// The tree's address: the sha256 of its encoding.
    pub fn address(&self) -> String {
        sha256_hex(&self.encode())
    }
}

/// Where a session's spec is: a path on the host that loaded it (embedded mode, and sessions
/// loaded before specs were shipped), or a file in a shipped tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecLocation {
    Path(String),
    Shipped {
        /// The tree's address.
        tree: String,
        /// The spec file's path in the tree.
        spec: String,
    },
}

impl SpecLocation {
    /// Reads a session's `spec_path`. A path that starts like a shipped location but is not
    /// one is a path.
    pub fn parse(spec_path: &str) -> SpecLocation {
        if let Some((tree, spec)) = spec_path
            .strip_prefix(SHIPPED)
            .and_then(|rest| rest.split_once('/'))
        {
            if is_address(tree) && path_problem(spec).is_none() {
                return SpecLocation::Shipped {
                    tree: tree.to_string(),
                    spec: spec.to_string(),
                };
            }
        }
        SpecLocation::Path(spec_path.to_string())
    }
}

impl std::fmt::Display for SpecLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecLocation::Path(p) => f.write_str(p),
            SpecLocation::Shipped { tree, spec } => write!(f, "{SHIPPED}{tree}/{spec}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, size: u64) -> TreeFile {
        TreeFile {
            path: path.into(),
            sha256: sha256_hex(path.as_bytes()),
            size,
            executable: false,
        }
    }

    #[test]
    fn parts_cover_a_file_exactly() {
        let p = PART_BYTES as u64;
        assert_eq!(parts(0), 1);
        assert_eq!(part_len(0, 0), Some(0));
        assert_eq!(parts(1), 1);
        assert_eq!(parts(p), 1);
        assert_eq!(parts(p + 1), 2);
        assert_eq!(part_len(p + 1, 0), Some(PART_BYTES));
        assert_eq!(part_len(p + 1, 1), Some(1));
        assert_eq!(part_len(p + 1, 2), None);
        assert_eq!(parts(MAX_FILE_BYTES), 64);
    }

    #[test]
    fn only_relative_normal_paths_are_tree_paths() {
        for ok in [
            "spec.toml",
            "examples/cuda-gemm/gemm.cu",
            "include/shoal_kernel.h",
            "a b.c",
        ] {
            assert_eq!(path_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a/",
            "a\\b",
            "a\nb",
        ] {
            assert!(path_problem(bad).is_some(), "{bad:?}");
        }
        assert!(path_problem(&"a".repeat(MAX_PATH_BYTES + 1)).is_some());
    }

    #[test]
    fn a_tree_round_trips_and_its_address_is_its_content() {
        let mut script = file("run.sh", 10);
        script.executable = true;
        let tree = Tree::new(vec![file("spec.toml", 300), script, file("include/k.h", 0)]).unwrap();
        assert_eq!(tree.files()[0].path, "include/k.h", "path order");
        let bytes = tree.encode();
        assert_eq!(Tree::decode(&bytes).unwrap(), tree);
        let same = Tree::new(tree.files().iter().rev().cloned().collect()).unwrap();
        assert_eq!(
            same.address(),
            tree.address(),
            "order given does not matter"
        );
        let other = Tree::new(vec![file("spec.toml", 301)]).unwrap();
        assert_ne!(other.address(), tree.address());
    }

    #[test]
    fn a_bad_tree_is_refused_with_the_reason() {
        let e = Tree::new(vec![file("a", 1), file("a", 2)]).unwrap_err();
        assert!(e.to_string().contains("both a file"), "{e}");
        let e = Tree::new(vec![file("a", 1), file("a/b", 2)]).unwrap_err();
        assert_eq!(
            e,
            InvalidTree::FileAndDirectory {
                file: "a".into(),
                under: "a/b".into()
            }
        );
        let e = Tree::new(vec![file("../a", 1)]).unwrap_err();
        assert!(e.to_string().contains("relative"), "{e}");
        let e = Tree::new(vec![file("a", MAX_FILE_BYTES + 1)]).unwrap_err();
        assert!(e.to_string().contains("at most"), "{e}");
        let many: Vec<_> = (0..5)
            .map(|i| file(&format!("f{i}"), MAX_FILE_BYTES))
            .collect();
        let e = Tree::new(many).unwrap_err();
        assert!(e.to_string().contains("in all"), "{e}");
        let mut bad = file("a", 1);
        bad.sha256 = "ABC".into();
        assert!(Tree::new(vec![bad]).is_err());
        for garbage in [&b"\xff\xfe"[..], b"abc 1 - a\n", b"only three fields\n"] {
            assert!(Tree::decode(garbage).is_err(), "{garbage:?}");
        }
        // Out of order: decodable, but not the canonical bytes of its address.
        let unordered = format!("{} 1 - b\n{} 1 - a\n", sha256_hex(b"b"), sha256_hex(b"a"));
        assert_eq!(
            Tree::decode(unordered.as_bytes()),
            Err(InvalidTree::NotCanonical)
        );
    }

    #[test]
    fn a_session_s_spec_location_reads_back() {
        let tree = sha256_hex(b"tree");
        let shipped = SpecLocation::Shipped {
            tree: tree.clone(),
            spec: "examples/cpu-gemm/spec.toml".into(),
        };
        assert_eq!(SpecLocation::parse(&shipped.to_string()), shipped);
        for path in [
            "/home/me/spec.toml",
            "examples/gemm.toml",
            "",
            "shipped:nothex/spec.toml",
        ] {
            assert_eq!(SpecLocation::parse(path), SpecLocation::Path(path.into()));
        }
        let escaping = format!("shipped:{tree}/../spec.toml");
        assert_eq!(
            SpecLocation::parse(&escaping),
            SpecLocation::Path(escaping.clone())
        );
    }
}
