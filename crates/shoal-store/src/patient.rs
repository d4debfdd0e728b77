//! Waiting out an outage of the store.
//!
//! A database restart, a failover or a network blip makes every call fail for seconds or
//! minutes, and then the database answers again with everything it had committed. A caller that
//! treats such a failure as an answer turns a short outage into a long one: the Scheduler's loop
//! failed and restarted, and each restart had the broker deliver its held replies again until
//! the delivery limit dead-lettered genuine results. [`PatientStore`] makes the outage a pause
//! instead: every call that fails with [`StoreError::Unreachable`] is tried again, with backoff
//! from 100 ms to 2 s (`MAX_PAUSE`), for up to its patience, and then returns as if nothing had
//! happened. An answer — a row, a refusal, a constraint violation — is returned at once.
//!
//! Two calls may write and fail at the commit, not knowing whether the commit applied:
//! - [`Store::apply`] is retried only once it is known whether it applied: the jobs it changes
//!   are read back, and a change whose job is now exactly where the change would have put it is
//!   reported as applied (the Scheduler is the one writer of job state, so nothing else moved
//!   it there);
//! - [`Store::create_session`] looks for the session it may have created before creating one,
//!   and [`Store::create_db_import`] for the import (by its label, device, files and creation
//!   time, which its caller sets).
//!
//! Every other write is idempotent (an upsert, an insert that leaves an existing row alone, a
//! renewal only ever later), so trying it again is safe.
//!
//! The outages themselves are recorded process-wide ([`outages`]), as the metrics are: a process
//! has one store, `/metrics` reports them, the Scheduler extends the leases the outage ran
//! down, and operators' commands say what is going on. [`stop_waiting`] ends every wait at once
//! (a shutdown signal): the call then fails with its last error.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use shoal_model::{
    Config, ConfigId, FinalResult, Job, JobId, JobState, NewConfig, NewJob, NewSession, NewSolver,
    ResultRow, Session, SessionId, Solver, SolverId,
};
use tokio::sync::watch;

use crate::{Batch, BuildRecord, LeaseRenewal, Result, Store, StoreError};

/// How long a call waits for an unreachable store by default before it fails: longer than a
/// database restart or a failover takes, short enough that a store gone for good is reported.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(15 * 60);

/// The first pause between tries, doubled after each up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between tries: a store that comes back is noticed within this.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// How many times a write is tried whose commits fail uncertainly one after another.
const UNCERTAIN_TRIES: u32 = 10;

/// What is known of this process's store outages.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OutageReport {
    /// Outages that began (the current one included).
    pub count: u64,
    /// How long the outages that ended lasted, in all.
    pub ended_total: Duration,
    /// How long the current one has lasted, if the store does not answer now.
    pub current: Option<Duration>,
    /// Where the store is (no password), and the last error of the current or last outage.
    pub location: String,
    pub last_error: String,
}

impl OutageReport {
    /// The outages' length in all, the current one included.
    pub fn total(&self) -> Duration {
        self.ended_total + self.current.unwrap_or_default()
    }

    /// What an operator is told while the store does not answer.
    pub fn waiting_message(&self) -> Option<String> {
        let lasted = self.current?;
        Some(format!(
            "the database at {} does not answer ({}); retrying, nothing is lost (for {:.0} s so far)",
            self.location,
            self.last_error,
            lasted.as_secs_f64()
        ))
    }
}

#[derive(Default)]
struct Outages {
    count: u64,
    ended_total: Duration,
    since: Option<Instant>,
    location: String,
    last_error: String,
}

fn state() -> &'static Mutex<Outages> {
    static STATE: Mutex<Outages> = Mutex::new(Outages {
        count: 0,
        ended_total: Duration::ZERO,
        since: None,
        location: String::new(),
        last_error: String::new(),
    });
    &STATE
}

fn stop_cell() -> &'static watch::Sender<bool> {
    static CELL: std::sync::OnceLock<watch::Sender<bool>> = std::sync::OnceLock::new();
    CELL.get_or_init(|| watch::channel(false).0)
}

/// This process's store outages so far.
pub fn outages() -> OutageReport {
    let s = state().lock().unwrap_or_else(PoisonError::into_inner);
    OutageReport {
        count: s.count,
        ended_total: s.ended_total,
        current: s.since.map(|t| t.elapsed()),
        location: s.location.clone(),
        last_error: s.last_error.clone(),
    }
}

/// Ends every wait for the store now and from now on (the process is shutting down): the
/// calls waiting fail with their last error.
pub fn stop_waiting() {
    stop_cell().send_replace(true);
}

