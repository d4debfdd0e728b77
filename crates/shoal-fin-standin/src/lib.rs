//! **A TEST DOUBLE of MIOpen's tuning handle `fin` — it tunes nothing, compiles nothing and
//! measures nothing.** Its binary is called `fin` so that Shoal's MIOpen backend can run it
//! exactly as it runs the real one (`fin -i in.json -o out.json`) on machines without ROCm or
//! an AMD GPU: in tests, in CI and in demos of the cluster plumbing.
//!
//! What it does, per job of the input file (`docs/miopen-formats.md` §6):
//!
//! 1. If a recorded real fin answer exists for the job's step, convolution, architecture and
//!    solver list (MIFin's own test recordings, embedded from `fixtures/`), it replays it.
//! 2. Otherwise it makes one up with deterministic rules (`rules`): which solvers apply (named
//!    after MIOpen's real solvers), fake code objects with real bzip2/md5 encoding, times from a
//!    hash of (problem, solver) so the winner of a problem never changes, perf-config strings
//!    shaped like the real ones.
//!
//! The output file has fin's shape: a list whose element 0 is `{"process_env": […]}` — plus
//! `"test_double": true` and `"standin_env"` (the MIOpen/HIP variables it was given, so tests
//! can check per-worker directories and GPU pinning) — then one object per job with fin's keys
//! and a `"test_double_source"` saying where each answer came from. Faults can be injected
//! through environment variables (`faults`).

mod faults;
mod job;
mod recorded;
mod rules;

use serde_json::{json, Map, Value};
use std::io::Write;

pub use faults::Faults;

/// `fin --help`.
pub const HELP: &str = "\
fin (Shoal stand-in) -- TEST DOUBLE, NOT MIOpen's fin.

This program imitates the command line and JSON files of MIOpen's tuning handle `fin` so that
Shoal can be tested without ROCm or a GPU. It does not compile or run any kernel: every time,
perf config and code object it reports is either replayed from a recording of real fin or made
up by fixed rules. Never use its output as tuning results.

Usage: fin -i <input.json> -o <output.json>

Fault injection (comma-separated solver names, or *):
  SHOAL_FIN_STANDIN_CRASH_SOLVER          abort() when an eval step reaches the solver
  SHOAL_FIN_STANDIN_HANG_SOLVER           hang forever when an eval step reaches the solver
  SHOAL_FIN_STANDIN_CRASH_COMPILE_SOLVER  abort() when a compile step reaches the solver
  SHOAL_FIN_STANDIN_HANG_COMPILE_SOLVER   hang forever when a compile step reaches the solver
  SHOAL_FIN_STANDIN_FAIL_SOLVER           report the solver as failed (compile or eval)
  SHOAL_FIN_STANDIN_DELAY_MS=<n>          sleep n ms per solver compiled or evaluated
  SHOAL_FIN_STANDIN_GARBLE_OUTPUT=1       write only half of the output file
  SHOAL_FIN_STANDIN_EXIT_CODE=<n>         exit with n after writing the output
";

/// Prefixes of the environment variables echoed in `standin_env`.
const LOGGED_ENV: [&str; 4] = ["MIOPEN_", "HIP_", "ROCR_", "SHOAL_FIN_STANDIN_"];

/// Runs the stand-in with `args` (including the program name); returns the exit code.
pub fn run(args: &[String]) -> i32 {
    if args
        .iter()
        .skip(1)
        .any(|a| a == "--help" || a == "-h" || a == "-?")
    {
        print!("{HELP}");
        return 0;
    }
    let (input, output) = match parse_args(args) {
        Some(paths) => paths,
        None => {
            eprintln!("Invalid arguments");
            eprint!("{HELP}");
            return 1;
        }
    };
    match run_files(&input, &output) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fin (stand-in): {e}");
            1
        }
    }
}

/// fin takes exactly `-i <file> -o <file>` (either order).
fn parse_args(args: &[String]) -> Option<(String, String)> {
    if args.len() != 5 {
        return None;
    }
    let (mut input, mut output) = (None, None);
    for pair in args[1..].chunks(2) {
        match pair[0].as_str() {
            "-i" => input = Some(pair[1].clone()),
            "-o" => output = Some(pair[1].clone()),
            _ => return None,
        }
    }
    Some((input?, output?))
}

/// Why the stand-in wrote no output: a file it cannot read or write, or a job real fin would
/// throw on.
#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: the input must be a JSON list of jobs")]
    NotAList { path: String },
    #[error("job {index}: {source}")]
    Job {
        index: usize,
        #[source]
        source: job::JobError,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn run_files(input: &str, output: &str) -> Result<i32, RunError> {
    let path = || input.to_string();
    let text = std::fs::read_to_string(input).map_err(|source| RunError::Read {
        path: path(),
        source,
    })?;
    let jobs: Value = serde_json::from_str(&text).map_err(|source| RunError::Json {
        path: path(),
        source,
    })?;
    let jobs = jobs
        .as_array()
        .ok_or_else(|| RunError::NotAList { path: path() })?;
    let ctx = job::Ctx {
        faults: Faults::from_env(),
        recordings: recorded::load(),
    };
    let mut elements = vec![process_env()];
    for (i, j) in jobs.iter().enumerate() {
        elements.push(job::process(j, &ctx).map_err(|source| RunError::Job { index: i, source })?);
    }
    let mut text = to_fin_json(&Value::Array(elements));
    if ctx.faults.garble_output {
        text.truncate(text.len() / 2);
    }
    std::fs::write(output, text).map_err(|source| RunError::Write {
        path: output.to_string(),
        source,
    })?;
    Ok(ctx.faults.exit_code.unwrap_or(0))
}

/// Element 0: every environment variable as `NAME=value` (like fin), flagged as a test double.
fn process_env() -> Value {
    let mut all: Vec<String> = Vec::new();
    let mut logged = Map::new();
    for (k, v) in std::env::vars_os() {
        let (k, v) = (k.to_string_lossy(), v.to_string_lossy());
        all.push(format!("{k}={v}"));
        if LOGGED_ENV.iter().any(|p| k.starts_with(p)) {
            logged.insert(k.to_string(), Value::from(v.to_string()));
        }
    }
    json!({
        "process_env": all,
        "test_double": true,
        "standin_env": logged,
    })
}

/// nlohmann's `setw(4) << json << endl`: keys sorted, 4-space indent, final newline.
fn to_fin_json(v: &Value) -> String {
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    serde::Serialize::serialize(v, &mut ser).expect("JSON values serialize");
    buf.write_all(b"\n").expect("writing to a Vec");
    String::from_utf8(buf).expect("serde_json writes UTF-8")
}
