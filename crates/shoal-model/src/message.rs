//! Everything that travels on the bus. Each message says what it is about with [`JobRef`]s
//! (job id and attempt), so a stale or duplicated message can be recognised and ignored.
//!
//! Requests and replies carry several jobs where one piece of work serves them all (one compile
//! for every shape that uses the same compile-time parameters; a batch of evaluations), so one
//! broker message does the work of many without giving up per-job state changes.

use serde::{Deserialize, Serialize};

use crate::ids::{Attempt, ConfigId, JobId, SessionId};
use crate::outcome::{FailureKind, Outcome};
use crate::params::Params;
use crate::steps::Step;

/// A job at a given attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobRef {
    pub job: JobId,
    pub attempt: Attempt,
}

/// Build one compile-time parameter set for every job listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompileRequest {
    pub session: SessionId,
    pub step: Step,
    pub build_key: String,
    /// The problem of the jobs. Read by backends whose builds depend on it (MIOpen compiles per
    /// config and solver, so every job of such a request has this config); an exec-backend
    /// build is shared across problems and never reads it.
    pub config_params: Params,
    pub compile_params: Params,
    pub jobs: Vec<JobRef>,
}

/// One evaluation: a compiled candidate on one problem.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalItem {
    pub job: JobRef,
    pub config: ConfigId,
    pub config_params: Params,
    pub compile_params: Params,
    pub run_params: Params,
    /// Content hash of the compiled artifact in the store.
    pub artifact: String,
}

/// Evaluate every item, in order, on the device that consumes the request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalRequest {
    pub session: SessionId,
    pub step: Step,
    pub items: Vec<EvalItem>,
}

/// The phase a notice is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    Compile,
    Eval,
}

/// A compile's result for every job that shared it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompileReply {
    pub session: SessionId,
    pub jobs: Vec<JobRef>,
    pub build_key: String,
    /// The artifact's content hash, or why there is none.
    pub result: Result<String, (FailureKind, String)>,
    pub worker: String,
    pub duration_ms: u64,
}

/// The outcomes of an evaluation request, one per item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalReply {
    pub session: SessionId,
    /// The step of the request, so the Scheduler can size the next requests of this step.
    pub step: Step,
    pub outcomes: Vec<(JobRef, Outcome)>,
    pub worker: String,
    pub device: String,
    /// How long the device spent on the whole request, in microseconds: the Scheduler sizes
    /// requests by it (`scheduler/shape.rs`), so that one is a fraction of a second of work.
    pub busy_us: u64,
}

/// How often a worker sends a [`ReplyBody::Heartbeat`] while it works.
pub const HEARTBEAT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The lease of started work: renewed by every heartbeat, so it only runs out when four
/// heartbeats in a row were not heard (a dead or cut-off worker). A broker restart (about 6 s)
/// costs one or two; an outage of the store costs none, because the Scheduler neither applies
/// renewals nor sweeps leases until it is back. Short, so that a lost worker's jobs come back in
/// seconds: in the chaos suite the 60 s this was before made a cut-off worker's jobs the tail of
/// the whole run.
pub const RUNNING_LEASE: std::time::Duration = std::time::Duration::from_secs(20);

/// What workers send to the Scheduler on the results queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ReplyBody {
    /// Work on these jobs has started on `worker`; their leases are renewed.
    Started {
        session: SessionId,
        phase: Phase,
        jobs: Vec<JobRef>,
        worker: String,
    },
    Compiled(CompileReply),
    Evaluated(EvalReply),
    /// Work on these jobs goes on on `worker`: renew their leases. Sent every
    /// [`HEARTBEAT_EVERY`] while a build or an evaluation runs, so a lease can be short (a dead
    /// worker's jobs come back within [`RUNNING_LEASE`]) whatever the step's timeout.
    Heartbeat {
        session: SessionId,
        phase: Phase,
        jobs: Vec<JobRef>,
        worker: String,
    },
    /// The worker gives these jobs back without an outcome (shutting down, device unhealthy).
    HandedBack {
        session: SessionId,
        phase: Phase,
        jobs: Vec<JobRef>,
        reason: String,
        /// Whether the hand-back counts against the retry bound (a sick GPU does, a drain
        /// does not).
        count_retry: bool,
        /// The worker giving them back: only the lease holder may.
        worker: String,
    },
}

