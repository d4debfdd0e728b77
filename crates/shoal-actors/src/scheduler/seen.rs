//! The message ids of the replies this Scheduler has settled, with who sent each: a copy that
//! comes again from someone else is a replay, and is refused (dead-lettered); one from the same
//! sender is its bus sending it again (at least once: a publish whose confirm was lost with its
//! connection, as when a broker node dies, is sent again on the next), and is dropped.
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

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use shoal_model::envelope::MessageId;

/// Ids remembered at most: about 6 MB, and at a thousand replies a second, the last few
/// minutes, longer than a lease lives without heartbeats.
pub(crate) const SEEN_MAX: usize = 200_000;

#[derive(Default)]
pub(crate) struct SeenIds {
    /// Each id with the sender of the copy that was settled (the broker user, as the bus
    /// authenticated it).
    set: HashMap<MessageId, Arc<str>>,
    order: VecDeque<MessageId>,
}

impl SeenIds {
    /// Who sent the settled copy of `id`, if one was settled.
    pub(crate) fn sender(&self, id: &MessageId) -> Option<Arc<str>> {
        self.set.get(id).cloned()
    }

    pub(crate) fn insert(&mut self, id: MessageId, sender: Arc<str>) {
        if self.set.contains_key(&id) {
            return;
        }
        self.set.insert(id, sender);
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
        let who: Arc<str> = "shoal_eval".into();
        seen.insert(id(0), who.clone());
        seen.insert(id(0), "someone else".into());
        assert_eq!(
            seen.sender(&id(0)).as_deref(),
            Some("shoal_eval"),
            "the first sender"
        );
        assert!(seen.sender(&id(1)).is_none());
        for seq in 1..=SEEN_MAX as u64 {
            seen.insert(id(seq), who.clone());
        }
        assert!(
            seen.sender(&id(0)).is_none(),
            "the oldest is forgotten first"
        );
        assert!(seen.sender(&id(1)).is_some() && seen.sender(&id(SEEN_MAX as u64)).is_some());
        assert_eq!(seen.order.len(), SEEN_MAX);
    }
}
