//! A broker that is a cluster: three RabbitMQ nodes of this test's own (scripts/broker-cluster,
//! on free ports under a temporary directory), the Scheduler, a Compile worker and two Eval
//! workers as `shoal worker` processes given the node list, and `shoal tune --cluster`. One
//! session runs without a fault; a second, the same work, runs while the node that leads the
//! namespace's quorum queues is SIGKILLed a quarter of the way in. Every job must end with its
//! one result, nothing may be dead-lettered, and the faulted session may take at most 30 s more
//! than the fault-free one: a failover costs seconds, not a lease.
//!
//! Skipped (with a message, not failed) only where rabbitmq-server is not installed. The
//! database is the test MariaDB (`SHOAL_TEST_MYSQL`, as in tests/cluster.rs).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use shoal_model::{JobState, SessionId};

/// What `scripts/broker-cluster` needs: Debian's rabbitmq-server and Erlang's epmd.
fn rabbitmq_missing() -> Option<&'static str> {
    if !Path::new("/usr/lib/rabbitmq/bin/rabbitmq-server").exists() {
        return Some("rabbitmq-server is not installed (/usr/lib/rabbitmq/bin/rabbitmq-server)");
    }
    let epmd = Command::new("sh")
        .args(["-c", "command -v epmd"])
        .output()
        .is_ok_and(|o| o.status.success());
    (!epmd).then_some("epmd (Erlang) is not installed")
}

/// The three nodes, stopped (by their recorded pids) when dropped, passed or failed; and, should
/// this process die before that, by the script's watchdog, which follows this process's pid.
struct Brokers {
    dir: PathBuf,
    /// The node list as one URL, with the password of the cluster's one user.
    url: String,
}

fn script() -> PathBuf {
    common::repo_root().join("scripts/broker-cluster")
}

fn run_script(args: &[&str]) -> String {
    let out = Command::new(script())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("scripts/broker-cluster runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scripts/broker-cluster {args:?} failed:\n{stderr}"
    );
    eprint!("{stderr}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

impl Brokers {
    fn start(dir: PathBuf) -> Brokers {
        // Made before the start, so that a start that fails halfway is stopped too.
        let mut brokers = Brokers {
            dir,
            url: String::new(),
        };
        let owner = std::process::id().to_string();
        run_script(&["start", brokers.dir.to_str().unwrap(), "--owner", &owner]);
        let env = std::fs::read_to_string(brokers.dir.join("broker.env")).unwrap();
        brokers.url = env
            .lines()
            .find_map(|l| l.strip_prefix("SHOAL_BROKER="))
            .expect("broker.env names the nodes")
            .to_string();
        brokers
    }

    /// The node (1-3) that leads the most of the namespace's quorum queues.
    fn leader(&self, ns: &str) -> u32 {
        let pattern = format!("^{}\\.", ns.replace('.', "\\."));
        run_script(&["leader", self.dir.to_str().unwrap(), "/", &pattern])
            .parse()
            .expect("a node number")
    }

    /// SIGKILLs node `n`; its pid.
    fn kill(&self, n: u32) -> String {
        run_script(&["kill", self.dir.to_str().unwrap(), &n.to_string()])
    }
}

impl Drop for Brokers {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .args(["stop", self.dir.to_str().unwrap()])
            .stdin(Stdio::null())
            .status();
    }
}

/// A spec of `name`: 4 builds x 10 shapes x 15 run values = 600 jobs of the chaos suite's
/// candidate (most exit at once, 3 in a hundred sleep up to 2 s; no R = 0, its hostile probe).
fn write_spec(dir: &Path, name: &str) -> PathBuf {
    let spec_dir = dir.join(name);
    std::fs::create_dir_all(&spec_dir).unwrap();
    std::fs::copy(common::fixture("chaos/job.c"), spec_dir.join("job.c")).unwrap();
    let shapes: String = (0..10)
        .map(|s| format!("[[shapes]]\nS = {s}\n\n"))
        .collect();
    let spec = format!(
        "name = \"{name}\"\nsources = [\"job.c\"]\n\n{shapes}\
         [build]\ncommand = \"cc -O1 -DVAR={{VAR}} -o {{out}} {{spec_dir}}/job.c\"\ntimeout_s = 60\n\n\
         [run]\ncommand = \"{{artifact}} {{S}} {{R}} 30\"\ntimeout_s = 20\nrepeat = 1\n\n\
         [output]\ntime = 'time_us=([0-9]+)'\npass = 'verdict=PASS'\n\n\
         [params.compile]\nVAR = {{ range = [0, 3] }}\n\n\
         [params.run]\nR = {{ range = [1, 15] }}\n"
    );
    let path = spec_dir.join("spec.toml");
    std::fs::write(&path, spec).unwrap();
    path
}

const JOBS: u64 = 4 * 10 * 15;

/// `shoal tune --cluster SPEC`, its output in `<dir>/<log>`.
fn start_tune(cluster: &Cluster, dir: &Path, spec: &Path, log: &str) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
    cmd.current_dir(dir)
        .env("RUST_LOG", "info")
        .args(["tune", "--cluster", "--out"])
        .arg(dir.join(format!("{log}-out")))
        .arg(spec)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join(format!("{log}.log"))).unwrap())
        .stderr(std::fs::File::create(dir.join(format!("{log}.err"))).unwrap());
    cluster.env(&mut cmd);
    cmd.spawn().unwrap()
}

