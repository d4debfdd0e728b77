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

use std::path::Path;
use std::sync::Arc;

use shoal_bus::{Bus, QueueOptions};
use shoal_model::command::{Command, CommandOutcome, CommandReply};
use shoal_model::Message;
use shoal_store::Store;

use crate::shutdown::Signal;
use crate::ActorError;

/// Serves `<ns>.commands` until `stop`.
pub async fn serve(
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    delivery_limit: u32,
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
        let reply = match store.command_reply(&req.id).await? {
            Some(recorded) => {
                tracing::info!(id = %req.id, command = req.command.name(), "command applied before: replying as then");
                recorded
            }
            None => {
                let reply = CommandReply {
                    id: req.id.clone(),
                    result: apply(&*store, &req.command).await?,
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
                reply
            }
        };
        // The CLI may have given up waiting and gone, its reply queue with it: the outcome is
        // recorded all the same, and `shoal sessions` shows it.
        if let Err(e) = crate::publish(&*bus, &req.reply_to, &Message::CommandReply(reply)).await {
            tracing::warn!(id = %req.id, reply_to = %req.reply_to, error = %e, "reply not delivered");
        }
        delivery.ack().await?;
    }
    Ok(())
}

/// Applies one command: its outcome, or its own failure, told to the CLI and recorded (a spec
/// that does not parse). A failure of the store is the outer `Err`: nothing is recorded, the
/// loop fails and is restarted, and the request is delivered again once the store is back.
async fn apply(
    store: &dyn Store,
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
            let spec = match shoal_backend::spec::parse(spec_text, Path::new(spec_path)) {
                Ok(spec) => spec,
                Err(e) => return Ok(Err(e.to_string())),
            };
            let identity = crate::load::session_for(&spec, (arch, *num_cu), reason, *max_retries);
            let loaded = crate::load::load(store, &spec, &identity).await?;
            Ok(Ok(CommandOutcome::SpecLoaded {
                session: loaded.session.id,
                resumed: loaded.resumed,
                jobs_total: loaded.jobs_total,
                jobs_created: loaded.jobs_created,
                builds: loaded.builds as u64,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use shoal_bus::{Consumer, MemoryBus};
    use shoal_model::command::CommandRequest;
    use shoal_model::queue::Namespace;
    use shoal_store::SqliteStore;

    use super::*;

    /// 3 candidates × 2 shapes.
    const SPEC: &str = r#"
name = "cmd"
[[shapes]]
N = 1
[[shapes]]
N = 2
[build]
command = "cc -DA={A} -o {out} {spec_dir}/k.c"
[run]
command = "{artifact} {N}"
[output]
time = 'time_us=([0-9.]+)'
[params.compile]
A = [1, 2, 3]
"#;

    struct World {
        store: Arc<dyn Store>,
        bus: Arc<MemoryBus>,
        dir: tempfile::TempDir,
        replies: Box<dyn Consumer>,
        reply_to: String,
    }

    async fn world() -> World {
        let store = SqliteStore::open_in_memory().unwrap();
        store.migrate().await.unwrap();
        let bus = MemoryBus::new(Namespace::new("cmd").unwrap());
        let reply_to = bus.namespace().reply_queue("t1");
        bus.declare_queue(&reply_to, &QueueOptions::default())
            .await
            .unwrap();
        let commands = bus.namespace().commands_queue();
        bus.declare_queue(&commands, &QueueOptions::default())
            .await
            .unwrap();
        let replies = bus.consume(&reply_to, 8).await.unwrap();
        World {
            store: Arc::new(store),
            bus,
            dir: tempfile::tempdir().unwrap(),
            replies,
            reply_to,
        }
    }

    impl World {
        fn load_spec(&self, id: &str, text: &str) -> CommandRequest {
            CommandRequest {
                id: id.into(),
                reply_to: self.reply_to.clone(),
                command: Command::LoadSpec {
                    spec_text: text.into(),
                    spec_path: self.dir.path().join("spec.toml").display().to_string(),
                    arch: "x86_64".into(),
                    num_cu: 2,
                    reason: "test".into(),
                    max_retries: 0,
                },
            }
        }

        async fn publish(&self, bytes: Vec<u8>) {
            let q = self.bus.namespace().commands_queue();
            self.bus.publish(&q, vec![bytes]).await.unwrap();
        }

        async fn send(&self, req: &CommandRequest) {
            self.publish(self.bus.codec().encode(&Message::Command(req.clone())))
                .await;
        }

        /// Runs the inbox until `n` replies came, and returns them.
        async fn serve_for(&mut self, n: usize) -> Vec<CommandReply> {
            let (trigger, signal) = crate::shutdown::channel();
            let task = tokio::spawn(serve(self.store.clone(), self.bus.clone(), 5, signal));
            let mut out = Vec::new();
            while out.len() < n {
                let d = tokio::time::timeout(Duration::from_secs(10), self.replies.next())
                    .await
                    .expect("a reply in time")
                    .unwrap()
                    .unwrap();
                match self.bus.codec().decode(&d.payload).unwrap() {
                    Message::CommandReply(r) => out.push(r),
                    other => panic!("{other:?}"),
                }
                d.ack().await.unwrap();
            }
            trigger.trigger();
            task.await.unwrap().unwrap();
            out
        }

        async fn dead_reasons(&self) -> Vec<String> {
            let dead = self.bus.namespace().dead_letter_queue();
            let mut c = self.bus.consume(&dead, 16).await.unwrap();
            let mut reasons = Vec::new();
            while let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(200), c.next()).await
            {
                let d = d.unwrap();
                reasons.push(d.dead_reason.clone().unwrap_or_default());
                d.ack().await.unwrap();
            }
            reasons
        }
    }

    #[tokio::test]
    async fn a_command_published_twice_is_applied_once_and_answered_alike() {
        let mut w = world().await;
        std::fs::write(w.dir.path().join("k.c"), "int main(void){return 0;}").unwrap();
        // Published before any inbox runs: it waits in the queue.
        let req = w.load_spec("c0ffee", SPEC);
        w.send(&req).await;
        w.send(&req).await;
        let replies = w.serve_for(2).await;
        let expected = CommandOutcome::SpecLoaded {
            session: shoal_model::SessionId(1),
            resumed: false,
            jobs_total: 6,
            jobs_created: 6,
            // A build serves both shapes.
            builds: 3,
        };
        assert_eq!(replies[0].result, Ok(expected.clone()));
        assert_eq!(
            replies[1], replies[0],
            "the recorded reply, not a second application"
        );
        assert_eq!(w.store.sessions().await.unwrap().len(), 1);
        // Another command for the same spec is applied: it finds the session.
        w.send(&w.load_spec("beef", SPEC)).await;
        let again = w.serve_for(1).await;
        assert!(
            matches!(
                again[0].result,
                Ok(CommandOutcome::SpecLoaded {
                    resumed: true,
                    jobs_created: 0,
                    ..
                })
            ),
            "{again:?}"
        );
        assert_eq!(
            w.store.command_reply("c0ffee").await.unwrap(),
            Some(replies[0].clone())
        );
    }

    #[tokio::test]
    async fn a_spec_that_does_not_parse_is_answered_with_why() {
        let mut w = world().await;
        w.send(&w.load_spec("bad", "name = \"x\"\nshapez = 3\n"))
            .await;
        let replies = w.serve_for(1).await;
        let err = replies[0].result.clone().unwrap_err();
        assert!(err.contains("shapez"), "{err}");
        assert!(w.store.sessions().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn forged_malformed_and_misdirected_commands_are_dead_lettered_with_their_reason() {
        let mut w = world().await;
        std::fs::write(w.dir.path().join("k.c"), "").unwrap();
        // Signed with another key.
        let forger = shoal_bus::random_codec();
        w.publish(forger.encode(&Message::Command(w.load_spec("f1", SPEC))))
            .await;
        // Garbage, and a well-signed message of another kind.
        w.publish(b"\x03garbage".to_vec()).await;
        w.publish(
            w.bus
                .codec()
                .encode(&Message::Control(shoal_model::message::Control::Drain)),
        )
        .await;
        // Signed, but asking for the reply on a work queue, or with no id.
        let mut elsewhere = w.load_spec("e1", SPEC);
        elsewhere.reply_to = w.bus.namespace().results_queue();
        w.send(&elsewhere).await;
        w.send(&w.load_spec("", SPEC)).await;
        // And a good one after them, to know they were all read.
        w.send(&w.load_spec("ok1", SPEC)).await;
        let replies = w.serve_for(1).await;
        assert_eq!(replies[0].id, "ok1");
        let reasons = w.dead_reasons().await;
        assert_eq!(reasons.len(), 5, "{reasons:?}");
        assert!(reasons[0].contains("signature"), "{reasons:?}");
        assert!(
            reasons[2].contains("expects command messages"),
            "{reasons:?}"
        );
        assert!(reasons[3].contains("not a reply queue"), "{reasons:?}");
        assert!(reasons[4].contains("command id"), "{reasons:?}");
        // None of them was applied: one session, from `ok1`.
        assert_eq!(w.store.sessions().await.unwrap().len(), 1);
        assert_eq!(w.store.command_reply("e1").await.unwrap(), None);
    }
}
