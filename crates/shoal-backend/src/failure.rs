//! The one place where the end of a child process becomes a [`FailureKind`].
//!
//! Builds, timed runs and MIOpen's `fin` are all child processes, and what their end means must
//! not depend on which backend ran them: the kind decides whether a failure is the candidate's
//! (recorded, and for a build cached for every job that shares it) or the host's (retried on
//! another worker, never cached). The rule that matters most is the first row of the table: a
//! program that cannot be started says nothing about the candidate — one host without the
//! compiler must not fail a build for the whole fleet — so it is `Infrastructure`.

use shoal_model::FailureKind;

use crate::process::ChildEnd;

/// What the child was doing, which decides what a non-zero end means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildStep {
    /// Making an artifact: a compiler, a build script, `fin` compiling a solver.
    Build,
    /// Running a candidate (or `fin` evaluating one).
    Run,
}

/// How a child's life ended, as far as the classifier needs to know.
#[derive(Clone, Copy, Debug)]
pub enum ChildFate<'a> {
    /// It could not be started: missing program, permissions, no memory, no pids.
    NotStarted,
    /// It started and ended this way.
    Ended(&'a ChildEnd),
}

/// The failure a child's fate stands for, or `None` when it exited with 0 (whatever its output
/// says next is judged by the caller: a missing artifact, a wrong answer, no time).
pub fn failure_kind(step: ChildStep, fate: ChildFate<'_>) -> Option<FailureKind> {
    use ChildStep::{Build, Run};
    Some(match (step, fate) {
        (_, ChildFate::NotStarted) => FailureKind::Infrastructure,
        (_, ChildFate::Ended(ChildEnd::Exited(0))) => return None,
        (Build, ChildFate::Ended(ChildEnd::TimedOut)) => FailureKind::BuildTimeout,
        // A compiler that dies of a signal failed this build like one that exits non-zero.
        (Build, ChildFate::Ended(ChildEnd::Exited(_) | ChildEnd::Signaled { .. })) => {
            FailureKind::BuildFailed
        }
        (Run, ChildFate::Ended(ChildEnd::TimedOut)) => FailureKind::Timeout,
        (Run, ChildFate::Ended(ChildEnd::Signaled { .. })) => FailureKind::Crashed,
        (Run, ChildFate::Ended(ChildEnd::Exited(_))) => FailureKind::RunFailed,
    })
}

/// The failure for output that a step's child should have left but did not (the artifact of a
/// successful build, fin's output file): the step failed, not the host.
pub fn missing_output(step: ChildStep) -> FailureKind {
    match step {
        ChildStep::Build => FailureKind::BuildFailed,
        ChildStep::Run => FailureKind::RunFailed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ChildStep::{Build, Run};

    #[test]
    fn every_end_of_every_step_has_one_kind() {
        let segv = ChildEnd::Signaled {
            signal: 11,
            name: "SIGSEGV".into(),
        };
        let table: [(ChildStep, ChildFate<'_>, Option<FailureKind>); 10] = [
            (
                Build,
                ChildFate::NotStarted,
                Some(FailureKind::Infrastructure),
            ),
            (
                Run,
                ChildFate::NotStarted,
                Some(FailureKind::Infrastructure),
            ),
            (Build, ChildFate::Ended(&ChildEnd::Exited(0)), None),
            (Run, ChildFate::Ended(&ChildEnd::Exited(0)), None),
            (
                Build,
                ChildFate::Ended(&ChildEnd::Exited(1)),
                Some(FailureKind::BuildFailed),
            ),
            (
                Build,
                ChildFate::Ended(&segv),
                Some(FailureKind::BuildFailed),
            ),
            (
                Build,
                ChildFate::Ended(&ChildEnd::TimedOut),
                Some(FailureKind::BuildTimeout),
            ),
            (
                Run,
                ChildFate::Ended(&ChildEnd::Exited(3)),
                Some(FailureKind::RunFailed),
            ),
            (Run, ChildFate::Ended(&segv), Some(FailureKind::Crashed)),
            (
                Run,
                ChildFate::Ended(&ChildEnd::TimedOut),
                Some(FailureKind::Timeout),
            ),
        ];
        for (step, fate, want) in table {
            assert_eq!(failure_kind(step, fate), want, "{step:?} {fate:?}");
        }
    }

    #[test]
    fn a_host_fault_is_never_a_cached_build_result() {
        // The Scheduler caches a build's failure for every job of the build unless it is an
        // infrastructure fault; a program that cannot start must land on that side.
        let kind = failure_kind(Build, ChildFate::NotStarted).unwrap();
        assert!(!kind.is_candidate_fault(), "{kind:?}");
        assert_eq!(missing_output(Build), FailureKind::BuildFailed);
        assert_eq!(missing_output(Run), FailureKind::RunFailed);
    }
}
