//! The job state machine: the one place that decides which state changes are legal.
//!
//! ```text
//! new ─▶ compile_queued ─▶ compiling ─▶ compiled ─▶ eval_queued ─▶ evaluating ─▶ evaluated
//!  ▲          │               │            ▲            │              │
//!  └──────────┴───────────────┘            └────────────┴──────────────┘
//!        lease expired / handed back             lease expired / handed back
//! any non-terminal state ─▶ errored        (a candidate fault, or retries exhausted)
//!
//! held ─▶ new        the shape's search chose the candidate
//! held ─▶ skipped    the shape's search ended (budget spent) without choosing it
//! ```
//!
//! `held` and `skipped` exist only in sessions whose spec has a `[search]` other than exhaustive:
//! every candidate is loaded as a `held` job, and the Scheduler's search releases the ones it
//! chooses, batch by batch, then skips the rest, so that "every job final" still means "done".
//!
//! A candidate that does not apply is never a job: the loaders skip it (MIOpen's applicability
//! step decides before `jobs load`), and a backend that finds out late records the failure kind
//! `not_applicable` on an errored job. So there is no state for it. (The schemas' CHECK lists
//! still allow the name, which no release ever wrote.)
//!
//! Every change is a compare-and-set on `(state, attempt)`: a [`Transition`] names the state and
//! attempt it expects to find and the store applies it only if both still hold. The Scheduler is
//! the only writer, and a reply that carries an attempt older than the store's is simply stale.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

use crate::ids::{Attempt, JobId};
use crate::outcome::FailureKind;

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum JobState {
    New,
    CompileQueued,
    Compiling,
    Compiled,
    EvalQueued,
    Evaluating,
    Evaluated,
    Errored,
    /// A candidate its shape's search has not chosen yet.
    Held,
    /// A candidate its shape's search ended without choosing (terminal, no result).
    Skipped,
}

impl JobState {
    pub const ALL: [JobState; 10] = [
        JobState::New,
        JobState::CompileQueued,
        JobState::Compiling,
        JobState::Compiled,
        JobState::EvalQueued,
        JobState::Evaluating,
        JobState::Evaluated,
        JobState::Errored,
        JobState::Held,
        JobState::Skipped,
    ];

    /// The name stored in the database and shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::New => "new",
            JobState::CompileQueued => "compile_queued",
            JobState::Compiling => "compiling",
            JobState::Compiled => "compiled",
            JobState::EvalQueued => "eval_queued",
            JobState::Evaluating => "evaluating",
            JobState::Evaluated => "evaluated",
            JobState::Errored => "errored",
            JobState::Held => "held",
            JobState::Skipped => "skipped",
        }
    }

    /// A terminal state is never left.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Evaluated | JobState::Errored | JobState::Skipped
        )
    }

    /// In flight: handed to a queue or a worker, and so covered by a lease.
    pub fn is_in_flight(self) -> bool {
        matches!(
            self,
            JobState::CompileQueued
                | JobState::Compiling
                | JobState::EvalQueued
                | JobState::Evaluating
        )
    }

    /// Where a job goes back to when its lease expires or its worker hands it back: the start of
    /// the phase it was in, so a compiled job is not compiled again.
    pub fn retry_state(self) -> Option<JobState> {
        match self {
            JobState::CompileQueued | JobState::Compiling => Some(JobState::New),
            JobState::EvalQueued | JobState::Evaluating => Some(JobState::Compiled),
            _ => None,
        }
    }

    /// Whether `self → next` is an edge of the state machine.
    pub fn can_move_to(self, next: JobState) -> bool {
        use JobState::*;
        match (self, next) {
            (New, CompileQueued) => true,
            (CompileQueued, Compiling) => true,
            // A fast compiler may answer before its "started" notice is applied.
            (CompileQueued, Compiled) | (Compiling, Compiled) => true,
            (Compiled, EvalQueued) => true,
            (EvalQueued, Evaluating) => true,
            (EvalQueued, Evaluated) | (Evaluating, Evaluated) => true,
            (Held, New) | (Held, Skipped) => true,
            // A cancelled session's work that is not under way: not started, or waiting in a
            // queue (a worker that takes the request later finds its job moved on).
            (New, Skipped) | (Compiled, Skipped) => true,
            (CompileQueued, Skipped) | (EvalQueued, Skipped) => true,
            (from, Errored) => !from.is_terminal(),
            (from, to) => from.retry_state() == Some(to),
        }
    }

    /// Whether a move into `next` starts a new dispatch, and so increments the attempt.
    pub fn dispatches(self, next: JobState) -> bool {
        matches!(
            (self, next),
            (JobState::New, JobState::CompileQueued) | (JobState::Compiled, JobState::EvalQueued)
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = crate::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| crate::UnknownName {
                what: "job state",
                name: s.to_string(),
                known: JobState::ALL.map(JobState::as_str).join(", "),
            })
    }
}

