//! The backend of each session, built once per process from what the store registered for the
//! session, and shared by every actor.
//!
//! Workers run only the commands of the spec stored with the session in the store (or MIOpen's
//! `fin` configured on the worker), never a command string that arrives in a message: a request
//! names a session and parameters, and this cache turns the session into its backend. A spec
//! shipped with its files (`shoal tune --cluster`) is read from its tree, written from the
//! store on this host once (`shoal_commands::shipped`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use shoal_backend::miopen::MiopenBackend;
use shoal_backend::replay::ReplayTime;
use shoal_backend::spec::{self, TuningSpec};
use shoal_backend::SessionBackend;
use shoal_commands::shipped::{ShippedTrees, TreeError};
use shoal_model::shipped::SpecLocation;
use shoal_model::{Backend, SessionId};
use shoal_store::Store;

use crate::ActorError;

/// Session → backend.
#[derive(Clone)]
pub struct SessionBackends {
    cache: Arc<Mutex<HashMap<SessionId, SessionBackend>>>,
    fin: PathBuf,
    /// How long replay sessions' answers take on this worker (`--replay-time`).
    replay_time: ReplayTime,
    /// Where the specs of sessions loaded from shipped files are written on this host.
    trees: ShippedTrees,
}

impl Default for SessionBackends {
    fn default() -> Self {
        Self::new(shoal_backend::session::DEFAULT_FIN.into())
    }
}

impl SessionBackends {
    /// `fin` is where MIOpen sessions find MIOpen's tuning handle on this host.
    pub fn new(fin: PathBuf) -> Self {
        SessionBackends {
            cache: Arc::default(),
            fin,
            replay_time: ReplayTime::Instant,
            trees: ShippedTrees::default(),
        }
    }

    /// Where MIOpen's tuning handle is on this host.
    pub fn fin(&self) -> &std::path::Path {
        &self.fin
    }

    /// The shipped trees this process wrote (the command inbox shares them).
    pub fn trees(&self) -> &ShippedTrees {
        &self.trees
    }

    /// How long the answers of replay sessions this process loads from the store take.
    pub fn with_replay_time(mut self, replay_time: ReplayTime) -> Self {
        self.replay_time = replay_time;
        self
    }

    /// Registers a backend already built (the CLI that created the session has the spec).
    pub fn insert(&self, session: SessionId, backend: SessionBackend) {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session, backend);
    }

    /// The backend of `session`, from the store on first use.
    pub async fn get(
        &self,
        store: &dyn Store,
        session: SessionId,
    ) -> Result<SessionBackend, ActorError> {
        if let Some(b) = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&session)
        {
            return Ok(b.clone());
        }
        let info = store
            .session(session)
            .await?
            .ok_or(ActorError::UnknownSession(session))?;
        let backend = match info.info.backend {
            Backend::Exec => {
                // The spec was checked, under the loader's --max-candidates, before the session
                // was written; the stored text is read back under no lower bound.
                let limits = spec::Limits {
                    max_candidates: u64::MAX,
                    ..spec::Limits::default()
                };
                let path = match SpecLocation::parse(&info.info.spec_path) {
                    SpecLocation::Path(path) => PathBuf::from(path),
                    SpecLocation::Shipped { tree, spec } => {
                        let dir = self.trees.dir(store, &tree).await.map_err(|e| match e {
                            TreeError::Store(e) => ActorError::Store(e),
                            invalid => ActorError::Tree {
                                session,
                                source: invalid,
                            },
                        })?;
                        dir.join(spec)
                    }
                };
                let mut parsed = spec::parse_with(&info.info.spec, &path, &limits)
                    .map_err(|source| ActorError::Spec { session, source })?;
                parsed.replay_time = self.replay_time;
                SessionBackend::Exec(Arc::new(parsed))
            }
            Backend::Miopen => SessionBackend::Miopen(Arc::new(MiopenBackend::new(
                self.fin.clone(),
                &info.info.arch,
                info.info.num_cu,
            ))),
            Backend::Noop => SessionBackend::Noop,
        };
        self.insert(session, backend.clone());
        Ok(backend)
    }

    /// The tuning spec of an exec-backend session.
    pub async fn spec(
        &self,
        store: &dyn Store,
        session: SessionId,
    ) -> Result<Arc<TuningSpec>, ActorError> {
        match self.get(store, session).await? {
            SessionBackend::Exec(spec) => Ok(spec),
            _ => Err(ActorError::NoSpec(session)),
        }
    }
}
