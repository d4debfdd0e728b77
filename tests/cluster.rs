//! Cluster mode for real: the Scheduler, two Compile workers and an Eval worker as separate OS
//! processes over the real RabbitMQ and MariaDB, tuning the fault-injection spec; and the same
//! with the compile and eval workers each in their own network namespace, reaching the broker and
//! the database over a veth pair, so compile hosts and GPU hosts are separate hosts for real.

mod common;
#[path = "cluster/steps.rs"]
mod steps;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::cluster::Cluster;
use shoal_model::{FailureKind, JobState};

/// The two tests time candidates; run together on two cores their timings would disturb each
/// other's (and the winner check), so they take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The text of `GET /metrics` on a local port.
fn scrape(port: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    reply
}

/// The values of the sample lines that start with `prefix`.
fn metric_lines(text: &str, prefix: &str) -> Vec<f64> {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect()
}

/// `shoal workers --json` against the cluster's database.
fn workers(cluster: &Cluster, dir: &Path) -> Vec<serde_json::Value> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
    cmd.current_dir(dir)
        .args(["workers", "--json", "--cluster"]);
    cluster.env(&mut cmd);
    let out = common::run_ok(&mut cmd);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `shoal tune <faulty spec> --cluster`, waiting for the workers; returns its stdout.
fn tune_in_cluster(cluster: &Cluster, dir: &Path) -> String {
    let mut cmd = tune_command(cluster, dir);
    String::from_utf8(common::run_ok(&mut cmd).stdout).unwrap()
}

fn tune_command(cluster: &Cluster, dir: &Path) -> Command {
    tune_spec_command(cluster, dir, &common::fixture("faulty/spec.toml"))
}

fn tune_spec_command(cluster: &Cluster, dir: &Path, spec: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
    cmd.current_dir(dir)
        .env("RUST_LOG", "warn")
        .args(["tune", "--cluster", "--out", "out"])
        .arg(spec);
    cluster.env(&mut cmd);
    cmd
}

