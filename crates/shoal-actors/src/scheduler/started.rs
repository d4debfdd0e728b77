//! "Started" notices, held back, and what the Scheduler knows for certain about them.
//!
//! A worker says "started" when it takes a job, and replies with the result when it is done.
//! Writing every notice would cost a row write per job for work that often finishes in
//! milliseconds, so notices are held back for [`STARTED_DEBOUNCE`]: work that finishes sooner
//! never shows as compiling or evaluating, and work that takes longer gets its state and renewed
//! lease a second late.
//!
//! A result is planned as two compare-and-sets, one from the queued state and one from the
//! started state (see [`plan`](super::plan)); at most one can match. When this Scheduler *knows*
//! which state the job is in, it sends only the one that can match, which the store writes as
//! one guarded `UPDATE`. It knows only what it has seen committed ([`StartedNotices::committed`]):
//! - it queued this attempt itself and has not committed a started notice for it: the job is
//!   queued (no one else writes job state);
//! - it committed the started notice for this attempt: the job is started.
//!
//! Anything else — a Scheduler restarted midway, a duplicate notice after a redelivery, a notice
//! whose write failed — keeps both alternatives, so a result is never dropped for want of
//! knowledge. (An earlier version inferred "queued" from a notice being held, and a duplicate
//! notice after a redelivery made it drop the real result.)
//!
//! **The lease holder.** The worker whose "started" notice for an attempt took the lease holds
//! it, together with the sender the bus authenticated for that notice (its broker user,
//! [`Publisher::publisher`]); a result, a hand-back or a heartbeat for the attempt from another
//! worker, or from another sender under the same worker name, is refused. A request is
//! delivered to a second worker at the same attempt only when the broker gave it back (the first
//! worker's connection dropped). That worker's notice takes the lease over if the same sender
//! sent it, so the first one's late result is refused rather than racing the second's (marked
//! [`Refused::superseded`]: a broker node that dies takes its connections with it, so this is what
//! a failover looks like, and the Scheduler drops such a reply with a log line instead of
//! dead-lettering it as suspect); another sender's does not ([`Holder::yields_to`]): a host cannot take over work another host has
//! started, and a lost host's lease runs out instead (the job is tried again at a new attempt).
//! After a restart the holders of started work are read back from the store by worker name
//! ([`StartedNotices::restore`]). Where no notice was seen (work shorter than the notices' path)
//! the attempt alone decides, as the store's compare-and-set does.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use shoal_model::{JobId, JobState, Transition};
use shoal_store::Change;

/// How long a "started" notice is held back before it is written.
pub(crate) const STARTED_DEBOUNCE: Duration = Duration::from_millis(1000);

/// A job at an attempt.
type Key = (JobId, u32);

/// What the caller's tag says of a change's sender: the broker user that published the reply
/// it came from (`""` where nobody is known, as in tests).
pub(crate) trait Publisher {
    fn publisher(&self) -> &str;
}

#[cfg(test)]
impl Publisher for () {
    fn publisher(&self) -> &str {
        ""
    }
}

#[cfg(test)]
impl Publisher for u8 {
    fn publisher(&self) -> &str {
        ""
    }
}

#[cfg(test)]
impl Publisher for &'static str {
    fn publisher(&self) -> &str {
        self
    }
}

/// Who holds an attempt's lease: the worker its notice named, and the sender of that notice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Holder {
    pub worker: Option<String>,
    pub publisher: String,
}

impl Holder {
    /// Whether a later started notice for the same attempt takes this lease over. From the
    /// same sender, yes: the broker gave the request back to another of its workers (a shared
    /// role user cannot be told apart). From another sender, no: a host's identity does not take
    /// work another host has started; if that host is gone, its lease runs out and the job is
    /// tried again at a new attempt. A holder read back from the store yields only to its own
    /// worker.
    pub(crate) fn yields_to(&self, next: &Holder) -> bool {
        if self.publisher.is_empty() && !next.publisher.is_empty() {
            return self.worker == next.worker;
        }
        self.publisher == next.publisher
    }

