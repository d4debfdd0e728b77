//! fin's output file: a JSON list whose first element is `{"process_env": ["NAME=value", …]}`
//! and then one object per input job (`docs/miopen-formats.md` §6.2, §6.4). MITuna drops element 0;
//! Shoal keeps it because it records the environment fin actually saw (MIOpen db and cache
//! directories, `HIP_VISIBLE_DEVICES`), which is how tests check per-worker isolation.
//!
//! Shapes accepted, besides the current one: the MIFin perf fixtures' `solver_id` instead of
//! `solver_name`, the old `fin_output.json` with no `process_env` element, `all_solvers` as
//! `[[id, "name"], …]`, a `miopen_find_result` list and numbers written as strings. Unknown keys
//! are ignored; a missing or mistyped known key is an error naming its JSON path.

use super::blob::KernelObject;
use super::input::parse_config_at;
use super::jsonpath::At;
use super::FinError;
use crate::problem::ConvConfig;
use serde_json::Value;

/// A parsed fin output file.
#[derive(Clone, Debug, PartialEq)]
pub struct FinOutput {
    /// Element 0's `process_env` (`None` for very old fins that did not write it).
    pub process_env: Option<Vec<String>>,
    /// Element 0's `"test_double": true` — set only by Shoal's stand-in fin, never by fin.
    pub test_double: bool,
    /// One entry per job, in input order.
    pub jobs: Vec<FinJobOutput>,
}

impl FinOutput {
    /// The value of `name` in `process_env` (`NAME=value`), if fin saw it.
    pub fn env_var(&self, name: &str) -> Option<&str> {
        self.process_env.as_ref()?.iter().find_map(|kv| {
            kv.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix('='))
        })
    }
}

/// The output of one job. Which result lists are present depends on the job's steps.
#[derive(Clone, Debug, PartialEq)]
pub struct FinJobOutput {
    /// Position of this element in the output list (element 0 is `process_env` when present).
    pub index: usize,
    pub arch: Option<String>,
    pub config_tuna_id: Option<i64>,
    /// The job's top-level direction echo: 1, 2 or 4.
    pub direction: Option<i64>,
    /// The Serialize key (§1.2a) of the problem: the find-db key.
    pub db_key: Option<String>,
    pub network_config: Option<String>,
    pub is_winograd_only: Option<bool>,
    /// fin's verbatim echo of the input job.
    pub input: Option<Value>,
    /// `applicability` step.
    pub applicable_solvers: Option<Vec<String>>,
    /// `get_solvers` step.
    pub all_solvers: Option<Vec<SolverInfo>>,
    pub perf_compile: Option<Vec<PerfCompileResult>>,
    pub perf_eval: Option<Vec<EvalResult>>,
    pub find_compile: Option<Vec<FindCompileResult>>,
    pub find_eval: Option<Vec<EvalResult>>,
    /// `miopen_find_result` of old fins (no `evaluated` flag: every entry counts as evaluated).
    pub legacy_find: Option<Vec<EvalResult>>,
}

impl FinJobOutput {
    /// The convolution of this job, read from the echoed input (`input.config`, with the
    /// top-level `direction` for older configs that lack the letter).
    pub fn config(&self) -> Option<Result<ConvConfig, FinError>> {
        let input = self.input.as_ref()?;
        let root = At {
            v: input,
            path: format!("$[{}].input", self.index),
        };
        let config = match root.get("config") {
            Ok(Some(c)) => c,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let dir = match root.opt_i64("direction") {
            Ok(d) => d.or(self.direction),
            Err(e) => return Some(Err(e)),
        };
        Some(parse_config_at(&config, dir))
    }
}

/// One solver of `get_solvers` (`all_solvers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SolverInfo {
    pub id: u64,
    pub name: String,
    /// `None` in the old `[[id, name]]` shape.
    pub tunable: Option<bool>,
    pub dynamic: Option<bool>,
    /// `"convolution"` or `"batch_norm"`.
    pub kind: Option<String>,
}

/// One entry of `miopen_perf_compile_result`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfCompileResult {
    pub solver_name: String,
    pub algorithm: Option<String>,
    /// `"Success"`, `"Not Applicable"`, `"Not Dynamic"`, `"Empty Solver"`, `"Skip Fused"`, …
    pub reason: Option<String>,
    pub tunable: Option<bool>,
    pub perf_compiled: bool,
    /// All kernels of all perf configs (tunable solvers) or of the default solution.
    pub kernel_objects: Vec<KernelObject>,
}

