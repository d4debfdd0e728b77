//! An insider: a host of the cluster that holds the deployment's key and its own broker user
//! (an eval host's), and turns hostile. On the real RabbitMQ and MariaDB, with one broker user
//! per role as a deployment has them, this test is the eval hosts itself: `victim`
//! (`<ns>_eval`) takes real eval requests from the queue and `insider`
//! (`<ns>_eval.<this host>`) attacks. It shows that, although every message it sends is signed
//! with the right key:
//! - its commands, control orders and compile results are refused for its role and
//!   dead-lettered with the reason, and change nothing;
//! - its results for the victim's jobs, under the victim's worker name, are refused: the lease
//!   holder is the sender of the started notice, not the name a message gives;
//! - its own started notice for a job the victim holds does not take the lease, and its result
//!   for that job is refused; a replay of the victim's captured started notice, through the
//!   insider's own connection, is refused as a replay (a copy through the victim's own, which
//!   is what its bus sends again after a lost connection, is dropped without effect);
//! - the tuned table holds only the genuine times.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use shoal_bus::{Bus, Delivery, RabbitBus, RabbitOptions};
use shoal_model::command::{Command, CommandRequest};
use shoal_model::envelope::Codec;
use shoal_model::message::{CompileReply, Control, EvalReply, EvalRequest, Phase, ReplyBody};
use shoal_model::queue::{ControlTarget, Namespace};
use shoal_model::{JobRef, JobState, Measurement, Message, Outcome, SessionId, Step};

/// Broker users made for this test alone, deleted with it.
struct Users {
    names: Vec<String>,
}

impl Users {
    /// Adds `name` with a random password and every permission on vhost `/` (the broker's own
    /// permission rules are checked by scripts/check-privileges); returns its password.
    fn add(&mut self, name: &str) -> String {
        let pw = format!("{:016x}", shoal_bus::random_origin());
        rabbitmqctl(&["add_user", name], Some(&pw));
        rabbitmqctl(
            &["set_permissions", "-p", "/", name, ".*", ".*", ".*"],
            None,
        );
        self.names.push(name.to_string());
        pw
    }
}

impl Drop for Users {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = std::process::Command::new("rabbitmqctl")
                .args(["-q", "delete_user", n])
                .output();
        }
    }
}

fn rabbitmqctl(args: &[&str], stdin: Option<&str>) {
    use std::io::Write;
    let mut child = std::process::Command::new("rabbitmqctl")
        .arg("-q")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("rabbitmqctl (the test needs root and the broker's CLI)");
    let mut input = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        writeln!(input, "{s}").unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "rabbitmqctl {}: {}",
        args[0],
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The cluster's broker URL with another user.
fn url_as(cluster: &Cluster, user: &str, pw: &str) -> String {
    let rest = cluster.amqp.split_once('@').expect("user@host").1;
    format!("amqp://{user}:{pw}@{rest}")
}

fn codec(cluster: &Cluster) -> Codec {
    let key = std::fs::read_to_string(&cluster.key_file).unwrap();
    let bytes: Vec<u8> = (0..key.trim().len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&key.trim()[i..i + 2], 16).unwrap())
        .collect();
    Codec::new(&bytes)
        .unwrap()
        .with_origin(shoal_bus::random_origin())
}

async fn bus_as(cluster: &Cluster, user: &str, pw: &str) -> Arc<RabbitBus> {
    let options = RabbitOptions {
        codec: codec(cluster),
        ..RabbitOptions::default()
    };
    RabbitBus::connect_with(
        &url_as(cluster, user, pw),
        Namespace::new(&cluster.namespace).unwrap(),
        options,
    )
    .await
    .unwrap()
}

/// The next delivery of a consumer, within a bound.
async fn next(consumer: &mut Box<dyn shoal_bus::Consumer>, what: &str) -> Delivery {
    tokio::time::timeout(Duration::from_secs(60), consumer.next())
        .await
        .unwrap_or_else(|_| panic!("no {what} within 60 s"))
        .expect("consumer open")
        .unwrap()
}

/// Dead letters with their reasons, until `want` of them match or the bound passes.
async fn dead_reasons(dead: &mut Box<dyn shoal_bus::Consumer>, got: &mut Vec<String>) {
    while let Ok(Some(Ok(d))) = tokio::time::timeout(Duration::from_millis(500), dead.next()).await
    {
        got.push(d.dead_reason.clone().unwrap_or_default());
        d.ack().await.unwrap();
    }
}

fn started(session: SessionId, job: JobRef, worker: &str) -> Message {
    Message::Reply(ReplyBody::Started {
        session,
        phase: Phase::Eval,
        jobs: vec![job],
        worker: worker.into(),
    })
}