    /// Whether a reply of `worker` from `publisher` may speak for this lease. A holder read
    /// back from the store after a restart has no known sender: its worker name decides.
    pub(crate) fn admits(&self, worker: Option<&str>, publisher: &str) -> bool {
        (self.publisher.is_empty() || publisher == self.publisher)
            && match (worker, self.worker.as_deref()) {
                (Some(w), Some(h)) => w == h,
                _ => true,
            }
    }
}

/// A worker as refusals name it: with the sender where one is known.
fn who(worker: &str, publisher: &str) -> String {
    if publisher.is_empty() {
        worker.to_string()
    } else {
        format!("{worker} (sent by {publisher})")
    }
}

/// Held-back notices, with a tag of the caller's (the session) carried along.
pub(crate) struct StartedNotices<T> {
    pending: HashMap<Key, (Instant, Change, T)>,
    /// Attempts this Scheduler queued, whose started notice is not committed.
    queued: HashSet<Key>,
    /// Attempts whose started notice this Scheduler committed.
    started: HashSet<Key>,
    /// The worker (and sender) whose started notice for an attempt was seen last: the lease
    /// holder.
    holders: HashMap<Key, Holder>,
}

/// Holders remembered at most; past it they are forgotten (the attempt alone then decides), so
/// notices of jobs whose results never come here (a lease that ran out) cannot pile up.
const MAX_HOLDERS: usize = 100_000;

/// A result refused because it did not come from the lease holder: its caller's tag, and why.
pub(crate) struct Refused<T> {
    pub tag: T,
    pub reason: String,
    /// It came from the very sender that holds the lease, under another worker's name: a
    /// worker of that sender took the lease over when the broker gave the request back (the
    /// first worker's connection dropped), and this is the first worker's late reply. Expected
    /// after a broker failover, not a sign of anyone hostile: a sender that shares its identity
    /// with other workers cannot be told apart from them anyway (per-host users can).
    pub superseded: bool,
}

impl<T> Default for StartedNotices<T> {
    fn default() -> Self {
        StartedNotices {
            pending: HashMap::new(),
            queued: HashSet::new(),
            started: HashSet::new(),
            holders: HashMap::new(),
        }
    }
}

/// Whether a change is a "started" notice (queued → started).
pub(crate) fn is_started_edge(t: &Transition) -> bool {
    use JobState::*;
    matches!(
        (t.from, t.to),
        (CompileQueued, Compiling) | (EvalQueued, Evaluating)
    )
}

fn is_queued(s: JobState) -> bool {
    matches!(s, JobState::CompileQueued | JobState::EvalQueued)
}

fn is_started(s: JobState) -> bool {
    matches!(s, JobState::Compiling | JobState::Evaluating)
}

impl<T: Publisher> StartedNotices<T> {
    /// The worker holding the lease of a job's attempt, as far as this Scheduler has seen.
    #[cfg(test)]
    pub(crate) fn holder(&self, job: JobId, attempt: u32) -> Option<&str> {
        self.holders
            .get(&(job, attempt))
            .and_then(|h| h.worker.as_deref())
    }

    /// A lease holder read from the store (a job started before this Scheduler's state was
    /// built: the worker its row names), unless one is known already.
    pub(crate) fn restore(&mut self, job: JobId, attempt: u32, worker: String) {
        if self.holders.len() < MAX_HOLDERS {
            self.holders.entry((job, attempt)).or_insert(Holder {
                worker: Some(worker),
                publisher: String::new(),
            });
        }
    }

    /// Whether `publisher` (for `worker`) may renew the lease of a job's attempt: it holds it,
    /// or this Scheduler knows no holder (the attempt alone then decides, as in the store).
    pub(crate) fn may_renew(
        &self,
        job: JobId,
        attempt: u32,
        worker: &str,
        publisher: &str,
    ) -> bool {
        self.holders
            .get(&(job, attempt))
            .is_none_or(|h| h.admits(Some(worker), publisher))
    }

