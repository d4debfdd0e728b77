//! The outbox: which requests are owed to the bus, kept in the same transaction as the state
//! changes that owe them.
//!
//! Why: the Scheduler commits a job's move to a queued state and then publishes its request.
//! Killed between the two, or facing a broker that is down, it used to leave the job queued with
//! nothing in any queue, waiting out its lease (ten minutes). Now every move into a queued state
//! writes an outbox row `(job, attempt)` in the same transaction, so "the job is queued" and "a
//! request is owed" are one fact. The Scheduler removes the row once the broker has confirmed
//! the request ([`crate::Store::mark_sent`]); rows left behind — a failed publish, a crash — are
//! sent again by its sender ([`crate::Store::unsent`]), first of all after a restart.
//!
//! The rule lives here, once, as a pure function both stores apply inside `apply`:
//! - a change that applies and enters a queued state owes a request for the job at the attempt
//!   it enters with;
//! - a change that applies and leaves a queued state settles whatever the job owed: the request
//!   was consumed (`→ compiling`, `→ evaluating`, or a result), or is no longer wanted (a lease
//!   expired, the job was requeued).
//!
//! So the outbox never holds more than one row per job, and never a row for a job that is not
//! waiting in a queue, whatever happens to the sender's own removals.

use std::collections::{BTreeMap, BTreeSet};

use shoal_model::message::JobRef;
use shoal_model::{JobId, JobState};

use crate::Change;

/// Whether a job in this state waits for a request in a queue.
pub fn is_queued(state: JobState) -> bool {
    matches!(state, JobState::CompileQueued | JobState::EvalQueued)
}

/// What a batch does to the outbox: remove every row of `settled`, then add `owed`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutboxEffect {
    /// Jobs that left a queued state: their rows go.
    pub settled: Vec<JobId>,
    /// Requests the batch leaves owed, one per job at most.
    pub owed: Vec<JobRef>,
}

impl OutboxEffect {
    pub fn is_empty(&self) -> bool {
        self.settled.is_empty() && self.owed.is_empty()
    }
}

/// The outbox rows a batch leaves, given which of its changes applied (as [`crate::Store::apply`]
/// returns them), replaying the changes in order.
pub fn outbox_effect(changes: &[Change], applied: &[bool]) -> OutboxEffect {
    let mut settled = BTreeSet::new();
    let mut owed: BTreeMap<JobId, u32> = BTreeMap::new();
    for (c, _) in changes.iter().zip(applied).filter(|(_, ok)| **ok) {
        let t = &c.transition;
        if is_queued(t.from) {
            settled.insert(t.job);
            owed.remove(&t.job);
        }
        if is_queued(t.to) {
            owed.insert(t.job, t.next_attempt());
        }
    }
    OutboxEffect {
        settled: settled.into_iter().collect(),
        owed: owed
            .into_iter()
            .map(|(job, attempt)| JobRef { job, attempt })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_model::Transition;

    fn change(job: i64, from: JobState, attempt: u32, to: JobState) -> Change {
        Transition::new(JobId(job), from, attempt, to)
            .unwrap()
            .into()
    }

    fn r(job: i64, attempt: u32) -> JobRef {
        JobRef {
            job: JobId(job),
            attempt,
        }
    }

    #[test]
    fn entering_a_queue_owes_a_request_at_the_new_attempt() {
        use JobState::*;
        let changes = [
            change(1, New, 0, CompileQueued),
            change(2, Compiled, 1, EvalQueued),
        ];
        let e = outbox_effect(&changes, &[true, true]);
        assert_eq!(e.owed, vec![r(1, 1), r(2, 2)]);
        assert!(e.settled.is_empty());
    }

    #[test]
    fn changes_that_did_not_apply_owe_nothing() {
        use JobState::*;
        let changes = [change(1, New, 0, CompileQueued)];
        assert!(outbox_effect(&changes, &[false]).is_empty());
    }

    #[test]
    fn leaving_a_queue_settles_the_job() {
        use JobState::*;
        let changes = [
            change(1, CompileQueued, 1, Compiling),
            change(2, EvalQueued, 2, Compiled),
            change(3, Compiling, 1, Compiled),
        ];
        let e = outbox_effect(&changes, &[true, true, true]);
        assert_eq!(e.settled, vec![JobId(1), JobId(2)]);
        assert!(e.owed.is_empty(), "compiling → compiled owes nothing");
    }

    #[test]
    fn a_chain_through_a_cached_build_owes_only_the_eval() {
        use JobState::*;
        // A known build: queued for compile, compiled from the cache, queued for eval, in one
        // batch. Only the eval request is owed.
        let changes = [
            change(1, New, 0, CompileQueued),
            change(1, CompileQueued, 1, Compiled),
            change(1, Compiled, 1, EvalQueued),
        ];
        let e = outbox_effect(&changes, &[true, true, true]);
        assert_eq!(e.owed, vec![r(1, 2)]);
        assert_eq!(e.settled, vec![JobId(1)]);
    }
}
