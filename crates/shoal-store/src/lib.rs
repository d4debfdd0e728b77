//! The `Store`: where every session, config, solver, job, result and artifact lives. The store is
//! the truth; the bus only carries work.
//!
//! One interface, several implementations ([`sqlite::SqliteStore`] for the embedded mode, MySQL for
//! the cluster), all held to the same [`conformance`] suite, written once.
//!
//! **Architecture invariants:**
//! - Every job state change goes through [`Store::apply`], a compare-and-set on (state, attempt);
//!   a result row is written only in the same transaction as the state change it belongs to, and
//!   only if that change applied. So a stale or duplicated reply changes nothing, and a job has
//!   at most one result per attempt.
//! - Values reach SQL only as bound parameters.
//! - A batch either applies whole or not at all (one transaction).
//! - A job waiting in a queued state owes a request, recorded in the outbox by the same
//!   transaction that queued it ([`outbox`]).
//!
//! **Features:** `sqlite` and `mysql` (both by default) choose the stores compiled in;
//! `test-support` adds the [`conformance`] suite and `mysql::ScratchDb`, which no release
//! binary needs (the crate's own tests turn it on through a dev-dependency on itself).

#[macro_use]
mod encoding;

mod commands;
#[cfg(feature = "test-support")]
pub mod conformance;
mod db_import;
#[cfg(feature = "mysql")]
pub mod mysql;
pub mod outbox;
pub mod patient;
mod presence;
mod shipped;
#[cfg(feature = "sqlite")]
pub mod sqlite;

use std::collections::BTreeMap;

use async_trait::async_trait;
use shoal_model::{
    Config, ConfigId, FailureKind, FinalResult, Job, JobId, JobState, NewConfig, NewJob,
    NewSession, NewSolver, ResultRow, Session, SessionId, Solver, SolverId, Transition,
    TransitionError,
};

pub use db_import::{DbImport, DbImportId, DbRecord, DbValue, NewDbImport};
#[cfg(feature = "mysql")]
pub use mysql::{MysqlOptions, MysqlStore, MysqlTls};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

