//! The tuning spec registered for each session, parsed once per process and shared.
//!
//! Workers run only the commands of the spec stored with the session in the store, never a
//! command string that arrives in a message: a request names a session and parameters, and this
//! cache turns the session into its spec.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use shoal_backend::spec::{self, TuningSpec};
use shoal_model::SessionId;
use shoal_store::Store;

use crate::ActorError;

/// Session → parsed spec.
#[derive(Clone, Default)]
pub struct SessionSpecs {
    cache: Arc<Mutex<HashMap<SessionId, Arc<TuningSpec>>>>,
}

impl SessionSpecs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a spec already parsed (the CLI that created the session has it).
    pub fn insert(&self, session: SessionId, spec: Arc<TuningSpec>) {
        self.cache.lock().unwrap().insert(session, spec);
    }

    /// The spec of `session`, read from the store and parsed on first use.
    pub async fn get(
        &self,
        store: &dyn Store,
        session: SessionId,
    ) -> Result<Arc<TuningSpec>, ActorError> {
        if let Some(s) = self.cache.lock().unwrap().get(&session) {
            return Ok(s.clone());
        }
        let info = store
            .session(session)
            .await?
            .ok_or(ActorError::UnknownSession(session))?;
        if info.info.backend != "command" {
            return Err(ActorError::Other(format!(
                "session {session} uses backend `{}`, which this worker does not run",
                info.info.backend
            )));
        }
        let parsed = spec::parse(&info.info.spec, Path::new(&info.info.spec_path))
            .map_err(|e| ActorError::Other(format!("session {session}: {e}")))?;
        let parsed = Arc::new(parsed);
        self.insert(session, parsed.clone());
        Ok(parsed)
    }
}
