//! The Scheduler's apply path: replies verified, checked and planned, applied in one
//! transaction, and each delivery settled on its own; every committed job change goes through
//! [`Inner::apply_counted`], which keeps the in-flight counts and what is known of started
//! notices.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_bus::Delivery;
use shoal_model::envelope::MessageId;
use shoal_model::message::{ReplyBody, RUNNING_LEASE};
use shoal_model::{Message, SessionId};
use shoal_store::{Batch, LeaseRenewal, StoreError};

use super::plan::{check_reply, plan_reply, renewals, Leases};
use super::started::Refused;
use super::{started, Inner, Tag};
use crate::shutdown::Signal;
use crate::ActorError;

impl Inner {
    /// Applies a batch whose changes belong to `sessions[i]`, and keeps the in-flight counts
    /// and what is known of started notices: every committed job change goes through here.
    pub(super) async fn apply_counted(
        &mut self,
        batch: &Batch,
        sessions: &[SessionId],
    ) -> Result<Vec<bool>, ActorError> {
        for s in sessions {
            self.in_flight_of(*s).await?;
        }
        let t0 = Instant::now();
        let applied = self.store.apply(batch).await?;
        let m = shoal_metrics::metrics();
        m.apply_took(t0.elapsed());
        for (change, _) in batch.changes.iter().zip(&applied).filter(|(_, ok)| **ok) {
            if let Some(r) = &change.result {
                m.result(match &r.outcome {
                    shoal_model::Outcome::Measured(_) => "ok",
                    shoal_model::Outcome::Failed { kind, .. } => kind.as_str(),
                });
            }
        }
        self.started.committed(&batch.changes, &applied);
        for ((change, ok), session) in batch.changes.iter().zip(&applied).zip(sessions) {
            if *ok && change.transition.to.is_terminal() {
                self.record_outcome(*session, change);
            }
            if let Some(f) = self.in_flight.get_mut(session) {
                f.account([(&change.transition, *ok)]);
            }
        }
        Ok(applied)
    }

    /// Work of `session` started before this Scheduler's state was built: its lease holders, as
    /// the store recorded them (the worker each started job names), so that a restart does not
    /// open a lease to whoever speaks first. `counts` are the session's jobs per state.
    pub(super) async fn restore_holders(
        &mut self,
        session: SessionId,
        counts: &std::collections::BTreeMap<shoal_model::JobState, u64>,
    ) -> Result<(), ActorError> {
        use shoal_model::JobState::{Compiling, Evaluating};
        for state in [Compiling, Evaluating] {
            let n = counts
                .get(&state)
                .copied()
                .unwrap_or(0)
                .min(MAX_RESTORED_HOLDERS) as u32;
            if n == 0 {
                continue;
            }
            let jobs = self.store.jobs_in_state(session, state, n).await?;
            let started = &mut self.started;
            for job in jobs {
                if let Some(worker) = job.worker {
                    started.restore(job.id, job.attempt, worker);
                }
            }
        }
        Ok(())
    }