/// A compare-and-set on one job: "if job `job` is in `from` at `attempt`, move it to `to`".
///
/// The attempt after the change is `attempt + 1` when the edge dispatches the job
/// ([`JobState::dispatches`]), otherwise unchanged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    pub job: JobId,
    pub from: JobState,
    pub attempt: Attempt,
    pub to: JobState,
    /// The lease deadline to set, in milliseconds since the Unix epoch; `None` clears it.
    pub lease_deadline_ms: Option<i64>,
    /// Which worker holds the job now, if any.
    pub worker: Option<String>,
    /// Set when the job is handed back because of an infrastructure failure (counted against the
    /// retry bound).
    pub count_retry: bool,
    /// Set when moving to `errored`.
    pub failure: Option<(FailureKind, String)>,
    /// The artifact a compile produced (set on `→ compiled`).
    pub artifact: Option<String>,
}

/// Why a transition could not even be attempted.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TransitionError {
    #[error("job {job}: `{from} → {to}` is not an edge of the job state machine")]
    IllegalEdge {
        job: JobId,
        from: JobState,
        to: JobState,
    },
}

impl Transition {
    /// A transition with no side data; checked against the state machine.
    pub fn new(
        job: JobId,
        from: JobState,
        attempt: Attempt,
        to: JobState,
    ) -> Result<Self, TransitionError> {
        if !from.can_move_to(to) {
            return Err(TransitionError::IllegalEdge { job, from, to });
        }
        Ok(Transition {
            job,
            from,
            attempt,
            to,
            lease_deadline_ms: None,
            worker: None,
            count_retry: false,
            failure: None,
            artifact: None,
        })
    }

    pub fn with_lease(mut self, deadline_ms: i64) -> Self {
        self.lease_deadline_ms = Some(deadline_ms);
        self
    }

    pub fn with_worker(mut self, worker: impl Into<String>) -> Self {
        self.worker = Some(worker.into());
        self
    }

    pub fn with_failure(mut self, kind: FailureKind, reason: impl Into<String>) -> Self {
        self.failure = Some((kind, reason.into()));
        self
    }

    pub fn with_artifact(mut self, hash: impl Into<String>) -> Self {
        self.artifact = Some(hash.into());
        self
    }

    pub fn counting_retry(mut self) -> Self {
        self.count_retry = true;
        self
    }

    /// The attempt the job has after this transition succeeds.
    pub fn next_attempt(&self) -> Attempt {
        if self.from.dispatches(self.to) {
            self.attempt + 1
        } else {
            self.attempt
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use JobState::*;

    #[test]
    fn happy_path_is_legal_and_dispatches_increment() {
        let path = [
            New,
            CompileQueued,
            Compiling,
            Compiled,
            EvalQueued,
            Evaluating,
            Evaluated,
        ];
        for w in path.windows(2) {
            assert!(w[0].can_move_to(w[1]), "{} -> {}", w[0], w[1]);
        }
        let t = Transition::new(JobId(1), New, 0, CompileQueued).unwrap();
        assert_eq!(t.next_attempt(), 1);
        let t = Transition::new(JobId(1), CompileQueued, 1, Compiling).unwrap();
        assert_eq!(t.next_attempt(), 1);
        let t = Transition::new(JobId(1), Compiled, 1, EvalQueued).unwrap();
        assert_eq!(t.next_attempt(), 2);
    }

    #[test]
    fn terminal_states_are_never_left() {
        for from in [Evaluated, Errored] {
            for to in JobState::ALL {
                assert!(!from.can_move_to(to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn retries_go_back_to_the_start_of_the_phase() {
        assert!(Compiling.can_move_to(New));
        assert!(Evaluating.can_move_to(Compiled));
        assert!(
            !Evaluating.can_move_to(New),
            "a compiled job is not compiled again"
        );
        assert!(!New.can_move_to(Compiled));
        assert!(Transition::new(JobId(3), New, 0, Evaluated).is_err());
    }

    #[test]
    fn only_work_not_under_way_is_skipped() {
        for from in JobState::ALL {
            let expected = matches!(from, New | Held | Compiled | CompileQueued | EvalQueued);
            assert_eq!(from.can_move_to(Skipped), expected, "{from} -> skipped");
        }
    }

    #[test]
    fn state_names_round_trip() {
        for s in JobState::ALL {
            assert_eq!(s.as_str().parse::<JobState>().unwrap(), s);
        }
        assert!("bogus".parse::<JobState>().is_err());
    }
}
