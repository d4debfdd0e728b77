//! A session as recorded search spaces in the T4 format, the autotuning community's exchange
//! format (KernelTuner and the autotuning-methodology project read and write it): one file per
//! problem and solver, one entry per candidate with its configuration, its timed runs in
//! milliseconds and whether it was valid. So Shoal's own tunings become spaces that search
//! strategies can be developed and compared on, here or in other tools.
//!
//! What Shoal does not know is left out rather than made up: a candidate's compile time is not
//! kept per job, so `times` has only `runtimes`; candidates without a final outcome (pending, or
//! given up on for reasons of the machinery) are not in the space.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use shoal_model::{ConfigId, FailureKind, FinalResult, JobState, Outcome, Params};

/// The schema version written.
pub const SCHEMA_VERSION: &str = "1.0.0";

/// One problem's space: the file name and its JSON.
pub struct Space {
    pub file_name: String,
    pub json: Value,
}

/// The T4 `invalidity` of a candidate fault.
fn invalidity(kind: FailureKind) -> Option<&'static str> {
    match kind {
        FailureKind::BuildFailed | FailureKind::BuildTimeout => Some("compile"),
        FailureKind::Crashed | FailureKind::Timeout | FailureKind::RunFailed => Some("runtime"),
        FailureKind::WrongAnswer => Some("correctness"),
        FailureKind::NotApplicable => Some("constraints"),
        // Not the candidate's doing: no verdict on it.
        FailureKind::Infrastructure => None,
    }
}

/// A parameter value as T4 writes it: a number when it is one, else a string.
fn value(v: &str) -> Value {
    if let Ok(i) = v.parse::<i64>() {
        return Value::from(i);
    }
    match v.parse::<f64>() {
        Ok(f) if f.is_finite() => Value::from(f),
        _ => Value::from(v),
    }
}

fn object(params: &Params) -> Map<String, Value> {
    params
        .iter()
        .map(|(n, v)| (n.to_string(), value(v)))
        .collect()
}

/// One T4 entry for a final result, or `None` when it has no verdict on the candidate.
fn entry(r: &FinalResult) -> Option<Value> {
    let configuration = Value::Object(object(&r.compile_params.chain(&r.run_params)));
    let (runtimes_ms, time_ms, invalidity) = match (&r.state, &r.outcome) {
        (JobState::Evaluated, Some(Outcome::Measured(m))) => (
            m.samples_us.iter().map(|us| us / 1000.0).collect(),
            Some(m.time_us / 1000.0),
            "correct",
        ),
        (JobState::Errored, outcome) => {
            let kind = r.failure.or(match outcome {
                Some(Outcome::Failed { kind, .. }) => Some(*kind),
                _ => None,
            })?;
            (Vec::new(), None, invalidity(kind)?)
        }
        _ => return None,
    };
    Some(json!({
        "configuration": configuration,
        "times": { "runtimes": runtimes_ms },
        "invalidity": invalidity,
        "correctness": u8::from(invalidity == "correct"),
        "measurements": [{ "name": "time", "value": time_ms, "unit": "ms" }],
        "objectives": ["time"],
    }))
}

/// The spaces of a session's final results: one per (problem, solver), in config order, named
/// `<solver>-<config id>.T4.json`; `device` says what the times were measured on.
pub fn spaces(results: &[FinalResult], device: &str) -> Vec<Space> {
    let mut groups: BTreeMap<(ConfigId, String), Vec<&FinalResult>> = BTreeMap::new();
    for r in results {
        groups
            .entry((r.config, r.solver.clone()))
            .or_default()
            .push(r);
    }
    groups
        .into_iter()
        .map(|((config, solver), rs)| {
            let entries: Vec<Value> = rs.iter().filter_map(|r| entry(r)).collect();
            let json = json!({
                "schema_version": SCHEMA_VERSION,
                "metadata": {
                    "timeunit": "milliseconds",
                    "device": device,
                    "problem": Value::Object(object(&rs[0].config_params)),
                    "solver": solver,
                    "written_by": "shoal export --format t4",
                },
                "results": entries,
            });
            let safe: String = solver
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            Space {
                file_name: format!("{safe}-{}.T4.json", config.0),
                json,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_model::{JobId, Measurement};

    fn result(
        job: i64,
        config: i64,
        bm: &str,
        state: JobState,
        outcome: Option<Outcome>,
    ) -> FinalResult {
        let mut compile = Params::new();
        compile.push("BM", bm);
        let mut run = Params::new();
        run.push("unroll", "2");
        let mut shape = Params::new();
        shape.push("M", (config * 64).to_string());
        FinalResult {
            job: JobId(job),
            config: ConfigId(config),
            config_params: shape,
            solver: "gemm".into(),
            compile_params: compile,
            run_params: run,
            state,
            failure: None,
            last_error: None,
            outcome,
            worker: None,
            device: None,
            eval_step: shoal_model::Step::ExecRun,
        }
    }

    fn measured(us: f64) -> Option<Outcome> {
        Some(Outcome::Measured(Measurement {
            time_us: us,
            samples_us: vec![us, us + 150.0],
            workspace: 0,
            details: Params::new(),
        }))
    }

    #[test]
    fn one_space_per_problem_with_valid_and_failed_candidates() {
        let results = vec![
            result(1, 1, "32", JobState::Evaluated, measured(1500.0)),
            result(
                2,
                1,
                "64",
                JobState::Errored,
                Some(Outcome::failed(FailureKind::Crashed, "SIGSEGV")),
            ),
            result(
                3,
                1,
                "x",
                JobState::Errored,
                Some(Outcome::failed(FailureKind::BuildFailed, "cc")),
            ),
            result(
                4,
                1,
                "128",
                JobState::Errored,
                Some(Outcome::failed(FailureKind::Infrastructure, "lease")),
            ),
            result(5, 1, "256", JobState::Compiled, None),
            result(6, 2, "32", JobState::Evaluated, measured(3000.0)),
        ];
        let spaces = spaces(&results, "x86_64 (2 units)");
        assert_eq!(spaces.len(), 2);
        assert_eq!(spaces[0].file_name, "gemm-1.T4.json");
        let s = &spaces[0].json;
        assert_eq!(s["metadata"]["timeunit"], "milliseconds");
        assert_eq!(s["metadata"]["problem"]["M"], 64);
        let r = s["results"].as_array().unwrap();
        assert_eq!(
            r.len(),
            3,
            "no verdict from the machinery nor from pending work"
        );
        assert_eq!(r[0]["configuration"], json!({"BM": 32, "unroll": 2}));
        assert_eq!(r[0]["invalidity"], "correct");
        assert_eq!(r[0]["times"]["runtimes"], json!([1.5, 1.65]));
        assert_eq!(r[0]["measurements"][0]["value"], 1.5);
        assert_eq!(r[1]["invalidity"], "runtime");
        assert_eq!(r[1]["correctness"], 0);
        assert_eq!(r[2]["invalidity"], "compile");
        assert_eq!(
            r[2]["configuration"]["BM"], "x",
            "a value that is no number stays a string"
        );
    }
}