    /// Verifies, checks, plans and applies a batch of replies in one transaction, then settles
    /// each delivery on its own: a reply that cannot apply — unsigned, undecodable, not a reply,
    /// naming an unknown session, carrying impossible values, or entirely stale — is
    /// dead-lettered alone with its reason, and the rest of the batch goes on. A store that
    /// cannot be reached is retried while the deliveries are held ([`StoreRetry`]).
    pub(super) async fn apply_deliveries(
        &mut self,
        deliveries: Vec<Delivery>,
        stop: &Signal,
    ) -> Result<(), ActorError> {
        let now = self.now();
        let mut gathered = Gathered::with_capacity(deliveries.len());
        // The replies of this batch so far, by id: a second copy in the same batch is known as
        // one before the first is settled.
        let mut in_batch = std::collections::HashMap::new();
        for d in deliveries {
            if let Some((d, reply, leases, sent)) = self.accept_reply(d, &in_batch, stop).await? {
                in_batch.insert(sent.id, sent.publisher.clone());
                gathered.add(d, &reply, leases, now, sent);
            }
        }
        let Gathered {
            mut batch,
            tags,
            finished_builds,
            mut renewed,
            mut held,
        } = gathered;
        // Only the lease holder renews a lease it holds.
        {
            let started = &self.started;
            renewed.retain(|(r, worker, publisher)| {
                started.may_renew(r.job.job, r.job.attempt, worker, publisher)
            });
        }
        let renewed: Vec<LeaseRenewal> = renewed.into_iter().map(|(r, _, _)| r).collect();
        let (changes, tags, refused) =
            self.started
                .sift(std::mem::take(&mut batch.changes), tags, Instant::now());
        note_refused(&mut held, refused);
        let (changes, tags, chained) = self.chain_evals(changes, tags).await?;
        batch.changes = changes;
        let mut applied_any = vec![false; held.len()];
        if !batch.changes.is_empty() || !batch.builds.is_empty() {
            let sessions: Vec<SessionId> = tags.iter().map(|t| t.session).collect();
            let mut retry = StoreRetry::new(self.config.store_retry_for, stop, "applying replies");
            let applied = loop {
                match self.apply_counted(&batch, &sessions).await {
                    Err(e) if retry.again(&e).await => {}
                    other => break other?,
                }
            };
            for (tag, ok) in tags.iter().zip(&applied) {
                if let (Some(i), true) = (tag.origin, ok) {
                    applied_any[i] = true;
                }
            }
            self.publish_chained(chained, &applied).await?;
        }
        if !renewed.is_empty() {
            let mut retry = StoreRetry::new(self.config.store_retry_for, stop, "renewing leases");
            loop {
                match self
                    .store
                    .renew_leases(&renewed)
                    .await
                    .map_err(ActorError::from)
                {
                    Err(e) if retry.again(&e).await => {}
                    other => {
                        other?;
                        break;
                    }
                }
            }
        }
        {
            let building = &mut self.building;
            for k in finished_builds {
                building.remove(&k);
            }
        }
        for ((d, unapplied, sent), applied) in held.into_iter().zip(applied_any) {
            match unapplied {
                Unapplied::Stale(reason) | Unapplied::Refused(reason) if !applied => {
                    refuse(d, reason).await?
                }
                Unapplied::Superseded(reason) if !applied => {
                    tracing::info!(%reason, "late reply of a lease taken over after a redelivery; dropped");
                    d.ack().await?
                }
                _ => d.ack().await?,
            }
            // Settled: a copy of it from now on is a replay (or, from the same sender, a copy
            // its bus sent again).
            self.seen.insert(sent.id, sent.publisher);
        }
        Ok(())
    }