/// `impl Store for $ty` with the given `describe` and `apply`, and every other method of
/// [`Store`] a call on the store in `self.$field`: for wrappers that change how changes are
/// applied (a scratch database, a test double that fails on purpose) and delegate the rest.
/// The one place the delegation is spelled out.
#[macro_export]
macro_rules! delegating_store {
    (impl Store for $ty:ty { delegate to $field:ident; $($custom:tt)* }) => {
        #[$crate::__async_trait::async_trait]
        impl $crate::Store for $ty {
            $($custom)*
    async fn migrate(&self) -> $crate::Result<u32> {
            self.$field.migrate().await
        }
        async fn create_session(&self, session: &$crate::__model::NewSession) -> $crate::Result<$crate::__model::SessionId> {
            self.$field.create_session(session).await
        }
        async fn session(&self, id: $crate::__model::SessionId) -> $crate::Result<Option<$crate::__model::Session>> {
            self.$field.session(id).await
        }
        async fn sessions(&self) -> $crate::Result<Vec<$crate::__model::Session>> {
            self.$field.sessions().await
        }
        async fn find_session(&self, session: &$crate::__model::NewSession) -> $crate::Result<Option<$crate::__model::Session>> {
            self.$field.find_session(session).await
        }
        async fn upsert_configs(&self, configs: &[$crate::__model::NewConfig]) -> $crate::Result<Vec<($crate::__model::ConfigId, bool)>> {
            self.$field.upsert_configs(configs).await
        }
        async fn config(&self, id: $crate::__model::ConfigId) -> $crate::Result<Option<$crate::__model::Config>> {
            self.$field.config(id).await
        }
        async fn configs_with_tag(&self, tag: &str) -> $crate::Result<Vec<$crate::__model::Config>> {
            self.$field.configs_with_tag(tag).await
        }
        async fn upsert_solvers(&self, solvers: &[$crate::__model::NewSolver]) -> $crate::Result<Vec<$crate::__model::Solver>> {
            self.$field.upsert_solvers(solvers).await
        }
        async fn solvers(&self) -> $crate::Result<Vec<$crate::__model::Solver>> {
            self.$field.solvers().await
        }
        async fn set_applicability(
            &self,
            session: $crate::__model::SessionId,
            rows: &[($crate::__model::ConfigId, $crate::__model::SolverId, bool)],
        ) -> $crate::Result<()> {
            self.$field.set_applicability(session, rows).await
        }
        async fn applicable_solvers(
            &self,
            session: $crate::__model::SessionId,
            config: $crate::__model::ConfigId,
        ) -> $crate::Result<Vec<$crate::__model::SolverId>> {
            self.$field.applicable_solvers(session, config).await
        }
        async fn insert_jobs(&self, jobs: &[$crate::__model::NewJob]) -> $crate::Result<u64> {
            self.$field.insert_jobs(jobs).await
        }
        async fn job(&self, id: $crate::__model::JobId) -> $crate::Result<Option<$crate::__model::Job>> {
            self.$field.job(id).await
        }
        async fn job_progress(
            &self,
            id: $crate::__model::JobId,
        ) -> $crate::Result<Option<($crate::__model::JobState, $crate::__model::Attempt)>> {
            self.$field.job_progress(id).await
        }
        async fn jobs_in_state(
            &self,
            session: $crate::__model::SessionId,
            state: $crate::__model::JobState,
            limit: u32,
        ) -> $crate::Result<Vec<$crate::__model::Job>> {
            self.$field.jobs_in_state(session, state, limit).await
        }
        async fn in_flight(&self, session: $crate::__model::SessionId) -> $crate::Result<Vec<$crate::__model::Job>> {
            self.$field.in_flight(session).await
        }
        async fn expired_leases(&self, now_ms: i64, limit: u32) -> $crate::Result<Vec<$crate::__model::Job>> {
            self.$field.expired_leases(now_ms, limit).await
        }
        async fn state_counts(&self, session: $crate::__model::SessionId) -> $crate::Result<::std::collections::BTreeMap<$crate::__model::JobState, u64>> {
            self.$field.state_counts(session).await
        }
        async fn renew_leases(&self, renewals: &[$crate::LeaseRenewal]) -> $crate::Result<u64> {
            self.$field.renew_leases(renewals).await
        }
        async fn extend_leases(&self, by_ms: i64, changed_before_ms: i64) -> $crate::Result<u64> {
            self.$field.extend_leases(by_ms, changed_before_ms).await
        }
        async fn unsent(&self, before_ms: i64, limit: u32) -> $crate::Result<Vec<$crate::__model::Job>> {
            self.$field.unsent(before_ms, limit).await
        }
        async fn mark_sent(&self, sent: &[$crate::__model::message::JobRef]) -> $crate::Result<()> {
            self.$field.mark_sent(sent).await
        }
        async fn builds(&self, session: $crate::__model::SessionId, keys: &[String]) -> $crate::Result<Vec<$crate::BuildRecord>> {
            self.$field.builds(session, keys).await
        }
        async fn put_artifact(&self, hash: &str, bytes: &[u8]) -> $crate::Result<bool> {
            self.$field.put_artifact(hash, bytes).await
        }
        async fn artifact(&self, hash: &str) -> $crate::Result<Option<Vec<u8>>> {
            self.$field.artifact(hash).await
        }
        async fn results(&self, job: $crate::__model::JobId) -> $crate::Result<Vec<$crate::__model::ResultRow>> {
            self.$field.results(job).await
        }
        async fn final_results(&self, session: $crate::__model::SessionId) -> $crate::Result<Vec<$crate::__model::FinalResult>> {
            self.$field.final_results(session).await
        }
        async fn finish_times(&self, session: $crate::__model::SessionId, since_ms: i64) -> $crate::Result<Vec<i64>> {
            self.$field.finish_times(session, since_ms).await
        }
        async fn put_worker(&self, worker: &$crate::__model::WorkerPresence) -> $crate::Result<()> {
            self.$field.put_worker(worker).await
        }
        async fn workers(&self) -> $crate::Result<Vec<$crate::__model::WorkerPresence>> {
            self.$field.workers().await
        }
        async fn command_reply(
            &self,
            id: &str,
        ) -> $crate::Result<Option<$crate::__model::command::CommandReply>> {
            self.$field.command_reply(id).await
        }
        async fn put_command_reply(
            &self,
            reply: &$crate::__model::command::CommandReply,
            applied_ms: i64,
        ) -> $crate::Result<()> {
            self.$field.put_command_reply(reply, applied_ms).await
        }
        async fn cancel_session(
            &self,
            session: $crate::__model::SessionId,
            cancelled_ms: i64,
        ) -> $crate::Result<bool> {
            self.$field.cancel_session(session, cancelled_ms).await
        }
        async fn cancelled_sessions(&self) -> $crate::Result<Vec<$crate::__model::SessionId>> {
            self.$field.cancelled_sessions().await
        }
        async fn put_file_part(
            &self,
            sha256: &str,
            size: u64,
            part: u32,
            bytes: &[u8],
        ) -> $crate::Result<()> {
            self.$field.put_file_part(sha256, size, part, bytes).await
        }
        async fn file_parts_stored(&self, sha256: &str) -> $crate::Result<u32> {
            self.$field.file_parts_stored(sha256).await
        }
        async fn shipped_file(&self, sha256: &str) -> $crate::Result<Option<Vec<u8>>> {
            self.$field.shipped_file(sha256).await
        }
        async fn forget_file(&self, sha256: &str) -> $crate::Result<()> {
            self.$field.forget_file(sha256).await
        }
        async fn create_db_import(
            &self,
            import: &$crate::NewDbImport,
            records: &[$crate::DbRecord],
        ) -> $crate::Result<$crate::DbImportId> {
            self.$field.create_db_import(import, records).await
        }
        async fn db_imports(&self) -> $crate::Result<Vec<$crate::DbImport>> {
            self.$field.db_imports().await
        }
        async fn db_records(&self, import: $crate::DbImportId) -> $crate::Result<Vec<$crate::DbRecord>> {
            self.$field.db_records(import).await
        }
            }
    };
}

