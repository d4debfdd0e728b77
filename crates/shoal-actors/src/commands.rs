//! The Scheduler's command inbox: in cluster mode, operators' CLIs publish commands
//! (`shoal_model::command`) to `<ns>.commands` instead of writing the store, and this loop,
//! beside the Scheduler, applies them. So the Scheduler's process is the only writer of what it
//! schedules, and an operator's machine needs a broker identity, not the database's password.
//!
//! Each request is verified and decoded like every message (a forged, corrupt or foreign one is
//! dead-lettered with its reason), then checked ([`CommandRequest::problem`]: its id, its reply
//! queue, its size), then applied **once per id**: the reply of every applied command is
//! recorded in the store (`command` table) before it is sent and before the request is
//! acknowledged. A request redelivered after a crash, or published twice, finds its recorded
//! reply and gets it again, unapplied. A crash between applying and recording applies again,
//! which is safe because applying is itself idempotent (loading a spec finds the session it
//! made, and jobs that exist are left as they are); what the record adds is that the CLI is told
//! the first outcome, not "resumed, 0 new".
//!
//! A command published while no Scheduler runs waits in the durable queue, and is applied when
//! one starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use shoal_backend::spec::{SpecError, TuningSpec};
use shoal_bus::{Bus, QueueOptions};
use shoal_model::command::{Command, CommandOutcome, CommandReply};
use shoal_model::shipped::SpecLocation;
use shoal_model::Message;
use shoal_store::Store;

use crate::shipped::{ShippedTrees, TreeError};
use crate::shutdown::Signal;
use crate::ActorError;

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

/// Serves `<ns>.commands` until `stop`.
pub async fn serve(
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    delivery_limit: u32,
    tools: HostTools,
    mut stop: Signal,
) -> Result<(), ActorError> {
    let queue = bus.namespace().commands_queue();
    bus.declare_queue(&queue, &QueueOptions::limited(delivery_limit))
        .await?;
    let mut consumer = bus.consume(&queue, 1).await?;
    while let Some((req, delivery)) = crate::next_request(
        bus.codec(),
        &mut *consumer,
        &mut stop,
        &queue,
        "command",
        |m| match m {
            Message::Command(r) => Some(r),
            _ => None,
        },
    )
    .await?
    {
        if let Some(problem) = req.problem(bus.namespace()) {
            let reason = format!("refused on {queue}: {problem}");
            tracing::error!(queue = %queue, reason = %reason, "dead-lettering a message");
            delivery.dead_letter(reason).await?;
            continue;
        }
        // The database unreachable for a while (a restart, a failover) holds the command here,
        // retried, rather than sending it round the queue until its delivery limit
        // dead-letters it.
        let reply =
            while_unreachable(&stop, STORE_PATIENCE, || answer(&*store, &tools, &req)).await?;
        // The CLI may have given up waiting and gone, its reply queue with it: the outcome is
        // recorded all the same, and `shoal sessions` shows it.
        if let Err(e) = crate::publish(&*bus, &req.reply_to, &Message::CommandReply(reply)).await {
            tracing::warn!(id = %req.id, reply_to = %req.reply_to, error = %e, "reply not delivered");
        }
        delivery.ack().await?;
    }
    Ok(())
}

/// How long a command waits for an unreachable store before the loop fails (and is restarted,
/// and the command delivered again).
const STORE_PATIENCE: Duration = Duration::from_secs(300);

