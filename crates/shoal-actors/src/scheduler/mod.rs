//! The Scheduler: the only writer of job state.
//!
//! The Scheduler is an actix actor, and its state ([`Inner`], with the pace of dispatch) is the
//! actor's own: no lock, no `RefCell`, nothing shared. Work arrives as typed messages —
//! [`Replies`] from the results queue's adapter ([`feed_replies`]), [`Turn`] from the same
//! adapter when no reply came in time, [`Drained`] at shutdown — and each runs to its end
//! before the next is taken, in the order they came, with the state moved into the message's
//! future and back (the work is spawned, not awaited with `ctx.wait`, so that the adapter is
//! polled meanwhile: it may hold the bus's channel lock). The state lives on the actor's
//! arbiter, one thread, as actix runs every actor; nothing else can reach it. Time is read from
//! an injected [`Clock`]. If a message's work fails or
//! panics, the actor stops and actix's `Supervisor` restarts it with fresh state, after a
//! backoff ([`RestartPace`]): everything it keeps in memory (in-flight counts, builds out,
//! caches) is derived again from the store, so nothing stale or half-updated survives a
//! failure. Each message's work does two kinds of work:
//! - **dispatch**: claims `new` jobs in batches, oldest first (the jobs of a batch that share a
//!   build key go out in one compile request, and a key already out is not built again), reuses
//!   builds already known, publishes compile requests; claims
//!   `compiled` jobs and publishes eval requests; keeps the number of jobs in flight bounded so a
//!   lease measures work, not a long wait in a queue; requeues expired leases; errors jobs whose
//!   retries are exhausted.
//! - **replies**: consumes the results queue in batches, turns each reply into compare-and-sets
//!   ([`plan`]), applies the batch in one transaction, and only then acknowledges the deliveries.
//!   A compile result also moves its jobs on to `eval_queued` in the same write and publishes
//!   their eval requests after the commit (`Inner::chain_evals`): one row write per job fewer.
//!
//! State is committed before the message that depends on it is published, and the commit that
//! queues a job also records the request it owes in the outbox ([`shoal_store::outbox`]). The
//! request is published right after the commit and its row removed once the broker confirms; if
//! the publish fails, or the Scheduler dies in between, the sender ([`send`]) publishes it from
//! the outbox: at start-up first, then within seconds. A lost publish costs seconds, not a lease.

mod actor;
mod apply;
mod cancel;
mod dispatch;
mod eval_room;
mod in_flight;
pub mod plan;
mod prior;
mod progress;
mod search;
mod seen;
mod send;
pub mod shape;
mod started;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use shoal_bus::{Bus, QueueOptions};
use shoal_model::{Config, ConfigId, Session, SessionId, Transition};
use shoal_store::{Batch, Change, Store};

use crate::backends::SessionBackends;
#[cfg(test)]
use crate::shutdown::Signal;
use crate::supervise::Backoff;
use crate::ActorError;
pub use actor::{Drained, Replies, Scheduler, Turn};
pub use in_flight::InFlight;
use plan::Leases;
use shape::{EvalShape, ShapeConfig};
use shoal_model::message::RUNNING_LEASE;
use started::StartedNotices;
pub(crate) use started::STARTED_DEBOUNCE;

/// What a planned change is for: its session, and the delivery (by index in its batch) whose
/// reply it came from, if it is a result; `None` for started notices and the Scheduler's own
/// follow-ups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tag {
    session: SessionId,
    origin: Option<usize>,
    /// The broker user that published the reply (empty for the Scheduler's own follow-ups):
    /// with a started notice it becomes part of the lease holder's identity.
    publisher: std::sync::Arc<str>,
}

impl started::Publisher for Tag {
    fn publisher(&self) -> &str {
        &self.publisher
    }
}