/// Waits for `tune` to exit within `bound` (killing it past that); it must succeed.
fn finish(mut tune: Child, bound: Duration, dir: &Path, log: &str, cluster: &Cluster) {
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = tune.try_wait().unwrap() {
            break status;
        }
        if t0.elapsed() > bound {
            let _ = tune.kill();
            let _ = tune.wait();
            panic!(
                "shoal tune --cluster ({log}) did not finish within {bound:?}:\n{}\nscheduler:\n{}",
                std::fs::read_to_string(dir.join(format!("{log}.err"))).unwrap_or_default(),
                tail(&cluster.log("scheduler"), 60)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status.success(),
        "shoal tune --cluster ({log}): {status}\n{}\nscheduler:\n{}",
        std::fs::read_to_string(dir.join(format!("{log}.err"))).unwrap_or_default(),
        tail(&cluster.log("scheduler"), 60)
    );
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Every job of the session ended evaluated, with exactly one result row, measured.
fn check_session(cluster: &Cluster, session: SessionId) {
    let store = cluster.store();
    let counts = store.state_counts(session);
    assert_eq!(
        counts.get(&JobState::Evaluated).copied().unwrap_or(0),
        JOBS,
        "session {session:?}: {counts:?}"
    );
    let finals = store.final_results(session);
    assert_eq!(finals.len() as u64, JOBS);
    let mut missing = Vec::new();
    let mut duplicated = Vec::new();
    for f in &finals {
        match store.results(f.job).len() {
            1 => {}
            0 => missing.push(f.job),
            _ => duplicated.push(f.job),
        }
        assert!(
            matches!(f.outcome, Some(shoal_model::Outcome::Measured(_))),
            "{f:?}"
        );
    }
    assert!(missing.is_empty(), "jobs without a result: {missing:?}");
    assert!(
        duplicated.is_empty(),
        "jobs with two results: {duplicated:?}"
    );
}

/// What the namespace's dead-letter queue holds (nobody else consumes it): each message's reason
/// and publisher, read and then left there.
fn dead_letters(cluster: &Cluster) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use shoal_bus::Bus;
        let ns = shoal_model::queue::Namespace::new(&cluster.namespace).unwrap();
        let bus = shoal_bus::amqp::RabbitBus::connect(&cluster.amqp, ns.clone())
            .await
            .unwrap();
        let queue = ns.dead_letter_queue();
        let depth = bus.queue_depth(&queue).await.unwrap();
        let mut seen = Vec::new();
        if depth > 0 {
            let mut c = bus.consume(&queue, 100).await.unwrap();
            for _ in 0..depth.min(100) {
                match tokio::time::timeout(Duration::from_secs(5), c.next()).await {
                    Ok(Some(Ok(d))) => {
                        seen.push(format!(
                            "{:?} from {:?} (delivery {})",
                            d.dead_reason, d.publisher, d.delivery_count
                        ));
                        let _ = d.requeue().await;
                    }
                    _ => break,
                }
            }
        }
        let _ = bus.close().await;
        seen
    })
}

