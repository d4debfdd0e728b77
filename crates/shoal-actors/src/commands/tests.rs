//! The command inbox's loop on the in-process bus and an in-memory store: a command published
//! twice answered alike, dead letters, the wait for a store outage. (Each kind of command's
//! answer is tested in `shoal-commands`.)

use shoal_bus::{Consumer, MemoryBus};
use shoal_model::command::{Command, CommandOutcome, CommandReply, CommandRequest};
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
        let tools = HostTools {
            fin: "/nonexistent/fin".into(),
            scratch: self.dir.path().join("fin"),
            trees: Default::default(),
        };
        let drain = crate::shutdown::Drain::new();
        CommandInbox {
            store: self.store.clone(),
            bus: self.bus.clone(),
            delivery_limit: 5,
            tools,
        }
        .start(signal, drain.guard());
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
        drain.wait().await;
        out
    }

    async fn dead_reasons(&self) -> Vec<String> {
        let dead = self.bus.namespace().dead_letter_queue();
        let mut c = self.bus.consume(&dead, 16).await.unwrap();
        let mut reasons = Vec::new();
        while let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(200), c.next()).await {
            let d = d.unwrap();
            reasons.push(d.dead_reason.clone().unwrap_or_default());
            d.ack().await.unwrap();
        }
        reasons
    }
}

#[actix::test]
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

#[actix::test]
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

/// The wait for an unreachable store: a backend error is retried until the store answers; any
/// other error at once; and an outage longer than the patience ends the wait.
#[tokio::test(start_paused = true)]
async fn a_command_waits_out_a_store_outage_and_no_longer() {
    let (_trigger, stop) = crate::shutdown::channel();
    let down = || {
        Err::<u32, _>(shoal_store::StoreError::backend(
            "command_reply",
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "database down"),
        ))
    };
    let calls = std::cell::Cell::new(0);
    let t0 = tokio::time::Instant::now();
    let answered = while_unreachable(&stop, Duration::from_secs(300), || {
        calls.set(calls.get() + 1);
        let r = if calls.get() <= 4 { down() } else { Ok(7) };
        async move { r }
    })
    .await;
    assert_eq!(answered.unwrap(), 7);
    assert_eq!(calls.get(), 5);
    // 0.1 + 0.2 + 0.4 + 0.8 s of backoff.
    assert_eq!(t0.elapsed(), Duration::from_millis(1500));

    calls.set(0);
    let refused = while_unreachable(&stop, Duration::from_secs(300), || {
        calls.set(calls.get() + 1);
        async {
            Err::<u32, _>(shoal_store::StoreError::Invalid(
                "not a store outage".into(),
            ))
        }
    })
    .await;
    assert!(refused.is_err());
    assert_eq!(calls.get(), 1, "only an outage is waited out");

    let t0 = tokio::time::Instant::now();
    let gave_up = while_unreachable(&stop, Duration::from_secs(20), || {
        let r = down();
        async move { r }
    })
    .await;
    assert!(gave_up.is_err());
    assert!(t0.elapsed() >= Duration::from_secs(20) && t0.elapsed() < Duration::from_secs(26));
}