/// Whether [`stop_waiting`] was called: the process is shutting down, and nothing it holds
/// should wait any longer for a server that does not answer (the broker included).
pub fn stopping() -> bool {
    *stop_cell().borrow()
}

/// The store did not answer: the outage begins, if it had not. (Also called by a store that
/// waits for its server at start-up.)
pub(crate) fn unanswered(location: &str, e: &StoreError) {
    let mut s = state().lock().unwrap_or_else(PoisonError::into_inner);
    s.last_error = short_error(e);
    if s.since.is_none() {
        s.since = Some(Instant::now());
        s.count += 1;
        s.location = location.to_string();
        tracing::warn!(
            "the database at {location} does not answer ({}); retrying, nothing is lost",
            s.last_error
        );
    }
}

/// The store answered: the outage, if there was one, ends.
pub(crate) fn answered() {
    let mut s = state().lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(since) = s.since.take() {
        let lasted = since.elapsed();
        s.ended_total += lasted;
        tracing::warn!(
            "the database at {} answers again after {:.1} s",
            s.location,
            lasted.as_secs_f64()
        );
    }
}

/// The innermost cause of `e`, which says what happened ("Connection refused").
fn short_error(e: &StoreError) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// A store that waits out outages of the one it wraps (see the module's documentation).
pub struct PatientStore {
    inner: Arc<dyn Store>,
    patience: Duration,
    location: String,
}

impl PatientStore {
    /// `inner`, waited for up to `patience` per call while it cannot be reached.
    pub fn new(inner: Arc<dyn Store>, patience: Duration) -> Self {
        let location = inner.describe();
        PatientStore {
            inner,
            patience,
            location,
        }
    }

    /// Runs `op` until it answers, the patience runs out or the process stops waiting. An
    /// uncertain commit is returned to the caller (only [`Store::apply`],
    /// [`Store::create_session`] and [`Store::create_db_import`] can give one, and they resolve
    /// it).
    async fn patiently<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: Fn() -> Fut + Send + Sync,
        Fut: Future<Output = Result<T>> + Send,
        T: Send,
    {
        let give_up = Instant::now() + self.patience;
        let mut pause = FIRST_PAUSE;
        loop {
            match op().await {
                Err(e) if e.is_unreachable() => {
                    unanswered(&self.location, &e);
                    if matches!(
                        e,
                        StoreError::Unreachable {
                            uncertain: true,
                            ..
                        }
                    ) || !self.pause(&mut pause, give_up).await
                    {
                        return Err(e);
                    }
                }
                other => {
                    answered();
                    return other;
                }
            }
        }
    }

    /// Sleeps before the next try; `false` when there is to be none.
    async fn pause(&self, pause: &mut Duration, give_up: Instant) -> bool {
        if stopping() || Instant::now() + *pause > give_up {
            return false;
        }
        let mut stop = stop_cell().subscribe();
        tokio::select! {
            _ = tokio::time::sleep(*pause) => {}
            _ = stop.wait_for(|s| *s) => return false,
        }
        *pause = (*pause * 2).min(MAX_PAUSE);
        true
    }

    /// Which changes of `batch` applied, after a commit that may or may not have: each job is
    /// read back and a change counts as applied when its job is now exactly where the change
    /// would have put it; the batch is then applied again, which applies what did not (a batch
    /// that committed applies nothing the second time: every compare-and-set has moved on).
    ///
    /// One case reads back wrong: a stale change whose job was already exactly where it would
    /// have put it (a second reply for a transition that applied before) is reported applied.
    /// Its reply is then acknowledged instead of dead-lettered; nothing is written twice.
    async fn apply_after_uncertain_commit(&self, batch: &Batch) -> Result<Vec<bool>> {
        let mut landed = Vec::with_capacity(batch.changes.len());
        for c in &batch.changes {
            let now = self
                .patiently(|| self.inner.job_progress(c.transition.job))
                .await?;
            landed.push(now == Some((c.transition.to, c.transition.next_attempt())));
        }
        let again = self.patiently(|| self.inner.apply(batch)).await?;
        tracing::warn!(
            landed = landed.iter().filter(|l| **l).count(),
            applied_now = again.iter().filter(|a| **a).count(),
            "a commit failed as the database went away; what it did was read back"
        );
        Ok(landed.iter().zip(again).map(|(l, a)| *l || a).collect())
    }
}

