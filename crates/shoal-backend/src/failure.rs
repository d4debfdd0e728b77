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

/// Whether a failure's detail says the host cannot write its disk: out of space (`ENOSPC`,
/// `EDQUOT`, SQLite's "database or disk is full") or mounted read-only (`EROFS`), whatever the
/// step or the kind it was given: a linker that cannot write its output, an artifact that cannot
/// be installed, a store that cannot grow.
/// That is the host's state, not the candidate's: the worker hands the work back without
/// counting a retry and stops taking more (see the Compiler), rather than burning the job's
/// retries, or caching a build failure for every job of the build, in the seconds the disk is
/// full. Children run with a scrubbed environment, so their messages are in the C locale.
pub fn host_cannot_write(detail: &str) -> bool {
    const SIGNS: [&str; 7] = [
        "No space left on device",
        "Disk quota exceeded",
        "database or disk is full",
        "(os error 28)",
        "Read-only file system",
        "(os error 30)",
        "attempt to write a readonly database",
    ];
    SIGNS.iter().any(|s| detail.contains(s))
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

    #[test]
    fn a_disk_that_cannot_be_written_is_the_hosts_state_whatever_the_step_says() {
        for detail in [
            "build exited with code 1; stderr:\n/usr/bin/ld: final link failed: No space left on device",
            "installing artifact ab12: No space left on device (os error 28) at path \"/w/a\"",
            "store: database or disk is full",
            "write /w/out: Disk quota exceeded",
            "cc1: fatal error: cannot open '/w/a.s': Read-only file system",
            "store: attempt to write a readonly database",
        ] {
            assert!(host_cannot_write(detail), "{detail}");
        }
        for detail in [
            "build exited with code 1; stderr:\nerror: expected ';'",
            "run exited with code 28",
            "",
        ] {
            assert!(!host_cannot_write(detail), "{detail}");
        }
    }
}
