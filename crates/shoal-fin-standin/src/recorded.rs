//! Real fin answers, replayed. The current-shape recordings of MIFin's own tests (`fixtures/`,
//! copied from MIFin's `src/tests/`, MIT license — see `fixtures/README.md` and
//! `docs/data-provenance.md`) are embedded in the binary; a job whose step, convolution,
//! architecture and solver list equal a recording's gets the recorded result for that step instead
//! of a rule-made one.

use serde_json::Value;
use shoal_miopen::fin::parse_output;
use shoal_miopen::naming::base_arch;
use shoal_miopen::ConvConfig;

const FILES: [(&str, &str); 4] = [
    (
        "fin_output_applicability.json",
        include_str!("../fixtures/fin_output_applicability.json"),
    ),
    (
        "fin_output_find_compile-1.json",
        include_str!("../fixtures/fin_output_find_compile-1.json"),
    ),
    (
        "fin_output_find_compile-2.json",
        include_str!("../fixtures/fin_output_find_compile-2.json"),
    ),
    (
        "fin_output_find_eval.json",
        include_str!("../fixtures/fin_output_find_eval.json"),
    ),
];

/// The output key of each replayable step.
pub const STEP_RESULTS: [(&str, &str); 5] = [
    ("applicability", "applicable_solvers"),
    ("miopen_perf_compile", "miopen_perf_compile_result"),
    ("miopen_perf_eval", "miopen_perf_eval_result"),
    ("miopen_find_compile", "miopen_find_compile_result"),
    ("miopen_find_eval", "miopen_find_eval_result"),
];

/// One recorded job output.
pub struct Recording {
    pub source: &'static str,
    pub step: &'static str,
    pub config: ConvConfig,
    pub arch: String,
    pub solvers: Vec<String>,
    /// The whole recorded job element (results, `db_key`, `network_config`, …).
    pub output: Value,
}

/// Parses the embedded recordings (they are part of the binary, so a failure is a bug).
pub fn load() -> Vec<Recording> {
    let mut out = Vec::new();
    for (source, text) in FILES {
        let parsed = parse_output(text).expect("embedded fin recording parses");
        let raw: Value = serde_json::from_str(text).expect("embedded fin recording is JSON");
        for job in parsed.jobs {
            let config = job
                .config()
                .expect("recording echoes its input")
                .expect("recording's config parses");
            let input = job.input.as_ref().expect("recording echoes its input");
            let arch = base_arch(input["arch"].as_str().unwrap_or_default()).to_string();
            let mut solvers: Vec<String> = input["solvers"]
                .as_array()
                .map(|l| {
                    l.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            solvers.sort();
            let element = &raw[job.index];
            for (step, key) in STEP_RESULTS {
                if element.get(key).is_some() {
                    out.push(Recording {
                        source,
                        step,
                        config: config.clone(),
                        arch: arch.clone(),
                        solvers: solvers.clone(),
                        output: element.clone(),
                    });
                }
            }
        }
    }
    out
}

/// The recording for this step of this job, if any. `solvers` must be sorted.
pub fn find<'a>(
    recordings: &'a [Recording],
    step: &str,
    config: &ConvConfig,
    arch: &str,
    solvers: &[String],
) -> Option<&'a Recording> {
    recordings
        .iter()
        .find(|r| r.step == step && r.config == *config && r.arch == arch && r.solvers == solvers)
}