    /// The reply a delivery carries, with the leases of its session, if it may be planned at
    /// all: one that is no reply, fails its checks, names a session not in the store or is
    /// another sender's copy of a reply settled already (or earlier in `in_batch`) is
    /// dead-lettered here with its reason (`None`); its own sender's copy is acked and dropped.
    async fn accept_reply(
        &mut self,
        d: Delivery,
        in_batch: &std::collections::HashMap<MessageId, Arc<str>>,
        stop: &Signal,
    ) -> Result<Option<(Delivery, ReplyBody, Leases, Sent)>, ActorError> {
        let trusted = match self.bus.codec().open(&d.payload, d.publisher.as_deref()) {
            Ok(t) => t,
            Err(e) => {
                refuse(d, format!("refused on the results queue: {e}")).await?;
                return Ok(None);
            }
        };
        let reply = match trusted.message {
            Message::Reply(r) => r,
            other => {
                let kind = format!("{other:?}");
                let kind = kind.split('(').next().unwrap_or("?").to_string();
                refuse(d, format!("results queue got a {kind} message")).await?;
                return Ok(None);
            }
        };
        let settled_from = self
            .seen
            .sender(&trusted.id)
            .or_else(|| in_batch.get(&trusted.id).cloned());
        if let Some(first) = settled_from {
            if *first == *trusted.sender.user {
                // Its sender's bus sent it again: a publish whose confirm was lost with its
                // connection (a broker node died) goes out again on the next connection.
                tracing::info!(
                    id = %trusted.id,
                    kind = reply.kind(),
                    sender = %first,
                    "a copy of a reply settled already, from its own sender; dropped"
                );
                d.ack().await?;
                return Ok(None);
            }
            refuse(
                d,
                format!(
                    "replayed {} (message {} from {} was applied already)",
                    reply.kind(),
                    trusted.id,
                    trusted.sender.user
                ),
            )
            .await?;
            return Ok(None);
        }
        let sent = Sent {
            id: trusted.id,
            publisher: trusted.sender.user.as_str().into(),
        };
        if let Err(reason) = check_reply(&reply) {
            refuse(d, format!("impossible reply: {reason}")).await?;
            return Ok(None);
        }
        let session = reply.session();
        let mut retry = StoreRetry::new(self.config.store_retry_for, stop, "session lookup");
        let leases = loop {
            match self.leases(session).await {
                Err(e) if retry.again(&e).await => {}
                other => break other,
            }
        };
        match leases {
            Ok(leases) => {
                // The holders of work started before this Scheduler's state, before any reply
                // of the session is sifted (`in_flight_of` restores them once per session).
                let mut retry = StoreRetry::new(self.config.store_retry_for, stop, "lease holders");
                loop {
                    match self.in_flight_of(session).await {
                        Err(e) if retry.again(&e).await => {}
                        other => {
                            other?;
                            break;
                        }
                    }
                }
                // What the items of this step take on a device sizes the next requests.
                if let ReplyBody::Evaluated(e) = &reply {
                    self.shape
                        .observe(e.session, e.step, e.outcomes.len(), e.busy_us);
                }
                Ok(Some((d, reply, leases, sent)))
            }
            Err(ActorError::UnknownSession(s)) => {
                refuse(
                    d,
                    format!("reply for session {s}, which is not in the store"),
                )
                .await?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// Lease holders read back from the store per session and started state, at most.
const MAX_RESTORED_HOLDERS: u64 = 50_000;

/// Who sent an accepted reply, and its message id.
struct Sent {
    id: MessageId,
    publisher: Arc<str>,
}

/// The planned changes of a batch of replies, before any is applied, and the deliveries held
/// until they are settled.
struct Gathered {
    batch: Batch,
    /// One per change of `batch`: its session, and which held delivery it settles.
    tags: Vec<Tag>,
    /// (session, build key) of the builds whose results came in.
    finished_builds: Vec<(SessionId, String)>,
    /// Renewals, with the worker and the sender of the heartbeat that asks for each.
    renewed: Vec<(LeaseRenewal, String, Arc<str>)>,
    /// (delivery, what becomes of it if none of its changes applies, its id and sender)
    held: Vec<(Delivery, Unapplied, Sent)>,
}

/// What becomes of a reply none of whose changes applied.
enum Unapplied {
    /// Nothing to say (a started notice or a heartbeat that changed nothing): acked.
    Fine,
    /// Stale (none of its jobs is at the attempt it names): dead-lettered with this reason.
    Stale(String),
    /// Refused for not coming from the lease holder: dead-lettered with this reason.
    Refused(String),
    /// The late reply of a lease another worker of the same sender took over after the broker
    /// gave the request back ([`Refused::superseded`]): acked, and logged with this reason.
    Superseded(String),
}

impl Gathered {
    fn with_capacity(n: usize) -> Gathered {
        Gathered {
            batch: Batch::default(),
            tags: Vec::new(),
            finished_builds: Vec::new(),
            renewed: Vec::new(),
            held: Vec::with_capacity(n),
        }
    }

    /// Plans one accepted reply into the batch and holds its delivery. A started notice or a
    /// heartbeat that changes nothing is no fault (it is acked); any other reply none of whose
    /// changes applies is stale.
    fn add(&mut self, d: Delivery, reply: &ReplyBody, leases: Leases, now: i64, sent: Sent) {
        let session = reply.session();
        if let ReplyBody::Compiled(c) = reply {
            self.finished_builds.push((c.session, c.build_key.clone()));
        }
        let worker = match reply {
            ReplyBody::Heartbeat { worker, .. } | ReplyBody::Started { worker, .. } => {
                worker.as_str()
            }
            _ => "",
        };
        self.renewed.extend(
            renewals(reply, now + RUNNING_LEASE.as_millis() as i64)
                .into_iter()
                .map(|r| (r, worker.to_string(), sent.publisher.clone())),
        );
        let stale_if_unapplied = match reply {
            ReplyBody::Started { .. } | ReplyBody::Heartbeat { .. } => Unapplied::Fine,
            r => Unapplied::Stale(format!(
                "stale {}: no job of it is at the attempt it names",
                r.kind()
            )),
        };
        let plan = plan_reply(reply, leases, now);
        let origin = Some(self.held.len());
        self.tags.extend(plan.changes.iter().map(|c| {
            Tag {
                session,
                origin: (!started::is_started_edge(&c.transition))
                    .then_some(origin)
                    .flatten(),
                publisher: sent.publisher.clone(),
            }
        }));
        self.batch.changes.extend(plan.changes);
        self.batch.builds.extend(plan.builds);
        self.held.push((d, stale_if_unapplied, sent));
    }
}

/// A reply none of whose changes applies is dead-lettered: says why, if it was refused for not
/// coming from the lease holder; unless every refusal of it was of a lease taken over by its own
/// sender (a failover's late reply), which is dropped instead.
fn note_refused(held: &mut [(Delivery, Unapplied, Sent)], refused: Vec<Refused<Tag>>) {
    for r in refused {
        let Some(i) = r.tag.origin else {
            continue;
        };
        let reason = format!("not from the lease holder: {}", r.reason);
        match &held[i].1 {
            Unapplied::Fine | Unapplied::Refused(_) => {}
            Unapplied::Stale(_) | Unapplied::Superseded(_) if r.superseded => {
                tracing::info!(reason = %r.reason, "result of a lease taken over refused");
                held[i].1 = Unapplied::Superseded(reason);
            }
            Unapplied::Stale(_) | Unapplied::Superseded(_) => {
                tracing::warn!(reason = %r.reason, "result refused");
                held[i].1 = Unapplied::Refused(reason);
            }
        }
    }
}

/// Dead-letters one reply with its reason, logged.
async fn refuse(d: Delivery, reason: String) -> Result<(), ActorError> {
    tracing::warn!(reason = %reason, "reply dead-lettered");
    d.dead_letter(reason).await?;
    Ok(())
}

/// Paces the retries of a store operation that fails because the store cannot be reached:
/// backoff from 100 ms to 5 s, for at most [`super::SchedulerConfig::store_retry_for`] and not
/// past the stop signal. The operation itself is written at the call site, in a loop:
/// ```ignore
/// let out = loop {
///     match op(&mut state).await {
///         Err(e) if retry.again(&e).await => {}
///         other => break other?,
///     }
/// };
/// ```
/// so that it may borrow the Scheduler's state mutably, which a closure returning a future
/// cannot.
pub(super) struct StoreRetry<'a> {
    give_up: Instant,
    delay: Duration,
    stop: &'a Signal,
    what: &'static str,
}

impl<'a> StoreRetry<'a> {
    pub(super) fn new(retry_for: Duration, stop: &'a Signal, what: &'static str) -> Self {
        StoreRetry {
            give_up: Instant::now() + retry_for,
            delay: Duration::from_millis(100),
            stop,
            what,
        }
    }

    /// Whether to try again after `e`: if so, once the backoff's delay has passed. Only the
    /// store's being unreachable is retried; other errors, and the last one, are not.
    pub(super) async fn again(&mut self, e: &ActorError) -> bool {
        let unreachable = matches!(
            e,
            ActorError::Store(StoreError::Backend { .. } | StoreError::Unreachable { .. })
        );
        if !unreachable || Instant::now() >= self.give_up || self.stop.is_triggered() {
            return false;
        }
        tracing::warn!(error = %e, what = self.what, retry_in_ms = self.delay.as_millis() as u64, "store unreachable; replies held, retrying");
        tokio::time::sleep(self.delay).await;
        self.delay = (self.delay * 2).min(Duration::from_secs(5));
        true
    }
}
