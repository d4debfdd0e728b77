//! This process's outages of the broker: from the moment its connection is found lost to the
//! moment a new one (to the same node or, failing over, to another) is in use.
//!
//! Kept process-wide, as the metrics are (a process has one bus). The Scheduler reads it to
//! stop the clock of its leases while it could hear no heartbeat (the heartbeats were not lost:
//! the workers send them again, or the replies follow), and `/metrics` reports it.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What is known of this process's broker outages.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BrokerOutages {
    /// Outages that began (the current one included).
    pub count: u64,
    /// How long the outages that ended lasted, in all.
    pub ended_total: Duration,
    /// How long the current one has lasted, if the connection is down now.
    pub current: Option<Duration>,
}

struct State {
    count: u64,
    ended_total: Duration,
    since: Option<Instant>,
}

static STATE: Mutex<State> = Mutex::new(State {
    count: 0,
    ended_total: Duration::ZERO,
    since: None,
});

/// This process's broker outages so far.
pub fn outages() -> BrokerOutages {
    let s = STATE.lock().unwrap_or_else(PoisonError::into_inner);
    BrokerOutages {
        count: s.count,
        ended_total: s.ended_total,
        current: s.since.map(|t| t.elapsed()),
    }
}

/// The connection in use was lost: an outage begins, if one had not.
pub(crate) fn lost() {
    let mut s = STATE.lock().unwrap_or_else(PoisonError::into_inner);
    if s.since.is_none() {
        s.since = Some(Instant::now());
        s.count += 1;
    }
}

/// A connection is in use again: the outage, if there was one, ends.
pub(crate) fn regained() {
    let mut s = STATE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(since) = s.since.take() {
        s.ended_total += since.elapsed();
    }
}