/// Runs `op` again while it fails because the store cannot be reached (a backend error), with
/// backoff from 100 ms to 5 s, for at most `patience` and not past `stop`; any other error,
/// and the last one, is returned.
async fn while_unreachable<T, F, Fut>(
    stop: &Signal,
    patience: Duration,
    mut op: F,
) -> shoal_store::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = shoal_store::Result<T>>,
{
    let give_up = tokio::time::Instant::now() + patience;
    let mut delay = Duration::from_millis(100);
    loop {
        match op().await {
            Err(
                e @ (shoal_store::StoreError::Backend { .. }
                | shoal_store::StoreError::Unreachable { .. }),
            ) if tokio::time::Instant::now() < give_up && !stop.is_triggered() => {
                tracing::warn!(error = %e, retry_in = ?delay, "store unreachable; the command waits");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

/// The reply to `req`: the one recorded when it was applied before, or else it is applied now
/// and its reply recorded.
async fn answer(
    store: &dyn Store,
    tools: &HostTools,
    req: &shoal_model::command::CommandRequest,
) -> shoal_store::Result<CommandReply> {
    if let Some(recorded) = store.command_reply(&req.id).await? {
        tracing::info!(id = %req.id, command = req.command.name(), "command applied before: replying as then");
        return Ok(recorded);
    }
    let reply = CommandReply {
        id: req.id.clone(),
        result: apply(store, tools, &req.command).await?,
    };
    match &reply.result {
        Ok(outcome) => {
            tracing::info!(id = %req.id, command = req.command.name(), ?outcome, "command applied")
        }
        Err(e) => {
            tracing::warn!(id = %req.id, command = req.command.name(), error = %e, "command failed")
        }
    }
    store.put_command_reply(&reply, crate::now_ms()).await?;
    Ok(reply)
}

/// Loads the session and jobs of a parsed spec, the session recording `location` as where
/// the spec is; a spec that did not parse is the reply.
async fn load_spec(
    store: &dyn Store,
    parsed: Result<TuningSpec, SpecError>,
    location: &SpecLocation,
    device: (&str, u32),
    reason: &str,
    max_retries: u32,
) -> shoal_store::Result<Result<CommandOutcome, String>> {
    let spec = match parsed {
        Ok(spec) => spec,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let identity = crate::load::session_for(&spec, location, device, reason, max_retries);
    let loaded = crate::load::load(store, &spec, &identity).await?;
    Ok(Ok(CommandOutcome::SpecLoaded {
        session: loaded.session.id,
        resumed: loaded.resumed,
        jobs_total: loaded.jobs_total,
        jobs_created: loaded.jobs_created,
        builds: loaded.builds as u64,
    }))
}

/// Applies one command: its outcome, or its own failure, told to the CLI and recorded (a spec
/// that does not parse). A failure of the store is the outer `Err`: nothing is recorded, and
/// the command is tried again ([`serve`] waits for the store).
async fn apply(
    store: &dyn Store,
    tools: &HostTools,
    command: &Command,
) -> shoal_store::Result<Result<CommandOutcome, String>> {
    match command {
        Command::LoadSpec {
            spec_text,
            spec_path,
            arch,
            num_cu,
            reason,
            max_retries,
        } => {
            let location = SpecLocation::Path(spec_path.clone());
            let device = (arch.as_str(), *num_cu);
            let parsed = shoal_backend::spec::parse(spec_text, Path::new(spec_path));
            load_spec(store, parsed, &location, device, reason, *max_retries).await
        }
        Command::LoadShippedSpec {
            tree,
            spec,
            arch,
            num_cu,
            reason,
            max_retries,
        } => {
            let dir = match tools.trees.dir(store, tree).await {
                Ok(dir) => dir,
                Err(TreeError::Store(e)) => return Err(e),
                Err(invalid) => return Ok(Err(invalid.to_string())),
            };
            let parsed = shoal_backend::spec::load(&dir.join(spec));
            let location = SpecLocation::Shipped {
                tree: tree.clone(),
                spec: spec.clone(),
            };
            let device = (arch.as_str(), *num_cu);
            load_spec(store, parsed, &location, device, reason, *max_retries).await
        }
        Command::PutFilePart {
            sha256,
            size,
            part,
            bytes,
        } => Ok(
            crate::shipped::store_part(store, sha256, *size, *part, bytes)
                .await?
                .map(|complete| CommandOutcome::FilePartStored { complete }),
        ),
        Command::MissingFiles { files } => Ok(Ok(CommandOutcome::FilesMissing {
            sha256: crate::shipped::missing(store, files).await?,
        })),
        Command::CreateSession { identity } => {
            if let Some(s) = store.find_session(identity).await? {
                return Ok(Ok(CommandOutcome::SessionReady {
                    session: s.id,
                    existed: true,
                }));
            }
            let session = store.create_session(identity).await?;
            Ok(Ok(CommandOutcome::SessionReady {
                session,
                existed: false,
            }))
        }
        Command::ImportConfigs { configs } => {
            let created = store
                .upsert_configs(configs)
                .await?
                .iter()
                .filter(|(_, created)| *created)
                .count() as u64;
            Ok(Ok(CommandOutcome::ConfigsImported {
                created,
                present: configs.len() as u64 - created,
            }))
        }
        Command::UpdateSolvers { solvers } => {
            let before = store.solvers().await?.len() as u64;
            let stored = store.upsert_solvers(solvers).await?;
            let after = store.solvers().await?.len() as u64;
            Ok(Ok(CommandOutcome::SolversUpdated {
                solvers: stored.len() as u64,
                tunable: stored.iter().filter(|s| s.tunable).count() as u64,
                created: after.saturating_sub(before),
            }))
        }
        Command::CancelSession { session } => {
            if store.session(*session).await?.is_none() {
                return Ok(Err(format!("session {session} is not in the store")));
            }
            // The mark is all: the Scheduler's next sessions refresh skips the work
            // (`scheduler/cancel.rs`), from its own task.
            let newly = store.cancel_session(*session, crate::now_ms()).await?;
            Ok(Ok(CommandOutcome::SessionCancelled {
                session: *session,
                already: !newly,
            }))
        }
        Command::UpdateApplicability { session, tag } => {
            let session = match session {
                Some(id) => *id,
                None => match newest_session(store).await? {
                    Some(id) => id,
                    None => return Ok(Err("the cluster's store has no session".into())),
                },
            };
            let ask_fin = |input: String| {
                let (fin, scratch) = (&tools.fin, &tools.scratch);
                async move { shoal_backend::miopen::ask_fin(fin, scratch, &input).await }
            };
            let updated =
                shoal_miopen::load::update_applicability(store, session, tag, ask_fin).await;
            refused_or_store(updated.map(|a| CommandOutcome::ApplicabilityUpdated {
                session,
                configs: a.configs as u64,
                pairs: a.pairs as u64,
                applicable: a.applicable as u64,
            }))
        }
        Command::LoadJobs {
            session,
            tag,
            fin_steps,
            solvers,
            only_applicable,
            reason,
        } => {
            let session = match session {
                Some(id) => *id,
                None => match newest_session(store).await? {
                    Some(id) => id,
                    None => return Ok(Err("the cluster's store has no session".into())),
                },
            };
            let req = shoal_miopen::load::JobsLoad {
                session,
                tag: tag.clone(),
                fin_steps: fin_steps.clone(),
                solvers: solvers.clone(),
                only_applicable: *only_applicable,
                reason: reason.clone(),
            };
            let loaded = shoal_miopen::load::load(store, &req).await;
            refused_or_store(loaded.map(|loaded| CommandOutcome::JobsLoaded {
                session,
                configs: loaded.configs as u64,
                candidates: loaded.candidates as u64,
                created: loaded.created,
                not_applicable_skipped: loaded.not_applicable_skipped as u64,
            }))
        }
    }
}

/// A refusal is the command's answer; a store failure is the outer `Err`, to be tried again.
fn refused_or_store(
    r: Result<CommandOutcome, shoal_miopen::load::LoadError>,
) -> shoal_store::Result<Result<CommandOutcome, String>> {
    match r {
        Ok(outcome) => Ok(Ok(outcome)),
        Err(shoal_miopen::load::LoadError::Store(e)) => Err(e),
        Err(refused) => Ok(Err(refused.to_string())),
    }
}

/// The newest session: what a command that names none works on, as `--session` means everywhere.
async fn newest_session(store: &dyn Store) -> shoal_store::Result<Option<shoal_model::SessionId>> {
    Ok(store.sessions().await?.iter().map(|s| s.id).max())
}

#[cfg(test)]
mod tests;
