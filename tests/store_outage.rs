//! A database outage costs a cluster session no more than its own length (issue 33).
//!
//! A real cluster of `shoal worker` processes (scheduler, compile, two evals) on the shared
//! RabbitMQ and a MariaDB server of this test's own, which it SIGKILLs mid-session and starts
//! again on the same data 12 s later. The same load runs once without the fault. Then:
//! - `shoal tune --cluster` finishes with every result, and said while it waited that the
//!   database did not answer and nothing is lost; so did `shoal status`, asked meanwhile, before
//!   it answered; the dashboard answered at once with a page saying so, and `/metrics` too;
//! - nothing is lost, doubled, errored by the machinery, or dead-lettered;
//! - the Scheduler rode the outage out in one run of its loop (no restart), and its `/metrics`
//!   counted the outage and its length;
//! - the faulted session took at most the outage plus 30 s longer than the fault-free one.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::own_mariadb::{free_port, OwnMariadb};
use shoal_model::JobState;

/// How long the database is away.
const OUTAGE: Duration = Duration::from_secs(12);
/// What the session may take at most, in any case.
const BOUND: Duration = Duration::from_secs(600);

/// The whole HTTP reply (status line, headers, body) to `GET path` on a local port.
fn get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    reply
}

fn scrape(port: u16) -> String {
    get(port, "/metrics")
}

/// The value of the first sample line that starts with `prefix`.
fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// What one session showed.
struct Session {
    secs: f64,
    tune_stderr: String,
    metrics: String,
    scheduler_log: String,
}

