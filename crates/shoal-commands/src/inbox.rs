//! The Scheduler's command inbox, the part that answers: in cluster mode, operators' CLIs
//! publish commands (`shoal_model::command`) to `<ns>.commands` instead of writing the store,
//! and the inbox's loop beside the Scheduler (`shoal-actors`, `commands.rs`: it reads the queue,
//! dead-letters what is not a well-formed command, sends the reply and acknowledges) hands each
//! request to [`answer`]. So the Scheduler's process is the only writer of what it schedules, and
//! an operator's machine needs a broker identity, not the database's password.
//!
//! A command is applied **once per id**: the reply of every applied command is recorded in the
//! store (`command` table) before it is sent and before the request is acknowledged. A request
//! redelivered after a crash, or published twice, finds its recorded reply and gets it again,
//! unapplied. A crash between applying and recording applies again, which is safe because
//! applying is itself idempotent (loading a spec finds the session it made, and jobs that exist
//! are left as they are); what the record adds is that the CLI is told the first outcome, not
//! "resumed, 0 new".
//!
//! Each kind of command is applied by a function of its own below; their errors are a
//! [`CommandError`], which is either the command's answer (a spec that does not parse, a tag no
//! config carries) or the store failing, and then nothing is recorded and the command is tried
//! again.

use std::path::{Path, PathBuf};

use shoal_model::command::{Command, CommandOutcome, CommandReply, CommandRequest};
use shoal_model::shipped::SpecLocation;
use shoal_model::{NewConfig, NewSession, NewSolver, SessionId};
use shoal_store::{Store, StoreError};

use crate::shipped::{self, ShippedTrees};
use crate::CommandError;

/// What applying commands needs of the Scheduler's host.
#[derive(Clone, Debug)]
pub struct HostTools {
    /// MIOpen's tuning handle (`UpdateApplicability` asks it).
    pub fin: PathBuf,
    /// Where fin runs.
    pub scratch: PathBuf,
    /// Where shipped specs are written (shared with the Scheduler's session backends).
    pub trees: ShippedTrees,
}

/// The reply to `req`: the one recorded when it was applied before, or else it is applied now
/// and its reply recorded. `Err` is the store failing: nothing is recorded, and the command is
/// to be tried again.
pub async fn answer(
    store: &dyn Store,
    tools: &HostTools,
    req: &CommandRequest,
) -> Result<CommandReply, StoreError> {
    if let Some(recorded) = store.command_reply(&req.id).await? {
        tracing::info!(id = %req.id, command = req.command.name(), "command applied before: replying as then");
        return Ok(recorded);
    }
    let result = match apply(store, tools, &req.command).await {
        Ok(outcome) => Ok(outcome),
        Err(e) => Err(e.into_answer()?.into()),
    };
    let reply = CommandReply {
        id: req.id.clone(),
        result,
    };
    match &reply.result {
        Ok(outcome) => {
            tracing::info!(id = %req.id, command = req.command.name(), ?outcome, "command applied")
        }
        Err(e) => {
            tracing::warn!(id = %req.id, command = req.command.name(), error = %e, "command failed")
        }
    }
    store.put_command_reply(&reply, now_ms()).await?;
    Ok(reply)
}

