//! Reading a recorded search space in the T4 format, the autotuning community's exchange format
//! (KernelTuner and the autotuning-methodology project read and write it):
//! `{"schema_version", "metadata": {"timeunit"}, "results": [{"configuration": {param: value},
//! "times": {"compilation", "runtimes": [...]}, "invalidity": "correct" | "compile" | "runtime"
//! | …, "measurements": [{"name": "time", "value"}]}]}`, times in milliseconds.
//!
//! The one reader of the format: the replay backend ([`super::ReplaySpace`]) and the benches
//! that replay recorded spaces (`shoal-bench fleet --space`, `shoal-bench search`) use it;
//! `shoal_export::t4` writes it. A file may come from anyone, so the decompressed size is
//! bounded as well as the file's.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The most bytes a recorded space may decompress to.
pub const MAX_DECOMPRESSED_BYTES: u64 = 512 << 20;

/// One configuration of a recorded space.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Its parameter values, as text, in [`Recorded::names`] order.
    pub values: Vec<String>,
    /// Whether it ran correctly (`invalidity = "correct"`).
    pub valid: bool,
    /// Its recorded `invalidity`: `correct`, `compile`, `runtime`, `correctness`, `timeout` …
    pub invalidity: String,
    /// Its timed runs, in milliseconds.
    pub runtimes_ms: Vec<f64>,
    /// Its time: the `time` measurement, else its runs' mean; `None` when invalid or unknown.
    pub time_ms: Option<f64>,
    /// How long it took to compile (`times.compilation`), in milliseconds, when recorded.
    pub compile_ms: Option<f64>,
}

/// A recorded space: its parameters' names and every configuration.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub names: Vec<String>,
    pub entries: Vec<Entry>,
}

/// Why bytes are no recorded space in the T4 format.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("not a gzip file: {0}")]
    NotGzip(#[source] std::io::Error),
    #[error("decompresses to more than {} MiB", MAX_DECOMPRESSED_BYTES >> 20)]
    TooLarge,
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("no `results` array (T4 format)")]
    NoResults,
    /// `results[index]` has no `configuration` object.
    #[error("results[{index}]: no `configuration` object")]
    NoConfiguration { index: usize },
    /// `results[index]` names other parameters than the first result's `names`.
    #[error(
        "results[{index}]: its configuration names other parameters than the first's ({})",
        .names.join(", ")
    )]
    OtherParameters { index: usize, names: Vec<String> },
}

/// Why the recorded space at `path` was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", .path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: ParseError,
    },
}

/// A value as text: strings as they are, numbers as JSON writes them.
fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// Reads the file at `path`, gzip-compressed (by its first bytes) or not. The error names the
/// file.
pub fn read(path: &Path) -> Result<Recorded, ReadError> {
    let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&bytes).map_err(|source| ReadError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses a T4 document from its bytes, gzip-compressed or not.
pub fn parse(bytes: &[u8]) -> Result<Recorded, ParseError> {
    let json: Value = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .take(MAX_DECOMPRESSED_BYTES + 1)
            .read_to_end(&mut text)
            .map_err(ParseError::NotGzip)?;
        if text.len() as u64 > MAX_DECOMPRESSED_BYTES {
            return Err(ParseError::TooLarge);
        }
        serde_json::from_slice(&text)
    } else {
        serde_json::from_slice(bytes)
    }
    .map_err(ParseError::NotJson)?;
    let results = json["results"].as_array().ok_or(ParseError::NoResults)?;
    let names: Vec<String> = results
        .first()
        .and_then(|r| r["configuration"].as_object())
        .map(|c| c.keys().cloned().collect())
        .unwrap_or_default();
    let mut entries = Vec::with_capacity(results.len());
    for (i, r) in results.iter().enumerate() {
        let configuration = r["configuration"]
            .as_object()
            .ok_or(ParseError::NoConfiguration { index: i })?;
        if configuration.len() != names.len()
            || names.iter().any(|n| !configuration.contains_key(n))
        {
            return Err(ParseError::OtherParameters {
                index: i,
                names: names.clone(),
            });
        }
        let invalidity = r["invalidity"].as_str().unwrap_or("unknown").to_string();
        let valid = invalidity == "correct";
        let runtimes_ms: Vec<f64> = r["times"]["runtimes"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        let measured = r["measurements"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["name"] == "time"))
            .and_then(|m| m["value"].as_f64());
        let mean = (!runtimes_ms.is_empty())
            .then(|| runtimes_ms.iter().sum::<f64>() / runtimes_ms.len() as f64);
        entries.push(Entry {
            values: names.iter().map(|n| text(&configuration[n])).collect(),
            valid,
            invalidity,
            time_ms: valid
                .then_some(measured.or(mean))
                .flatten()
                .filter(|t| t.is_finite() && *t > 0.0),
            runtimes_ms,
            compile_ms: r["times"]["compilation"]
                .as_f64()
                .filter(|t| t.is_finite() && *t >= 0.0),
        });
    }
    Ok(Recorded { names, entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_times_failures_and_compressed_files() {
        let doc = r#"{"schema_version": "1.0.0", "results": [
            {"configuration": {"a": 1, "b": "x"}, "invalidity": "correct",
             "times": {"compilation": 900.5, "runtimes": [2.0, 4.0]},
             "measurements": [{"name": "time", "value": 3.5}]},
            {"configuration": {"a": 2, "b": "x"}, "invalidity": "correct",
             "times": {"runtimes": [2.0, 4.0]}},
            {"configuration": {"a": 3, "b": "y"}, "invalidity": "runtime", "times": {}}
        ]}"#;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, doc.as_bytes()).unwrap();
        for bytes in [doc.as_bytes().to_vec(), gz.finish().unwrap()] {
            let r = parse(&bytes).unwrap();
            assert_eq!(r.names, ["a", "b"]);
            assert_eq!(r.entries[0].values, ["1", "x"]);
            assert_eq!(r.entries[0].time_ms, Some(3.5));
            assert_eq!(r.entries[0].compile_ms, Some(900.5));
            assert_eq!(r.entries[1].time_ms, Some(3.0), "the runs' mean");
            assert!(!r.entries[2].valid && r.entries[2].time_ms.is_none());
            assert_eq!(r.entries[2].invalidity, "runtime");
        }
    }

    #[test]
    fn refuses_what_is_not_a_recorded_space() {
        assert!(parse(b"{").unwrap_err().to_string().contains("not JSON"));
        assert!(matches!(parse(b"{}"), Err(ParseError::NoResults)));
        let mixed = br#"{"results": [{"configuration": {"a": 1}}, {"configuration": {"b": 1}}]}"#;
        let e = parse(mixed).unwrap_err();
        assert!(e.to_string().starts_with("results[1]: "), "{e}");
    }
}
