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
/// Scheduler refused or failed it (its reason), or when no answer came in time. For one
/// command; a process that sends many keeps a [`CommandClient`].
pub async fn send(
    bus: &dyn Bus,
    command: Command,
    wait: Duration,
) -> anyhow::Result<CommandOutcome> {
    CommandClient::open(bus).await?.send(command, wait).await
}

/// One process's side of commands: its reply queue, declared and consumed once, and the
/// commands queue, declared once, whatever the number of commands sent (an import of a large
/// file sends one per 500 configs).
pub struct CommandClient<'b> {
    bus: &'b dyn Bus,
    reply_to: String,
    replies: Box<dyn shoal_bus::Consumer>,
    commands: String,
}

impl<'b> CommandClient<'b> {
    pub async fn open(bus: &'b dyn Bus) -> anyhow::Result<CommandClient<'b>> {
        let ns = bus.namespace();
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
        let replies = bus.consume(&reply_to, 4).await?;
        bus.declare_queue(&commands, &QueueOptions::default())
            .await
            .with_context(|| {
                // The cli role may use the queue but not create it: a refusal here most often
                // means that no Scheduler has run on this namespace yet.
                format!(
                    "declaring {commands}, the Scheduler's command queue (the Scheduler creates \
                     it: if access was refused, start `shoal worker --role scheduler` first)"
                )
            })?;
        Ok(CommandClient {
            bus,
            reply_to,
            replies,
            commands,
        })
    }

    /// The namespace the commands go to.
    pub fn namespace(&self) -> String {
        self.bus.namespace().to_string()
    }

    /// The commands queue.
    pub fn commands_queue(&self) -> &str {
        &self.commands
    }

    /// [`send`] on this client's queues.
    pub async fn send(
        &mut self,
        command: Command,
        wait: Duration,
    ) -> anyhow::Result<CommandOutcome> {
        let (id, name) = self.publish(command).await?;
        self.wait_for(&id, name, wait).await
    }

    /// Publishes `command` without waiting for its answer: its id and name. Commands of one
    /// client are applied in the order published.
    pub async fn publish(&mut self, command: Command) -> anyhow::Result<(String, &'static str)> {
        let (bus, commands) = (self.bus, &self.commands);
        let request = CommandRequest {
            id: random_hex(16),
            reply_to: self.reply_to.clone(),
            command,
        };
        if let Some(problem) = request.problem(bus.namespace()) {
            anyhow::bail!("{}: {problem}", request.command.name());
        }
        let name = request.command.name();
        let id = request.id.clone();
        bus.publish(
            commands,
            vec![bus.codec().encode(&Message::Command(request))],
        )
        .await
        .with_context(|| format!("publishing the {name} command to {commands}"))?;
        tracing::debug!(%id, command = name, queue = %commands, "command published");
        Ok((id, name))
    }

    /// Waits up to `wait` for the answer to the command `id`: `Err` when the Scheduler refused
    /// or failed it, or [`NoAnswer`] when no answer came in time.
    pub async fn wait_for(
        &mut self,
        id: &str,
        name: &'static str,
        wait: Duration,
    ) -> anyhow::Result<CommandOutcome> {
        let (bus, reply_to) = (self.bus, &self.reply_to);
        let deadline = tokio::time::Instant::now() + wait;
        // A Scheduler answers within a moment; past that, say what the wait is for.
        let mut hint = Some(tokio::time::Instant::now() + PATIENCE);
        loop {
            let until = hint.filter(|at| *at < deadline);
            let next = match tokio::time::timeout_at(until.unwrap_or(deadline), self.replies.next())
                .await
            {
                Err(_) if until.is_some() => {
                    eprintln!(
                        "waiting for the Scheduler's answer to the {name} command (up to {}s; Ctrl-C leaves it queued)",
                        wait.as_secs()
                    );
                    hint = None;
                    continue;
                }
                Err(_) => {
                    return Err(NoAnswer {
                        name,
                        id: id.to_string(),
                        waited: wait,
                        namespace: bus.namespace().to_string(),
                        queue: self.commands.clone(),
                    }
                    .into())
                }
                Ok(next) => next,
            };
            let delivery = next
                .context("the reply queue closed")?
                .with_context(|| format!("reading {reply_to}"))?;
            let message = bus
                .codec()
                .open(&delivery.payload, delivery.publisher.as_deref())
                .map(|t| t.message);
            delivery.ack().await?;
            match message {
                Ok(Message::CommandReply(reply)) if reply.id == id => {
                    return reply.result.map_err(|e| {
                        anyhow::anyhow!("the Scheduler refused the {name} command: {e}")
                    });
                }
                // A late answer to an earlier command of this client that gave up waiting, or
                // to one published without waiting.
                Ok(_) => {
                    tracing::debug!(queue = %reply_to, "ignoring a reply not awaited")
                }
                Err(e) => {
                    tracing::warn!(queue = %reply_to, error = %e, "ignoring an unverifiable message")
                }
            }
        }
    }
}

/// No answer to a command in time: no Scheduler runs, or it is busy. The command waits in the
/// durable commands queue all the same.
#[derive(Debug, thiserror::Error)]
#[error(
    "no answer to the {name} command (id {id}) within {}s: no Scheduler is running in \
     namespace {namespace}, or it is busy. The command is not lost: it waits in {queue} and \
     is applied when a Scheduler runs (`shoal sessions --cluster` shows its session then)",
    waited.as_secs()
)]
pub struct NoAnswer {
    pub name: &'static str,
    pub id: String,
    pub waited: Duration,
    pub namespace: String,
    pub queue: String,
}
