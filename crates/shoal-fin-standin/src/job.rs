//! One job of the input file: its steps in order, each answered from a recording or from the
//! rules, with the configured faults applied — the same output object fin builds
//! (`docs/miopen-formats.md` §6.2, §6.4).

use crate::faults::{Faults, Phase};
use crate::recorded::{self, Recording, STEP_RESULTS};
use crate::rules;
use serde_json::{json, Map, Value};
use shoal_miopen::fin::{decode_blob, parse_config};
use shoal_miopen::keys::{find_db_key, network_config};
use shoal_miopen::naming::base_arch;
use shoal_miopen::solvers::{self, SolverInfo};
use shoal_miopen::ConvConfig;

/// Why a job cannot be answered: what makes real fin throw.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("a job is not a JSON object")]
    NotAnObject,
    #[error("job has no `steps` list")]
    NoSteps,
    #[error("`steps` holds a non-string")]
    StepNotAString,
    #[error("config: {0}")]
    Config(#[source] shoal_miopen::fin::FinError),
    /// A step that reports on the convolution, in a job without one.
    #[error("step {step} needs a `config`")]
    NoConfig { step: String },
}

/// Everything a job needs besides its own JSON.
pub struct Ctx {
    pub faults: Faults,
    pub recordings: Vec<Recording>,
}

/// The output element for `job`. An error is what makes real fin throw (and exit non-zero).
pub fn process(job: &Value, ctx: &Ctx) -> Result<Value, JobError> {
    let obj = job.as_object().ok_or(JobError::NotAnObject)?;
    let input = JobInput::read(obj)?;
    let mut out = Map::new();
    let mut sources: Vec<String> = Vec::new();
    for step in &input.steps {
        let step = *step;
        let Some((_, result_key)) = STEP_RESULTS.iter().find(|(s, _)| *s == step) else {
            if step == "get_solvers" {
                out.insert("all_solvers".into(), all_solvers());
            }
            // alloc_buf, fill_buf, copy_buf_*, and unknown steps: nothing to report.
            continue;
        };
        let c = input.config.as_ref().ok_or_else(|| JobError::NoConfig {
            step: step.to_string(),
        })?;
        if let Some(rec) = recorded::find(&ctx.recordings, step, c, &input.arch, &input.solvers) {
            insert_recorded(&mut out, rec, step, result_key, &ctx.faults);
            sources.push(format!("recorded {}", rec.source));
            continue;
        }
        out.insert("is_winograd_only".into(), Value::Bool(false));
        out.insert("db_key".into(), Value::from(find_db_key(c)));
        out.insert("network_config".into(), Value::from(network_config(c)));
        let s = Step {
            config: c,
            arch: &input.arch,
            dynamic_only: input.dynamic_only,
            faults: &ctx.faults,
        };
        let result = rule_result(step, &s, &input.listed, obj);
        out.insert((*result_key).into(), result);
        sources.push("rules".into());
    }
    for key in ["config_tuna_id", "arch", "direction"] {
        out.insert(key.into(), obj.get(key).cloned().unwrap_or(Value::Null));
    }
    out.insert("input".into(), job.clone());
    out.insert("test_double_source".into(), Value::from(sources.join(", ")));
    Ok(Value::Object(out))
}

/// What a job asks for, read from its JSON object.
struct JobInput<'a> {
    steps: Vec<&'a str>,
    /// The base architecture (`gfx90a` of `gfx90a:sramecc+:xnack-`).
    arch: String,
    config: Option<ConvConfig>,
    /// The solvers named, sorted: how recordings are matched.
    solvers: Vec<String>,
    /// The solvers named, in the job's order: the order compile results come in.
    listed: Vec<String>,
    dynamic_only: bool,
}

