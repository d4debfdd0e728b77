//! The runner's wire protocol: one JSON object per line, a request on the runner's stdin and
//! its reply on the runner's reply pipe (its original stdout). One request is in flight at a
//! time, so no ids are needed.

use serde::{Deserialize, Serialize};

/// Time one candidate on one problem.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The candidate's shared object (a local file).
    pub library: String,
    /// The shape, `NAME=VALUE,...` (the key of its `Params`).
    pub problem: String,
    /// The candidate's run-time parameters, `NAME=VALUE,...` or empty.
    pub run_params: String,
    pub warmup: u32,
    pub repeat: u32,
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Measured; `samples_us` holds the timed runs.
    Pass,
    /// `shoal_run` reported a wrong answer.
    WrongAnswer,
    /// `shoal_run` reported that the device failed; the runner exits after this reply.
    Fatal,
    /// `shoal_run` reported that the candidate does not apply to the problem.
    NotApplicable,
    /// The library could not be loaded or lacks an entry point, or its ABI differs.
    LoadFailed,
    /// `shoal_prepare` failed for the problem.
    PrepareFailed,
    /// The request itself was malformed, or `shoal_run` broke the contract (bad samples).
    Error,
}

/// The runner's answer to one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub status: Status,
    #[serde(default)]
    pub samples_us: Vec<f64>,
    /// What the library wrote to `err`, or what went wrong in the runner.
    #[serde(default)]
    pub message: String,
    /// Microseconds spent loading the library (0 when it was already loaded).
    #[serde(default)]
    pub load_us: f64,
    /// Microseconds spent preparing the problem (0 when it was already prepared).
    #[serde(default)]
    pub prepare_us: f64,
}

impl Reply {
    pub fn failed(status: Status, message: impl Into<String>) -> Reply {
        Reply {
            status,
            samples_us: Vec::new(),
            message: message.into(),
            load_us: 0.0,
            prepare_us: 0.0,
        }
    }
}
