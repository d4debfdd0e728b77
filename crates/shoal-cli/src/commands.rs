//! The CLI's side of commands (`shoal_model::command`): in cluster mode a command that changes
//! what is scheduled is published to the Scheduler, which alone writes the store, and the CLI
//! waits for the answer on a reply queue of its own.
//!
//! Each process makes one reply queue, `<ns>.reply.<random>`, consumed before the command is
//! published (so no reply can arrive before anyone listens), and set to expire once unused, so
//! a CLI that ends, however it ends, leaves nothing on the broker. Each command gets a random id:
//! the Scheduler applies an id once, so a command the broker delivers twice is applied once.
//!
//! When no Scheduler answers in time the command is not lost: it waits in the durable commands
//! queue, which the CLI declares too (it exists wherever `scripts/services-up` set up the
//! namespace or a Scheduler ran), and is applied when a Scheduler runs. The error says so.

use std::time::Duration;

use anyhow::Context;
use shoal_bus::{Bus, QueueOptions};
use shoal_model::command::{Command, CommandOutcome, CommandRequest};
use shoal_model::Message;

/// How long the commands without a `--reply-timeout` of their own wait for the Scheduler.
pub const WAIT: Duration = Duration::from_secs(60);

/// How long the CLI waits quietly before it says it is waiting for the Scheduler.
const PATIENCE: Duration = Duration::from_secs(3);

/// How long a reply queue outlives its last consumer.
const REPLY_QUEUE_EXPIRES: Duration = Duration::from_secs(30);

/// `n` random bytes as hex.
fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).expect("the operating system's random source is available");
    hex::encode(bytes)
}

/// Publishes `command` to the Scheduler and waits up to `wait` for its outcome. `Err` when the
/// Scheduler refused or failed it (its reason), or when no answer came in time.
pub async fn send(
    bus: &dyn Bus,
    command: Command,
    wait: Duration,
) -> anyhow::Result<CommandOutcome> {
    let ns = bus.namespace().clone();
    let reply_to = ns.reply_queue(&random_hex(8));
    let commands = ns.commands_queue();
    bus.declare_queue(
        &reply_to,
        &QueueOptions {
            expires_after: Some(REPLY_QUEUE_EXPIRES),
            ..QueueOptions::default()
        },
    )
    .await
    .with_context(|| format!("declaring the reply queue {reply_to}"))?;
    let mut replies = bus.consume(&reply_to, 4).await?;
    bus.declare_queue(&commands, &QueueOptions::default())
        .await
        .with_context(|| format!("declaring {commands}"))?;
    let request = CommandRequest {
        id: random_hex(16),
        reply_to: reply_to.clone(),
        command,
    };
    if let Some(problem) = request.problem(&ns) {
        anyhow::bail!("{}: {problem}", request.command.name());
    }
    let name = request.command.name();
    let id = request.id.clone();
    bus.publish(
        &commands,
        vec![bus.codec().encode(&Message::Command(request))],
    )
    .await
    .with_context(|| format!("publishing the {name} command to {commands}"))?;
    tracing::debug!(%id, command = name, queue = %commands, "command published");
    let deadline = tokio::time::Instant::now() + wait;
    // A Scheduler answers within a moment; past that, say what the wait is for.
    let mut hint = Some(tokio::time::Instant::now() + PATIENCE);
    loop {
        let next = match hint {
            Some(at) if at < deadline => match tokio::time::timeout_at(at, replies.next()).await {
                Ok(next) => Ok(next),
                Err(_) => {
                    eprintln!(
                            "waiting for the Scheduler's answer to the {name} command (up to {}s; Ctrl-C leaves it queued)",
                            wait.as_secs()
                        );
                    hint = None;
                    continue;
                }
            },
            _ => tokio::time::timeout_at(deadline, replies.next()).await,
        };
        let Ok(next) = next else {
            anyhow::bail!(
                "no answer to the {name} command (id {id}) within {}s: no Scheduler is running in \
                 namespace {ns}, or it is busy. The command is not lost: it waits in {commands} and \
                 is applied when a Scheduler runs (`shoal sessions --cluster` shows its session then)",
                wait.as_secs()
            );
        };
        let delivery = next
            .context("the reply queue closed")?
            .with_context(|| format!("reading {reply_to}"))?;
        let message = bus.codec().decode(&delivery.payload);
        delivery.ack().await?;
        match message {
            Ok(Message::CommandReply(reply)) if reply.id == id => {
                return reply
                    .result
                    .map_err(|e| anyhow::anyhow!("the Scheduler refused the {name} command: {e}"));
            }
            Ok(_) => {
                tracing::warn!(queue = %reply_to, "ignoring a message that is not the reply awaited")
            }
            Err(e) => {
                tracing::warn!(queue = %reply_to, error = %e, "ignoring an unverifiable message")
            }
        }
    }
}
