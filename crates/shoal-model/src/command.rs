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

use crate::{shipped, NewConfig, NewSession, NewSolver, SessionId};

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
    /// Store one part of a file shipped with a spec (`crate::shipped`): the file is named by
    /// its address and size, and the part by its index; its bytes are exactly
    /// [`crate::shipped::part_len`]. Storing a part stored before changes nothing.
    PutFilePart {
        sha256: String,
        size: u64,
        part: u32,
        bytes: Vec<u8>,
    },
    /// Which of these files (address, size) the store lacks, so that only those are sent.
    MissingFiles { files: Vec<(String, u64)> },
    /// `LoadSpec` for a spec shipped with its files: the tree (`crate::shipped::Tree`) at
    /// address `tree` must be stored, and each of its files; the spec is the file at `spec`.
    LoadShippedSpec {
        tree: String,
        spec: String,
        arch: String,
        num_cu: u32,
        reason: String,
        max_retries: u32,
    },
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
            Command::PutFilePart { .. } => "put-file-part",
            Command::MissingFiles { .. } => "missing-files",
            Command::LoadShippedSpec { .. } => "load-shipped-spec",
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
    FilePartStored {
        /// Every part of the file is stored, and together they hash to its address.
        complete: bool,
    },
    /// The addresses of the files asked about that the store lacks.
    FilesMissing { sha256: Vec<String> },
}

/// The answer to one command: its outcome, or why it was refused or failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandReply {
    pub id: String,
    pub result: Result<CommandOutcome, CommandRefused>,
}

/// Why the Scheduler refused a command or could not apply it (a spec that does not parse, a
/// shipped file not stored whole), in the Scheduler's words: the cause lived in its process, so
/// the client and the store get its text. Serialized as that bare string, so the wire and the
/// stored reply are what they were when the text was a `String`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(transparent)]
#[error("{reason}")]
pub struct CommandRefused {
    pub reason: String,
}

impl From<String> for CommandRefused {
    fn from(reason: String) -> Self {
        CommandRefused { reason }
    }
}

impl From<&str> for CommandRefused {
    fn from(reason: &str) -> Self {
        CommandRefused {
            reason: reason.to_string(),
        }
    }
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
            Command::PutFilePart {
                sha256,
                size,
                part,
                bytes,
            } => {
                if !shipped::is_address(sha256) {
                    return Some(format!("{sha256:?} is not a file's sha256 address"));
                }
                if *size > shipped::MAX_FILE_BYTES {
                    return Some(format!(
                        "a file of {size} bytes; a shipped file has at most {}",
                        shipped::MAX_FILE_BYTES
                    ));
                }
                match shipped::part_len(*size, *part) {
                    None => Some(format!(
                        "part {part} of a file of {size} bytes, which has {} parts",
                        shipped::parts(*size)
                    )),
                    Some(len) if len != bytes.len() => Some(format!(
                        "part {part} of a file of {size} bytes has {len} bytes, not {}",
                        bytes.len()
                    )),
                    Some(_) => None,
                }
            }
            Command::MissingFiles { files } => {
                if files.len() > shipped::MAX_TREE_FILES + 1 {
                    return Some(format!(
                        "{} files asked about; at most {}",
                        files.len(),
                        shipped::MAX_TREE_FILES + 1
                    ));
                }
                files
                    .iter()
                    .find(|(sha, _)| !shipped::is_address(sha))
                    .map(|(sha, _)| format!("{sha:?} is not a file's sha256 address"))
            }
            Command::LoadShippedSpec { tree, spec, .. } => {
                if !shipped::is_address(tree) {
                    return Some(format!("{tree:?} is not a tree's sha256 address"));
                }
                shipped::path_problem(spec).map(|p| format!("the spec's path: {p}"))
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
            "shoal.compile.exec_build.x86_64",
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

    #[test]
    fn a_file_part_must_be_exactly_the_part_it_names() {
        let ns = Namespace::new("shoal").unwrap();
        let part = |sha256: &str, size: u64, part: u32, len: usize| CommandRequest {
            id: "p1".into(),
            reply_to: ns.reply_queue("c"),
            command: Command::PutFilePart {
                sha256: sha256.into(),
                size,
                part,
                bytes: vec![7; len],
            },
        };
        let sha = shipped::sha256_hex(b"x");
        let big = shipped::PART_BYTES as u64 + 5;
        assert_eq!(part(&sha, big, 0, shipped::PART_BYTES).problem(&ns), None);
        assert_eq!(part(&sha, big, 1, 5).problem(&ns), None);
        assert_eq!(part(&sha, 0, 0, 0).problem(&ns), None);
        for (bad, why) in [
            (part(&sha, big, 1, 6), "has 5 bytes"),
            (part(&sha, big, 2, 0), "which has 2 parts"),
            (part("XYZ", 1, 0, 1), "not a file's sha256"),
            (
                part(&sha, shipped::MAX_FILE_BYTES + 1, 0, shipped::PART_BYTES),
                "at most",
            ),
        ] {
            let p = bad.problem(&ns).unwrap();
            assert!(p.contains(why), "{p}");
        }
        let mut load = part(&sha, 1, 0, 1);
        load.command = Command::LoadShippedSpec {
            tree: sha.clone(),
            spec: "../spec.toml".into(),
            arch: "x86_64".into(),
            num_cu: 2,
            reason: "t".into(),
            max_retries: 0,
        };
        assert!(load.problem(&ns).unwrap().contains("spec's path"));
    }
}