impl ReplyBody {
    /// The session the reply is about.
    pub fn session(&self) -> SessionId {
        match self {
            ReplyBody::Started { session, .. }
            | ReplyBody::Heartbeat { session, .. }
            | ReplyBody::HandedBack { session, .. } => *session,
            ReplyBody::Compiled(c) => c.session,
            ReplyBody::Evaluated(e) => e.session,
        }
    }

    /// The reply's kind, for logs and dead-letter reasons.
    pub fn kind(&self) -> &'static str {
        match self {
            ReplyBody::Started { .. } => "started notice",
            ReplyBody::Heartbeat { .. } => "heartbeat",
            ReplyBody::Compiled(_) => "compile result",
            ReplyBody::Evaluated(_) => "eval result",
            ReplyBody::HandedBack { .. } => "hand-back",
        }
    }
}

/// Health of one device, published by the GpuMonitor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceHealth {
    pub host: String,
    pub device: String,
    pub healthy: bool,
    pub detail: String,
}

/// Broadcast facts: nobody must receive them for the system to be correct.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Event {
    Health(DeviceHealth),
    Progress {
        session: SessionId,
        done: u64,
        total: u64,
    },
}

/// Orders from operators, routed by host and actor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Control {
    /// Stop consuming eval work on a device until resumed.
    Pause {
        device: String,
    },
    Resume {
        device: String,
    },
    /// Finish in-flight work, take no more.
    Drain,
    /// Restart the named actor.
    Restart {
        actor: Actor,
    },
    /// Write a session's outputs into a directory of the exporter's host.
    Export {
        session: SessionId,
        out_dir: String,
    },
    /// `Export` of a MIOpen session with the options of `shoal export` (`export --cluster` with
    /// any of them): the exporter writes into `out_dir`, merging into `options.base_dir` when
    /// given, both directories inside its export directory.
    ExportMiopen {
        session: SessionId,
        out_dir: String,
        options: MiopenExportOptions,
    },
}

/// The options of a MIOpen session's export (`shoal export --find-db … --cluster`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MiopenExportOptions {
    /// The databases to write; none: all of them.
    pub find_db: bool,
    pub perf_db: bool,
    pub kern_db: bool,
    /// Write the user databases, named for this MIOpen version (empty: the session's).
    pub user_db: Option<String>,
    /// Merge into the databases found in this directory, relative to the exporter's export
    /// directory.
    pub base_dir: Option<String>,
    /// With `base_dir`: the session's entry wherever both have one (`--policy newer`), instead
    /// of the faster one.
    pub newer: bool,
    /// Only the results of configs with this tag.
    pub tag: Option<String>,
}

crate::names::named_enum! {
    /// An actor of a worker process, as control messages address it (the second word of a
    /// control routing key). On the wire it is its name, as it was when it was a string.
    pub enum Actor("actor") {
        Scheduler => "scheduler",
        Compiler => "compiler",
        Evaluator => "evaluator",
        Exporter => "exporter",
        /// The worker process itself (drain, restart orders).
        Worker => "worker",
        /// The GpuMonitor (pause, resume).
        Monitor => "monitor",
    }
}

/// Every message kind that has a wire form.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Message {
    Compile(CompileRequest),
    Eval(EvalRequest),
    Reply(ReplyBody),
    Event(Event),
    Control(Control),
    /// From an operator's CLI to the Scheduler (`<ns>.commands`).
    Command(crate::command::CommandRequest),
    /// From the Scheduler to the CLI that asked (`<ns>.reply.<client>`).
    CommandReply(crate::command::CommandReply),
}