impl<'a> JobInput<'a> {
    fn read(obj: &'a Map<String, Value>) -> Result<JobInput<'a>, JobError> {
        let steps: Vec<&str> = obj
            .get("steps")
            .and_then(Value::as_array)
            .ok_or(JobError::NoSteps)?
            .iter()
            .map(|s| s.as_str().ok_or(JobError::StepNotAString))
            .collect::<Result<_, _>>()?;
        let arch = base_arch(obj.get("arch").and_then(Value::as_str).unwrap_or("")).to_string();
        let config = match obj.get("config") {
            Some(c) => Some(
                parse_config(c, obj.get("direction").and_then(Value::as_i64))
                    .map_err(JobError::Config)?,
            ),
            None => None,
        };
        let mut solvers: Vec<String> = obj
            .get("solvers")
            .and_then(Value::as_array)
            .map(|l| {
                l.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let listed = solvers.clone();
        solvers.sort();
        let dynamic_only = obj
            .get("dynamic_only")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(JobInput {
            steps,
            arch,
            config,
            solvers,
            listed,
            dynamic_only,
        })
    }
}

/// Answers a step from a recording: its result (with the faults applied to an eval's), and the
/// keys fin reports beside it.
fn insert_recorded(
    out: &mut Map<String, Value>,
    rec: &Recording,
    step: &str,
    result_key: &str,
    faults: &Faults,
) {
    let mut result = rec.output[result_key].clone();
    if step.ends_with("_eval") {
        apply_faults_to_recorded(&mut result, faults);
    }
    for key in ["db_key", "network_config", "is_winograd_only"] {
        if let Some(v) = rec.output.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    out.insert(result_key.into(), result);
}

/// Answers a step from the rules: the applicable solvers, a compile result per solver (those
/// listed, else every verified one), or an eval result per compile result of the job's input.
fn rule_result(step: &str, s: &Step, listed: &[String], obj: &Map<String, Value>) -> Value {
    match step {
        "applicability" => Value::from(
            verified()
                .filter(|sv| rules::applicable(sv, s.config, s.arch))
                .map(|sv| sv.name)
                .collect::<Vec<_>>(),
        ),
        "miopen_perf_compile" | "miopen_find_compile" => {
            let find = step == "miopen_find_compile";
            let names: Vec<String> = if listed.is_empty() {
                verified().map(|sv| sv.name.to_string()).collect()
            } else {
                listed.to_vec()
            };
            Value::Array(names.iter().map(|n| s.compile(n, find)).collect())
        }
        _ => {
            let find = step == "miopen_find_eval";
            let input_key = if find {
                "miopen_find_compile_result"
            } else {
                "miopen_perf_compile_result"
            };
            let entries = obj
                .get(input_key)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            Value::Array(entries.iter().map(|e| s.eval(e, find)).collect())
        }
    }
}

/// The MIOpen 3.3 solver table (the one real fin of that version reports).
fn verified() -> impl Iterator<Item = &'static SolverInfo> {
    solvers::all().iter().filter(|s| s.verified)
}

/// `get_solvers`: every convolution solver, values as strings like fin writes them.
fn all_solvers() -> Value {
    Value::Array(
        verified()
            .map(|s| {
                json!({
                    "id": s.id.to_string(),
                    "name": s.name,
                    "tunable": if s.tunable { "1" } else { "0" },
                    "dynamic": if s.dynamic { "1" } else { "0" },
                    "type": "convolution",
                })
            })
            .collect(),
    )
}

/// A recorded eval result with the configured faults applied (crash, hang, failure).
fn apply_faults_to_recorded(result: &mut Value, faults: &Faults) {
    for item in result.as_array_mut().into_iter().flatten() {
        let name = item["solver_name"].as_str().unwrap_or_default().to_string();
        if let Some(reason) = faults.reach(Phase::Eval, &name) {
            item["evaluated"] = Value::Bool(false);
            item["reason"] = Value::from(reason);
        }
    }
}

struct Step<'a> {
    config: &'a ConvConfig,
    arch: &'a str,
    dynamic_only: bool,
    faults: &'a Faults,
}

impl Step<'_> {
    /// Why `solver` is skipped before any work, as fin words it; `None` to go on.
    fn skip(&self, s: Option<&SolverInfo>) -> Option<&'static str> {
        match s {
            None => Some("Empty Solver"),
            Some(s) if !rules::applicable(s, self.config, self.arch) => Some("Not Applicable"),
            Some(s) if self.dynamic_only && !s.dynamic => Some("Not Dynamic"),
            Some(_) => None,
        }
    }

