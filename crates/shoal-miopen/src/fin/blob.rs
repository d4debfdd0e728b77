//! Kernel objects as fin sends them: `blob` = standard base64 of `bzip2(code object)`,
//! `md5_sum` = lowercase hex md5 of the **uncompressed** code object, `uncompressed_size` = its
//! length (`docs/miopen-formats.md` §6.4, §4.2, §9.5).
//!
//! MIOpen compresses with `BZ2_bzBuffToBuffCompress(blockSize100k = 9)` into a buffer the size of
//! the input; when the result would not fit, the raw bytes are stored and `uncompressed_size` is
//! 0. [`encode_blob`] does the same (the pure-Rust `libbz2-rs-sys` backend of the `bzip2` crate
//! produces the same bytes as libbzip2: the tests re-compress every recorded fin object and get
//! its blob back byte for byte). [`decode_blob`] reverses it and re-checks the md5, as MIOpen's
//! `LoadJsonKernelList` does.

use super::FinError;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// `md5_sum` fin writes when it could not compress a kernel (and then sends no bytes).
pub const FAILED_TO_COMPRESS: &str = "Failed to compress kernel";

/// One compiled kernel (code object) in fin's JSON. Field names are fin's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelObject {
    /// base64 of bzip2 of the code object (or of the raw code object when
    /// `uncompressed_size` is 0).
    pub blob: String,
    /// Compile options without ` -mcpu=…` (usually starting with a space; keep bytes exactly).
    pub comp_options: String,
    /// Kernel source file name without `.o`, e.g. `conv1x1u_stride2.s`.
    pub kernel_file: String,
    /// Lowercase hex md5 of the uncompressed code object.
    pub md5_sum: String,
    /// Length of the uncompressed code object; 0 when `blob` holds the raw bytes.
    pub uncompressed_size: u64,
}

/// Lowercase hex md5 of `bytes` (MIOpen's `md5()`).
pub fn md5_hex(bytes: &[u8]) -> String {
    let digest = Md5::digest(bytes);
    let mut s = String::with_capacity(32);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// bzip2 level 9 of `raw`, or `None` when the result is larger than `raw` (MIOpen's
/// `BZ_OUTBUFF_FULL` case: the destination buffer is exactly `raw.len()` bytes).
pub fn bz2_compress(raw: &[u8]) -> Option<Vec<u8>> {
    let mut enc = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
    enc.write_all(raw).ok()?;
    let out = enc.finish().ok()?;
    (out.len() <= raw.len()).then_some(out)
}

/// Decompresses one bzip2 stream.
pub fn bz2_decompress(data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    bzip2::read::BzDecoder::new(data).read_to_end(&mut out)?;
    Ok(out)
}

/// The uncompressed code object of `obj`, after checking its size and md5.
pub fn decode_blob(obj: &KernelObject) -> Result<Vec<u8>, FinError> {
    if obj.md5_sum == FAILED_TO_COMPRESS {
        return Err(FinError::NoObject {
            kernel_file: obj.kernel_file.clone(),
            md5_sum: obj.md5_sum.clone(),
        });
    }
    let stored = STANDARD
        .decode(obj.blob.as_bytes())
        .map_err(|e| FinError::Base64 {
            kernel_file: obj.kernel_file.clone(),
            message: e.to_string(),
        })?;
    let raw = if obj.uncompressed_size == 0 {
        stored
    } else {
        let raw = bz2_decompress(&stored).map_err(|e| FinError::Bzip2 {
            kernel_file: obj.kernel_file.clone(),
            message: e.to_string(),
        })?;
        if raw.len() as u64 != obj.uncompressed_size {
            return Err(FinError::Size {
                kernel_file: obj.kernel_file.clone(),
                expected: obj.uncompressed_size,
                actual: raw.len() as u64,
            });
        }
        raw
    };
    let actual = md5_hex(&raw);
    if !actual.eq_ignore_ascii_case(&obj.md5_sum) {
        return Err(FinError::Md5 {
            kernel_file: obj.kernel_file.clone(),
            expected: obj.md5_sum.clone(),
            actual,
        });
    }
    Ok(raw)
}

/// A kernel object for the code object `raw`, made as fin makes it: bzip2 level 9, or the raw
/// bytes with `uncompressed_size = 0` when compression would not fit in `raw.len()` bytes.
pub fn encode_blob(raw: &[u8], kernel_file: &str, comp_options: &str) -> KernelObject {
    let (stored, uncompressed_size) = match bz2_compress(raw) {
        Some(z) => (z, raw.len() as u64),
        None => (raw.to_vec(), 0),
    };
    KernelObject {
        blob: STANDARD.encode(stored),
        comp_options: comp_options.to_string(),
        kernel_file: kernel_file.to_string(),
        md5_sum: md5_hex(raw),
        uncompressed_size,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_of_empty_and_abc() {
        assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(md5_hex(b"abc"), "900150983cd24fb0d6963f7d28e17f72");
    }

    #[test]
    fn roundtrip_compressible() {
        let raw: Vec<u8> = b"__CLANG_OFFLOAD_BUNDLE__".repeat(200);
        let obj = encode_blob(&raw, "k.s", " -DX=1");
        assert_eq!(obj.uncompressed_size, raw.len() as u64);
        assert!(obj.blob.starts_with("QlpoOTFBWSZTW")); // "BZh91AY&SY"
        assert_eq!(decode_blob(&obj).unwrap(), raw);
    }

    #[test]
    fn tiny_object_falls_back_to_raw() {
        let raw = b"\x7fELF";
        let obj = encode_blob(raw, "k.s", "");
        assert_eq!(obj.uncompressed_size, 0);
        assert_eq!(STANDARD.decode(&obj.blob).unwrap(), raw);
        assert_eq!(decode_blob(&obj).unwrap(), raw);
    }

    #[test]
    fn md5_mismatch_is_reported() {
        let mut obj = encode_blob(&[7u8; 1000], "k.s", "");
        obj.md5_sum = "0".repeat(32);
        let err = decode_blob(&obj).unwrap_err();
        assert!(matches!(err, FinError::Md5 { .. }), "{err}");
        assert!(err.to_string().contains("k.s"));
    }

    #[test]
    fn wrong_size_and_no_object() {
        let mut obj = encode_blob(&[7u8; 1000], "k.s", "");
        obj.uncompressed_size = 999;
        assert!(matches!(decode_blob(&obj), Err(FinError::Size { .. })));
        obj.md5_sum = FAILED_TO_COMPRESS.into();
        assert!(matches!(decode_blob(&obj), Err(FinError::NoObject { .. })));
        obj.md5_sum = "x".into();
        obj.blob = "not base64!".into();
        assert!(matches!(decode_blob(&obj), Err(FinError::Base64 { .. })));
    }
}
