//! The Scheduler: the only writer of job state.
//!
//! Two loops share one actor:
//! - **dispatch**: claims `new` jobs in batches (grouped by build key, so one compile serves every
//!   job that needs it), reuses builds already known, publishes compile requests; claims
//!   `compiled` jobs and publishes eval requests; keeps the number of jobs in flight bounded so a
//!   lease measures work, not a long wait in a queue; requeues expired leases; errors jobs whose
//!   retries are exhausted.
//! - **results**: consumes the results queue in batches, turns each reply into compare-and-sets
//!   ([`plan`]), applies the batch in one transaction, and only then acknowledges the deliveries.
//!   A compile result also moves its jobs on to `eval_queued` in the same write and publishes
//!   their eval requests after the commit (`Inner::chain_evals`): one row write per job fewer.
//!
//! State is committed before the message that depends on it is published: if the publish fails
//! the job sits in a queued state under a lease, and the lease brings it back.

mod dispatch;
pub mod plan;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use shoal_bus::{Bus, Consumer, Delivery, QueueOptions};
use shoal_model::{envelope, Config, ConfigId, Message, Session, SessionId, Transition};
use shoal_store::{Batch, Change, Store};
use tokio::sync::Notify;

use crate::backends::SessionBackends;
use crate::shutdown::{DrainGuard, Signal};
use crate::supervise::{supervise, Backoff};
use crate::{now_ms, ActorError};
use plan::{plan_reply, Leases};

/// How the Scheduler paces work. Every number bounds something that would otherwise grow.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Sessions this Scheduler serves; empty: every session with open work (the cluster).
    pub sessions: Vec<SessionId>,
    /// Jobs in compile phases (queued or compiling) at most: about two builds per compile slot
    /// keeps every slot busy while a lease still measures work, not waiting.
    pub max_compile_in_flight: u64,
    /// Jobs in eval phases at most, for the same reason.
    pub max_eval_in_flight: u64,
    /// Items per eval request.
    pub eval_batch: usize,
    /// Lease for a job waiting in a queue.
    pub queue_lease: Duration,
    /// How often dispatch runs when nothing wakes it sooner.
    pub tick: Duration,
    /// Replies applied per transaction at most.
    pub result_batch: usize,
    /// Delivery limit of the queues this Scheduler declares.
    pub delivery_limit: u32,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            sessions: Vec::new(),
            max_compile_in_flight: 64,
            max_eval_in_flight: 8,
            eval_batch: 1,
            queue_lease: Duration::from_secs(600),
            tick: Duration::from_millis(200),
            result_batch: 256,
            delivery_limit: 5,
        }
    }
}

/// The Scheduler actor. It owns no job state in memory that the store does not also have,
/// except the set of builds in progress (lost on restart, which costs at most a duplicate build).
pub struct Scheduler {
    inner: Arc<Inner>,
    stop: Signal,
    guard: DrainGuard,
}

struct Inner {
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    backends: SessionBackends,
    config: SchedulerConfig,
    /// Wakes dispatch when replies freed capacity.
    wake: Notify,
    sessions: Mutex<HashMap<SessionId, Session>>,
    configs: Mutex<HashMap<ConfigId, Config>>,
    /// (session, build key) pairs with a compile request out.
    building: Mutex<HashSet<(SessionId, String)>>,
    /// Jobs this Scheduler sent to compile, as claimed (what an eval request needs), so that
    /// their compile result can dispatch the eval in the same compare-and-set (see
    /// [`Inner::chain_evals`]). Lost on restart: those jobs then take the ordinary eval dispatch.
    compiling: Mutex<HashMap<shoal_model::JobId, shoal_model::Job>>,
    /// Queues already declared by this Scheduler.
    declared: Mutex<HashSet<String>>,
    /// "Started" notices held back for a moment (see [`StartedNotices`]).
    started: Mutex<StartedNotices>,
    /// Jobs in flight per session and phase, kept by the one writer as it applies changes
    /// (counted from the store once per session), so dispatch never scans the job table.
    in_flight: Mutex<HashMap<SessionId, InFlight>>,
}

