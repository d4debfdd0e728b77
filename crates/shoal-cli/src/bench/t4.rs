//! Reading a recorded search space in the T4 format (`.json` or `.json.gz`), the one reader of
//! the benches that replay recorded spaces: `bench fleet --space` (evaluation times) and
//! `bench search` (the space and its times). `shoal_export::t4` writes the format.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;

/// One configuration of a recorded space.
pub struct Entry {
    /// Its parameter values, as text, in [`Recorded::names`] order.
    pub values: Vec<String>,
    /// Whether it ran correctly (`invalidity = "correct"`).
    pub valid: bool,
    /// Its timed runs, in milliseconds.
    pub runtimes_ms: Vec<f64>,
    /// Its time: the `time` measurement, else its runs' mean; `None` when invalid or unknown.
    pub time_ms: Option<f64>,
}

/// A recorded space: its parameters' names and every configuration.
pub struct Recorded {
    pub names: Vec<String>,
    pub entries: Vec<Entry>,
}

/// A value as text: strings as they are, numbers as JSON writes them.
fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

pub fn read(path: &Path) -> anyhow::Result<Recorded> {
    let file = std::fs::File::open(path).with_context(|| path.display().to_string())?;
    let reader: Box<dyn std::io::Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let json: Value = serde_json::from_reader(std::io::BufReader::new(reader))
        .with_context(|| format!("{}: not JSON", path.display()))?;
    let results = json["results"]
        .as_array()
        .with_context(|| format!("{}: no `results` array (T4 format)", path.display()))?;
    let names: Vec<String> = results
        .first()
        .and_then(|r| r["configuration"].as_object())
        .map(|c| c.keys().cloned().collect())
        .unwrap_or_default();
    let entries = results
        .iter()
        .map(|r| {
            let valid = r["invalidity"].as_str() == Some("correct");
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
            Entry {
                values: names.iter().map(|n| text(&r["configuration"][n])).collect(),
                valid,
                time_ms: valid
                    .then_some(measured.or(mean))
                    .flatten()
                    .filter(|t| *t > 0.0),
                runtimes_ms,
            }
        })
        .collect();
    Ok(Recorded { names, entries })
}
