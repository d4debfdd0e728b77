//! Files shipped with a spec (`shoal_model::shipped`), on the cluster's side: the Scheduler's
//! command inbox stores the parts the CLI sends ([`store_part`], [`missing`]), and every process
//! that needs a shipped spec — the Scheduler to load it, a compile worker to build it, an eval
//! worker to run it, `shoal export` to read it — writes its tree from the store into a directory
//! of its own ([`ShippedTrees`]) and reads the spec there.
//!
//! Nothing read from the store is trusted: each file's bytes must hash to its address and have
//! its size, and the tree's paths were checked by `Tree::decode`, so writing one can never leave
//! its directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use shoal_model::shipped::{self, Tree};
use shoal_store::{Store, StoreError};

/// Why a shipped tree could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// The store could not be read: worth trying again.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The tree or one of its files is missing or wrong in the store, or could not be written
    /// here: trying again changes nothing until someone acts.
    #[error("shipped tree {tree}: {reason}")]
    Invalid { tree: String, reason: String },
}

/// Why a part of a shipped file was not kept.
#[derive(Debug, thiserror::Error)]
pub enum PartError {
    /// The store could not be written: worth trying again.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Every part is stored, and together they do not make the file: they are forgotten.
    #[error(
        "the parts stored for file {sha256} do not make a file of {size} bytes with that hash; \
         they are forgotten: send the file again"
    )]
    Mismatch { sha256: String, size: u64 },
}

/// Stores one part of a shipped file. `Ok(true)` once every part of it is stored and together
/// they hash to its address; parts that do not are forgotten, and the error says to send the
/// file again.
pub async fn store_part(
    store: &dyn Store,
    sha256: &str,
    size: u64,
    part: u32,
    bytes: &[u8],
) -> Result<bool, PartError> {
    store.put_file_part(sha256, size, part, bytes).await?;
    if store.file_parts_stored(sha256).await? < shipped::parts(size) {
        return Ok(false);
    }
    match store.shipped_file(sha256).await? {
        Some(file) if file.len() as u64 == size && shipped::sha256_hex(&file) == sha256 => Ok(true),
        _ => {
            store.forget_file(sha256).await?;
            Err(PartError::Mismatch {
                sha256: sha256.to_string(),
                size,
            })
        }
    }
}

/// The addresses among `files` (address, size) of which the store lacks a part.
pub async fn missing(
    store: &dyn Store,
    files: &[(String, u64)],
) -> shoal_store::Result<Vec<String>> {
    let mut lacking = Vec::new();
    for (sha256, size) in files {
        if store.file_parts_stored(sha256).await? < shipped::parts(*size) {
            lacking.push(sha256.clone());
        }
    }
    Ok(lacking)
}

/// A file from the store, checked against its address (and its size, when known).
async fn checked_file(
    store: &dyn Store,
    tree: &str,
    sha256: &str,
    size: Option<u64>,
    what: &str,
) -> Result<Vec<u8>, TreeError> {
    let invalid = |reason: String| TreeError::Invalid {
        tree: tree.to_string(),
        reason,
    };
    let bytes = store.shipped_file(sha256).await?.ok_or_else(|| {
        invalid(format!(
            "{what} ({sha256}) is not stored whole; ship the spec again"
        ))
    })?;
    if shipped::sha256_hex(&bytes) != sha256 || size.is_some_and(|s| s != bytes.len() as u64) {
        return Err(invalid(format!(
            "{what}: the stored bytes do not match {sha256}"
        )));
    }
    Ok(bytes)
}

/// The shipped trees this process has written, each once, under a temporary directory of its
/// own that is removed when the process ends.
#[derive(Clone, Default)]
pub struct ShippedTrees {
    inner: Arc<tokio::sync::Mutex<Written>>,
}

impl std::fmt::Debug for ShippedTrees {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShippedTrees")
    }
}

#[derive(Default)]
struct Written {
    root: Option<tempfile::TempDir>,
    trees: HashMap<String, PathBuf>,
}