/// How long a "started" notice is held back before it is written.
const STARTED_DEBOUNCE: Duration = Duration::from_millis(1000);

/// "Started" notices are held back for [`STARTED_DEBOUNCE`]: work that finishes sooner never
/// shows as compiling or evaluating, and its notice costs no write; work that takes longer gets
/// its state and renewed lease a second late. Knowing which notices were written, the result of
/// a job is one compare-and-set instead of two alternatives.
#[derive(Default)]
struct StartedNotices {
    pending: HashMap<(shoal_model::JobId, u32), (Instant, Change, SessionId)>,
    written: HashSet<(shoal_model::JobId, u32)>,
}

impl StartedNotices {
    fn is_started_edge(t: &Transition) -> bool {
        use shoal_model::JobState::*;
        matches!(
            (t.from, t.to),
            (CompileQueued, Compiling) | (EvalQueued, Evaluating)
        )
    }

    /// Takes the batch's changes: holds back started notices, drops the alternative of a result
    /// that cannot match, and adds the notices held long enough.
    fn sift(
        &mut self,
        changes: Vec<Change>,
        sessions: Vec<SessionId>,
        now: Instant,
    ) -> (Vec<Change>, Vec<SessionId>) {
        use shoal_model::JobState::*;
        let mut out = Vec::with_capacity(changes.len());
        let mut out_sessions = Vec::with_capacity(changes.len());
        let mut finished = HashSet::new();
        for (c, session) in changes.into_iter().zip(sessions) {
            let t = &c.transition;
            let key = (t.job, t.attempt);
            if Self::is_started_edge(t) {
                self.pending.entry(key).or_insert((now, c, session));
                continue;
            }
            let from_started = matches!(t.from, Compiling | Evaluating);
            let from_queued = matches!(t.from, CompileQueued | EvalQueued);
            if from_started || from_queued {
                finished.insert(key);
                if self.pending.contains_key(&key) && from_started {
                    continue; // its notice was never written: the job is still queued
                }
                if self.written.contains(&key) && from_queued {
                    continue; // its notice was written: the job is started
                }
            }
            out.push(c);
            out_sessions.push(session);
        }
        for key in finished {
            self.pending.remove(&key);
            self.written.remove(&key);
        }
        let due: Vec<_> = self
            .pending
            .iter()
            .filter(|(_, (at, _, _))| now.duration_since(*at) >= STARTED_DEBOUNCE)
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            if let Some((_, c, session)) = self.pending.remove(&key) {
                self.written.insert(key);
                out.push(c);
                out_sessions.push(session);
            }
        }
        (out, out_sessions)
    }

    /// Every held notice, now (shutdown).
    fn drain(&mut self) -> (Vec<Change>, Vec<SessionId>) {
        let mut out = Vec::new();
        let mut sessions = Vec::new();
        for (key, (_, c, session)) in self.pending.drain() {
            self.written.insert(key);
            out.push(c);
            sessions.push(session);
        }
        (out, sessions)
    }
}

/// Jobs of a session in the compile phase (queued or compiling) and in the eval phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    pub compile: i64,
    pub eval: i64,
}

impl InFlight {
    /// The phase a state belongs to: 0 compile, 1 eval, none otherwise.
    fn phase(state: shoal_model::JobState) -> Option<usize> {
        use shoal_model::JobState::*;
        match state {
            CompileQueued | Compiling => Some(0),
            EvalQueued | Evaluating => Some(1),
            _ => None,
        }
    }

    fn slot(&mut self, phase: usize) -> &mut i64 {
        if phase == 0 {
            &mut self.compile
        } else {
            &mut self.eval
        }
    }