/// How the Scheduler paces work. Every number bounds something that would otherwise grow.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Sessions this Scheduler serves; empty: every session with open work (the cluster).
    pub sessions: Vec<SessionId>,
    /// Jobs in compile phases (queued or compiling) at most: about two builds per compile slot
    /// keeps every slot busy while a lease still measures work, not waiting.
    pub max_compile_in_flight: u64,
    /// Items per eval request and items in eval phases: by default shaped to the devices and
    /// to how long items take ([`shape`]).
    pub eval: ShapeConfig,
    /// What a queued job's lease adds to the work that may legitimately be ahead of it (see
    /// [`queue_leases`]): room for a broker restart and the outbox's resend.
    pub queue_lease_margin: Duration,
    /// Candidates a searched session keeps chosen and unfinished (see [`search`]): about one
    /// per compile slot and device keeps them busy, and each batch still learns from the last.
    pub search_in_flight: usize,
    /// How often dispatch runs when nothing wakes it sooner.
    pub tick: Duration,
    /// Replies applied per transaction at most.
    pub result_batch: usize,
    /// Delivery limit of the queues this Scheduler declares.
    pub delivery_limit: u32,
    /// How long a store that fails is retried, with backoff, while the replies are held
    /// (neither acked nor given back, so no delivery limit counts it) before the results loop
    /// fails and its supervisor takes over. The cluster's store first waits out an outage on
    /// its own ([`shoal_store::patient`]): this bounds the errors that remain (a full disk
    /// under SQLite, a database past its patience).
    pub store_retry_for: Duration,
    /// How long the Scheduler's task may fail run after run before it gives up and the process
    /// ends non-zero (see [`Backoff::give_up_after`]).
    pub give_up_after: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            sessions: Vec::new(),
            max_compile_in_flight: 64,
            eval: ShapeConfig::default(),
            search_in_flight: 16,
            queue_lease_margin: Duration::from_secs(120),
            tick: Duration::from_millis(200),
            result_batch: 256,
            delivery_limit: 5,
            store_retry_for: Duration::from_secs(300),
            give_up_after: Backoff::default().give_up_after,
        }
    }
}

/// The leases of a session's queued jobs, (compile, eval): derived from the step's own time
/// limits, not fixed. A queued request waits for the work ahead of it, and the in-flight bounds
/// keep that to about two requests per slot (see [`SchedulerConfig::max_compile_in_flight`]),
/// so the lease is two requests' worth of the step's limit plus `margin`. A request cannot be
/// lost between the store and the broker (the outbox) nor with a dying worker (the broker gives
/// its delivery back), so this lease only catches what the bus itself dropped: a dead-lettered
/// or purged request comes back in minutes. A lease that runs out in a backlog larger than the
/// bounds assume costs one duplicate piece of work, never a wrong result: the old request's
/// reply no longer matches the job's attempt.
pub fn queue_leases(
    limits: (Duration, Duration),
    eval_batch: usize,
    margin: Duration,
) -> (Duration, Duration) {
    let (build, eval) = limits;
    let eval_request = eval.saturating_mul(eval_batch.max(1) as u32);
    (
        margin.saturating_add(build.saturating_mul(2)),
        margin.saturating_add(eval_request.saturating_mul(2)),
    )
}

/// Where the Scheduler reads the time (milliseconds since the Unix epoch): leases, the lease
/// sweep, the outbox's grace. Injected so that tests can move time instead of waiting for it.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
}

/// The system's clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        crate::now_ms()
    }
}

/// What every run of the Scheduler's task starts from.
#[derive(Clone)]
struct Parts {
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    backends: SessionBackends,
    config: SchedulerConfig,
    clock: Arc<dyn Clock>,
}

