//! The domain of Shoal as plain data and pure functions: sessions, configs (problems), solvers,
//! jobs and their state machine, outcomes, and the messages that travel between actors together
//! with their versioned wire envelope.
//!
//! **Architecture invariant:** this crate does no I/O. It knows nothing about SQLite, MySQL,
//! RabbitMQ, actix or child processes. Everything here can be tested with plain values, and every
//! other crate agrees on the meaning of a job through the types defined here.
//!
//! One place for each decision:
//! - the job state machine and its compare-and-set rules: [`state`];
//! - the wire format (version, kinds, bincode configuration): [`envelope`];
//! - queue names: [`queue`].

pub mod command;
pub mod envelope;
pub mod identity;
pub mod ids;
mod names;
pub use names::UnknownName;
pub mod message;
pub mod outcome;
pub mod params;
pub mod presence;
pub mod progress;
pub mod queue;
pub mod record;
pub mod repeats;
pub mod search;
pub mod shipped;
pub mod state;
pub mod steps;
pub use steps::Step;

pub use ids::{Attempt, ConfigId, JobId, SessionId, SolverId};
pub use message::{
    CompileReply, CompileRequest, EvalReply, EvalRequest, JobRef, Message, ReplyBody,
};
pub use outcome::{FailureKind, Measurement, Outcome};
pub use params::Params;
pub use presence::{DevicePresence, Liveness, WorkerPresence};
pub use record::{
    Backend, Config, FinalResult, Job, NewConfig, NewJob, NewSession, NewSolver, ResultRow,
    Session, Solver,
};
pub use state::{JobState, Transition, TransitionError};
