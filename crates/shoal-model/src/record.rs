//! The rows of the store as plain data: what is written (`New*`) and what is read back.

use serde::{Deserialize, Serialize};

use crate::ids::{Attempt, ConfigId, JobId, SessionId, SolverId};
use crate::outcome::{FailureKind, Outcome};
use crate::params::Params;
use crate::state::JobState;
use crate::steps::Step;

crate::names::named_enum! {
    /// The backend of a session. In the store (and in JSON) it is its name, as it was when it
    /// was a string; a name this build does not know is an error where the session is read.
    pub enum Backend("backend") {
        /// The exec backend: it execs a tuning spec's build and run commands, or runs its
        /// library-mode runner (a replay spec's sessions are of it too, answered from the
        /// recording). Named `command` before store schema 12, whose migration renames the
        /// sessions stored under that name.
        Exec => "exec",
        /// MIOpen's solvers, through fin.
        Miopen => "miopen",
        /// Builds and evaluations that do nothing, for benchmarks of the machinery.
        Noop => "noop",
    }
}

/// A tuning campaign for one device kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewSession {
    /// Why the session exists ("nightly resnet50", "cpu-gemm example").
    pub reason: String,
    /// Routing architecture: `gfx90a`, `sm_90`, `x86_64` for the CPU.
    pub arch: String,
    /// Compute units, SMs, or CPU cores.
    pub num_cu: u32,
    /// Which backend builds and evaluates the session's jobs.
    pub backend: Backend,
    /// Backend-specific identity: for the exec backend, the tuning spec's canonical text (so a
    /// worker runs only the commands of the spec registered here, never a command it was sent).
    pub spec: String,
    /// Where the spec was read from (for resolving relative paths and for messages).
    pub spec_path: String,
    pub library_version: String,
    pub driver_version: String,
    /// How many infrastructure failures a job survives before it is marked errored.
    pub max_retries: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub id: SessionId,
    pub created_ms: i64,
    #[serde(flatten)]
    pub info: NewSession,
}

/// One problem. `key` is its canonical text and is unique across the store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewConfig {
    /// `shape` for the exec backend, `conv` … for MIOpen.
    pub kind: String,
    pub key: String,
    pub params: Params,
    pub tags: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub id: ConfigId,
    pub kind: String,
    pub key: String,
    pub params: Params,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewSolver {
    pub name: String,
    pub tunable: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Solver {
    pub id: SolverId,
    pub name: String,
    pub tunable: bool,
}

/// A job to create. (session, config, solver, compile_step, eval_step, candidate) is unique, so
/// loading the same jobs twice creates nothing new.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewJob {
    pub session: SessionId,
    pub config: ConfigId,
    pub solver: SolverId,
    pub compile_step: Step,
    pub eval_step: Step,
    pub compile_params: Params,
    pub run_params: Params,
    /// Identifies the build this job needs: jobs with equal keys share one compile.
    pub build_key: String,
    /// Whether the job waits for its shape's search to choose it (inserted `held`, not `new`).
    pub held: bool,
}

impl NewJob {
    /// The canonical candidate key stored with the job (compile then run parameters).
    pub fn candidate_key(&self) -> String {
        candidate_key(&self.compile_params, &self.run_params)
    }
}

/// `compile-params|run-params`, the text that makes a candidate unique within a problem.
pub fn candidate_key(compile: &Params, run: &Params) -> String {
    format!("{}|{}", compile.key(), run.key())
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub session: SessionId,
    pub config: ConfigId,
    pub solver: SolverId,
    pub compile_step: Step,
    pub eval_step: Step,
    pub compile_params: Params,
    pub run_params: Params,
    pub build_key: String,
    pub state: JobState,
    pub attempt: Attempt,
    pub retries: u32,
    pub lease_deadline_ms: Option<i64>,
    pub worker: Option<String>,
    pub artifact: Option<String>,
    pub failure: Option<FailureKind>,
    pub last_error: Option<String>,
    pub updated_ms: i64,
}

impl Job {
    pub fn job_ref(&self) -> crate::message::JobRef {
        crate::message::JobRef {
            job: self.id,
            attempt: self.attempt,
        }
    }
}

/// One measurement or failure of one attempt. Never overwritten: a job may have several rows
/// (one per attempt that produced an outcome), and the one whose attempt equals the job's final
/// attempt is the job's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    pub job: JobId,
    pub session: SessionId,
    pub attempt: Attempt,
    pub outcome: Outcome,
    pub worker: String,
    pub device: String,
    pub created_ms: i64,
}

/// A job's final result joined with what it was about, for exports and reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FinalResult {
    pub job: JobId,
    pub config: ConfigId,
    pub config_params: Params,
    pub solver: String,
    pub compile_params: Params,
    pub run_params: Params,
    pub state: JobState,
    pub outcome: Option<Outcome>,
    pub failure: Option<FailureKind>,
    pub last_error: Option<String>,
    /// The worker and the device that produced `outcome`, when there is one.
    pub worker: Option<String>,
    pub device: Option<String>,
    /// The job's eval step (a MIOpen session has perf and find jobs).
    pub eval_step: crate::Step,
}