/// The caches and counts of one run of the Scheduler, owned by its [`State`] (so by the actor)
/// alone: no lock, nothing else can reach it.
struct Inner {
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    backends: SessionBackends,
    config: SchedulerConfig,
    clock: Arc<dyn Clock>,
    sessions: HashMap<SessionId, Session>,
    configs: HashMap<ConfigId, Config>,
    /// (session, build key) pairs with a compile request out.
    building: HashSet<(SessionId, String)>,
    /// Jobs this Scheduler sent to compile, as claimed (what an eval request needs), so that
    /// their compile result can dispatch the eval in the same compare-and-set (see
    /// [`Inner::chain_evals`]). Lost on restart: those jobs then take the ordinary eval dispatch.
    compiling: HashMap<shoal_model::JobId, shoal_model::Job>,
    /// Queues already declared by this Scheduler.
    declared: HashSet<String>,
    /// "Started" notices held back for a moment, and what is known of them (see
    /// [`started`]).
    started: StartedNotices<Tag>,
    /// The replies settled, by message id: a copy that comes again is a replay ([`seen`]).
    seen: seen::SeenIds,
    /// Jobs in flight per session and phase, kept by the one writer as it applies changes
    /// (counted from the store once per session), so dispatch never scans the job table.
    in_flight: HashMap<SessionId, InFlight>,
    /// What eval replies said of their items' device time, and the request sizes it gives.
    shape: EvalShape,
    /// Consumers per eval queue, with when they were counted (see [`eval_room`]).
    consumers: HashMap<String, (u32, std::time::Instant)>,
    /// The searches of searched sessions (`None`: the session has none to drive; see
    /// [`search`]).
    searches: HashMap<SessionId, Option<search::SessionSearch>>,
    /// Outcomes of jobs that became final, per session that has (or may have) a search, as
    /// `apply_counted` applied them: each search takes its own on its next turn.
    outcomes: HashMap<SessionId, search::Outcomes>,
    /// How long the store's and the broker's outages that ended have lasted in all, as of the
    /// last lease sweep (see [`Inner::sweep_leases`]).
    outage_seen: Duration,
}

impl Inner {
    fn new(p: &Parts) -> Inner {
        Inner {
            store: p.store.clone(),
            bus: p.bus.clone(),
            backends: p.backends.clone(),
            config: p.config.clone(),
            clock: p.clock.clone(),
            sessions: Default::default(),
            configs: Default::default(),
            building: Default::default(),
            compiling: Default::default(),
            declared: Default::default(),
            in_flight: Default::default(),
            started: Default::default(),
            seen: Default::default(),
            shape: EvalShape::new(p.config.eval.clone()),
            consumers: Default::default(),
            searches: Default::default(),
            outcomes: Default::default(),
            outage_seen: dispatch::outages_ended(),
        }
    }