    /// Accounts for the changes that applied.
    pub fn account<'a>(&mut self, applied: impl IntoIterator<Item = (&'a Transition, bool)>) {
        for (t, ok) in applied {
            if !ok {
                continue;
            }
            let (from, to) = (Self::phase(t.from), Self::phase(t.to));
            if from != to {
                if let Some(p) = from {
                    *self.slot(p) -= 1;
                }
                if let Some(p) = to {
                    *self.slot(p) += 1;
                }
            }
        }
    }
}

impl Scheduler {
    pub fn new(
        store: Arc<dyn Store>,
        bus: Arc<dyn Bus>,
        backends: SessionBackends,
        config: SchedulerConfig,
        stop: Signal,
        guard: DrainGuard,
    ) -> Self {
        Scheduler {
            inner: Arc::new(Inner {
                store,
                bus,
                backends,
                config,
                wake: Notify::new(),
                sessions: Mutex::new(HashMap::new()),
                configs: Mutex::new(HashMap::new()),
                building: Mutex::new(HashSet::new()),
                compiling: Mutex::new(HashMap::new()),
                declared: Mutex::new(HashSet::new()),
                in_flight: Mutex::new(HashMap::new()),
                started: Mutex::new(StartedNotices::default()),
            }),
            stop,
            guard,
        }
    }
}

impl Actor for Scheduler {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        let inner = self.inner.clone();
        let stop = self.stop.clone();
        supervise(
            "scheduler.dispatch".into(),
            Backoff::default(),
            self.stop.clone(),
            self.guard.clone(),
            move || dispatch_loop(inner.clone(), stop.clone()),
        );
        let inner = self.inner.clone();
        let stop = self.stop.clone();
        supervise(
            "scheduler.results".into(),
            Backoff::default(),
            self.stop.clone(),
            self.guard.clone(),
            move || results_loop(inner.clone(), stop.clone()),
        );
    }
}

/// Puts every in-flight job of `session` back to the start of its phase, without counting a
/// retry. Only for the embedded mode at start-up, where nothing else can hold the jobs: the
/// previous process was killed and its in-process queues died with it.
pub async fn requeue_in_flight(store: &dyn Store, session: SessionId) -> Result<u64, ActorError> {
    let jobs = store.in_flight(session).await?;
    let changes: Vec<Change> = jobs
        .iter()
        .filter_map(|j| {
            let to = j.state.retry_state()?;
            Transition::new(j.id, j.state, j.attempt, to)
                .ok()
                .map(Change::from)
        })
        .collect();
    let applied = store
        .apply(&Batch {
            changes,
            builds: vec![],
        })
        .await?;
    Ok(applied.iter().filter(|a| **a).count() as u64)
}

async fn dispatch_loop(inner: Arc<Inner>, mut stop: Signal) -> Result<(), ActorError> {
    let mut last_sweep = 0i64;
    let mut sessions = inner.config.sessions.clone();
    let mut last_refresh = 0i64;
    loop {
        if stop.is_triggered() {
            return Ok(());
        }
        // Serving every session (the cluster Scheduler): find the ones with open work now and
        // then, so a session created after start-up is picked up within two seconds.
        if inner.config.sessions.is_empty() && now_ms() - last_refresh > 2_000 {
            sessions = inner.open_sessions().await?;
            last_refresh = now_ms();
        }
        let mut progressed = false;
        for &session in &sessions {
            progressed |= inner.dispatch_compile(session).await?;
            progressed |= inner.dispatch_eval(session).await?;
        }
        if now_ms() - last_sweep > 1_000 {
            inner.sweep_leases().await?;
            last_sweep = now_ms();
        }
        if progressed {
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            _ = inner.wake.notified() => {}
            _ = tokio::time::sleep(inner.config.tick) => {}
            _ = stop.triggered() => return Ok(()),
        }
    }
}