/// Calls on the wrapped store, waited for while it cannot be reached.
macro_rules! patiently {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        $self.patiently(|| $self.inner.$method($($arg),*)).await
    };
}

#[async_trait]
impl Store for PatientStore {
    fn describe(&self) -> String {
        self.location.clone()
    }

    async fn migrate(&self) -> Result<u32> {
        patiently!(self.migrate())
    }

    async fn create_session(&self, session: &NewSession) -> Result<SessionId> {
        let mut tries = 1;
        loop {
            match patiently!(self.create_session(session)) {
                Err(
                    e @ StoreError::Unreachable {
                        uncertain: true, ..
                    },
                ) => {
                    if let Some(s) = patiently!(self.find_session(session))? {
                        return Ok(s.id);
                    }
                    if stopping() || tries >= UNCERTAIN_TRIES {
                        return Err(e);
                    }
                    tries += 1;
                }
                other => return other,
            }
        }
    }
    async fn session(&self, id: SessionId) -> Result<Option<Session>> {
        patiently!(self.session(id))
    }
    async fn sessions(&self) -> Result<Vec<Session>> {
        patiently!(self.sessions())
    }
    async fn find_session(&self, session: &NewSession) -> Result<Option<Session>> {
        patiently!(self.find_session(session))
    }
    async fn upsert_configs(&self, configs: &[NewConfig]) -> Result<Vec<(ConfigId, bool)>> {
        self.idempotent(|| self.inner.upsert_configs(configs)).await
    }
    async fn config(&self, id: ConfigId) -> Result<Option<Config>> {
        patiently!(self.config(id))
    }
    async fn configs_with_tag(&self, tag: &str) -> Result<Vec<Config>> {
        patiently!(self.configs_with_tag(tag))
    }
    async fn upsert_solvers(&self, solvers: &[NewSolver]) -> Result<Vec<Solver>> {
        self.idempotent(|| self.inner.upsert_solvers(solvers)).await
    }
    async fn solvers(&self) -> Result<Vec<Solver>> {
        patiently!(self.solvers())
    }
    async fn set_applicability(
        &self,
        session: SessionId,
        rows: &[(ConfigId, SolverId, bool)],
    ) -> Result<()> {
        self.idempotent(|| self.inner.set_applicability(session, rows))
            .await
    }
    async fn applicable_solvers(
        &self,
        session: SessionId,
        config: ConfigId,
    ) -> Result<Vec<SolverId>> {
        patiently!(self.applicable_solvers(session, config))
    }
    async fn insert_jobs(&self, jobs: &[NewJob]) -> Result<u64> {
        // (After an uncertain commit the count says what the second try created.)
        self.idempotent(|| self.inner.insert_jobs(jobs)).await
    }
    async fn job(&self, id: JobId) -> Result<Option<Job>> {
        patiently!(self.job(id))
    }
    async fn job_progress(&self, id: JobId) -> Result<Option<(JobState, shoal_model::Attempt)>> {
        patiently!(self.job_progress(id))
    }
    async fn jobs_in_state(
        &self,
        session: SessionId,
        state: JobState,
        limit: u32,
    ) -> Result<Vec<Job>> {
        patiently!(self.jobs_in_state(session, state, limit))
    }
    async fn in_flight(&self, session: SessionId) -> Result<Vec<Job>> {
        patiently!(self.in_flight(session))
    }
    async fn expired_leases(&self, now_ms: i64, limit: u32) -> Result<Vec<Job>> {
        patiently!(self.expired_leases(now_ms, limit))
    }
    async fn state_counts(&self, session: SessionId) -> Result<BTreeMap<JobState, u64>> {
        patiently!(self.state_counts(session))
    }
    async fn finish_times(&self, session: SessionId, since_ms: i64) -> Result<Vec<i64>> {
        patiently!(self.finish_times(session, since_ms))
    }
    async fn apply(&self, batch: &Batch) -> Result<Vec<bool>> {
        match patiently!(self.apply(batch)) {
            Err(StoreError::Unreachable {
                uncertain: true, ..
            }) => self.apply_after_uncertain_commit(batch).await,
            other => other,
        }
    }
    async fn renew_leases(&self, renewals: &[LeaseRenewal]) -> Result<u64> {
        self.idempotent(|| self.inner.renew_leases(renewals)).await
    }
    async fn extend_leases(&self, by_ms: i64, changed_before_ms: i64) -> Result<u64> {
        // Not idempotent: an uncertain commit is returned to the caller.
        patiently!(self.extend_leases(by_ms, changed_before_ms))
    }
    async fn unsent(&self, before_ms: i64, limit: u32) -> Result<Vec<Job>> {
        patiently!(self.unsent(before_ms, limit))
    }
    async fn mark_sent(&self, sent: &[shoal_model::message::JobRef]) -> Result<()> {
        self.idempotent(|| self.inner.mark_sent(sent)).await
    }
    async fn builds(&self, session: SessionId, keys: &[String]) -> Result<Vec<BuildRecord>> {
        patiently!(self.builds(session, keys))
    }
    async fn put_artifact(&self, hash: &str, bytes: &[u8]) -> Result<bool> {
        self.idempotent(|| self.inner.put_artifact(hash, bytes))
            .await
    }
    async fn artifact(&self, hash: &str) -> Result<Option<Vec<u8>>> {
        patiently!(self.artifact(hash))
    }
    async fn results(&self, job: JobId) -> Result<Vec<ResultRow>> {
        patiently!(self.results(job))
    }
    async fn final_results(&self, session: SessionId) -> Result<Vec<FinalResult>> {
        patiently!(self.final_results(session))
    }
    async fn put_worker(&self, worker: &shoal_model::WorkerPresence) -> Result<()> {
        self.idempotent(|| self.inner.put_worker(worker)).await
    }
    async fn workers(&self) -> Result<Vec<shoal_model::WorkerPresence>> {
        patiently!(self.workers())
    }
    async fn command_reply(&self, id: &str) -> Result<Option<shoal_model::command::CommandReply>> {
        patiently!(self.command_reply(id))
    }
    async fn put_command_reply(
        &self,
        reply: &shoal_model::command::CommandReply,
        applied_ms: i64,
    ) -> Result<()> {
        self.idempotent(|| self.inner.put_command_reply(reply, applied_ms))
            .await
    }
    async fn cancel_session(&self, session: SessionId, cancelled_ms: i64) -> Result<bool> {
        // (After an uncertain commit, `false` may mean "cancelled by the first try".)
        self.idempotent(|| self.inner.cancel_session(session, cancelled_ms))
            .await
    }
    async fn cancelled_sessions(&self) -> Result<Vec<SessionId>> {
        patiently!(self.cancelled_sessions())
    }
    async fn put_file_part(&self, sha256: &str, size: u64, part: u32, bytes: &[u8]) -> Result<()> {
        self.idempotent(|| self.inner.put_file_part(sha256, size, part, bytes))
            .await
    }
    async fn file_parts_stored(&self, sha256: &str) -> Result<u32> {
        patiently!(self.file_parts_stored(sha256))
    }
    async fn shipped_file(&self, sha256: &str) -> Result<Option<Vec<u8>>> {
        patiently!(self.shipped_file(sha256))
    }
    async fn forget_file(&self, sha256: &str) -> Result<()> {
        self.idempotent(|| self.inner.forget_file(sha256)).await
    }
    async fn create_db_import(
        &self,
        import: &crate::NewDbImport,
        records: &[crate::DbRecord],
    ) -> Result<crate::DbImportId> {
        let mut tries = 1;
        loop {
            match patiently!(self.create_db_import(import, records)) {
                Err(
                    e @ StoreError::Unreachable {
                        uncertain: true, ..
                    },
                ) => {
                    // Its identity (label, device, files, creation time) tells it apart.
                    let stored = patiently!(self.db_imports())?;
                    if let Some(i) = stored.iter().find(|i| i.info == *import) {
                        return Ok(i.id);
                    }
                    if stopping() || tries >= UNCERTAIN_TRIES {
                        return Err(e);
                    }
                    tries += 1;
                }
                other => return other,
            }
        }
    }
    async fn db_imports(&self) -> Result<Vec<crate::DbImport>> {
        patiently!(self.db_imports())
    }
    async fn db_records(&self, import: crate::DbImportId) -> Result<Vec<crate::DbRecord>> {
        patiently!(self.db_records(import))
    }
}

impl PatientStore {
    /// [`PatientStore::patiently`] for a write that may simply be done again after an
    /// uncertain commit (an upsert, an insert that leaves an existing row alone).
    async fn idempotent<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: Fn() -> Fut + Send + Sync,
        Fut: Future<Output = Result<T>> + Send,
        T: Send,
    {
        let mut tries = 1;
        loop {
            match self.patiently(&op).await {
                Err(StoreError::Unreachable {
                    uncertain: true, ..
                }) if !stopping() && tries < UNCERTAIN_TRIES => tries += 1,
                other => return other,
            }
        }
    }
}