/// Runs the chaos suite's short load (1,200 jobs) on a fresh cluster; `fault` is called once a
/// tenth of the jobs are done, with the database.
fn session(
    db: &mut OwnMariadb,
    dir: &Path,
    name: &str,
    fault: impl FnOnce(&mut OwnMariadb, &Probe),
) -> Session {
    std::fs::create_dir_all(dir).unwrap();
    let mut cluster = Cluster::on_mysql(name, dir, db.server_url());
    let metrics_port = free_port();
    cluster.start_worker(
        "scheduler",
        &[],
        &[
            "--role",
            "scheduler",
            "--metrics-addr",
            &metrics_port.to_string(),
        ],
    );
    cluster.start_worker("compile", &[], &["--role", "compile", "-j", "2"]);
    cluster.start_worker("eval1", &[], &["--role", "eval", "--host", "e1"]);
    cluster.start_worker("eval2", &[], &["--role", "eval", "--host", "e2"]);
    // The dashboard, as an operator keeps it open.
    let dashboard_port = free_port();
    let mut dashboard = Command::new(env!("CARGO_BIN_EXE_shoal"));
    dashboard
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .args(["serve", "--cluster", "--addr"])
        .arg(format!("127.0.0.1:{dashboard_port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("serve.log")).unwrap());
    cluster.env(&mut dashboard);
    let mut dashboard = dashboard.spawn().unwrap();
    let stderr = dir.join("tune.log");
    let mut tune = Command::new(env!("CARGO_BIN_EXE_shoal"));
    tune.current_dir(dir)
        .env("RUST_LOG", "warn")
        .args(["tune", "--cluster", "--out", "out"])
        .arg(common::fixture("chaos/short.toml"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap());
    cluster.env(&mut tune);
    let t0 = Instant::now();
    let mut tune = tune.spawn().unwrap();
    // Mid-session: once a tenth of the jobs are final.
    let reader = cluster.store();
    let mut fault = Some(fault);
    let status = loop {
        if let Some(status) = tune.try_wait().unwrap() {
            break status;
        }
        if fault.is_some() {
            let done: u64 = reader
                .sessions()
                .first()
                .map(|s| {
                    reader
                        .state_counts(s.id)
                        .iter()
                        .filter(|(st, _)| st.is_terminal())
                        .map(|(_, n)| n)
                        .sum()
                })
                .unwrap_or(0);
            if done >= 120 {
                (fault.take().unwrap())(
                    db,
                    &Probe {
                        cluster: &cluster,
                        dir,
                        dashboard_port,
                        metrics_port,
                    },
                );
            }
        }
        assert!(
            t0.elapsed() < BOUND,
            "the session did not end within {BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let secs = t0.elapsed().as_secs_f64();
    let tune_stderr = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        status.success(),
        "shoal tune --cluster failed:\n{tune_stderr}"
    );
    assert!(fault.is_none(), "the session ended before the fault");
    let metrics = scrape(metrics_port);

    // Every job final with its one result; none errored by the machinery.
    let reader = cluster.store();
    let session = reader.sessions()[0].id;
    let results = reader.final_results(session);
    assert_eq!(results.len(), 1200);
    let lost: Vec<_> = results
        .iter()
        .filter(|r| r.state != JobState::Evaluated || r.outcome.is_none())
        .collect();
    assert!(
        lost.is_empty(),
        "{} jobs without their result: {:?}",
        lost.len(),
        lost.first()
    );
    // Nothing of the cluster's own was dead-lettered.
    let mut dead = Command::new(env!("CARGO_BIN_EXE_shoal"));
    dead.current_dir(dir).args(["dead-letters", "--json"]);
    cluster.env(&mut dead);
    let out = common::run_ok(&mut dead);
    let dead: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(dead["held"], 0, "dead-lettered: {dead:#}");
    let _ = dashboard.kill();
    let _ = dashboard.wait();
    cluster.stop_workers(Duration::from_secs(60));
    Session {
        secs,
        tune_stderr,
        metrics,
        scheduler_log: cluster.log("scheduler"),
    }
}

/// Where a fault reaches the session's processes.
struct Probe<'a> {
    cluster: &'a Cluster,
    dir: &'a Path,
    dashboard_port: u16,
    metrics_port: u16,
}

/// `shoal status`, asked while the database is away.
struct Asked {
    status: std::process::Child,
    log: std::path::PathBuf,
}

impl Probe<'_> {
    /// What operators see while the database is away: the dashboard answers within seconds,
    /// with a page that says why and reloads itself; the Scheduler's `/metrics` answers and
    /// says the database is unreachable; `shoal status` is asked (see [`Asked::check`]).
    fn while_away(&self) -> Asked {
        let log = self.dir.join("status.log");
        let mut status = Command::new(env!("CARGO_BIN_EXE_shoal"));
        status
            .current_dir(self.dir)
            .env("RUST_LOG", "warn")
            .args(["status", "--cluster"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        self.cluster.env(&mut status);
        let status = status.spawn().unwrap();
        let t0 = Instant::now();
        let page = get(self.dashboard_port, "/");
        assert!(t0.elapsed() < Duration::from_secs(10), "the dashboard hung");
        assert!(page.starts_with("HTTP/1.1 503"), "{page}");
        assert!(page.to_ascii_lowercase().contains("refresh: 5"), "{page}");
        assert!(page.contains("does not answer"), "{page}");
        // The Scheduler has met the outage by now (it reads the store several times a second).
        std::thread::sleep(Duration::from_secs(2));
        let t0 = Instant::now();
        let metrics = scrape(self.metrics_port);
        assert!(t0.elapsed() < Duration::from_secs(5), "/metrics hung");
        assert_eq!(
            metric(&metrics, "shoal_store_unreachable"),
            Some(1.0),
            "{metrics}"
        );
        Asked { status, log }
    }
}

impl Asked {
    /// `shoal status` waited, said why, and answered once the database was back.
    fn check(mut self) {
        let t0 = Instant::now();
        let code = loop {
            if let Some(code) = self.status.try_wait().unwrap() {
                break code;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "shoal status never answered"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let said = std::fs::read_to_string(&self.log).unwrap();
        assert!(code.success(), "shoal status failed:\n{said}");
        assert!(
            said.contains("does not answer") && said.contains("nothing is lost"),
            "shoal status did not say why it waited:\n{said}"
        );
    }
}

#[test]
fn a_database_outage_costs_no_more_than_its_length() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut db) = OwnMariadb::start(&dir.path().join("mariadb")) else {
        return;
    };
    let faultfree = session(&mut db, &dir.path().join("ff"), "soff", |_, _| {});
    let mut outage = Duration::ZERO;
    let faulted = session(&mut db, &dir.path().join("fx"), "sofx", |db, probe| {
        let t = Instant::now();
        db.kill();
        let operators = probe.while_away();
        std::thread::sleep(OUTAGE.saturating_sub(t.elapsed()));
        db.restart();
        outage = t.elapsed();
        operators.check();
    });
    eprintln!(
        "fault-free {:.1} s; with a {:.1} s database outage {:.1} s",
        faultfree.secs,
        outage.as_secs_f64(),
        faulted.secs
    );

    // The operator was told, and the command carried on.
    assert!(
        faulted.tune_stderr.contains("does not answer")
            && faulted.tune_stderr.contains("nothing is lost"),
        "tune --cluster did not say it waits for the database:\n{}",
        faulted.tune_stderr
    );
    // The Scheduler waited in one run of its loop, and counted the outage.
    assert!(
        !faulted.scheduler_log.contains("restarting"),
        "the Scheduler's loop restarted:\n{}",
        faulted.scheduler_log
    );
    let outages = metric(&faulted.metrics, "shoal_store_outages_total").unwrap_or(0.0);
    let secs = metric(&faulted.metrics, "shoal_store_outage_seconds_total").unwrap_or(0.0);
    assert!(outages >= 1.0, "{}", faulted.metrics);
    assert!(secs >= OUTAGE.as_secs_f64() - 2.0, "outage seconds {secs}");
    assert_eq!(
        metric(&faulted.metrics, "shoal_store_unreachable"),
        Some(0.0)
    );
    // At most its length plus 30 s over the fault-free session.
    assert!(
        faulted.secs - outage.as_secs_f64() <= faultfree.secs + 30.0,
        "a {:.1} s outage cost {:.1} s over the fault-free {:.1} s",
        outage.as_secs_f64(),
        faulted.secs - faultfree.secs,
        faultfree.secs
    );
}