    /// Takes a batch of planned changes (with their tags): holds back started notices, refuses
    /// results from a worker that does not hold the lease, drops the alternative of a result
    /// that certainly cannot match, and adds the notices held long enough.
    pub(crate) fn sift(
        &mut self,
        changes: Vec<Change>,
        tags: Vec<T>,
        now: Instant,
    ) -> (Vec<Change>, Vec<T>, Vec<Refused<T>>) {
        let mut out = Vec::with_capacity(changes.len());
        let mut out_tags = Vec::with_capacity(changes.len());
        let mut refused = Vec::new();
        let mut finished = HashSet::new();
        for (c, tag) in changes.into_iter().zip(tags) {
            let t = &c.transition;
            let key = (t.job, t.attempt);
            if is_started_edge(t) {
                if t.worker.is_some() {
                    if self.holders.len() >= MAX_HOLDERS {
                        self.holders.clear();
                    }
                    let holder = Holder {
                        worker: t.worker.clone(),
                        publisher: tag.publisher().to_string(),
                    };
                    match self.holders.get(&key) {
                        Some(held) if !held.yields_to(&holder) => {
                            tracing::warn!(
                                job = %t.job,
                                attempt = t.attempt,
                                holder = ?held.worker,
                                by = %holder.publisher,
                                "a started notice from another sender does not take a held lease"
                            );
                        }
                        _ => {
                            self.holders.insert(key, holder);
                        }
                    }
                }
                self.pending.entry(key).or_insert((now, c, tag));
                continue;
            }
            if is_queued(t.from) || is_started(t.from) {
                if let Some(holder) = self.holders.get(&key) {
                    if !holder.admits(t.worker.as_deref(), tag.publisher()) {
                        let reason = format!(
                            "job {} attempt {}: reply from {}, but {} holds the lease",
                            t.job,
                            t.attempt,
                            who(t.worker.as_deref().unwrap_or("a worker"), tag.publisher()),
                            who(holder.worker.as_deref().unwrap_or("?"), &holder.publisher),
                        );
                        let superseded =
                            !holder.publisher.is_empty() && holder.publisher == tag.publisher();
                        refused.push(Refused {
                            tag,
                            reason,
                            superseded,
                        });
                        continue;
                    }
                }
                finished.insert(key);
                let notice_committed = self.started.contains(&key);
                let surely_queued = self.queued.contains(&key) && !notice_committed;
                if is_started(t.from) && surely_queued {
                    continue;
                }
                if is_queued(t.from) && notice_committed {
                    continue;
                }
            }
            out.push(c);
            out_tags.push(tag);
        }
        // A finished job's held notice would only be refused: forget it.
        for key in finished {
            self.pending.remove(&key);
        }
        let due: Vec<Key> = self
            .pending
            .iter()
            .filter(|(_, (at, _, _))| now.duration_since(*at) >= STARTED_DEBOUNCE)
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            if let Some((_, c, tag)) = self.pending.remove(&key) {
                out.push(c);
                out_tags.push(tag);
            }
        }
        (out, out_tags, refused)
    }

    /// Learns from changes that were committed (`applied[i]` for `changes[i]`), in order: the
    /// only source of what [`sift`](Self::sift) takes as certain.
    pub(crate) fn committed(&mut self, changes: &[Change], applied: &[bool]) {
        for (c, ok) in changes.iter().zip(applied) {
            let t = &c.transition;
            let key = (t.job, t.attempt);
            if !ok {
                // A notice refused means the job is not where this Scheduler thought: from
                // here on, nothing about this attempt is certain.
                if is_started_edge(t) {
                    self.queued.remove(&key);
                }
                continue;
            }
            if is_queued(t.to) && !is_queued(t.from) {
                self.queued.insert((t.job, t.next_attempt()));
            } else if is_started_edge(t) {
                self.started.insert(key);
            } else if is_queued(t.from) || is_started(t.from) {
                self.queued.remove(&key);
                self.started.remove(&key);
                self.holders.remove(&key);
            }
        }
    }

    /// Every held notice, now (shutdown).
    pub(crate) fn drain(&mut self) -> (Vec<Change>, Vec<T>) {
        let mut out = Vec::new();
        let mut tags = Vec::new();
        for (_, (_, c, tag)) in self.pending.drain() {
            out.push(c);
            tags.push(tag);
        }
        (out, tags)
    }

    /// Attempts tracked, for tests and bounds.
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.queued.len() + self.started.len() + self.pending.len() + self.holders.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_model::JobState::*;

    fn change(job: i64, from: JobState, attempt: u32, to: JobState) -> Change {
        Transition::new(JobId(job), from, attempt, to)
            .unwrap()
            .into()
    }

    /// A result as planned: the started alternative, then the queued one.
    fn result(job: i64, attempt: u32) -> Vec<Change> {
        vec![
            change(job, Evaluating, attempt, Evaluated),
            change(job, EvalQueued, attempt, Evaluated),
        ]
    }

    fn froms(out: &[Change]) -> Vec<JobState> {
        out.iter().map(|c| c.transition.from).collect()
    }

    fn queue(n: &mut StartedNotices<()>, job: i64) {
        // compiled (attempt 1) → eval_queued (attempt 2)
        n.committed(&[change(job, Compiled, 1, EvalQueued)], &[true]);
    }

    #[test]
    fn a_notice_and_its_result_together_take_the_queued_path() {
        let mut n = StartedNotices::default();
        let t0 = Instant::now();
        queue(&mut n, 1);
        let mut batch = vec![change(1, EvalQueued, 2, Evaluating)];
        batch.extend(result(1, 2));
        let (out, _, _) = n.sift(batch, vec![(); 3], t0);
        assert_eq!(froms(&out), vec![EvalQueued]);
        n.committed(&out, &[true]);
        assert_eq!(n.tracked(), 0);
    }

    #[test]
    fn a_committed_notice_sends_its_result_down_the_started_path() {
        let mut n = StartedNotices::default();
        let t0 = Instant::now();
        queue(&mut n, 2);
        let (out, _, _) = n.sift(vec![change(2, EvalQueued, 2, Evaluating)], vec![()], t0);
        assert!(out.is_empty(), "held back");
        let later = t0 + STARTED_DEBOUNCE;
        let (out, _, _) = n.sift(vec![], vec![], later);
        assert_eq!(out.len(), 1);
        n.committed(&out, &[true]);
        let (out, _, _) = n.sift(result(2, 2), vec![(); 2], later);
        assert_eq!(froms(&out), vec![Evaluating]);
    }

    /// The bug this module's rules fix: a notice written, then a duplicate notice (the request
    /// was redelivered), then the result. The result must still reach the store.
    #[test]
    fn a_duplicate_notice_never_drops_the_result() {
        let mut n = StartedNotices::default();
        let t0 = Instant::now();
        queue(&mut n, 3);
        n.sift(vec![change(3, EvalQueued, 2, Evaluating)], vec![()], t0);
        let later = t0 + STARTED_DEBOUNCE;
        let (out, _, _) = n.sift(vec![], vec![], later);
        n.committed(&out, &[true]);
        // The duplicate is held; the result arrives while it is.
        let (out, _, _) = n.sift(vec![change(3, EvalQueued, 2, Evaluating)], vec![()], later);
        assert!(out.is_empty());
        let (out, _, _) = n.sift(result(3, 2), vec![(); 2], later);
        assert_eq!(
            froms(&out),
            vec![Evaluating],
            "the path that matches is kept"
        );
    }

    /// A Scheduler restarted midway knows nothing of the jobs: both alternatives, whatever
    /// notices arrive.
    #[test]
    fn without_knowledge_both_alternatives_are_kept() {
        let mut n = StartedNotices::default();
        let t0 = Instant::now();
        n.sift(vec![change(4, EvalQueued, 2, Evaluating)], vec![()], t0);
        let (out, _, _) = n.sift(result(4, 2), vec![(); 2], t0);
        assert_eq!(froms(&out), vec![Evaluating, EvalQueued]);
        // A notice refused by the store unsettles what was known.
        let mut n = StartedNotices::default();
        queue(&mut n, 5);
        let later = t0 + STARTED_DEBOUNCE;
        n.sift(vec![change(5, EvalQueued, 2, Evaluating)], vec![()], t0);
        let (out, _, _) = n.sift(vec![], vec![], later);
        n.committed(&out, &[false]);
        let (out, _, _) = n.sift(result(5, 2), vec![(); 2], later);
        assert_eq!(froms(&out), vec![Evaluating, EvalQueued]);
    }

    #[test]
    fn shutdown_writes_what_is_held() {
        let mut n: StartedNotices<u8> = StartedNotices::default();
        n.sift(
            vec![change(6, CompileQueued, 1, Compiling)],
            vec![9],
            Instant::now(),
        );
        let (out, tags) = n.drain();
        assert_eq!((out.len(), tags), (1, vec![9]));
    }

    /// Changes as a worker's reply plans them: they name the worker.
    fn by(worker: &str, changes: Vec<Change>) -> Vec<Change> {
        changes
            .into_iter()
            .map(|mut c| {
                c.transition.worker = Some(worker.to_string());
                c
            })
            .collect()
    }

    #[test]
    fn a_result_from_a_worker_that_does_not_hold_the_lease_is_refused() {
        let mut n = StartedNotices::default();
        let t0 = Instant::now();
        queue(&mut n, 7);
        let notice = by("a", vec![change(7, EvalQueued, 2, Evaluating)]);
        n.sift(notice, vec![()], t0);
        assert_eq!(n.holder(JobId(7), 2), Some("a"));
        // A stranger's result for the same attempt: refused, with who holds it.
        let (out, _, refused) = n.sift(by("b", result(7, 2)), vec![(); 2], t0);
        assert!(out.is_empty());
        assert_eq!(refused.len(), 2);
        assert!(
            refused[0].reason.contains("from b, but a holds"),
            "{}",
            refused[0].reason
        );
        // The holder's result goes through.
        let (out, _, refused) = n.sift(by("a", result(7, 2)), vec![(); 2], t0);
        assert!(refused.is_empty());
        assert_eq!(froms(&out), vec![EvalQueued]);
        n.committed(&out, &[true]);
        assert_eq!(n.holder(JobId(7), 2), None);
    }

    /// The holder is who sent the notice, not only the name it gave: another sender naming the
    /// holder's worker is refused, and may not renew its lease.
    #[test]
    fn a_result_under_the_holders_name_from_another_sender_is_refused() {
        let mut n: StartedNotices<&'static str> = StartedNotices::default();
        let t0 = Instant::now();
        n.committed(&[change(8, Compiled, 1, EvalQueued)], &[true]);
        let notice = by(
            "h1/evaluator[0]",
            vec![change(8, EvalQueued, 2, Evaluating)],
        );
        n.sift(notice, vec!["shoal_eval.h1"], t0);
        assert!(n.may_renew(JobId(8), 2, "h1/evaluator[0]", "shoal_eval.h1"));
        assert!(!n.may_renew(JobId(8), 2, "h1/evaluator[0]", "shoal_eval.h2"));
        assert!(
            n.may_renew(JobId(9), 1, "anyone", "anyone"),
            "no holder known"
        );
        let forged = by("h1/evaluator[0]", result(8, 2));
        let (out, _, refused) = n.sift(forged, vec!["shoal_eval.h2"; 2], t0);
        assert!(out.is_empty());
        assert!(!refused[0].superseded, "another sender's reply is suspect");
        assert!(
            refused[0].reason.contains(
                "from h1/evaluator[0] (sent by shoal_eval.h2), but h1/evaluator[0] (sent by shoal_eval.h1) holds"
            ),
            "{}",
            refused[0].reason
        );
        let genuine = by("h1/evaluator[0]", result(8, 2));
        let (out, _, refused) = n.sift(genuine, vec!["shoal_eval.h1"; 2], t0);
        assert!(refused.is_empty());
        assert_eq!(out.len(), 1);
    }

    /// Another sender's notice for an attempt already held does not take the lease: an insider
    /// cannot start the work of another host and have that host's result refused.
    #[test]
    fn another_senders_notice_does_not_take_a_held_lease() {
        let mut n: StartedNotices<&'static str> = StartedNotices::default();
        let t0 = Instant::now();
        let notice = |w| by(w, vec![change(9, EvalQueued, 2, Evaluating)]);
        n.sift(notice("h1/e"), vec!["shoal_eval.h1"], t0);
        n.sift(notice("h2/e"), vec!["shoal_eval.h2"], t0);
        assert_eq!(n.holder(JobId(9), 2), Some("h1/e"));
        let (out, _, refused) = n.sift(by("h2/e", result(9, 2)), vec!["shoal_eval.h2"; 2], t0);
        assert!(out.is_empty() && refused.len() == 2);
        let (out, _, refused) = n.sift(by("h1/e", result(9, 2)), vec!["shoal_eval.h1"; 2], t0);
        assert!(refused.is_empty() && !out.is_empty());
        // A holder read back from the store yields to its own worker only.
        let mut n: StartedNotices<&'static str> = StartedNotices::default();
        n.restore(JobId(9), 2, "h1/e".into());
        n.sift(notice("h2/e"), vec!["shoal_eval.h2"], t0);
        assert_eq!(n.holder(JobId(9), 2), Some("h1/e"));
        n.sift(notice("h1/e"), vec!["shoal_eval.h1"], t0);
        assert!(n.may_renew(JobId(9), 2, "h1/e", "shoal_eval.h1"));
        assert!(!n.may_renew(JobId(9), 2, "h1/e", "shoal_eval.h2"));
    }

    #[test]
    fn a_later_notice_takes_the_lease_over() {
        // The broker gave a's delivery back (a's connection dropped) and b got it at the same
        // attempt: b's notice makes b the holder, and a's late result is refused.
        let mut n = StartedNotices::default();
        let t0 = Instant::now();
        n.sift(
            by("a", vec![change(8, EvalQueued, 2, Evaluating)]),
            vec![()],
            t0,
        );
        n.sift(
            by("b", vec![change(8, EvalQueued, 2, Evaluating)]),
            vec![()],
            t0,
        );
        assert_eq!(n.holder(JobId(8), 2), Some("b"));
        let (out, _, refused) = n.sift(by("a", result(8, 2)), vec![(); 2], t0);
        assert!(out.is_empty() && refused.len() == 2);
        let (out, _, refused) = n.sift(by("b", result(8, 2)), vec![(); 2], t0);
        assert!(refused.is_empty());
        assert_eq!(froms(&out), vec![Evaluating, EvalQueued]);
    }

    /// After a failover: b (a's sender) took a's request over; a's late result is superseded.
    #[test]
    fn a_late_result_of_the_same_sender_is_superseded_not_suspect() {
        let mut n: StartedNotices<&'static str> = StartedNotices::default();
        let t0 = Instant::now();
        let notice = |w| by(w, vec![change(8, EvalQueued, 2, Evaluating)]);
        n.sift(notice("a"), vec!["shoal_eval"], t0);
        n.sift(notice("b"), vec!["shoal_eval"], t0);
        assert_eq!(n.holder(JobId(8), 2), Some("b"));
        let (out, _, refused) = n.sift(by("a", result(8, 2)), vec!["shoal_eval"; 2], t0);
        assert!(out.is_empty() && refused.len() == 2);
        assert!(refused.iter().all(|r| r.superseded));
        let (out, _, refused) = n.sift(by("b", result(8, 2)), vec!["shoal_eval"; 2], t0);
        assert!(refused.is_empty() && !out.is_empty());
    }

    #[test]
    fn without_a_notice_the_attempt_alone_decides() {
        // A Scheduler restarted midway saw no notice: any worker's result for the attempt is
        // planned, and the store's compare-and-set decides.
        let mut n: StartedNotices<()> = StartedNotices::default();
        let (out, _, refused) = n.sift(by("c", result(9, 2)), vec![(); 2], Instant::now());
        assert!(refused.is_empty());
        assert_eq!(out.len(), 2);
    }
}