impl ShippedTrees {
    /// The directory tree `tree` is written in, from the store on first use. Callers wait for
    /// one another, so a tree is written once however many jobs of its session arrive at once.
    pub async fn dir(&self, store: &dyn Store, tree: &str) -> Result<PathBuf, TreeError> {
        let mut written = self.inner.lock().await;
        if let Some(dir) = written.trees.get(tree) {
            return Ok(dir.clone());
        }
        let invalid = |reason: String| TreeError::Invalid {
            tree: tree.to_string(),
            reason,
        };
        let listing = checked_file(store, tree, tree, None, "the tree").await?;
        let files = Tree::decode(&listing).map_err(|e| invalid(e.to_string()))?;
        if written.root.is_none() {
            let root = tempfile::Builder::new()
                .prefix("shoal-specs-")
                .tempdir()
                .map_err(|e| invalid(format!("creating a directory for it: {e}")))?;
            written.root = Some(root);
        }
        let root = written.root.as_ref().map(|r| r.path().to_path_buf());
        let dir = root.unwrap_or_default().join(tree);
        let partial = dir.with_extension("partial");
        // What an attempt that failed half-way left.
        let _ = std::fs::remove_dir_all(&partial);
        for file in files.files() {
            let bytes =
                checked_file(store, tree, &file.sha256, Some(file.size), &file.path).await?;
            let (path, executable) = (partial.join(&file.path), file.executable);
            tokio::task::spawn_blocking(move || write_file(&path, &bytes, executable))
                .await
                .map_err(|e| invalid(format!("writing {}: {e}", file.path)))?
                .map_err(|e| invalid(format!("writing {}: {e}", file.path)))?;
        }
        std::fs::create_dir_all(&partial)
            .and_then(|()| std::fs::rename(&partial, &dir))
            .map_err(|e| invalid(format!("moving it to {}: {e}", dir.display())))?;
        tracing::info!(tree, dir = %dir.display(), files = files.files().len(), "shipped tree written");
        written.trees.insert(tree.to_string(), dir.clone());
        Ok(dir)
    }
}

/// Writes one file, creating its directories; executable or not.
fn write_file(path: &Path, bytes: &[u8], executable: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, bytes)?;
    let mode = if executable { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_model::shipped::TreeFile;

    async fn ship(store: &dyn Store, bytes: &[u8]) -> String {
        let sha = shipped::sha256_hex(bytes);
        let size = bytes.len() as u64;
        for part in 0..shipped::parts(size) {
            let start = part as usize * shipped::PART_BYTES;
            let len = shipped::part_len(size, part).unwrap();
            store_part(store, &sha, size, part, &bytes[start..start + len])
                .await
                .unwrap();
        }
        sha
    }

    fn entry(path: &str, bytes: &[u8], executable: bool) -> TreeFile {
        TreeFile {
            path: path.into(),
            sha256: shipped::sha256_hex(bytes),
            size: bytes.len() as u64,
            executable,
        }
    }

    #[tokio::test]
    async fn a_tree_is_written_as_shipped_and_once() {
        let store = shoal_store::SqliteStore::open_in_memory().unwrap();
        store.migrate().await.unwrap();
        let big: Vec<u8> = (0..shipped::PART_BYTES * 2 + 1).map(|i| i as u8).collect();
        let script = b"#!/bin/sh\necho hi\n";
        let tree = Tree::new(vec![
            entry("a/spec.toml", b"name = \"x\"", false),
            entry("include/k.h", &big, false),
            entry("a/build.sh", script, true),
        ])
        .unwrap();
        assert_eq!(
            missing(&store, &[(tree.address(), 1)]).await.unwrap(),
            vec![tree.address()]
        );
        for bytes in [&b"name = \"x\""[..], &big, script] {
            ship(&store, bytes).await;
        }
        let address = ship(&store, &tree.encode()).await;
        assert_eq!(address, tree.address());
        assert!(
            missing(&store, &[(address.clone(), tree.encode().len() as u64)])
                .await
                .unwrap()
                .is_empty()
        );
        let trees = ShippedTrees::default();
        let dir = trees.dir(&store, &address).await.unwrap();
        assert_eq!(std::fs::read(dir.join("include/k.h")).unwrap(), big);
        assert_eq!(std::fs::read(dir.join("a/build.sh")).unwrap(), script);
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &str| std::fs::metadata(dir.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("a/build.sh"), 0o755);
        assert_eq!(mode("a/spec.toml"), 0o644);
        // The second ask finds it written (even with the store's copy gone).
        store.forget_file(&address).await.unwrap();
        assert_eq!(trees.dir(&store, &address).await.unwrap(), dir);
        // Another process (another ShippedTrees) cannot write it now, and says why.
        let e = ShippedTrees::default()
            .dir(&store, &address)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("not stored whole"), "{e}");
    }

    #[tokio::test]
    async fn parts_that_do_not_make_their_file_are_forgotten() {
        let store = shoal_store::SqliteStore::open_in_memory().unwrap();
        store.migrate().await.unwrap();
        let sha = shipped::sha256_hex(b"honest");
        let told = store_part(&store, &sha, 6, 0, b"forged").await.unwrap_err();
        assert!(matches!(told, PartError::Mismatch { .. }), "{told}");
        assert!(told.to_string().contains("send the file again"));
        assert_eq!(store.file_parts_stored(&sha).await.unwrap(), 0);
        assert!(store_part(&store, &sha, 6, 0, b"honest").await.unwrap());
        // A tree naming a file the store lacks is refused by name.
        let tree = Tree::new(vec![entry("spec.toml", b"gone", false)]).unwrap();
        let address = ship(&store, &tree.encode()).await;
        let e = ShippedTrees::default()
            .dir(&store, &address)
            .await
            .unwrap_err();
        assert!(matches!(e, TreeError::Invalid { .. }));
        assert!(e.to_string().contains("spec.toml"), "{e}");
    }
}
