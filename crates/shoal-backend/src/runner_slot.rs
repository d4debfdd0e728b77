//! The slot of a device's library-mode runner: which program starts it, and the live runner
//! process, if one runs. Its own module, below both [`crate::context`] (whose `RunContext`
//! carries a slot to the evaluation) and [`crate::library`] (which starts, calls and replaces
//! the runner), so that neither has to import the other's parent.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::io::BufReader;
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::process::{GroupGuard, Tail};

/// The argv that starts a runner: `custom` (the CLI's `$SHOAL_RUNNER`, split on whitespace),
/// else this executable with the `runner` subcommand.
pub fn runner_program(custom: Option<&str>) -> Vec<String> {
    if let Some(custom) = custom {
        let argv: Vec<String> = custom.split_whitespace().map(str::to_string).collect();
        if !argv.is_empty() {
            return argv;
        }
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("shoal"));
    vec![exe.display().to_string(), "runner".into()]
}

/// The runner of one device, started on first use and again after each crash. The Evaluator
/// of a device owns one; evaluations through it are serialized.
pub struct RunnerSlot {
    pub(crate) program: Vec<String>,
    pub(crate) runner: tokio::sync::Mutex<Option<Runner>>,
}

impl std::fmt::Debug for RunnerSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerSlot")
            .field("program", &self.program)
            .finish_non_exhaustive()
    }
}

impl Default for RunnerSlot {
    fn default() -> Self {
        RunnerSlot::new(runner_program(None))
    }
}

impl RunnerSlot {
    pub fn new(program: Vec<String>) -> Self {
        RunnerSlot {
            program,
            runner: tokio::sync::Mutex::new(None),
        }
    }
}

/// A live runner process.
pub(crate) struct Runner {
    /// The spec identity it serves: states prepared for one spec mean nothing to another.
    pub(crate) spec_identity: String,
    pub(crate) child: Child,
    /// `None` once closed, which asks the runner to stop.
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) replies: BufReader<ChildStdout>,
    pub(crate) stderr: Arc<Mutex<Tail>>,
    /// The task draining stderr into `stderr`; done once every holder of the pipe has gone.
    pub(crate) stderr_reader: tokio::task::JoinHandle<()>,
    pub(crate) guard: GroupGuard,
    /// A request was sent and its reply not read (the caller was cancelled mid-call): the next
    /// reply on the pipe would be the wrong one, so such a runner is replaced.
    pub(crate) in_call: bool,
}