    fn compile(&self, name: &str, find: bool) -> Value {
        let flag = if find {
            "find_compiled"
        } else {
            "perf_compiled"
        };
        let info = solvers::by_name(name).filter(|s| s.verified);
        let mut e = Map::new();
        e.insert("solver_name".into(), Value::from(name));
        if let Some(s) = info {
            let dir = rules::problem_direction(self.config);
            e.insert(
                "algorithm".into(),
                Value::from(s.algo.directional_name(dir)),
            );
        }
        let reason = self
            .skip(info)
            .map(str::to_string)
            .or_else(|| self.faults.reach(Phase::Compile, name));
        let (Some(s), None) = (info, &reason) else {
            e.insert("reason".into(), Value::from(reason.unwrap_or_default()));
            e.insert(flag.into(), Value::Bool(false));
            return Value::Object(e);
        };
        let kernels = rules::kernels(s, self.config, self.arch, !find);
        e.insert("reason".into(), Value::from("Success"));
        e.insert("tunable".into(), Value::Bool(s.tunable));
        e.insert(
            "kernel_objects".into(),
            serde_json::to_value(kernels).unwrap(),
        );
        if find {
            e.insert("params".into(), Value::from(rules::params(s, self.config)));
            e.insert(
                "workspace".into(),
                Value::from(rules::workspace(s, self.config)),
            );
        }
        e.insert(flag.into(), Value::Bool(true));
        Value::Object(e)
    }

    fn eval(&self, entry: &Value, find: bool) -> Value {
        let name = entry
            .get("solver_name")
            .or_else(|| entry.get("solver_id"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let info = solvers::by_name(&name).filter(|s| s.verified);
        let dir = rules::problem_direction(self.config);
        let mut e = Map::new();
        e.insert("solver_name".into(), Value::from(name.as_str()));
        if let Some(s) = info {
            e.insert(
                "algorithm".into(),
                Value::from(s.algo.directional_name(dir)),
            );
            e.insert("tunable".into(), Value::Bool(s.tunable));
        }
        let compiled_flag = if find {
            "find_compiled"
        } else {
            "perf_compiled"
        };
        let mut reason = self.skip(info).map(str::to_string);
        if reason.is_none() && entry.get(compiled_flag).and_then(Value::as_bool) == Some(false) {
            reason = Some("Invoker not implemented: solver was not compiled".into());
        }
        let kernels = entry
            .get("kernel_objects")
            .cloned()
            .unwrap_or_else(|| Value::Array(vec![]));
        if reason.is_none() {
            reason = check_kernels(&kernels);
        }
        if reason.is_none() {
            reason = self.faults.reach(Phase::Eval, &name);
        }
        let (Some(s), None) = (info, &reason) else {
            e.insert("evaluated".into(), Value::Bool(false));
            e.insert("reason".into(), Value::from(reason.unwrap_or_default()));
            return Value::Object(e);
        };
        let key = find_db_key(self.config);
        e.insert("evaluated".into(), Value::Bool(true));
        e.insert("reason".into(), Value::from("Success"));
        e.insert("params".into(), Value::from(rules::params(s, self.config)));
        e.insert(
            "workspace".into(),
            Value::from(rules::workspace(s, self.config)),
        );
        e.insert(
            "time".into(),
            Value::from(rules::time_ms(&key, s.name, !find)),
        );
        e.insert("kernel_objects".into(), kernels);
        if !find {
            e.insert(
                "layout".into(),
                Value::from(rules::problem_layout(self.config)),
            );
            e.insert(
                "data_type".into(),
                Value::from(rules::data_type_int(self.config.data_type)),
            );
            e.insert("direction".into(), Value::from(rules::direction_int(dir)));
            e.insert("bias".into(), Value::from(0));
        }
        Value::Object(e)
    }
}

/// Loads the kernels as fin does (base64, bzip2, md5); the failure reason if one is bad.
fn check_kernels(kernels: &Value) -> Option<String> {
    let list = kernels.as_array()?;
    for k in list {
        let obj = match serde_json::from_value(k.clone()) {
            Ok(o) => o,
            Err(e) => return Some(format!("Program Build Exception: bad kernel object: {e}")),
        };
        if let Err(e) = decode_blob(&obj) {
            return Some(format!("Program Build Exception: {e}"));
        }
    }
    None
}
