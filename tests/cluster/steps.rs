//! Steps of the cluster test that run against its running processes: a searched replay asked
//! for without a database, an operator's restart order, and hostile messages.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common;
use crate::common::cluster::Cluster;
use shoal_model::JobState;

/// A budgeted search over a recorded space, run by the same processes and asked for by an
/// operator with no database access: the Scheduler loads it and proposes the forest's batches
/// as slots free up, the compile and eval workers answer from the recording (loaded from the
/// store, as any worker of the fleet would), and exactly the budget is tried, the rest skipped,
/// with the recorded failures among what was tried counted as such.
pub fn a_searched_replay_in_the_cluster(cluster: &Cluster, dir: &Path) {
    let replay = dir.join("replay");
    std::fs::create_dir_all(&replay).unwrap();
    common::write_replay_space(&replay.join("space.json"));
    std::fs::write(
        replay.join("spec.toml"),
        "name = \"replayed\"\nbackend = \"replay\"\nspace = \"space.json\"\n\
         [search]\nstrategy = \"forest\"\nbudget = 30\nseed = 7\n",
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
    cmd.current_dir(&replay).env("RUST_LOG", "warn").args([
        "tune",
        "--cluster",
        "--out",
        "out",
        "spec.toml",
    ]);
    // The operator holds the broker's settings and the key, no database: the Scheduler loads the
    // spec, and its progress reports say when the search is over.
    cluster.env(&mut cmd).env_remove("SHOAL_DB");
    let out = common::run_ok(&mut cmd);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(stdout.contains("session 2 tuned"), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("session 2: 119/119 candidates done"),
        "{stderr}"
    );
    let store = cluster.store();
    let sessions = store.sessions();
    assert_eq!(sessions.len(), 2, "the faulty spec's, then this one");
    let replayed = sessions.iter().map(|s| s.id).max().unwrap();
    let results = store.final_results(replayed);
    let count = |states: &[JobState]| results.iter().filter(|r| states.contains(&r.state)).count();
    assert_eq!(results.len(), 119, "every recorded configuration is a job");
    assert_eq!(
        (
            count(&[JobState::Evaluated, JobState::Errored]),
            count(&[JobState::Skipped])
        ),
        (30, 89)
    );
    // What was tried was answered from the recording: a time of 1 + (A-7)² + (B-3)² ms, or the
    // recorded failure (A=1 never compiled).
    for r in &results {
        let a: i64 = r.compile_params.get("A").unwrap().parse().unwrap();
        let b: i64 = r.compile_params.get("B").unwrap().parse().unwrap();
        match (r.state, &r.outcome) {
            (JobState::Evaluated, Some(shoal_model::Outcome::Measured(m))) => {
                let recorded = 1000.0 * (1 + (a - 7).pow(2) + (b - 3).pow(2)) as f64;
                assert!((m.time_us - recorded).abs() < 1e-6, "{a},{b}: {m:?}");
            }
            (JobState::Errored, _) => assert!(a == 1 || (a, b) == (2, 0), "{a},{b}: {r:?}"),
            (JobState::Skipped, _) => {}
            other => panic!("{a},{b} ended {other:?}"),
        }
    }
}

/// `shoal control restart <actor> --host <host>` restarts that actor in every worker process of
/// the host that runs it (here all share one machine: both compile workers restart their
/// Compiler; the eval worker, which runs none, ignores the order), and the processes go on: the
/// drain that follows needs the restarted Scheduler and Compilers to stop cleanly.
pub fn actors_restart_on_an_operators_order(cluster: &Cluster) {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let restarted = |worker: &str, actor: &str| {
        let t0 = std::time::Instant::now();
        let marker = "restarted by an operator";
        while !cluster
            .log(worker)
            .lines()
            .any(|l| l.contains(marker) && l.contains(actor))
        {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{worker} did not restart its {actor}:\n{}",
                cluster.log(worker)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    for actor in ["compiler", "scheduler"] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
        cmd.args(["control", "restart", actor, "--host", host.trim()]);
        cluster.env(&mut cmd);
        common::run_ok(&mut cmd);
    }
    restarted("compile1", "compiler");
    restarted("compile2", "compiler");
    restarted("scheduler", "scheduler");
    let eval = cluster.log("eval");
    assert!(
        eval.contains("this process does not run; ignored"),
        "{eval}"
    );
    assert!(!eval.contains("restarted by an operator"), "{eval}");
}

/// Someone with access to the broker publishes to the compile queue the running workers consume:
/// garbage, the 15-byte length bomb that used to abort every consumer, a request signed with
/// another key, and — as a holder of the key gone wrong — a signed request whose parameter is C
/// code. Each is dead-lettered with its reason, nothing is built (no file appears), and the
/// workers go on (the drain that follows needs every one of them alive).
pub fn hostile_messages_are_dead_lettered(cluster: &Cluster, dir: &Path) {
    const WANT: [&str; 7] = [
        "unknown wire version 104",
        "unknown wire version 1 ",
        "bad signature",
        "compile request refused",
        // And on the commands queue: bytes, a forger's command, a key holder's misdirected one.
        ".commands: unknown wire version 104",
        ".commands: bad signature",
        "is not a reply queue of namespace",
    ];
    use shoal_bus::Bus;
    use shoal_model::message::{CompileRequest, JobRef};
    use shoal_model::{JobId, Message, Params, SessionId};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let key = hex::decode(std::fs::read_to_string(&cluster.key_file).unwrap().trim()).unwrap();
    let codec = shoal_model::envelope::Codec::new(&key).unwrap();
    let stranger = shoal_model::envelope::Codec::new(&[7u8; 32]).unwrap();
    let marker = dir.join("pwned");
    let mut evil = Params::new();
    evil.push(
        "MODE",
        format!("(system(\"touch {}\")*0)", marker.display()),
    );
    evil.push("WORK", "1");
    let request = |compile_params: Params| {
        Message::Compile(CompileRequest {
            session: SessionId(1),
            step: shoal_model::Step::ExecBuild,
            build_key: "forged".into(),
            config_params: Params::from_key("N=20000").unwrap(),
            compile_params,
            jobs: vec![JobRef {
                job: JobId(1),
                attempt: 99,
            }],
        })
    };
    let mut bomb = vec![1u8, 1, 7, 0xFD];
    bomb.extend_from_slice(&(1u64 << 62).to_le_bytes());
    bomb.extend_from_slice(&[0; 3]);
    assert_eq!(bomb.len(), 15);
    let ns = shoal_model::queue::Namespace::new(&cluster.namespace).unwrap();
    let queue = ns.compile_queue(shoal_model::Step::ExecBuild, std::env::consts::ARCH);
    let reasons = rt.block_on(async {
        let options = shoal_bus::RabbitOptions {
            codec: codec.clone(),
            ..Default::default()
        };
        let bus = shoal_bus::RabbitBus::connect_with(&cluster.amqp, ns.clone(), options)
            .await
            .unwrap();
        let mut good = Params::new();
        good.push("MODE", "0");
        good.push("WORK", "1");
        assert!(codec.decode(&codec.encode(&request(good))).is_ok());
        bus.publish(
            &queue,
            vec![
                b"hello".to_vec(),
                bomb,
                stranger.encode(&request(Params::new())),
                codec.encode(&request(evil)),
            ],
        )
        .await
        .unwrap();
        let load = |reply_to: String| {
            Message::Command(shoal_model::command::CommandRequest {
                id: "forged1".into(),
                reply_to,
                command: shoal_model::command::Command::LoadSpec {
                    spec_text: "name = \"forged\"".into(),
                    spec_path: "/tmp/forged.toml".into(),
                    arch: "x86_64".into(),
                    num_cu: 1,
                    reason: "forged".into(),
                    max_retries: 0,
                },
            })
        };
        bus.publish(
            &ns.commands_queue(),
            vec![
                b"hello".to_vec(),
                stranger.encode(&load(ns.reply_queue("x"))),
                codec.encode(&load(ns.results_queue())),
            ],
        )
        .await
        .unwrap();
        let mut dead = bus.consume(&ns.dead_letter_queue(), 16).await.unwrap();
        let mut reasons: Vec<String> = Vec::new();
        let t0 = std::time::Instant::now();
        let found = |reasons: &[String]| WANT.iter().all(|w| reasons.iter().any(|r| r.contains(w)));
        while !found(&reasons) && t0.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(d)) = tokio::time::timeout(Duration::from_secs(1), dead.next()).await {
                let d = d.unwrap();
                reasons.push(d.dead_reason.clone().unwrap_or_default());
                d.ack().await.unwrap();
            }
        }
        bus.close().await.unwrap();
        reasons
    });
    let all = reasons.join("\n");
    for want in WANT {
        assert!(
            all.contains(want),
            "no `{want}` among the dead letters:\n{all}"
        );
    }
    assert!(!marker.exists(), "the forged parameter was built");
}
