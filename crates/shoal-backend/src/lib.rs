//! Backends: the code that turns a candidate into an artifact (the compile step) and an
//! artifact into a measurement or a failure of a named kind (the eval step).
//!
//! This crate does the work; the actors in `shoal-actors` decide when. Nothing here knows
//! about the bus or the store: a backend step takes plain values from `shoal-model` and returns
//! plain values, and every fault of the tuned code comes back as a
//! [`FailureKind`](shoal_model::FailureKind) so that the tuning goes on.
//!
//! - [`process`] — how every child process is contained: own process group, timeout, group kill
//!   on timeout, on exit and on drop, bounded output, no core dumps. One-shot children go
//!   through [`process::run`]; the long-lived runner of [`library`] uses the same pieces.
//! - [`failure`] — the one classifier from a child's end (exit, signal, timeout, or no start
//!   at all) to a failure kind, shared by builds, runs, the library runner and `fin`.
//! - [`child_env`] — what no child may inherit: the worker's connection strings and keys.
//! - [`expr`] — the integer expression language of constraint rules and FLOP counts.
//! - [`spec`] — the tuning spec of the exec backend (TOML): parsing, validation with
//!   file:line:field errors, candidate enumeration, build identity.
//! - [`context`] — the leaf types every backend step takes ([`RunContext`], [`EvalInput`],
//!   [`context::device_env`]), apart from `session` so that no backend depends on it.
//! - [`exec`] — the exec backend's two steps, which exec the spec's commands: [`exec::build`]
//!   (one artifact per compile-time parameter set, content-addressed and compressed) and
//!   [`exec::evaluate`] (warm-up and timed runs of one candidate on one shape, a process per
//!   run).
//! - [`library`] — the exec backend's library mode: one runner process per device loads each
//!   candidate's shared object (`include/shoal_kernel.h`), with crash and hang recovery.
//! - [`leaders`] — each shape's best time seen by this process, what `repeat = "adaptive"`
//!   weighs a candidate's runs against (a leaf: `spec` holds a board, `exec` reads it).
//! - [`miopen`] — the MIOpen backend: MIOpen's `fin`, run per (config, solver).
//! - [`replay`] — the replay backend: a recorded space (T4 format) answers each candidate with
//!   its recorded time or failure, at once or at the recorded pace scaled.
//! - [`session`] — [`SessionBackend`], what the actors call whatever the backend is.

pub mod child_env;
pub mod context;
pub mod exec;
pub mod expr;
pub mod failure;
mod fin_process;
pub mod leaders;
pub mod library;
pub mod miopen;
pub mod noop;
pub mod process;
pub mod replay;
pub mod runner_slot;
pub mod sandbox;
pub mod session;
pub mod spec;

pub use context::{EvalInput, RunContext};
pub use session::SessionBackend;