fn evaluated(session: SessionId, job: JobRef, worker: &str, time_us: f64) -> Message {
    Message::Reply(ReplyBody::Evaluated(EvalReply {
        session,
        step: Step::ExecRun,
        outcomes: vec![(
            job,
            Outcome::Measured(Measurement {
                time_us,
                samples_us: vec![time_us],
                workspace: 0,
                details: Default::default(),
            }),
        )],
        worker: worker.into(),
        device: "cpu".into(),
        busy_us: 10,
    }))
}

#[test]
fn an_eval_hosts_identity_can_speak_only_for_itself() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::new("insider", dir.path());
    let ns = cluster.namespace.clone();
    let host = shoal_cli_hostname();
    let mut users = Users { names: Vec::new() };
    let sched_user = format!("{ns}_scheduler");
    let compile_user = format!("{ns}_compile");
    let victim_user = format!("{ns}_eval");
    let insider_user = format!("{ns}_eval.{host}");
    let sched_pw = users.add(&sched_user);
    let compile_pw = users.add(&compile_user);
    let victim_pw = users.add(&victim_user);
    let insider_pw = users.add(&insider_user);

    // The Scheduler and a compile worker, each as its role's user; a replay spec whose builds
    // and timings answer from a recording.
    let amqp = cluster.amqp.clone();
    cluster.amqp = url_as(&cluster, &sched_user, &sched_pw);
    cluster.start_worker("scheduler", &[], &["--role", "scheduler"]);
    cluster.amqp = url_as(&cluster, &compile_user, &compile_pw);
    cluster.start_worker("compile", &[], &["--role", "compile"]);
    cluster.amqp = amqp;
    let spec_dir = dir.path().join("spec");
    std::fs::create_dir_all(&spec_dir).unwrap();
    common::write_replay_space(&spec_dir.join("space.json"));
    std::fs::write(
        spec_dir.join("spec.toml"),
        "name = \"replayed\"\nbackend = \"replay\"\nspace = \"space.json\"\n",
    )
    .unwrap();
    let mut tune = std::process::Command::new(env!("CARGO_BIN_EXE_shoal"));
    tune.current_dir(&spec_dir)
        .env("RUST_LOG", "warn")
        .args(["tune", "--cluster", "--out", "out", "spec.toml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cluster.env(&mut tune);
    let mut tune = tune.spawn().unwrap();

    let store = cluster.store();
    let t0 = Instant::now();
    let session = loop {
        if let Some(s) = store.sessions().first() {
            break s.clone();
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no session loaded");
        std::thread::sleep(Duration::from_millis(200));
    };
    let ns_ = Namespace::new(&ns).unwrap();
    let eval_queue = ns_.eval_queue(Step::ExecRun, &session.info.arch, session.info.num_cu);
    let victim_worker = format!("{host}/evaluator[cpu]");
    let insider_worker = format!("{host}/evaluator[gpu9]");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let reasons = rt.block_on(async {
        let victim = bus_as(&cluster, &victim_user, &victim_pw).await;
        let insider = bus_as(&cluster, &insider_user, &insider_pw).await;
        let results = ns_.results_queue();
        // The dead letters, read as the administrator.
        let admin = RabbitBus::connect(&cluster.amqp, ns_.clone())
            .await
            .unwrap();
        let mut dead = admin.consume(&ns_.dead_letter_queue(), 64).await.unwrap();
        // The victim takes eval requests as a worker does.
        let mut requests = loop {
            match victim.consume(&eval_queue, 4).await {
                Ok(c) => break c,
                Err(_) if t0.elapsed() < Duration::from_secs(60) => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Err(e) => panic!("{eval_queue}: {e}"),
            }
        };
        let mut taken = Vec::new();
        let mut jobs = Vec::new();
        while jobs.len() < 2 {
            let d = next(&mut requests, "eval request").await;
            let opened = victim
                .codec()
                .open(&d.payload, d.publisher.as_deref())
                .expect("a request from the Scheduler's user");
            let Message::Eval(EvalRequest { items, .. }) = opened.message else {
                panic!("not an eval request")
            };
            jobs.extend(items.iter().map(|i| i.job));
            taken.push(d);
        }
        let (job1, job2) = (jobs[0], jobs[1]);
        let sid = session.id;

        // 1. The victim starts both; its notice for job 2 is captured.
        let notice2 = victim.codec().encode(&started(sid, job2, &victim_worker));
        let notice1 = victim.codec().encode(&started(sid, job1, &victim_worker));
        victim
            .publish(&results, vec![notice1, notice2.clone()])
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;

        // 2. The insider, under the victim's worker name, sends forged times for job 1; then
        //    commands, control orders and a compile result of its own.
        let forged = insider
            .codec()
            .encode(&evaluated(sid, job1, &victim_worker, 1e-300));
        let forged2 = insider
            .codec()
            .encode(&evaluated(sid, job1, &victim_worker, 0.001));
        insider
            .publish(&results, vec![forged, forged2])
            .await
            .unwrap();
        let cancel = Message::Command(CommandRequest {
            id: "insider-cancel".into(),
            reply_to: format!("{ns}.reply.insider"),
            command: Command::CancelSession { session: sid },
        });
        insider
            .publish(&ns_.commands_queue(), vec![insider.codec().encode(&cancel)])
            .await
            .unwrap();
        let drain = insider.codec().encode(&Message::Control(Control::Drain));
        let target = ControlTarget::any(shoal_model::message::Actor::Worker);
        insider
            .publish_topic(&ns_.control_topic(), &target.routing_key(), drain)
            .await
            .unwrap();
        let compiled = Message::Reply(ReplyBody::Compiled(CompileReply {
            session: sid,
            jobs: vec![job1],
            build_key: "k".into(),
            result: Ok("0".repeat(64)),
            worker: format!("{host}/compiler"),
            duration_ms: 1,
        }));
        insider
            .publish(&results, vec![insider.codec().encode(&compiled)])
            .await
            .unwrap();

        // 3. The insider tries to take job 2 over with a notice of its own, under its own name,
        //    and sends a result for it; the victim's captured notice is replayed (the same bytes,
        //    through the insider's connection: the broker stamps the insider's user on them).
        let takeover = insider.codec().encode(&started(sid, job2, &insider_worker));
        insider.publish(&results, vec![takeover]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let stolen = insider
            .codec()
            .encode(&evaluated(sid, job2, &insider_worker, 0.002));
        insider.publish(&results, vec![stolen]).await.unwrap();
        insider.publish(&results, vec![notice2]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;

        // 4. Genuine results: the victim's, for both of the jobs it holds.
        let genuine1 = victim
            .codec()
            .encode(&evaluated(sid, job1, &victim_worker, 5000.0));
        let genuine2 = victim
            .codec()
            .encode(&evaluated(sid, job2, &victim_worker, 6000.0));
        victim
            .publish(&results, vec![genuine1, genuine2])
            .await
            .unwrap();
        let mut reasons = Vec::new();
        for _ in 0..20 {
            dead_reasons(&mut dead, &mut reasons).await;
            if reasons.len() >= 6 {
                break;
            }
        }
        for d in taken {
            d.ack().await.unwrap();
        }
        (reasons, job1, job2)
    });
    let (reasons, job1, job2) = reasons;
    let all = reasons.join("\n");
    let has = |what: &str| reasons.iter().any(|r| r.contains(what));
    assert!(
        has(&format!("{insider_user} (eval) may not send commands")),
        "{all}"
    );
    assert!(
        has(&format!(
            "{insider_user} (eval) may not send compile results"
        )),
        "{all}"
    );
    assert!(
        has(&format!(
            "sent by {insider_user}), but {victim_worker} (sent by {victim_user}) holds the lease"
        )),
        "{all}"
    );
    assert!(has("replayed started notice"), "{all}");
    assert!(
        has(&format!(
            "reply from {insider_worker} (sent by {insider_user}), but {victim_worker}"
        )),
        "the insider's own notice took the victim's lease: {all}"
    );

    // What the store holds: the genuine times, the session not cancelled, the workers running.
    let t1 = Instant::now();
    let results = loop {
        let results = store.final_results(session.id);
        let done = |j: JobRef| {
            results
                .iter()
                .any(|r| r.job == j.job && r.state == JobState::Evaluated)
        };
        if done(job1) && done(job2) {
            break results;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(30),
            "genuine results not applied"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let time = |j: JobRef| match &results.iter().find(|r| r.job == j.job).unwrap().outcome {
        Some(Outcome::Measured(m)) => m.time_us,
        other => panic!("{other:?}"),
    };
    assert_eq!((time(job1), time(job2)), (5000.0, 6000.0));
    for (name, child) in &mut cluster.workers {
        assert!(
            child.try_wait().unwrap().is_none(),
            "{name} obeyed a forged drain"
        );
    }
    let _ = tune.kill();
    let _ = tune.wait();
    cluster.stop_workers(Duration::from_secs(60));
    drop(users);
}

fn shoal_cli_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}