/// What every cluster run must show: each fault recorded with its kind, every working candidate
/// measured, the cheapest variant winning on both shapes.
fn check_results(cluster: &Cluster, dir: &Path, stdout: &str) {
    let store = cluster.store();
    let sessions = store.sessions();
    assert_eq!(sessions.len(), 1);
    let results = store.final_results(sessions[0].id);
    assert_eq!(results.len(), 16);
    let kinds = |mode: &str| -> Vec<Option<FailureKind>> {
        results
            .iter()
            .filter(|r| r.compile_params.get("MODE") == Some(mode))
            .map(|r| r.failure)
            .collect()
    };
    assert_eq!(kinds("1"), vec![Some(FailureKind::Crashed); 2]);
    assert_eq!(kinds("2"), vec![Some(FailureKind::Timeout); 2]);
    assert_eq!(kinds("3"), vec![Some(FailureKind::WrongAnswer); 2]);
    assert_eq!(kinds("5"), vec![Some(FailureKind::BuildFailed); 2]);
    assert!(results
        .iter()
        .filter(|r| r.compile_params.get("MODE") == Some("0"))
        .all(|r| r.state == JobState::Evaluated));
    // A working candidate wins each shape. (Which WORK wins is a timing, and in these tests
    // the compile and eval workers share two cores with the broker and the database; the
    // embedded test, where builds never overlap timings, checks the cheapest one wins.)
    let csv = std::fs::read_to_string(dir.join("out/tuned.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    for line in csv.lines().skip(1) {
        assert_eq!(line.split(',').nth(3), Some("0"), "{line}");
    }
    assert!(stdout.contains("crashed:1"), "{stdout}");
}

#[test]
fn scheduler_two_compilers_and_an_evaluator_as_separate_processes() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::new("cp", dir.path());
    let arch = std::env::consts::ARCH;
    let metrics_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    // The operator's spec is on the operator's machine only: a copy that is gone before any
    // Scheduler or worker starts, so they can read it only from what `tune --cluster` shipped.
    let checkout = dir.path().join("operator");
    std::fs::create_dir_all(&checkout).unwrap();
    for file in ["spec.toml", "kernel.c"] {
        std::fs::copy(common::fixture("faulty").join(file), checkout.join(file)).unwrap();
    }
    let spec = checkout.join("spec.toml");
    // The operator's commands come first, while no Scheduler runs. One that gives up waiting
    // says that its command is not lost...
    let given_up = tune_spec_command(&cluster, dir.path(), &spec)
        .args(["--reply-timeout", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&given_up.stderr);
    assert!(!given_up.status.success(), "{stderr}");
    assert!(
        stderr.contains("no Scheduler is running") && stderr.contains("not lost"),
        "{stderr}"
    );
    // ... and one that waits gets its answer once a Scheduler starts. The first command is
    // applied first: it makes the session, and the second finds it (one session in all).
    let mut tune = tune_spec_command(&cluster, dir.path(), &spec)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        tune.try_wait().unwrap().is_none(),
        "tune --cluster ended with no Scheduler to answer it"
    );
    std::fs::rename(&checkout, dir.path().join("operator-gone")).unwrap();
    cluster.start_worker(
        "scheduler",
        &[],
        &["--role", "scheduler", "--metrics-addr", &metrics_port],
    );
    cluster.start_worker(
        "compile1",
        &[],
        &["--role", "compile", "--arch", arch, "-j", "1"],
    );
    cluster.start_worker(
        "compile2",
        &[],
        &["--role", "compile", "--arch", arch, "-j", "1"],
    );
    cluster.start_worker("eval", &[], &["--role", "eval"]);
    let exports = dir.path().join("exports");
    cluster.start_worker(
        "exporter",
        &[],
        &[
            "--role",
            "exporter",
            "--export-dir",
            exports.to_str().unwrap(),
        ],
    );
    let out = tune.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("session 1 (resumed)"), "{stderr}");
    check_results(&cluster, dir.path(), &stdout);
    let spec_path = &cluster.store().sessions()[0].info.spec_path;
    assert!(spec_path.starts_with("shipped:"), "{spec_path}");
    assert!(spec_path.ends_with("/spec.toml"), "{spec_path}");
    // The fleet view: every worker process reports itself, live, with its roles.
    let mut table = Command::new(env!("CARGO_BIN_EXE_shoal"));
    table.current_dir(dir.path()).args(["workers", "--cluster"]);
    cluster.env(&mut table);
    let table = common::run_ok(&mut table);
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.contains("5 live, 0 stale"), "{table}");
    eprintln!("shoal workers --cluster, during the run:\n{table}");
    let listed = workers(&cluster, dir.path());
    let mut roles: Vec<String> = listed
        .iter()
        .map(|w| {
            assert_eq!(w["state"], "live", "{w}");
            w["roles"][0].as_str().unwrap().to_string()
        })
        .collect();
    roles.sort();
    assert_eq!(
        roles,
        ["compile", "compile", "eval", "exporter", "scheduler"],
        "{listed:?}"
    );
    let eval = listed.iter().find(|w| w["roles"][0] == "eval").unwrap();
    assert!(!eval["devices"].as_array().unwrap().is_empty(), "{eval}");
    // The Scheduler's metrics: the session's 16 jobs, 16 results applied, the results queue.
    let metrics = scrape(&metrics_port);
    let jobs: f64 = metric_lines(&metrics, "shoal_jobs{session=\"1\",")
        .iter()
        .sum();
    assert_eq!(jobs, 16.0, "{metrics}");
    let results: f64 = metric_lines(&metrics, "shoal_results_total{").iter().sum();
    assert!(results >= 16.0, "{metrics}");
    assert_eq!(
        metric_lines(
            &metrics,
            &format!(
                "shoal_queue_messages{{queue=\"{}.results\"}}",
                cluster.namespace
            )
        ),
        vec![0.0],
        "{metrics}"
    );
    // And how full the bounded dead-letter queue is (`shoal dead-letters`).
    let dead = format!(
        "shoal_queue_messages{{queue=\"{}.dead\"}}",
        cluster.namespace
    );
    assert_eq!(metric_lines(&metrics, &dead).len(), 1, "{metrics}");
    steps::hostile_messages_are_dead_lettered(&cluster, dir.path());
    // The exporter role writes the tuned table on request, on its own host, inside its export
    // directory only: a request for a path outside it is refused by the CLI.
    let mut outside = Command::new(env!("CARGO_BIN_EXE_shoal"));
    outside.current_dir(dir.path()).args([
        "export",
        "--session",
        "1",
        "--cluster",
        "-o",
        "../escape",
    ]);
    cluster.env(&mut outside);
    let out = outside.output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("relative path inside"));
    let exported = exports.join("nightly");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
    cmd.current_dir(dir.path())
        .args(["export", "--session", "1", "--cluster", "-o", "nightly"]);
    cluster.env(&mut cmd);
    common::run_ok(&mut cmd);
    let t0 = std::time::Instant::now();
    while !exported.join("tuned.csv").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "the exporter wrote nothing:\n{}",
            cluster.log("exporter")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        std::fs::read_to_string(exported.join("tuned.csv")).unwrap(),
        std::fs::read_to_string(dir.path().join("out/tuned.csv")).unwrap()
    );
    steps::a_searched_replay_in_the_cluster(&cluster, dir.path());
    steps::actors_restart_on_an_operators_order(&cluster);
    // An operator drains the deployment: every worker finishes and exits on its own.
    let mut drain = Command::new(env!("CARGO_BIN_EXE_shoal"));
    drain.args(["control", "drain", "--host", "any"]);
    cluster.env(&mut drain);
    common::run_ok(&mut drain);
    cluster.wait_workers(Duration::from_secs(20));
    // Each said it stopped.
    let listed = workers(&cluster, dir.path());
    assert_eq!(listed.len(), 5, "{listed:?}");
    assert!(listed.iter().all(|w| w["state"] == "stopped"), "{listed:?}");
    // Both compile workers took builds: the queue spreads work across processes.
    for w in ["compile1", "compile2"] {
        let log = cluster.log(w);
        assert!(
            log.contains("compile request received"),
            "{w} compiled nothing:\n{log}"
        );
    }
}