#[doc(hidden)]
pub use async_trait as __async_trait;
#[doc(hidden)]
pub use shoal_model as __model;

/// Errors of a store. The message names what was being done; it never contains credentials.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store: {context}: {source}")]
    Backend {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The server could not be reached: the connection was refused, reset or lost, or the
    /// server is shutting down. An outage to wait out, not an answer: [`patient::PatientStore`]
    /// retries these. `uncertain` is set when it was the commit that failed, so the operation
    /// may or may not have applied.
    #[error("store: {context}: the database does not answer: {source}")]
    Unreachable {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
        uncertain: bool,
    },
    #[error("store: {0}")]
    Invalid(String),
    /// A stored job state or failure kind this build does not know.
    #[error("store: {0}")]
    UnknownName(#[from] shoal_model::UnknownName),
    #[error(
        "store: schema version {found} is newer than this build knows ({known}); upgrade shoal"
    )]
    SchemaTooNew { found: u32, known: u32 },
}

impl StoreError {
    /// Whether the server could not be reached (see [`StoreError::Unreachable`]), as opposed to
    /// answering with a refusal or an error: only the first is worth waiting out.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, StoreError::Unreachable { .. })
    }

    pub fn backend(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError::Backend {
            context: context.into(),
            source: Box::new(source),
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// One state change and what travels with it, applied atomically by [`Store::apply`].
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub transition: Transition,
    /// Written only if the transition applied.
    pub result: Option<ResultRow>,
}

impl From<Transition> for Change {
    fn from(transition: Transition) -> Self {
        Change {
            transition,
            result: None,
        }
    }
}

impl Change {
    /// Checks the change before anything is written: the edge must be one of the state machine,
    /// and a result must belong to this job and to the attempt the job has after the change
    /// (any other attempt would be invisible to [`Store::final_results`]).
    pub fn validate(&self) -> Result<()> {
        let t = &self.transition;
        if !t.from.can_move_to(t.to) {
            let e = TransitionError::IllegalEdge {
                job: t.job,
                from: t.from,
                to: t.to,
            };
            return Err(StoreError::Invalid(e.to_string()));
        }
        if let Some(r) = &self.result {
            if r.job != t.job || r.attempt != t.next_attempt() {
                return Err(StoreError::Invalid(format!(
                    "job {} attempt {}: the result carried with it is for job {} attempt {}",
                    t.job,
                    t.next_attempt(),
                    r.job,
                    r.attempt
                )));
            }
        }
        Ok(())
    }
}

/// What a build produced for a build key in a session: an artifact, or a candidate fault.
/// Recorded so jobs that need the same build later reuse it instead of compiling again.
#[derive(Clone, Debug, PartialEq)]
pub struct BuildRecord {
    pub session: SessionId,
    pub build_key: String,
    pub result: std::result::Result<String, (FailureKind, String)>,
}

/// A lease renewed by a worker's heartbeat: the job keeps its state and attempt, and its lease
/// runs to `deadline_ms` (never earlier than it already did). Not a state change, so not a
/// [`Change`]: it moves nothing, owes nothing and stamps no time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRenewal {
    pub job: shoal_model::message::JobRef,
    /// The state the job must still be in (its work started: `compiling`, `evaluating`).
    pub state: JobState,
    pub deadline_ms: i64,
}

