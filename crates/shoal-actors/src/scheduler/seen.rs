//! The message ids of the replies this Scheduler has settled: a copy that comes again is a
//! replay, and is refused.
//!
//! A reply is applied by compare-and-set, so a stale copy changes nothing in the store; what a
//! replay can still do is speak again in the present: a captured "started" notice replayed
//! after a takeover would give the lease back to the worker that lost it, and the new holder's
//! genuine result would be refused. Every message carries a unique id
//! ([`shoal_model::envelope::MessageId`]), so a copy is known for what it is.
//!
//! An id is remembered once its delivery is settled (acked or dead-lettered), never before: a
//! delivery handed back unsettled (the Scheduler's loop failed midway) comes again with the same
//! id and must be applied then. The set is bounded ([`SEEN_MAX`], oldest forgotten first), and
//! lives as long as the Scheduler's state: a restarted Scheduler starts empty, which only
//! matters for a replay of a notice whose attempt is still the job's current one.

use std::collections::{HashSet, VecDeque};

use shoal_model::envelope::MessageId;

/// Ids remembered at most: about 6 MB, and at a thousand replies a second, the last few
/// minutes, longer than a lease lives without heartbeats.
pub(crate) const SEEN_MAX: usize = 200_000;

#[derive(Default)]
pub(crate) struct SeenIds {
    set: HashSet<MessageId>,
    order: VecDeque<MessageId>,
}

impl SeenIds {
    pub(crate) fn contains(&self, id: &MessageId) -> bool {
        self.set.contains(id)
    }

    pub(crate) fn insert(&mut self, id: MessageId) {
        if !self.set.insert(id) {
            return;
        }
        self.order.push_back(id);
        if self.order.len() > SEEN_MAX {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_newest_ids_within_its_bound() {
        let id = |seq| MessageId { origin: 7, seq };
        let mut seen = SeenIds::default();
        seen.insert(id(0));
        seen.insert(id(0));
        assert!(seen.contains(&id(0)) && !seen.contains(&id(1)));
        for seq in 1..=SEEN_MAX as u64 {
            seen.insert(id(seq));
        }
        assert!(!seen.contains(&id(0)), "the oldest is forgotten first");
        assert!(seen.contains(&id(1)) && seen.contains(&id(SEEN_MAX as u64)));
        assert_eq!(seen.order.len(), SEEN_MAX);
    }
}
