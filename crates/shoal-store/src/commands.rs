//! Applied commands (`schemas/*/…_command.sql`), the same in both stores: the statements and
//! the one encoding of a [`CommandReply`] as a column (JSON text).
//!
//! The first reply recorded for an id is the one kept: recording is an insert that ignores a
//! duplicate, so a retried statement, or a second Scheduler racing on a redelivered command,
//! never replaces what the CLI may already have been told.

use shoal_model::command::CommandReply;

use crate::encoding::to_json;
use crate::{Result, StoreError};

pub(crate) const INSERT_SQLITE: &str =
    "INSERT OR IGNORE INTO command (id, reply, applied_ms) VALUES (?, ?, ?)";
pub(crate) const INSERT_MYSQL: &str =
    "INSERT IGNORE INTO command (id, reply, applied_ms) VALUES (?, ?, ?)";
pub(crate) const SELECT_REPLY: &str = "SELECT reply FROM command WHERE id = ?";

/// Marks a session cancelled; a second mark keeps the first time.
pub(crate) const CANCEL_SQLITE: &str =
    "INSERT OR IGNORE INTO session_cancel (session_id, cancelled_ms) VALUES (?, ?)";
pub(crate) const CANCEL_MYSQL: &str =
    "INSERT IGNORE INTO session_cancel (session_id, cancelled_ms) VALUES (?, ?)";
pub(crate) const CANCELLED: &str = "SELECT session_id FROM session_cancel ORDER BY session_id";

pub(crate) fn encode(reply: &CommandReply) -> Result<String> {
    to_json("command reply", reply)
}

pub(crate) fn decode(id: &str, json: &str) -> Result<CommandReply> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::Invalid(format!("the recorded reply of command {id}: {e}")))
}