/// A batch of changes, applied in one transaction.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub changes: Vec<Change>,
    pub builds: Vec<BuildRecord>,
}

impl Batch {
    /// A batch of state changes and no build records.
    pub fn from_changes(changes: Vec<Change>) -> Self {
        Batch {
            changes,
            builds: Vec::new(),
        }
    }

    /// Validates every change ([`Change::validate`]). Every [`Store::apply`] calls this before
    /// touching the database, so a batch with one bad change is rejected whole.
    pub fn validate(&self) -> Result<()> {
        self.changes.iter().try_for_each(Change::validate)
    }
}

/// The persistence interface every actor uses.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// A description for logs and errors: kind and location, never a password.
    fn describe(&self) -> String;

    /// Applies pending migrations from `schemas/`; returns the schema version now in force.
    async fn migrate(&self) -> Result<u32>;

    async fn create_session(&self, session: &NewSession) -> Result<SessionId>;
    async fn session(&self, id: SessionId) -> Result<Option<Session>>;
    async fn sessions(&self) -> Result<Vec<Session>>;
    /// The newest session with exactly this identity (every field of `NewSession`), if any: how
    /// a rerun of the same tuning finds the session to resume.
    async fn find_session(&self, session: &NewSession) -> Result<Option<Session>>;

    /// Inserts configs whose key is new, adds tags to all; returns each config's id and whether
    /// it was created, in input order.
    async fn upsert_configs(&self, configs: &[NewConfig]) -> Result<Vec<(ConfigId, bool)>>;
    async fn config(&self, id: ConfigId) -> Result<Option<Config>>;
    /// Configs carrying `tag`, in id order.
    async fn configs_with_tag(&self, tag: &str) -> Result<Vec<Config>>;

    /// Inserts solvers whose name is new; returns every solver's id in input order.
    async fn upsert_solvers(&self, solvers: &[NewSolver]) -> Result<Vec<Solver>>;
    async fn solvers(&self) -> Result<Vec<Solver>>;

    /// Records which solvers apply to which configs in a session (replacing earlier answers).
    async fn set_applicability(
        &self,
        session: SessionId,
        rows: &[(ConfigId, SolverId, bool)],
    ) -> Result<()>;
    /// The solvers recorded as applicable to a config in a session, in id order.
    async fn applicable_solvers(
        &self,
        session: SessionId,
        config: ConfigId,
    ) -> Result<Vec<SolverId>>;

    /// Inserts jobs that do not exist yet (by session, config, solver, steps and candidate);
    /// returns how many were created. Existing jobs are left exactly as they are.
    async fn insert_jobs(&self, jobs: &[NewJob]) -> Result<u64>;
    async fn job(&self, id: JobId) -> Result<Option<Job>>;
    /// A job's state and attempt, and nothing else: what a compile worker may read of a job
    /// (its database user has no other column), to skip a redelivered request whose attempt
    /// has moved on.
    async fn job_progress(&self, id: JobId) -> Result<Option<(JobState, shoal_model::Attempt)>>;
    /// Up to `limit` jobs of a session in `state`, oldest first (by id), in every state: jobs
    /// that share a build are usually far apart, and claiming them by build key walked the
    /// whole table (the Scheduler groups a claim's jobs by build itself). The same in every
    /// store (conformance cases pin the order).
    async fn jobs_in_state(
        &self,
        session: SessionId,
        state: JobState,
        limit: u32,
    ) -> Result<Vec<Job>>;
    /// Every job of a session that is in flight (queued, compiling, evaluating).
    async fn in_flight(&self, session: SessionId) -> Result<Vec<Job>>;
    /// In-flight jobs, of any session, whose lease deadline is before `now_ms`.
    async fn expired_leases(&self, now_ms: i64, limit: u32) -> Result<Vec<Job>>;
    /// Number of jobs of a session per state (states with no job are absent).
    async fn state_counts(&self, session: SessionId) -> Result<BTreeMap<JobState, u64>>;
    /// When the jobs of a session that finished at or after `since_ms` finished, oldest first.
    async fn finish_times(&self, session: SessionId, since_ms: i64) -> Result<Vec<i64>>;

    /// Applies a batch in one transaction; returns, per change, whether its compare-and-set
    /// matched. A change that did not match writes nothing (not its result either).
    async fn apply(&self, batch: &Batch) -> Result<Vec<bool>>;
    /// Renews leases (see [`LeaseRenewal`]); returns how many jobs were still in the state and
    /// at the attempt named, and so renewed.
    async fn renew_leases(&self, renewals: &[LeaseRenewal]) -> Result<u64>;
    /// Moves the lease deadline of every in-flight job last changed before `changed_before_ms`
    /// later by `by_ms`; returns how many. After an outage of the store (see [`patient`]), whose
    /// length no lease should have counted: the heartbeats and replies that would have renewed
    /// or settled them were held, not lost.
    async fn extend_leases(&self, by_ms: i64, changed_before_ms: i64) -> Result<u64>;

    /// Jobs owed a request (see [`outbox`]) since before `before_ms`, oldest first, at most
    /// `limit`, each as it is now: in the queued state and at the attempt the request is for.
    async fn unsent(&self, before_ms: i64, limit: u32) -> Result<Vec<Job>>;
    /// Removes the outbox rows of requests the broker has confirmed. A row already settled (the
    /// job moved on meanwhile) is no error.
    async fn mark_sent(&self, sent: &[shoal_model::message::JobRef]) -> Result<()>;

    /// What builds are known for these build keys of a session.
    async fn builds(&self, session: SessionId, keys: &[String]) -> Result<Vec<BuildRecord>>;

    /// Stores an artifact under its content hash; returns false if it was already there.
    async fn put_artifact(&self, hash: &str, bytes: &[u8]) -> Result<bool>;
    async fn artifact(&self, hash: &str) -> Result<Option<Vec<u8>>>;

    /// Every result row of a job, oldest first.
    async fn results(&self, job: JobId) -> Result<Vec<ResultRow>>;
    /// Every job of a session with its final result (the result of its final attempt), in job
    /// order.
    async fn final_results(&self, session: SessionId) -> Result<Vec<FinalResult>>;

    /// Writes a worker process's presence record (`shoal_model::presence`): inserts it, or
    /// replaces the row with its id.
    async fn put_worker(&self, worker: &shoal_model::WorkerPresence) -> Result<()>;
    /// Every worker record, the most recently seen first.
    async fn workers(&self) -> Result<Vec<shoal_model::WorkerPresence>>;

    /// The reply recorded for a command id the Scheduler applied (`shoal_model::command`), if
    /// it applied it.
    async fn command_reply(&self, id: &str) -> Result<Option<shoal_model::command::CommandReply>>;
    /// Records the reply of an applied command. The first reply recorded for an id is kept; a
    /// second is ignored.
    async fn put_command_reply(
        &self,
        reply: &shoal_model::command::CommandReply,
        applied_ms: i64,
    ) -> Result<()>;

    /// Marks a session cancelled (the Scheduler then starts none of its work and skips what is
    /// not under way); `false` when it already was. The jobs are not touched here.
    async fn cancel_session(&self, session: SessionId, cancelled_ms: i64) -> Result<bool>;
    /// Every cancelled session, by id.
    async fn cancelled_sessions(&self) -> Result<Vec<SessionId>>;

    /// Stores one part of a file shipped with a spec (`shoal_model::shipped`), of the file
    /// `sha256` of `size` bytes; a part stored before is kept as it was.
    async fn put_file_part(&self, sha256: &str, size: u64, part: u32, bytes: &[u8]) -> Result<()>;
    /// How many parts of the file `sha256` are stored.
    async fn file_parts_stored(&self, sha256: &str) -> Result<u32>;
    /// The file `sha256`, its parts joined, when every part is stored; `None` otherwise. Its
    /// hash is not checked here: the caller checks it.
    async fn shipped_file(&self, sha256: &str) -> Result<Option<Vec<u8>>>;
    /// Forgets every stored part of `sha256` (parts that did not hash to it).
    async fn forget_file(&self, sha256: &str) -> Result<()>;

    /// Stores MIOpen databases read from files (`shoal import-db --store`): the import and its
    /// records, in one transaction, the records in the order given; every record is checked
    /// first, and one the stores could not keep exactly refuses the whole import
    /// ([`StoreError::Invalid`], naming it). Each record's config must exist.
    async fn create_db_import(
        &self,
        import: &NewDbImport,
        records: &[DbRecord],
    ) -> Result<DbImportId>;
    /// Every database import, oldest first, with the counts of its records.
    async fn db_imports(&self) -> Result<Vec<DbImport>>;
    /// An import's records in the order they were stored (none for an id not stored).
    async fn db_records(&self, import: DbImportId) -> Result<Vec<DbRecord>>;
}