/// One entry of `miopen_find_compile_result`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FindCompileResult {
    pub solver_name: String,
    pub algorithm: Option<String>,
    pub reason: Option<String>,
    /// Perf-db/default params of the solution (`""` for non-tunable solvers).
    pub params: Option<String>,
    pub workspace: Option<u64>,
    pub tunable: Option<bool>,
    pub find_compiled: bool,
    pub kernel_objects: Vec<KernelObject>,
}

/// One entry of `miopen_perf_eval_result` or `miopen_find_eval_result`.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalResult {
    pub solver_name: String,
    pub algorithm: Option<String>,
    pub evaluated: bool,
    pub reason: Option<String>,
    pub tunable: Option<bool>,
    /// Perf eval: the tuned perf-config that goes into the perf db.
    pub params: Option<String>,
    pub workspace: Option<u64>,
    /// Milliseconds (fin's `float`, widened to double).
    pub time: Option<f64>,
    pub layout: Option<String>,
    /// `miopenDataType_t` integer (perf eval only).
    pub data_type: Option<i64>,
    /// `conv::Direction` integer 0/1/2 (perf eval only).
    pub direction: Option<i64>,
    pub bias: Option<i64>,
    pub kernel_objects: Vec<KernelObject>,
}

/// Parses a fin output file.
pub fn parse_output(text: &str) -> Result<FinOutput, FinError> {
    let v: Value = serde_json::from_str(text)?;
    let root = At::root(&v);
    let mut elems = root.arr()?.into_iter().peekable();
    let mut process_env = None;
    let mut test_double = false;
    if let Some(first) = elems.peek() {
        if let Some(env) = first.get("process_env")? {
            process_env = Some(
                env.arr()?
                    .iter()
                    .map(|s| s.str().map(str::to_string))
                    .collect::<Result<Vec<_>, _>>()?,
            );
            test_double = first.opt_bool("test_double")?.unwrap_or(false);
            elems.next();
        }
    }
    let jobs = elems
        .enumerate()
        .map(|(i, e)| parse_job(&e, i + usize::from(process_env.is_some())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(FinOutput {
        process_env,
        test_double,
        jobs,
    })
}

fn list<T>(
    at: &At<'_>,
    key: &str,
    f: impl Fn(&At<'_>) -> Result<T, FinError>,
) -> Result<Option<Vec<T>>, FinError> {
    at.get(key)?
        .map(|l| l.arr()?.iter().map(&f).collect())
        .transpose()
}

fn parse_job(at: &At<'_>, index: usize) -> Result<FinJobOutput, FinError> {
    at.obj()?;
    Ok(FinJobOutput {
        index,
        arch: at.opt_str("arch")?,
        config_tuna_id: at.opt_i64("config_tuna_id")?,
        direction: at.opt_i64("direction")?,
        db_key: at.opt_str("db_key")?,
        network_config: at.opt_str("network_config")?,
        is_winograd_only: at.opt_bool("is_winograd_only")?,
        input: at.get("input")?.map(|a| a.v.clone()),
        applicable_solvers: at.opt_strings("applicable_solvers")?,
        all_solvers: list(at, "all_solvers", parse_solver_info)?,
        perf_compile: list(at, "miopen_perf_compile_result", parse_perf_compile)?,
        perf_eval: list(at, "miopen_perf_eval_result", |a| parse_eval(a, false))?,
        find_compile: list(at, "miopen_find_compile_result", parse_find_compile)?,
        find_eval: list(at, "miopen_find_eval_result", |a| parse_eval(a, false))?,
        legacy_find: list(at, "miopen_find_result", |a| parse_eval(a, true))?,
    })
}

fn parse_solver_info(at: &At<'_>) -> Result<SolverInfo, FinError> {
    if at.v.is_array() {
        let pair = at.arr()?;
        if pair.len() != 2 {
            return Err(at.err("expected [id, name]"));
        }
        return Ok(SolverInfo {
            id: pair[0].u64()?,
            name: pair[1].str()?.to_string(),
            tunable: None,
            dynamic: None,
            kind: None,
        });
    }
    Ok(SolverInfo {
        id: at.req("id")?.u64()?,
        name: at.req_str("name")?,
        tunable: at.opt_bool("tunable")?,
        dynamic: at.opt_bool("dynamic")?,
        kind: at.opt_str("type")?,
    })
}

/// `solver_name`, or the older `solver_id` (which held the name too).
fn solver_name(at: &At<'_>) -> Result<String, FinError> {
    match at.get("solver_name")? {
        Some(s) => Ok(s.str()?.to_string()),
        None => match at.get("solver_id")? {
            Some(s) => Ok(s.str()?.to_string()),
            None => Err(at.err("missing key `solver_name` (or the older `solver_id`)")),
        },
    }
}

fn kernel_objects(at: &At<'_>) -> Result<Vec<KernelObject>, FinError> {
    list(at, "kernel_objects", parse_kernel_object).map(Option::unwrap_or_default)
}

pub(crate) fn parse_kernel_object(at: &At<'_>) -> Result<KernelObject, FinError> {
    Ok(KernelObject {
        blob: at.req_str("blob")?,
        comp_options: at.req_str("comp_options")?,
        kernel_file: at.req_str("kernel_file")?,
        md5_sum: at.req_str("md5_sum")?,
        uncompressed_size: at.req("uncompressed_size")?.u64()?,
    })
}

fn parse_perf_compile(at: &At<'_>) -> Result<PerfCompileResult, FinError> {
    Ok(PerfCompileResult {
        solver_name: solver_name(at)?,
        algorithm: at.opt_str("algorithm")?,
        reason: at.opt_str("reason")?,
        tunable: at.opt_bool("tunable")?,
        perf_compiled: at.req("perf_compiled")?.bool()?,
        kernel_objects: kernel_objects(at)?,
    })
}

fn parse_find_compile(at: &At<'_>) -> Result<FindCompileResult, FinError> {
    Ok(FindCompileResult {
        solver_name: solver_name(at)?,
        algorithm: at.opt_str("algorithm")?,
        reason: at.opt_str("reason")?,
        params: at.opt_str("params")?,
        workspace: at.opt_u64("workspace")?,
        tunable: at.opt_bool("tunable")?,
        find_compiled: at.req("find_compiled")?.bool()?,
        kernel_objects: kernel_objects(at)?,
    })
}

fn parse_eval(at: &At<'_>, legacy: bool) -> Result<EvalResult, FinError> {
    let evaluated = if legacy {
        at.opt_bool("evaluated")?.unwrap_or(true)
    } else {
        at.req("evaluated")?.bool()?
    };
    Ok(EvalResult {
        solver_name: solver_name(at)?,
        algorithm: at.opt_str("algorithm")?,
        evaluated,
        reason: at.opt_str("reason")?,
        tunable: at.opt_bool("tunable")?,
        params: at.opt_str("params")?,
        workspace: at.opt_u64("workspace")?,
        time: at.opt_f64("time")?,
        layout: at.opt_str("layout")?,
        data_type: at.opt_i64("data_type")?,
        direction: at.opt_i64("direction")?,
        bias: at.opt_i64("bias")?,
        kernel_objects: kernel_objects(at)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_path() {
        let text = r#"[{"process_env": []}, {"miopen_perf_eval_result": [{"solver_name": "A", "evaluated": true, "time": "fast"}]}]"#;
        let err = parse_output(text).unwrap_err().to_string();
        assert!(
            err.starts_with("$[1].miopen_perf_eval_result[0].time:"),
            "{err}"
        );
        let text =
            r#"[{"process_env": []}, {"miopen_perf_compile_result": [{"perf_compiled": true}]}]"#;
        let err = parse_output(text).unwrap_err().to_string();
        assert!(
            err.starts_with("$[1].miopen_perf_compile_result[0]:"),
            "{err}"
        );
        assert!(err.contains("solver_name"), "{err}");
        let err = parse_output("{}").unwrap_err().to_string();
        assert!(err.starts_with("$: expected an array"), "{err}");
        assert!(matches!(
            parse_output("[").unwrap_err(),
            FinError::Syntax(_)
        ));
    }

    #[test]
    fn env_lookup() {
        let out = parse_output(
            r#"[{"process_env": ["A=1", "AB=2", "HIP_VISIBLE_DEVICES=3"], "test_double": true}]"#,
        )
        .unwrap();
        assert!(out.test_double);
        assert_eq!(out.env_var("A"), Some("1"));
        assert_eq!(out.env_var("AB"), Some("2"));
        assert_eq!(out.env_var("HIP_VISIBLE_DEVICES"), Some("3"));
        assert_eq!(out.env_var("B"), None);
        assert!(out.jobs.is_empty());
    }
}