/// Network namespaces joined by veth pairs to a bridge, torn down on drop.
struct TestNetwork {
    bridge: String,
    namespaces: Vec<String>,
    gateway: String,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

impl TestNetwork {
    /// `hosts` namespaces on 10.213.<n>.0/24; the host side (this process) is 10.213.<n>.1.
    fn new(hosts: &[&str]) -> Option<TestNetwork> {
        let n = std::process::id() % 200 + 20;
        let bridge = format!("shb{n}");
        let gateway = format!("10.213.{n}.1");
        let mut net = TestNetwork {
            bridge: bridge.clone(),
            namespaces: Vec::new(),
            gateway: gateway.clone(),
        };
        if !(ip(&["link", "add", &bridge, "type", "bridge"])
            && ip(&["addr", "add", &format!("{gateway}/24"), "dev", &bridge])
            && ip(&["link", "set", &bridge, "up"]))
        {
            return None;
        }
        for (k, host) in hosts.iter().enumerate() {
            let ns = format!("shoal{n}-{host}");
            let veth = format!("shv{n}{host}");
            let addr = format!("10.213.{n}.{}/24", k + 2);
            let ok = ip(&["netns", "add", &ns])
                && ip(&[
                    "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
                ])
                && ip(&["link", "set", &veth, "master", &bridge])
                && ip(&["link", "set", &veth, "up"])
                && ip(&[
                    "netns", "exec", &ns, "ip", "addr", "add", &addr, "dev", "eth0",
                ])
                && ip(&["netns", "exec", &ns, "ip", "link", "set", "eth0", "up"])
                && ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
            net.namespaces.push(ns);
            if !ok {
                return None;
            }
        }
        Some(net)
    }
}

impl Drop for TestNetwork {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            ip(&["netns", "del", ns]);
        }
        ip(&["link", "del", &self.bridge]);
    }
}

