//! Commands: what an operator's CLI asks of the cluster, as messages, so that in cluster mode the
//! Scheduler is the only process that writes what it schedules, and an operator's machine needs
//! a broker identity, not the database's password.
//!
//! A [`CommandRequest`] travels on the durable `<ns>.commands` queue, signed like every other
//! message. It carries an id the CLI generates, which is what makes applying it idempotent: the
//! Scheduler records the [`CommandReply`] of each id it applies in the store, and a request
//! redelivered after a crash gets that recorded reply again instead of being applied twice. The
//! reply goes to the queue the request names, which must be one of the namespace's reply queues
//! ([`crate::queue::Namespace::reply_queue`]): a command cannot make the Scheduler publish
//! anywhere else.
//!
//! Pure data; the Scheduler's side is `shoal_actors::commands`, the CLI's `shoal_cli::commands`.

use serde::{Deserialize, Serialize};

use crate::{NewConfig, NewSession, NewSolver, SessionId};

/// The longest command id accepted: 32 hex digits (128 random bits) is what the CLI writes.
pub const MAX_COMMAND_ID: usize = 64;

/// The most configs one `ImportConfigs` command carries: an import of a larger file is sent
/// as several commands, each applied on its own (upserts, so their order does not matter).
pub const MAX_CONFIGS_PER_COMMAND: usize = 500;

/// The largest spec text a command carries inline. A spec is a few KB of TOML; its sources
/// (kernel files, shape lists) are read on the Scheduler's host by path, as the workers read
/// them, so the bound is far above real specs and far below [`crate::envelope::MAX_MESSAGE_BYTES`].
pub const MAX_SPEC_BYTES: usize = 1 << 20;

/// One command with what is needed to answer it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandRequest {
    /// Chosen by the CLI, unique per command: the key of idempotent application.
    pub id: String,
    /// The reply queue of the CLI that waits for the answer.
    pub reply_to: String,
    pub command: Command,
}

/// What the cluster is asked to do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Register a tuning spec and load its session and jobs, as `shoal tune` does embedded:
    /// the same spec on the same device kind finds the session it made before.
    LoadSpec {
        /// The spec's text, as read by the CLI.
        spec_text: String,
        /// Where the CLI read it: relative paths in the spec are resolved against it, on the
        /// Scheduler's host and on the workers'.
        spec_path: String,
        /// The device kind the session is for.
        arch: String,
        num_cu: u32,
        /// Why the session exists.
        reason: String,
        /// Attempts a failed job gets again.
        max_retries: u32,
    },
    /// Find the session with this identity, or create it (`shoal session init`).
    CreateSession { identity: NewSession },
    /// Upsert configs with their tags: one part of `shoal import-configs`, at most
    /// [`MAX_CONFIGS_PER_COMMAND`].
    ImportConfigs { configs: Vec<NewConfig> },
    /// Upsert solvers (`shoal solvers update`).
    UpdateSolvers { solvers: Vec<NewSolver> },
    /// Load MIOpen jobs into a session (`shoal jobs load`).
    LoadJobs {
        /// `None`: the newest session.
        session: Option<SessionId>,
        tag: String,
        /// The compile and eval steps, by name.
        fin_steps: Vec<String>,
        /// Solvers by name; empty: every tunable one (every one, for Find).
        solvers: Vec<String>,
        only_applicable: bool,
        reason: String,
    },
    /// Ask fin which solvers apply to the configs with `tag`, for the session's architecture,
    /// and record it (`shoal applicability update`): fin runs on the Scheduler's host.
    UpdateApplicability {
        /// `None`: the newest session.
        session: Option<SessionId>,
        tag: String,
    },
    /// Cancel a session: work not under way is skipped, and none is started; builds and
    /// timings under way finish (`shoal session cancel`).
    CancelSession { session: SessionId },
}

impl Command {
    /// A short name for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Command::LoadSpec { .. } => "load-spec",
            Command::CreateSession { .. } => "create-session",
            Command::ImportConfigs { .. } => "import-configs",
            Command::UpdateSolvers { .. } => "update-solvers",
            Command::LoadJobs { .. } => "load-jobs",
            Command::UpdateApplicability { .. } => "update-applicability",
            Command::CancelSession { .. } => "cancel-session",
        }
    }
}