/// Applies one command.
async fn apply(
    store: &dyn Store,
    tools: &HostTools,
    command: &Command,
) -> Result<CommandOutcome, CommandError> {
    match command {
        Command::LoadSpec {
            spec_text,
            spec_path,
            arch,
            num_cu,
            reason,
            max_retries,
        } => {
            let session = SessionOf {
                device: (arch, *num_cu),
                reason,
                max_retries: *max_retries,
            };
            load_spec(store, spec_text, spec_path, session).await
        }
        Command::LoadShippedSpec {
            tree,
            spec,
            arch,
            num_cu,
            reason,
            max_retries,
        } => {
            let session = SessionOf {
                device: (arch, *num_cu),
                reason,
                max_retries: *max_retries,
            };
            load_shipped_spec(store, &tools.trees, (tree, spec), session).await
        }
        Command::PutFilePart {
            sha256,
            size,
            part,
            bytes,
        } => put_file_part(store, sha256, (*size, *part), bytes).await,
        Command::MissingFiles { files } => missing_files(store, files).await,
        Command::CreateSession { identity } => create_session(store, identity).await,
        Command::ImportConfigs { configs } => import_configs(store, configs).await,
        Command::UpdateSolvers { solvers } => update_solvers(store, solvers).await,
        Command::CancelSession { session } => cancel_session(store, *session).await,
        Command::UpdateApplicability { session, tag } => {
            update_applicability(store, tools, *session, tag).await
        }
        Command::LoadJobs {
            session,
            tag,
            fin_steps,
            solvers,
            only_applicable,
            reason,
        } => {
            let session = session_or_newest(store, *session).await?;
            let req = shoal_miopen::load::JobsLoad {
                session,
                tag: tag.clone(),
                fin_steps: fin_steps.clone(),
                solvers: solvers.clone(),
                only_applicable: *only_applicable,
                reason: reason.clone(),
            };
            load_jobs(store, &req).await
        }
    }
}

/// The session a spec is loaded into: the device kind it is tuned for, and the reason and
/// retries it is recorded with.
struct SessionOf<'a> {
    device: (&'a str, u32),
    reason: &'a str,
    max_retries: u32,
}

/// `LoadSpec`: a spec sent as text, read where the CLI ran (its path is recorded).
async fn load_spec(
    store: &dyn Store,
    text: &str,
    path: &str,
    session: SessionOf<'_>,
) -> Result<CommandOutcome, CommandError> {
    let spec = shoal_backend::spec::parse(text, Path::new(path))?;
    load_parsed(store, &spec, &SpecLocation::Path(path.to_string()), session).await
}

/// `LoadShippedSpec`: a spec shipped with its files, read from its tree written on this host.
async fn load_shipped_spec(
    store: &dyn Store,
    trees: &ShippedTrees,
    (tree, spec): (&str, &str),
    session: SessionOf<'_>,
) -> Result<CommandOutcome, CommandError> {
    let dir = trees.dir(store, tree).await?;
    let parsed = shoal_backend::spec::load(&dir.join(spec))?;
    let location = SpecLocation::Shipped {
        tree: tree.to_string(),
        spec: spec.to_string(),
    };
    load_parsed(store, &parsed, &location, session).await
}

/// Loads the session and jobs of a parsed spec, the session recording `location` as where the
/// spec is.
async fn load_parsed(
    store: &dyn Store,
    spec: &shoal_backend::spec::TuningSpec,
    location: &SpecLocation,
    session: SessionOf<'_>,
) -> Result<CommandOutcome, CommandError> {
    let SessionOf {
        device,
        reason,
        max_retries,
    } = session;
    let identity = crate::spec::session_for(spec, location, device, reason, max_retries);
    let loaded = crate::spec::load(store, spec, &identity).await?;
    Ok(CommandOutcome::SpecLoaded {
        session: loaded.session.id,
        resumed: loaded.resumed,
        jobs_total: loaded.jobs_total,
        jobs_created: loaded.jobs_created,
        builds: loaded.builds as u64,
    })
}

/// `PutFilePart`: one part of a shipped file.
async fn put_file_part(
    store: &dyn Store,
    sha256: &str,
    (size, part): (u64, u32),
    bytes: &[u8],
) -> Result<CommandOutcome, CommandError> {
    let complete = shipped::store_part(store, sha256, size, part, bytes).await?;
    Ok(CommandOutcome::FilePartStored { complete })
}

/// `MissingFiles`: which of the files a CLI is about to ship the store lacks.
async fn missing_files(
    store: &dyn Store,
    files: &[(String, u64)],
) -> Result<CommandOutcome, CommandError> {
    Ok(CommandOutcome::FilesMissing {
        sha256: shipped::missing(store, files).await?,
    })
}

