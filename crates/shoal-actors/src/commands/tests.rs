//! The command inbox on the in-process bus and an in-memory store: once per id, answers,
//! dead letters, and each kind of command applied.

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
        let tools = HostTools {
            fin: "/nonexistent/fin".into(),
            scratch: self.dir.path().join("fin"),
            trees: Default::default(),
        };
        let task = tokio::spawn(serve(
            self.store.clone(),
            self.bus.clone(),
            5,
            tools,
            signal,
        ));
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
        while let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(200), c.next()).await {
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
    let err = replies[0].result.clone().unwrap_err().reason;
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

/// The MIOpen workflow's loading steps, as commands: configs (twice: the second time they are
/// present), solvers, a session (twice: the second finds it), jobs, and a refusal that names why.
#[tokio::test]
async fn the_miopen_loading_steps_are_applied_as_commands() {
    let mut w = world().await;
    let configs: Vec<shoal_model::NewConfig> = [
        "./bin/MIOpenDriver conv -n 32 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 -j 1 -m conv -g 1 -F 1 -t 1",
        "./bin/MIOpenDriver conv -n 32 -c 64 -H 56 -W 56 -k 256 -y 1 -x 1 -p 0 -q 0 -u 1 -v 1 -l 1 -j 1 -m conv -g 1 -F 1 -t 1",
    ]
    .iter()
    .map(|line| match shoal_miopen::driver::parse_line(line).unwrap() {
        shoal_miopen::driver::LineKind::Conv { configs, .. } => shoal_model::NewConfig {
            kind: "conv".into(),
            key: shoal_miopen::driver::driver_line(&configs[0]),
            params: configs[0].to_params(),
            tags: vec!["net".into()],
        },
        other => panic!("{other:?}"),
    })
    .collect();
    let builtin: Vec<shoal_model::NewSolver> = shoal_miopen::solvers::all()
        .iter()
        .map(|s| shoal_model::NewSolver {
            name: s.name.to_string(),
            tunable: s.tunable,
        })
        .collect();
    let tunable = builtin.iter().filter(|s| s.tunable).count() as u64;
    let identity = shoal_model::NewSession {
        reason: "e2e".into(),
        arch: "gfx90a".into(),
        num_cu: 110,
        backend: shoal_model::Backend::Miopen,
        spec: String::new(),
        spec_path: String::new(),
        library_version: "3.2.0".into(),
        driver_version: "6.2.0".into(),
        max_retries: 3,
    };
    let load_jobs = |tag: &str| Command::LoadJobs {
        session: None,
        tag: tag.into(),
        fin_steps: vec!["miopen_perf_compile".into(), "miopen_perf_eval".into()],
        solvers: Vec::new(),
        only_applicable: false,
        reason: "e2e".into(),
    };
    let commands = [
        Command::ImportConfigs {
            configs: configs.clone(),
        },
        Command::ImportConfigs {
            configs: configs[..1].to_vec(),
        },
        Command::UpdateSolvers { solvers: builtin },
        Command::CreateSession {
            identity: identity.clone(),
        },
        Command::CreateSession { identity },
        load_jobs("net"),
        load_jobs("no-such-tag"),
    ];
    for (i, command) in commands.into_iter().enumerate() {
        let mut req = w.load_spec(&format!("m{i}"), "");
        req.command = command;
        w.send(&req).await;
    }
    let replies: Vec<_> = w.serve_for(7).await.into_iter().map(|r| r.result).collect();
    let session = shoal_model::SessionId(1);
    assert_eq!(
        replies[..6],
        [
            Ok(CommandOutcome::ConfigsImported {
                created: 2,
                present: 0
            }),
            Ok(CommandOutcome::ConfigsImported {
                created: 0,
                present: 1
            }),
            Ok(CommandOutcome::SolversUpdated {
                solvers: shoal_miopen::solvers::all().len() as u64,
                tunable,
                created: shoal_miopen::solvers::all().len() as u64,
            }),
            Ok(CommandOutcome::SessionReady {
                session,
                existed: false
            }),
            Ok(CommandOutcome::SessionReady {
                session,
                existed: true
            }),
            Ok(CommandOutcome::JobsLoaded {
                session,
                configs: 2,
                candidates: 2 * tunable,
                created: 2 * tunable,
                not_applicable_skipped: 0,
            }),
        ]
    );
    let refused = replies[6].clone().unwrap_err().reason;
    assert!(refused.contains("no-such-tag"), "{refused}");
    let counts = w.store.state_counts(session).await.unwrap();
    assert_eq!(counts.values().sum::<u64>(), 2 * tunable, "{counts:?}");
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

#[tokio::test]
async fn a_spec_shipped_with_its_files_is_loaded_from_them_and_read_back_anywhere() {
    use shoal_model::shipped::{sha256_hex, Tree, TreeFile};
    let mut w = world().await;
    let spec_text = format!("sources = [\"../src/k.c\"]\n{SPEC}");
    let source = b"int main(void){return 0;}\n".to_vec();
    let entry = |path: &str, bytes: &[u8]| TreeFile {
        path: path.into(),
        sha256: sha256_hex(bytes),
        size: bytes.len() as u64,
        executable: false,
    };
    let tree = Tree::new(vec![
        entry("specs/spec.toml", spec_text.as_bytes()),
        entry("src/k.c", &source),
    ])
    .unwrap();
    let listing = tree.encode();
    let reply_to = w.reply_to.clone();
    let request = |id: &str, command: Command| CommandRequest {
        id: id.into(),
        reply_to: reply_to.clone(),
        command,
    };
    let asked: Vec<(String, u64)> = tree
        .files()
        .iter()
        .map(|f| (f.sha256.clone(), f.size))
        .chain([(tree.address(), listing.len() as u64)])
        .collect();
    let load = |id: &str, address: String| {
        request(
            id,
            Command::LoadShippedSpec {
                tree: address,
                spec: "specs/spec.toml".into(),
                arch: "x86_64".into(),
                num_cu: 2,
                reason: "test".into(),
                max_retries: 0,
            },
        )
    };
    // Before any file: all missing, and a load names what is not stored.
    w.send(&request(
        "m1",
        Command::MissingFiles {
            files: asked.clone(),
        },
    ))
    .await;
    w.send(&load("l0", tree.address())).await;
    let replies = w.serve_for(2).await;
    assert_eq!(
        replies[0].result,
        Ok(CommandOutcome::FilesMissing {
            sha256: asked.iter().map(|(s, _)| s.clone()).collect()
        })
    );
    let err = replies[1].result.clone().unwrap_err().reason;
    assert!(err.contains("not stored whole"), "{err}");
    for (i, bytes) in [spec_text.as_bytes(), &source, &listing].iter().enumerate() {
        w.send(&request(
            &format!("p{i}"),
            Command::PutFilePart {
                sha256: sha256_hex(bytes),
                size: bytes.len() as u64,
                part: 0,
                bytes: bytes.to_vec(),
            },
        ))
        .await;
    }
    w.send(&request("m2", Command::MissingFiles { files: asked }))
        .await;
    w.send(&load("l1", tree.address())).await;
    let replies = w.serve_for(5).await;
    for stored in &replies[..3] {
        assert_eq!(
            stored.result,
            Ok(CommandOutcome::FilePartStored { complete: true })
        );
    }
    assert_eq!(
        replies[3].result,
        Ok(CommandOutcome::FilesMissing { sha256: vec![] })
    );
    let Ok(CommandOutcome::SpecLoaded {
        session,
        jobs_total,
        ..
    }) = replies[4].result
    else {
        panic!("{:?}", replies[4]);
    };
    assert_eq!(jobs_total, 6);
    let info = w.store.session(session).await.unwrap().unwrap().info;
    assert_eq!(
        info.spec_path,
        format!("shipped:{}/specs/spec.toml", tree.address())
    );
    // Another process (a worker) reads the spec from the tree it writes from the store: the
    // source it hashes is the shipped one.
    // (The tree's directory lives as long as the process's backends.)
    let backends = crate::backends::SessionBackends::default();
    let spec = backends.spec(&*w.store, session).await.unwrap();
    assert_eq!(
        spec.source_hashes,
        vec![("../src/k.c".into(), sha256_hex(&source))]
    );
    assert!(spec.dir.join("../src/k.c").exists());
}