#[test]
fn killing_the_node_that_leads_the_queues_costs_seconds() {
    if let Some(why) = rabbitmq_missing() {
        eprintln!("SKIPPED broker_cluster: {why}; this test starts a RabbitMQ cluster of its own");
        return;
    }
    let mut dir = tempfile::tempdir().unwrap();
    // SHOAL_KEEP_TEST_DIR=1 keeps the logs (workers', nodes') for a look afterwards.
    if std::env::var_os("SHOAL_KEEP_TEST_DIR").is_some() {
        dir.disable_cleanup(true);
        eprintln!("broker_cluster: keeping {}", dir.path().display());
    }
    let d = dir.path();
    let t_start = Instant::now();
    let mut cluster = Cluster::new("bc", d);
    // Made after the cluster, so dropped before it on every path: with the brokers stopped, the
    // cluster's clean-up skips the namespace at once (deleting quorum queues with a member down
    // takes seconds each) and drops the database.
    let brokers = Brokers::start(d.join("brokers"));
    cluster.amqp = brokers.url.clone();
    let arch = std::env::consts::ARCH;
    cluster.start_worker("scheduler", &[], &["--role", "scheduler"]);
    cluster.start_worker(
        "compile",
        &[],
        &["--role", "compile", "--arch", arch, "-j", "2"],
    );
    cluster.start_worker("eval1", &[], &["--role", "eval", "--host", "e1"]);
    cluster.start_worker("eval2", &[], &["--role", "eval", "--host", "e2"]);

    // The fault-free session.
    let spec = write_spec(d, "failover-free");
    let t0 = Instant::now();
    let tune = start_tune(&cluster, d, &spec, "free");
    finish(tune, Duration::from_secs(240), d, "free", &cluster);
    let fault_free = t0.elapsed();
    check_session(&cluster, SessionId(1));

    // The same work again, and the node leading the queues killed a quarter of the way in.
    let spec = write_spec(d, "failover-kill");
    let t0 = Instant::now();
    let tune = start_tune(&cluster, d, &spec, "kill");
    let store = cluster.store();
    let evaluated = || {
        if store.sessions().len() < 2 {
            return 0;
        }
        let counts = store.state_counts(SessionId(2));
        counts.get(&JobState::Evaluated).copied().unwrap_or(0)
    };
    while evaluated() < JOBS / 4 {
        assert!(
            t0.elapsed() < fault_free * 2 + Duration::from_secs(30),
            "the second session did not get a quarter of the way"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let leader = brokers.leader(&cluster.namespace);
    let at = t0.elapsed();
    let pid = brokers.kill(leader);
    eprintln!(
        "broker_cluster: SIGKILLed node {leader} (pid {pid}), the queues' leader, at {at:.1?} with {} of {JOBS} jobs evaluated",
        evaluated()
    );
    finish(
        tune,
        fault_free + Duration::from_secs(120),
        d,
        "kill",
        &cluster,
    );
    let faulted = t0.elapsed();
    check_session(&cluster, SessionId(2));
    // A reply whose acknowledgement died with the leader comes again after the Scheduler
    // applied it; none of its changes applies a second time, so it is refused as stale and
    // dead-lettered (as `scripts/chaos` counts it: not a genuine message lost). Every job has
    // one result all the same (`check_session`, above). Anything else dead-lettered is a fault.
    let dead: Vec<String> = dead_letters(&cluster)
        .into_iter()
        .filter(|d| !d.starts_with("Some(\"stale "))
        .collect();
    assert!(dead.is_empty(), "dead-lettered: {dead:#?}");
    eprintln!(
        "broker_cluster: fault-free {:.1} s, with the leader killed {:.1} s (bound: fault-free + 30 s)",
        fault_free.as_secs_f64(),
        faulted.as_secs_f64(),
    );
    // Every worker went over to another node.
    for w in ["scheduler", "compile", "eval1", "eval2"] {
        let log = cluster.log(w);
        assert!(
            log.contains("failed over to another broker node"),
            "{w} did not fail over:\n{}",
            tail(&log, 40)
        );
    }
    assert!(
        faulted <= fault_free + Duration::from_secs(30),
        "the failover cost {:.1} s: fault-free {fault_free:.1?}, with the leader killed {faulted:.1?}",
        (faulted.saturating_sub(fault_free)).as_secs_f64()
    );
    cluster.stop_workers(Duration::from_secs(30));
    drop(brokers);
    drop(cluster);
    eprintln!(
        "broker_cluster: whole test {:.1} s",
        t_start.elapsed().as_secs_f64()
    );
}
