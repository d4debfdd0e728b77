//! What an operator's command does to the store, wherever it is applied: a tuning spec loaded
//! into its session and jobs ([`spec`]), files shipped with a spec stored and written back out
//! ([`shipped`]), and the Scheduler's command inbox, which applies each command once
//! ([`inbox`]). `shoal tune` loads a spec into its own store with [`spec::load`]; in cluster mode
//! the CLI sends a command and the Scheduler's process applies it through [`inbox::answer`].
//!
//! The layering: this crate sits where the store meets the backends' parsed specs
//! (`shoal-backend`) and MIOpen's loading (`shoal_miopen::load`), below the actors
//! (`shoal-actors`), whose inbox loop reads `<ns>.commands` and hands each request here. It
//! knows nothing of the bus.

pub mod inbox;
pub mod shipped;
pub mod spec;

pub use inbox::{answer, HostTools};

use shoal_model::SessionId;
use shoal_store::StoreError;

/// Why a command was not applied: its answer, told to the operator and recorded, or the store
/// failing, and then it is tried again ([`CommandError::into_answer`]).
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The spec does not parse, or cannot be read from its shipped tree.
    #[error(transparent)]
    Spec(#[from] shoal_backend::spec::SpecError),
    #[error(transparent)]
    LoadSpec(#[from] spec::LoadSpecError),
    #[error(transparent)]
    Tree(#[from] shipped::TreeError),
    #[error(transparent)]
    Part(#[from] shipped::PartError),
    #[error(transparent)]
    Miopen(#[from] shoal_miopen::load::LoadError),
    #[error("session {0} is not in the store")]
    UnknownSession(SessionId),
    /// The command names no session and the store has none.
    #[error("the cluster's store has no session")]
    NoSession,
}

impl CommandError {
    /// The command's answer, to be recorded and told; or, for the store failing (wherever it
    /// failed), that failure, and then nothing is recorded and the command is tried again.
    pub fn into_answer(self) -> Result<String, StoreError> {
        use shoal_miopen::load::LoadError;
        match self {
            CommandError::Store(e)
            | CommandError::LoadSpec(spec::LoadSpecError::Store(e))
            | CommandError::Tree(shipped::TreeError::Store(e))
            | CommandError::Part(shipped::PartError::Store(e))
            | CommandError::Miopen(LoadError::Store(e)) => Err(e),
            answer => Ok(answer.to_string()),
        }
    }
}