/// `CreateSession`: a session of this identity, found or created.
async fn create_session(
    store: &dyn Store,
    identity: &NewSession,
) -> Result<CommandOutcome, CommandError> {
    if let Some(s) = store.find_session(identity).await? {
        return Ok(CommandOutcome::SessionReady {
            session: s.id,
            existed: true,
        });
    }
    let session = store.create_session(identity).await?;
    Ok(CommandOutcome::SessionReady {
        session,
        existed: false,
    })
}

/// `ImportConfigs`: configs upserted, counted as created or already present.
async fn import_configs(
    store: &dyn Store,
    configs: &[NewConfig],
) -> Result<CommandOutcome, CommandError> {
    let created = store
        .upsert_configs(configs)
        .await?
        .iter()
        .filter(|(_, created)| *created)
        .count() as u64;
    Ok(CommandOutcome::ConfigsImported {
        created,
        present: configs.len() as u64 - created,
    })
}

/// `UpdateSolvers`: the solver table upserted.
async fn update_solvers(
    store: &dyn Store,
    solvers: &[NewSolver],
) -> Result<CommandOutcome, CommandError> {
    let before = store.solvers().await?.len() as u64;
    let stored = store.upsert_solvers(solvers).await?;
    let after = store.solvers().await?.len() as u64;
    Ok(CommandOutcome::SolversUpdated {
        solvers: stored.len() as u64,
        tunable: stored.iter().filter(|s| s.tunable).count() as u64,
        created: after.saturating_sub(before),
    })
}

/// `CancelSession`: the session marked cancelled. The mark is all: the Scheduler's next
/// sessions refresh skips the work (`scheduler/cancel.rs` in `shoal-actors`), from its own task.
async fn cancel_session(
    store: &dyn Store,
    session: SessionId,
) -> Result<CommandOutcome, CommandError> {
    if store.session(session).await?.is_none() {
        return Err(CommandError::UnknownSession(session));
    }
    let newly = store.cancel_session(session, now_ms()).await?;
    Ok(CommandOutcome::SessionCancelled {
        session,
        already: !newly,
    })
}

/// `UpdateApplicability`: fin, on this host, asked which solvers apply to the tag's configs.
async fn update_applicability(
    store: &dyn Store,
    tools: &HostTools,
    session: Option<SessionId>,
    tag: &str,
) -> Result<CommandOutcome, CommandError> {
    let session = session_or_newest(store, session).await?;
    let ask_fin = |input: String| {
        let (fin, scratch) = (&tools.fin, &tools.scratch);
        async move { shoal_backend::miopen::ask_fin(fin, scratch, &input).await }
    };
    let a = shoal_miopen::load::update_applicability(store, session, tag, ask_fin).await?;
    Ok(CommandOutcome::ApplicabilityUpdated {
        session,
        configs: a.configs as u64,
        pairs: a.pairs as u64,
        applicable: a.applicable as u64,
    })
}

/// `LoadJobs`: a MIOpen session's jobs.
async fn load_jobs(
    store: &dyn Store,
    req: &shoal_miopen::load::JobsLoad,
) -> Result<CommandOutcome, CommandError> {
    let loaded = shoal_miopen::load::load(store, req).await?;
    Ok(CommandOutcome::JobsLoaded {
        session: req.session,
        configs: loaded.configs as u64,
        candidates: loaded.candidates as u64,
        created: loaded.created,
        not_applicable_skipped: loaded.not_applicable_skipped as u64,
    })
}

/// The session named, or the newest: what a command that names none works on, as `--session`
/// means everywhere.
async fn session_or_newest(
    store: &dyn Store,
    session: Option<SessionId>,
) -> Result<SessionId, CommandError> {
    if let Some(id) = session {
        return Ok(id);
    }
    let newest = store.sessions().await?.iter().map(|s| s.id).max();
    newest.ok_or(CommandError::NoSession)
}

/// Milliseconds since the Unix epoch, as the store's timestamps are.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
