//! Artifacts: built executables, addressed by the sha256 of their bytes and shipped
//! deflate-compressed, and the per-host cache of unpacked executables.
//!
//! A compile worker builds once per compile-time parameter set and sends the packed bytes;
//! every evaluator that needs the artifact installs it once into its [`ArtifactCache`] and runs
//! it from there. Installing verifies the hash (a corrupted transfer never runs) and publishes
//! the file with an atomic rename, so a concurrent reader sees either nothing or the whole file.

use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use flate2::Compression;
use sha2::{Digest, Sha256};

/// A built artifact: the hash of its raw bytes and the bytes, compressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// Hex sha256 of the raw (unpacked) bytes.
    pub hash: String,
    /// The raw bytes, deflate-compressed.
    pub packed: Vec<u8>,
}

/// Hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Hashes and compresses raw artifact bytes.
pub fn pack(raw: &[u8]) -> Artifact {
    let mut enc = DeflateEncoder::new(Vec::new(), Compression::default());
    enc.write_all(raw).expect("writing to a Vec cannot fail");
    Artifact {
        hash: sha256_hex(raw),
        packed: enc.finish().expect("writing to a Vec cannot fail"),
    }
}

/// Decompresses packed artifact bytes.
pub fn unpack(packed: &[u8]) -> io::Result<Vec<u8>> {
    let mut raw = Vec::new();
    DeflateDecoder::new(packed).read_to_end(&mut raw)?;
    Ok(raw)
}

fn is_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A directory of unpacked, executable artifacts named by their hash.
#[derive(Clone, Debug)]
pub struct ArtifactCache {
    dir: PathBuf,
}

impl ArtifactCache {
    /// A cache in `dir`, created if it does not exist.
    pub fn new(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        Ok(ArtifactCache { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of the artifact with this hash, if it is installed.
    pub fn path(&self, hash: &str) -> Option<PathBuf> {
        if !is_hash(hash) {
            return None;
        }
        let p = self.dir.join(hash);
        p.is_file().then_some(p)
    }

    /// Unpacks `packed`, checks that its sha256 is `hash`, and installs it as an executable.
    /// Installing an artifact that is already present only returns its path.
    pub fn install(&self, hash: &str, packed: &[u8]) -> io::Result<PathBuf> {
        if !is_hash(hash) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{hash}` is not a hex sha256"),
            ));
        }
        if let Some(p) = self.path(hash) {
            return Ok(p);
        }
        let raw = unpack(packed)?;
        let actual = sha256_hex(&raw);
        if actual != hash {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("artifact hash mismatch: expected {hash}, got {actual}"),
            ));
        }
        std::fs::create_dir_all(&self.dir)?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".install-")
            .tempfile_in(&self.dir)?;
        tmp.write_all(&raw)?;
        tmp.as_file().sync_all()?;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o755))?;
        let dest = self.dir.join(hash);
        tmp.persist(&dest).map_err(|e| e.error)?;
        Ok(dest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trips() {
        let raw = b"hello hello hello hello hello".repeat(100);
        let a = pack(&raw);
        assert!(a.packed.len() < raw.len());
        assert_eq!(a.hash, sha256_hex(&raw));
        assert_eq!(unpack(&a.packed).unwrap(), raw);
        assert!(unpack(b"not deflate at all").is_err());
    }

    #[test]
    fn cache_installs_verifies_and_finds() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactCache::new(dir.path().join("cache")).unwrap();
        let a = pack(b"#!/bin/sh\necho hi\n");
        assert_eq!(cache.path(&a.hash), None);
        let p = cache.install(&a.hash, &a.packed).unwrap();
        assert_eq!(cache.path(&a.hash), Some(p.clone()));
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(std::fs::read(&p).unwrap(), b"#!/bin/sh\necho hi\n");
        // Again: no error, same path.
        assert_eq!(cache.install(&a.hash, &a.packed).unwrap(), p);

        let other = pack(b"other");
        let err = cache.install(&other.hash, &a.packed).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert_eq!(cache.path(&other.hash), None);
        assert!(cache.install("../../etc/passwd", &a.packed).is_err());
        assert_eq!(cache.path("../x"), None);
        // No temp files left behind.
        let names: Vec<_> = std::fs::read_dir(cache.dir()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }
}
