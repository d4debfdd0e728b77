//! A MIOpen session's work, loaded into the store: its jobs, one per (config with a tag,
//! solver) ([`jobs`]), and which solvers apply to which configs, as fin says
//! ([`applicability`]). The CLI calls these on a local store; in cluster mode the Scheduler's
//! command inbox calls them for a `LoadJobs` or `UpdateApplicability` command
//! (`shoal-commands`), so both load alike.
//!
//! fin itself is run by the MIOpen backend (`shoal_backend::miopen::ask_fin`), which depends on
//! this crate: [`applicability::update_applicability`] is handed a way to ask it.

pub mod applicability;
pub mod jobs;

pub use applicability::{update_applicability, Applicability};
pub use jobs::{build_key, load, JobsLoad, Loaded};

use shoal_model::{Backend, ConfigId, SessionId};
use shoal_store::StoreError;

/// Why a MIOpen session's work was not loaded: the request itself, told to the operator as it
/// is (every variant but [`LoadError::Store`]), or the store.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("session {0} is not in the store")]
    UnknownSession(SessionId),
    #[error("session {session} is a `{backend}` session; MIOpen jobs and applicability are for MIOpen sessions")]
    NotMiopen {
        session: SessionId,
        backend: Backend,
    },
    #[error(
        "--fin-steps {0}: a job has a compile and an eval step: \
         `miopen_perf_compile,miopen_perf_eval` or `miopen_find_compile,miopen_find_eval`"
    )]
    FinSteps(String),
    #[error("the store has no solvers: run `shoal solvers update` first")]
    NoSolvers,
    #[error("--solvers: unknown solver `{0}` (see `shoal solvers update`)")]
    UnknownSolver(String),
    #[error("no config carries the tag `{0}` (see `shoal import-configs`)")]
    NoConfigWithTag(String),
    #[error("config {config}: {reason}")]
    Config { config: ConfigId, reason: String },
    #[error(
        "no applicable (config, solver) pair for tag `{tag}` in session {session}: run \
         `shoal applicability update --session {session}` first"
    )]
    NoneApplicable { tag: String, session: SessionId },
    /// fin could not be run, or said something that is not an answer.
    #[error("{0}")]
    Fin(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("fin answered {answered} of {asked} applicability jobs")]
    FinAnswers { answered: usize, asked: usize },
}

/// `session` from the store, which must be a MIOpen session.
async fn miopen_session(
    store: &dyn shoal_store::Store,
    session: SessionId,
) -> Result<shoal_model::Session, LoadError> {
    let Some(found) = store.session(session).await? else {
        return Err(LoadError::UnknownSession(session));
    };
    if found.info.backend != Backend::Miopen {
        return Err(LoadError::NotMiopen {
            session,
            backend: found.info.backend,
        });
    }
    Ok(found)
}

/// The configs with `tag`, at least one.
async fn tagged_configs(
    store: &dyn shoal_store::Store,
    tag: &str,
) -> Result<Vec<shoal_model::Config>, LoadError> {
    let configs = store.configs_with_tag(tag).await?;
    if configs.is_empty() {
        return Err(LoadError::NoConfigWithTag(tag.to_string()));
    }
    Ok(configs)
}

/// A config's convolution, from its parameters.
fn conv_of(config: &shoal_model::Config) -> Result<crate::ConvConfig, LoadError> {
    crate::ConvConfig::from_params(&config.params).map_err(|e| LoadError::Config {
        config: config.id,
        reason: e.to_string(),
    })
}