async fn results_loop(inner: Arc<Inner>, mut stop: Signal) -> Result<(), ActorError> {
    let queue = inner.bus.namespace().results_queue();
    inner
        .bus
        .declare_queue(
            &queue,
            &QueueOptions {
                delivery_limit: inner.config.delivery_limit,
            },
        )
        .await?;
    let prefetch = inner.config.result_batch.min(u16::MAX as usize) as u16;
    let mut consumer = inner.bus.consume(&queue, prefetch).await?;
    loop {
        let first = tokio::select! {
            d = consumer.next() => d,
            _ = stop.triggered() => break,
            // Nothing arrived for a while: write the started notices that are due.
            _ = tokio::time::sleep(STARTED_DEBOUNCE / 2) => {
                inner.apply_deliveries(Vec::new()).await?;
                continue;
            }
        };
        let Some(first) = first else { return Ok(()) };
        let mut batch = vec![first?];
        fill_batch(&mut *consumer, &mut batch, inner.config.result_batch).await?;
        inner.apply_deliveries(batch).await?;
        inner.wake.notify_one();
    }
    // Stopping: the workers have stopped first, so what is left in the queue is final. Apply it.
    loop {
        let mut batch = Vec::new();
        fill_batch(&mut *consumer, &mut batch, inner.config.result_batch).await?;
        if batch.is_empty() {
            let (changes, sessions) = inner.started.lock().unwrap().drain();
            if !changes.is_empty() {
                let batch = Batch {
                    changes,
                    builds: vec![],
                };
                inner.apply_counted(&batch, &sessions).await?;
            }
            return Ok(());
        }
        inner.apply_deliveries(batch).await?;
    }
}

/// Takes whatever else arrives within a few milliseconds, up to `max` deliveries.
async fn fill_batch(
    consumer: &mut dyn Consumer,
    batch: &mut Vec<Delivery>,
    max: usize,
) -> Result<(), ActorError> {
    while batch.len() < max {
        match tokio::time::timeout(Duration::from_millis(3), consumer.next()).await {
            Ok(Some(d)) => batch.push(d?),
            _ => break,
        }
    }
    Ok(())
}

impl Inner {
    /// The in-flight counts of a session, counted from the store the first time.
    async fn in_flight_of(&self, session: SessionId) -> Result<InFlight, ActorError> {
        if let Some(f) = self.in_flight.lock().unwrap().get(&session) {
            return Ok(*f);
        }
        let counts = self.store.state_counts(session).await?;
        let get = |s| counts.get(&s).copied().unwrap_or(0) as i64;
        use shoal_model::JobState::*;
        let f = InFlight {
            compile: get(CompileQueued) + get(Compiling),
            eval: get(EvalQueued) + get(Evaluating),
        };
        Ok(*self.in_flight.lock().unwrap().entry(session).or_insert(f))
    }

    /// Applies a batch whose changes all belong to `sessions[i]`, and keeps the in-flight counts.
    async fn apply_counted(
        &self,
        batch: &Batch,
        sessions: &[SessionId],
    ) -> Result<Vec<bool>, ActorError> {
        for s in sessions {
            self.in_flight_of(*s).await?;
        }
        let applied = self.store.apply(batch).await?;
        let mut counts = self.in_flight.lock().unwrap();
        for ((change, ok), session) in batch.changes.iter().zip(&applied).zip(sessions) {
            if let Some(f) = counts.get_mut(session) {
                f.account([(&change.transition, *ok)]);
            }
        }
        Ok(applied)
    }

    /// Sessions with at least one job that is not final.
    async fn open_sessions(&self) -> Result<Vec<SessionId>, ActorError> {
        let mut open = Vec::new();
        for s in self.store.sessions().await? {
            let counts = self.store.state_counts(s.id).await?;
            if counts.iter().any(|(st, n)| !st.is_terminal() && *n > 0) {
                open.push(s.id);
            }
        }
        Ok(open)
    }

    /// Declares a queue before the first publish to it, so requests wait in the queue for
    /// workers that have not started yet instead of failing.
    async fn ensure_queue(&self, name: &str) -> Result<(), ActorError> {
        if self.declared.lock().unwrap().contains(name) {
            return Ok(());
        }
        self.bus
            .declare_queue(
                name,
                &QueueOptions {
                    delivery_limit: self.config.delivery_limit,
                },
            )
            .await?;
        self.declared.lock().unwrap().insert(name.to_string());
        Ok(())
    }

