//! Progress reports: the cluster Scheduler publishes `Event::Progress` for its sessions on the
//! events topic (routing key `progress.<session>`), so that an operator's `shoal tune --cluster`
//! can follow a tuning with a broker identity alone, without reading the database.
//!
//! A session is reported on every refresh (every 2 s) while it has open work, and once more
//! whenever its counts change, so its last report says it is done. A session whose counts never
//! change after the Scheduler started (finished before) is reported once, at start.
//! Reports are broadcasts: nobody has to hear them, and one lost changes nothing.

use std::collections::HashMap;

use shoal_bus::Bus;
use shoal_model::message::Event;
use shoal_model::{JobState, Message, SessionId};

use super::Inner;
use crate::ActorError;

/// A session's jobs: those done (in a final state) and all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Counts {
    pub done: u64,
    pub total: u64,
}

/// How long a finished session's counts are trusted before they are counted again.
const FINISHED_RECOUNT_MS: i64 = 60_000;

/// The sessions found finished, with their counts and when they were counted. Counting a
/// session's jobs reads every one of them (0.3–0.4 s for 300,000 on MariaDB), and the store
/// keeps every session for good, so counting the finished ones every refresh cost dispatch a
/// quarter of its rate on a store holding 900,000 finished jobs.
#[derive(Default)]
pub(super) struct FinishedSessions {
    counted: HashMap<SessionId, (Counts, i64)>,
}

impl FinishedSessions {
    /// The counts of a session found finished less than [`FINISHED_RECOUNT_MS`] ago.
    fn recent(&self, session: SessionId, now_ms: i64) -> Option<Counts> {
        self.counted
            .get(&session)
            .filter(|(_, at)| now_ms - at < FINISHED_RECOUNT_MS)
            .map(|(c, _)| *c)
    }

    /// Remembers a session's fresh counts if it is finished, forgets it if not.
    fn record(&mut self, session: SessionId, counts: Counts, now_ms: i64) {
        if counts.done == counts.total {
            self.counted.insert(session, (counts, now_ms));
        } else {
            self.counted.remove(&session);
        }
    }
}

impl Inner {
    /// Every session's jobs, done and all: those with a job that is not final have open work.
    /// A session found finished is counted again only once a minute, or as soon as it has a
    /// new job (jobs loaded into it start as new; one probe of the state index tells).
    pub(super) async fn session_counts(
        &mut self,
        finished: &mut FinishedSessions,
        now_ms: i64,
    ) -> Result<Vec<(SessionId, Counts)>, ActorError> {
        let mut out = Vec::new();
        for s in self.store.sessions().await? {
            if let Some(c) = finished.recent(s.id, now_ms) {
                let new = self.store.jobs_in_state(s.id, JobState::New, 1).await?;
                if new.is_empty() {
                    out.push((s.id, c));
                    continue;
                }
            }
            let counts = self.store.state_counts(s.id).await?;
            let total = counts.values().sum();
            let done = counts
                .iter()
                .filter(|(st, _)| st.is_terminal())
                .map(|(_, n)| n)
                .sum();
            let c = Counts { done, total };
            finished.record(s.id, c, now_ms);
            out.push((s.id, c));
        }
        Ok(out)
    }
}

/// What was last reported of each session.
#[derive(Default)]
pub(super) struct ProgressReports {
    last: HashMap<SessionId, Counts>,
}

impl ProgressReports {
    /// The sessions to report now: those with open work, and those whose counts changed.
    pub(super) fn due(&mut self, counts: &[(SessionId, Counts)]) -> Vec<(SessionId, Counts)> {
        let mut due = Vec::new();
        for &(session, c) in counts {
            let changed = self.last.insert(session, c) != Some(c);
            if changed || c.done < c.total {
                due.push((session, c));
            }
        }
        due
    }

    /// Publishes the reports that are due; a failure is logged, never returned.
    pub(super) async fn publish(&mut self, bus: &dyn Bus, counts: &[(SessionId, Counts)]) {
        let topic = bus.namespace().events_topic();
        for (session, c) in self.due(counts) {
            let event = Message::Event(Event::Progress {
                session,
                done: c.done,
                total: c.total,
            });
            let key = format!("progress.{session}");
            if let Err(e) = bus
                .publish_topic(&topic, &key, bus.codec().encode(&event))
                .await
            {
                tracing::debug!(%session, error = %e, "progress not reported");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_session_is_trusted_for_a_minute_and_an_open_one_never() {
        let mut f = FinishedSessions::default();
        let (a, b) = (SessionId(1), SessionId(2));
        let c = |done, total| Counts { done, total };
        f.record(a, c(3, 3), 1_000);
        f.record(b, c(1, 3), 1_000);
        assert_eq!(f.recent(a, 1_000 + FINISHED_RECOUNT_MS - 1), Some(c(3, 3)));
        assert_eq!(
            f.recent(a, 1_000 + FINISHED_RECOUNT_MS),
            None,
            "counted again"
        );
        assert_eq!(f.recent(b, 1_001), None, "open work is always counted");
        f.record(a, c(3, 5), 2_000);
        assert_eq!(
            f.recent(a, 2_001),
            None,
            "jobs were added: no longer finished"
        );
    }

    #[test]
    fn open_sessions_every_time_finished_ones_when_they_change() {
        let mut r = ProgressReports::default();
        let (a, b) = (SessionId(1), SessionId(2));
        let c = |done, total| Counts { done, total };
        let first = [(a, c(1, 4)), (b, c(3, 3))];
        assert_eq!(r.due(&first), first.to_vec(), "everything, at start");
        assert_eq!(r.due(&first), vec![(a, c(1, 4))], "the open one again");
        let later = [(a, c(4, 4)), (b, c(3, 3))];
        assert_eq!(r.due(&later), vec![(a, c(4, 4))], "a's last report: done");
        assert!(r.due(&later).is_empty(), "nothing open, nothing new");
    }
}