/// What applying a command did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CommandOutcome {
    SpecLoaded {
        session: SessionId,
        /// The session existed before this command.
        resumed: bool,
        jobs_total: u64,
        jobs_created: u64,
        builds: u64,
    },
    SessionReady {
        session: SessionId,
        /// A session with this identity existed before.
        existed: bool,
    },
    ConfigsImported {
        /// Configs new to the store, and configs it had already.
        created: u64,
        present: u64,
    },
    SolversUpdated {
        solvers: u64,
        tunable: u64,
        /// Solvers new to the store.
        created: u64,
    },
    JobsLoaded {
        session: SessionId,
        configs: u64,
        candidates: u64,
        created: u64,
        not_applicable_skipped: u64,
    },
    ApplicabilityUpdated {
        session: SessionId,
        configs: u64,
        /// (config, solver) pairs asked about, and those applicable.
        pairs: u64,
        applicable: u64,
    },
    SessionCancelled {
        session: SessionId,
        /// It was cancelled before.
        already: bool,
    },
}

/// The answer to one command: its outcome, or why it was refused or failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandReply {
    pub id: String,
    pub result: Result<CommandOutcome, String>,
}

impl CommandRequest {
    /// Why the Scheduler must not apply this request, if it must not: an id that is no id, a
    /// reply queue outside the namespace's reply queues, a spec over [`MAX_SPEC_BYTES`].
    pub fn problem(&self, namespace: &crate::queue::Namespace) -> Option<String> {
        if self.id.is_empty()
            || self.id.len() > MAX_COMMAND_ID
            || !self
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Some(format!(
                "command id must be 1 to {MAX_COMMAND_ID} of [A-Za-z0-9-]"
            ));
        }
        if !namespace.is_reply_queue(&self.reply_to) {
            return Some(format!(
                "reply queue `{}` is not a reply queue of namespace {namespace}",
                self.reply_to
            ));
        }
        match &self.command {
            Command::LoadSpec { spec_text, .. } if spec_text.len() > MAX_SPEC_BYTES => {
                Some(format!(
                    "the spec has {} bytes; a command carries at most {MAX_SPEC_BYTES}",
                    spec_text.len()
                ))
            }
            Command::ImportConfigs { configs } if configs.len() > MAX_CONFIGS_PER_COMMAND => {
                Some(format!(
                    "{} configs in one command; at most {MAX_CONFIGS_PER_COMMAND} (send the rest in others)",
                    configs.len()
                ))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Namespace;

    fn request(id: &str, reply_to: &str, spec_bytes: usize) -> CommandRequest {
        CommandRequest {
            id: id.into(),
            reply_to: reply_to.into(),
            command: Command::LoadSpec {
                spec_text: "x".repeat(spec_bytes),
                spec_path: "/specs/gemm.toml".into(),
                arch: "x86_64".into(),
                num_cu: 2,
                reason: "test".into(),
                max_retries: 0,
            },
        }
    }

    #[test]
    fn only_well_formed_requests_to_the_namespaces_reply_queues_are_applied() {
        let ns = Namespace::new("shoal").unwrap();
        let reply = ns.reply_queue("0123abcd");
        assert_eq!(request("0123abcd", &reply, 10).problem(&ns), None);
        assert!(request("", &reply, 10).problem(&ns).is_some());
        assert!(request("a b", &reply, 10).problem(&ns).is_some());
        assert!(request(&"a".repeat(65), &reply, 10).problem(&ns).is_some());
        for elsewhere in [
            "shoal.results",
            "shoal.compile.command_build.x86_64",
            "other.reply.0123abcd",
            "shoal.reply.",
            "shoal.reply.a.b",
        ] {
            let p = request("1", elsewhere, 10).problem(&ns).unwrap();
            assert!(p.contains("not a reply queue"), "{elsewhere}: {p}");
        }
        let p = request("1", &reply, MAX_SPEC_BYTES + 1)
            .problem(&ns)
            .unwrap();
        assert!(p.contains("at most"), "{p}");
        let config = |i: usize| NewConfig {
            kind: "conv".into(),
            key: format!("k{i}"),
            params: crate::Params::new(),
            tags: vec!["t".into()],
        };
        let mut import = CommandRequest {
            id: "2".into(),
            reply_to: reply.clone(),
            command: Command::ImportConfigs {
                configs: (0..MAX_CONFIGS_PER_COMMAND).map(config).collect(),
            },
        };
        assert_eq!(import.problem(&ns), None);
        import.command = Command::ImportConfigs {
            configs: (0..=MAX_CONFIGS_PER_COMMAND).map(config).collect(),
        };
        assert!(import.problem(&ns).unwrap().contains("at most"));
    }
}
