//! What an attempt produced: a measurement, or a failure of a named kind.

use serde::{Deserialize, Serialize};

use std::fmt;
use std::str::FromStr;

/// Why a job did not produce a valid measurement. The first five are faults of the tuned code
/// (the candidate); they are final, never retried, and recorded so the tuning goes on. The rest
/// are faults of the machinery and are retried up to the session's bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FailureKind {
    /// The build command exited non-zero.
    BuildFailed,
    /// The build command ran past its timeout and was killed with its process group.
    BuildTimeout,
    /// The run was killed by a signal (segfault, abort, illegal memory access …).
    Crashed,
    /// The run ran past its timeout and was killed with its process group.
    Timeout,
    /// The run reported a wrong answer.
    WrongAnswer,
    /// The run exited non-zero without a signal, or its output had no time in it.
    RunFailed,
    /// The candidate does not apply to the problem.
    NotApplicable,
    /// Worker died, lease expired too often, artifact missing, store or bus error.
    Infrastructure,
}

impl FailureKind {
    pub const ALL: [FailureKind; 8] = [
        FailureKind::BuildFailed,
        FailureKind::BuildTimeout,
        FailureKind::Crashed,
        FailureKind::Timeout,
        FailureKind::WrongAnswer,
        FailureKind::RunFailed,
        FailureKind::NotApplicable,
        FailureKind::Infrastructure,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::BuildFailed => "build_failed",
            FailureKind::BuildTimeout => "build_timeout",
            FailureKind::Crashed => "crashed",
            FailureKind::Timeout => "timeout",
            FailureKind::WrongAnswer => "wrong_answer",
            FailureKind::RunFailed => "run_failed",
            FailureKind::NotApplicable => "not_applicable",
            FailureKind::Infrastructure => "infrastructure",
        }
    }

    /// A fault of the tuned code: final, recorded, never retried.
    pub fn is_candidate_fault(self) -> bool {
        !matches!(self, FailureKind::Infrastructure)
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FailureKind {
    type Err = crate::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FailureKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| crate::UnknownName {
                what: "failure kind",
                name: s.to_string(),
                known: FailureKind::ALL.map(FailureKind::as_str).join(", "),
            })
    }
}

/// A timing of one candidate on one problem.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// The statistic chosen by the spec (median by default) over the timed runs, in microseconds.
    pub time_us: f64,
    /// Every timed run, in microseconds, for noise analysis.
    pub samples_us: Vec<f64>,
    /// Workspace bytes the solution needs (MIOpen); 0 when not applicable.
    pub workspace: u64,
    /// What else the backend learned about this candidate, by name: for MIOpen the solver's
    /// tuned performance config (`params`), the algorithm name and the kernels it used.
    pub details: crate::Params,
}

/// What one attempt ended with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    Measured(Measurement),
    Failed { kind: FailureKind, detail: String },
}

impl Outcome {
    pub fn failed(kind: FailureKind, detail: impl Into<String>) -> Self {
        Outcome::Failed {
            kind,
            detail: detail.into(),
        }
    }
}
