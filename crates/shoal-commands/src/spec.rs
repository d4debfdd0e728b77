//! From a tuning spec to a session and its jobs in the store. Loading is idempotent: the same
//! spec on the same device kind finds the same session, and jobs that exist are left as they
//! are. `shoal tune` calls it in its own process; in cluster mode the Scheduler calls it when a
//! CLI's `LoadSpec` command arrives ([`crate::inbox`]), so the same spec loads the same way.
//!
//! It lives here rather than beside the spec's parser in `shoal-backend`, which knows nothing of
//! the store: loading is where a parsed spec meets the store.

use sha2::{Digest, Sha256};
use shoal_backend::spec::{OutOfMemory, TuningSpec};
use shoal_model::shipped::SpecLocation;
use shoal_model::{NewConfig, NewJob, NewSession, NewSolver, Params, Session, SessionId, Step};
use shoal_store::{Store, StoreError};

/// Why a spec's session and jobs were not loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadSpecError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("session {0} vanished after creation")]
    Vanished(SessionId),
    /// A shape's candidates did not fit in memory.
    #[error("shape {shape}: {source}")]
    OutOfMemory { shape: Params, source: OutOfMemory },
}

/// What loading did.
pub struct Loaded {
    pub session: Session,
    pub resumed: bool,
    pub jobs_total: u64,
    pub jobs_created: u64,
    pub builds: usize,
}

/// The session identity of a spec on a device kind (`arch`, `num_cu`), read from
/// `location` (its path on this host, or its place in a shipped tree, which is what every
/// host reads it from).
pub fn session_for(
    spec: &TuningSpec,
    location: &SpecLocation,
    (arch, num_cu): (&str, u32),
    reason: &str,
    max_retries: u32,
) -> NewSession {
    NewSession {
        reason: reason.to_string(),
        arch: arch.to_string(),
        num_cu,
        backend: shoal_model::Backend::Exec,
        spec: spec.source_text.clone(),
        spec_path: location.to_string(),
        library_version: spec_version(spec),
        driver_version: String::new(),
        max_retries,
    }
}

/// The version an exec-backend session records for its spec: a digest of the spec's text
/// and of every source's content, so a session's spec read back can be checked against the
/// files it was tuned from.
pub fn spec_version(spec: &TuningSpec) -> String {
    let digest = hex::encode(Sha256::digest(spec.identity().as_bytes()));
    format!("spec-sha256:{}", &digest[..16])
}

/// Creates or finds the session, then its configs, solver and jobs.
pub async fn load(
    store: &dyn Store,
    spec: &TuningSpec,
    identity: &NewSession,
) -> Result<Loaded, LoadSpecError> {
    let (session, resumed) = match store.find_session(identity).await? {
        Some(s) => (s, true),
        None => {
            let id = store.create_session(identity).await?;
            let s = store
                .session(id)
                .await?
                .ok_or(LoadSpecError::Vanished(id))?;
            (s, false)
        }
    };
    let configs: Vec<NewConfig> = spec
        .shapes
        .iter()
        .map(|shape| NewConfig {
            kind: "shape".into(),
            key: format!("shape:{}", shape.key()),
            params: shape.clone(),
            tags: vec![spec.name.clone()],
        })
        .collect();
    let config_ids = store.upsert_configs(&configs).await?;
    let solver = store
        .upsert_solvers(&[NewSolver {
            name: spec.name.clone(),
            tunable: true,
        }])
        .await?
        .remove(0);
    let mut jobs = Vec::new();
    for (shape, (config, _)) in spec.shapes.iter().zip(&config_ids) {
        let out_of_memory = |source| LoadSpecError::OutOfMemory {
            shape: shape.clone(),
            source,
        };
        let candidates = spec.candidates(shape).map_err(out_of_memory)?;
        jobs.try_reserve(candidates.len()).map_err(|_| {
            out_of_memory(OutOfMemory {
                what: "jobs",
                held: jobs.len(),
            })
        })?;
        for (compile, run) in candidates {
            jobs.push(NewJob {
                session: session.id,
                config: *config,
                solver: solver.id,
                compile_step: Step::ExecBuild,
                eval_step: Step::ExecRun,
                build_key: spec.build_key(&compile),
                compile_params: compile,
                run_params: run,
                // A searched shape's candidates wait for its search to choose them.
                held: spec.search.is_some(),
            });
        }
    }
    let mut builds: Vec<&str> = jobs.iter().map(|j| j.build_key.as_str()).collect();
    builds.sort_unstable();
    builds.dedup();
    let builds = builds.len();
    let mut created = 0;
    for chunk in jobs.chunks(2000) {
        created += store.insert_jobs(chunk).await?;
    }
    Ok(Loaded {
        session,
        resumed,
        jobs_total: jobs.len() as u64,
        jobs_created: created,
        builds,
    })
}