    async fn session(&self, id: SessionId) -> Result<Session, ActorError> {
        if let Some(s) = self.sessions.lock().unwrap().get(&id) {
            return Ok(s.clone());
        }
        let s = self
            .store
            .session(id)
            .await?
            .ok_or(ActorError::UnknownSession(id))?;
        self.sessions.lock().unwrap().insert(id, s.clone());
        Ok(s)
    }

    async fn config(&self, id: ConfigId) -> Result<Config, ActorError> {
        if let Some(c) = self.configs.lock().unwrap().get(&id) {
            return Ok(c.clone());
        }
        let c = self
            .store
            .config(id)
            .await?
            .ok_or_else(|| ActorError::Other(format!("config {id} is not in the store")))?;
        self.configs.lock().unwrap().insert(id, c.clone());
        Ok(c)
    }

    /// Leases for started work, from the session's spec timeouts.
    async fn leases(&self, session: SessionId) -> Result<Leases, ActorError> {
        let backend = self.backends.get(&*self.store, session).await?;
        let (build, eval) = backend.time_limits();
        let now = now_ms();
        let margin = 60_000;
        let build = build.as_millis() as i64;
        let eval = eval.as_millis() as i64 * self.config.eval_batch as i64;
        Ok(Leases {
            compile_started_ms: now + build + margin,
            eval_started_ms: now + eval + margin,
        })
    }

    /// Decodes, plans and applies a batch of replies in one transaction, then acks them all.
    async fn apply_deliveries(&self, deliveries: Vec<Delivery>) -> Result<(), ActorError> {
        let mut batch = Batch::default();
        let mut to_ack = Vec::with_capacity(deliveries.len());
        let now = now_ms();
        let mut finished_builds = Vec::new();
        let mut sessions = Vec::new();
        for d in deliveries {
            let reply = match envelope::decode(&d.payload) {
                Ok(Message::Reply(r)) => r,
                Ok(other) => {
                    let kind = format!("{other:?}");
                    let kind = kind.split('(').next().unwrap_or("?").to_string();
                    tracing::error!(kind = %kind, "results queue got a non-reply; dead-lettering");
                    d.dead_letter(format!("results queue got a {kind} message"))
                        .await?;
                    continue;
                }
                Err(e) => {
                    tracing::error!(error = %e, "undecodable reply; dead-lettering");
                    d.dead_letter(e.to_string()).await?;
                    continue;
                }
            };
            let session = match &reply {
                shoal_model::message::ReplyBody::Compiled(c) => {
                    finished_builds.push((c.session, c.build_key.clone()));
                    c.session
                }
                shoal_model::message::ReplyBody::Evaluated(e) => e.session,
                shoal_model::message::ReplyBody::Started { session, .. }
                | shoal_model::message::ReplyBody::HandedBack { session, .. } => *session,
            };
            let leases = self.leases(session).await?;
            let plan = plan_reply(&reply, leases, now);
            sessions.extend(std::iter::repeat_n(session, plan.changes.len()));
            batch.changes.extend(plan.changes);
            batch.builds.extend(plan.builds);
            to_ack.push(d);
        }
        let (changes, kept) = self.started.lock().unwrap().sift(
            std::mem::take(&mut batch.changes),
            sessions,
            Instant::now(),
        );
        let (changes, kept, chained) = self.chain_evals(changes, kept).await?;
        batch.changes = changes;
        sessions = kept;
        if !batch.changes.is_empty() || !batch.builds.is_empty() {
            let applied = self.apply_counted(&batch, &sessions).await?;
            self.publish_chained(chained, &applied).await?;
        }
        {
            let mut building = self.building.lock().unwrap();
            for k in finished_builds {
                building.remove(&k);
            }
        }
        for d in to_ack {
            d.ack().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