    /// Now, by the injected clock.
    fn now(&self) -> i64 {
        self.clock.now_ms()
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

/// When dispatch does what: the outbox sweep, the sessions served, the lease sweep.
struct DispatchPace {
    owed: send::OwedSweep,
    last_sweep: i64,
    sessions: Vec<SessionId>,
    last_refresh: Option<i64>,
    progress: progress::ProgressReports,
    finished: progress::FinishedSessions,
}

impl DispatchPace {
    fn new(inner: &Inner) -> Self {
        DispatchPace {
            // What a previous Scheduler (or this one's failed publishes) left owed goes out
            // first.
            owed: send::OwedSweep::new(),
            last_sweep: 0,
            sessions: inner.config.sessions.clone(),
            last_refresh: None,
            progress: progress::ProgressReports::default(),
            finished: progress::FinishedSessions::default(),
        }
    }

    /// One turn of dispatch; whether anything was dispatched or sent.
    async fn turn(&mut self, inner: &mut Inner) -> Result<bool, ActorError> {
        let now = inner.now();
        // Serving every session (the cluster Scheduler): find the ones with open work now and
        // then, so a session created after start-up is picked up within two seconds.
        if inner.config.sessions.is_empty() && self.last_refresh.is_none_or(|t| now - t > 2_000) {
            let counts = inner.session_counts(&mut self.finished, now).await?;
            let cancelled: HashSet<SessionId> = inner
                .store
                .cancelled_sessions()
                .await?
                .into_iter()
                .collect();
            self.sessions.clear();
            for (session, c) in &counts {
                if c.done == c.total {
                    continue;
                }
                if cancelled.contains(session) {
                    inner.skip_cancelled(*session).await?;
                } else {
                    self.sessions.push(*session);
                }
            }
            self.progress.publish(&*inner.bus, &counts).await;
            self.last_refresh = Some(now);
        }
        let mut progressed = false;
        if let Some(before) = self.owed.due(now) {
            progressed |= inner.send_owed(before).await? > 0;
        }
        for &session in &self.sessions {
            progressed |= inner.drive_search(session).await?;
            progressed |= inner.dispatch_compile(session).await?;
            progressed |= inner.dispatch_eval(session).await?;
        }
        if now - self.last_sweep > 1_000 {
            inner.sweep_leases().await?;
            self.last_sweep = now;
        }
        Ok(progressed)
    }
}

impl Inner {
    /// The in-flight counts of a session, counted from the store the first time.
    /// Counts a session's jobs in flight (once per state of the Scheduler) and restores the
    /// holders of its started work from the store.
    async fn in_flight_of(&mut self, session: SessionId) -> Result<InFlight, ActorError> {
        if let Some(f) = self.in_flight.get(&session) {
            return Ok(*f);
        }
        let counts = self.store.state_counts(session).await?;
        let get = |s| counts.get(&s).copied().unwrap_or(0) as i64;
        use shoal_model::JobState::*;
        let f = InFlight {
            compile: get(CompileQueued) + get(Compiling),
            eval: get(EvalQueued) + get(Evaluating),
        };
        self.restore_holders(session, &counts).await?;
        Ok(*self.in_flight.entry(session).or_insert(f))
    }

    /// Declares a queue before the first publish to it, so requests wait in the queue for
    /// workers that have not started yet instead of failing.
    async fn ensure_queue(&mut self, name: &str) -> Result<(), ActorError> {
        if self.declared.contains(name) {
            return Ok(());
        }
        self.bus
            .declare_queue(name, &QueueOptions::limited(self.config.delivery_limit))
            .await?;
        self.declared.insert(name.to_string());
        Ok(())
    }

    async fn session(&mut self, id: SessionId) -> Result<Session, ActorError> {
        if let Some(s) = self.sessions.get(&id) {
            return Ok(s.clone());
        }
        let s = self
            .store
            .session(id)
            .await?
            .ok_or(ActorError::UnknownSession(id))?;
        self.sessions.insert(id, s.clone());
        Ok(s)
    }

    async fn config(&mut self, id: ConfigId) -> Result<Config, ActorError> {
        if let Some(c) = self.configs.get(&id) {
            return Ok(c.clone());
        }
        let c = self
            .store
            .config(id)
            .await?
            .ok_or(ActorError::UnknownConfig(id))?;
        self.configs.insert(id, c.clone());
        Ok(c)
    }

    /// Deadlines for jobs of `session` queued now, (compile, eval): see [`queue_leases`].
    async fn queue_deadlines(&mut self, session: SessionId) -> Result<(i64, i64), ActorError> {
        let backend = self.backends.get(&*self.store, session).await?;
        let (compile, eval) = queue_leases(
            backend.time_limits(),
            self.largest_eval_batch(session).await?,
            self.config.queue_lease_margin,
        );
        let now = self.now();
        Ok((
            now + compile.as_millis() as i64,
            now + eval.as_millis() as i64,
        ))
    }

    /// Leases for started work: [`RUNNING_LEASE`], which the worker's heartbeats renew while it
    /// works, so a dead worker's jobs come back within seconds whatever the step's timeout.
    /// (Also checks that the session's backend loads: a reply for a session that is not in the
    /// store fails here.)
    async fn leases(&mut self, session: SessionId) -> Result<Leases, ActorError> {
        self.backends.get(&*self.store, session).await?;
        let deadline = self.now() + RUNNING_LEASE.as_millis() as i64;
        Ok(Leases {
            compile_started_ms: deadline,
            eval_started_ms: deadline,
        })
    }
}

#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod outbox_tests;
#[cfg(test)]
mod tests;