/// Forwards `listen` to `target` (the broker and the database listen on 127.0.0.1 only), so the
/// namespaces reach them over the bridge, as remote hosts reach a server.
fn forward(rt: &tokio::runtime::Runtime, listen: String, target: &'static str) {
    rt.spawn(async move {
        let listener = tokio::net::TcpListener::bind(&listen).await.unwrap();
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
}

#[test]
fn compile_and_eval_workers_on_separate_hosts_over_veth() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let hosts = ["c1", "c2", "e1"];
    let Some(net) = TestNetwork::new(&hosts) else {
        panic!("cannot create network namespaces (needs root and iproute2's `ip`)");
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();

    let mut cluster = Cluster::new("nn", dir.path());
    let arch = std::env::consts::ARCH;
    // The Scheduler stays on this host (loopback); the others see only the bridge address.
    cluster.start_worker("scheduler", &[], &["--role", "scheduler"]);
    let local = (cluster.amqp.clone(), cluster.mysql_server.clone());
    cluster.amqp = local.0.replace("127.0.0.1", &net.gateway);
    cluster.mysql_server = local.1.replace("127.0.0.1", &net.gateway);
    let exec = |ns: &str| ["ip", "netns", "exec", ns].map(String::from);
    for (name, ns, args) in [
        (
            "compile1",
            &net.namespaces[0],
            vec!["--role", "compile", "--arch", arch, "-j", "1"],
        ),
        (
            "compile2",
            &net.namespaces[1],
            vec!["--role", "compile", "--arch", arch, "-j", "1"],
        ),
        ("eval", &net.namespaces[2], vec!["--role", "eval"]),
    ] {
        let wrap = exec(ns);
        let wrap: Vec<&str> = wrap.iter().map(|s| s.as_str()).collect();
        cluster.start_worker(name, &wrap, &args);
    }
    cluster.amqp = local.0;
    cluster.mysql_server = local.1;
    // The remote hosts started while nothing answered on the bridge, as after a reboot where the
    // servers come up last: they wait for the database and the broker instead of exiting.
    std::thread::sleep(Duration::from_secs(2));
    forward(&rt, format!("{}:5672", net.gateway), "127.0.0.1:5672");
    forward(&rt, format!("{}:3306", net.gateway), "127.0.0.1:3306");
    let stdout = tune_in_cluster(&cluster, dir.path());
    check_results(&cluster, dir.path(), &stdout);
    for w in ["compile1", "compile2", "eval"] {
        let log = cluster.log(w);
        assert!(
            log.contains(&net.gateway),
            "{w} did not connect through the bridge:\n{log}"
        );
        assert!(
            log.contains("does not answer") && log.contains("nothing is lost"),
            "{w} did not wait for the database:\n{log}"
        );
    }
    cluster.stop_workers(Duration::from_secs(20));
    drop(cluster);
    drop(net);
}

/// `shoal session cancel --cluster`: a session whose builds take half a second each (a recorded
/// space replayed at its recorded pace, one build at a time) is cancelled once its first
/// candidate is timed. The Scheduler starts no more of its work and skips what is not under
/// way; the work under way finishes; every job ends, and the operator following the tuning
/// (with no database) sees it end.
#[test]
fn a_cancelled_session_starts_no_more_work() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut cluster = Cluster::new("cx", d);
    common::write_replay_space(&d.join("space.json"));
    std::fs::write(
        d.join("spec.toml"),
        "name = \"slow\"\nbackend = \"replay\"\nspace = \"space.json\"\n",
    )
    .unwrap();
    let arch = std::env::consts::ARCH;
    let paced = ["--replay-time", "scaled:1"];
    cluster.start_worker("scheduler", &[], &["--role", "scheduler"]);
    cluster.start_worker(
        "compile",
        &[],
        &[
            &["--role", "compile", "--arch", arch, "-j", "1"][..],
            &paced,
        ]
        .concat(),
    );
    cluster.start_worker("eval", &[], &[&["--role", "eval"][..], &paced].concat());
    let operator = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
        cmd.current_dir(d).env("RUST_LOG", "warn").args(args);
        cluster.env(&mut cmd).env_remove("SHOAL_DB");
        cmd
    };
    let tune = operator(&["tune", "--cluster", "spec.toml"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let store = cluster.store();
    // (Empty until the Scheduler has made the session.)
    let counts = || match store.sessions().is_empty() {
        true => Default::default(),
        false => store.state_counts(shoal_model::SessionId(1)),
    };
    let t0 = std::time::Instant::now();
    while counts().get(&JobState::Evaluated).copied().unwrap_or(0) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "nothing timed: {:?}\n{}",
            counts(),
            cluster.log("scheduler")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let cancelled = common::run_ok(&mut operator(&[
        "session",
        "cancel",
        "--session",
        "1",
        "--cluster",
    ]));
    let said = String::from_utf8_lossy(&cancelled.stdout);
    assert!(said.contains("session 1 cancelled"), "{said}");
    let again = common::run_ok(&mut operator(&[
        "session",
        "cancel",
        "--session",
        "1",
        "--cluster",
    ]));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("was already cancelled"),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    let out = tune.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let end = counts();
    let get = |s: JobState| end.get(&s).copied().unwrap_or(0);
    assert_eq!(end.values().sum::<u64>(), 119, "{end:?}");
    assert_eq!(
        get(JobState::Evaluated) + get(JobState::Errored) + get(JobState::Skipped),
        119,
        "every job ended: {end:?}"
    );
    // At a build each half second, most of the session was never started.
    assert!(get(JobState::Skipped) >= 60, "{end:?}");
    // The listing says so.
    let mut sessions = Command::new(env!("CARGO_BIN_EXE_shoal"));
    sessions.current_dir(d).args(["sessions", "--cluster"]);
    cluster.env(&mut sessions);
    let listed = String::from_utf8(common::run_ok(&mut sessions).stdout).unwrap();
    assert!(listed.contains("cancelled"), "{listed}");
    cluster.stop_workers(Duration::from_secs(20));
}
