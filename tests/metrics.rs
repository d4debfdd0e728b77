//! `shoal tune --metrics-addr`: a scrape of `/metrics` over HTTP while a real tuning runs parses
//! as Prometheus text, and its numbers agree with the store.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// What Prometheus 2.x sends as its scrapes' `Accept` header.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// GET `path` over HTTP/1.1 as Prometheus asks; returns (status line, content type, body).
fn get(port: u16, path: &str) -> (String, String, String) {
    get_accepting(port, path, PROMETHEUS_ACCEPT)
}

/// GET `path` with an `Accept` header (none when empty).
fn get_accepting(port: u16, path: &str, accept: &str) -> (String, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = if accept.is_empty() {
        String::new()
    } else {
        format!("Accept: {accept}\r\n")
    };
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{accept}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    let status = head.lines().next().unwrap().to_string();
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(String::from)
        })
        .unwrap_or_default();
    (status, content_type, body.to_string())
}

/// Every sample line as `name{labels}` → value; panics on a line that is not a comment or a
/// sample (the text format's grammar, as far as Shoal uses it).
fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if line.starts_with('#') {
            assert!(
                line.starts_with("# HELP ")
                    || line.starts_with("# TYPE ")
                    || line.starts_with("# UNIT ")
                    || line == "# EOF",
                "bad comment line: {line}"
            );
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line: {line}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name.starts_with("shoal_")
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad metric name in: {line}"
        );
        if let Some(labels) = series.strip_prefix(name) {
            assert!(
                labels.is_empty() || (labels.starts_with('{') && labels.ends_with('}')),
                "{line}"
            );
        }
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in: {line}"));
        samples.insert(series.to_string(), value);
    }
    samples
}

#[test]
fn metrics_are_served_while_tuning_and_agree_with_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = common::tune(dir.path(), "sleepy/spec.toml")
        .args(["--metrics-addr", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let samples = loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "tuning ended too early"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no results scraped"
        );
        std::thread::sleep(Duration::from_millis(300));
        let Ok(_) = TcpStream::connect(("127.0.0.1", port)) else {
            continue;
        };
        let (status, content_type, body) = get(port, "/metrics");
        assert!(status.contains(" 200 "), "{status}");
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        let samples = parse(&body);
        if samples
            .get("shoal_results_total{kind=\"ok\"}")
            .copied()
            .unwrap_or(0.0)
            >= 3.0
        {
            break samples;
        }
    };
    // Jobs per state add up to the session's 60 candidates.
    let jobs: f64 = samples
        .iter()
        .filter(|(k, _)| k.starts_with("shoal_jobs{session=\"1\","))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(jobs, 60.0, "{samples:?}");
    assert!(samples["shoal_apply_seconds_count"] >= 1.0, "{samples:?}");
    assert!(
        samples["shoal_dispatch_seconds_count"] >= 1.0,
        "{samples:?}"
    );
    assert_eq!(
        samples["shoal_device_healthy{device=\"cpu\"}"], 1.0,
        "{samples:?}"
    );
    assert!(
        samples["shoal_evaluator_busy_seconds_total{device=\"cpu\"}"] > 0.0,
        "{samples:?}"
    );
    // Without Prometheus's Accept header (curl, promtool): the classic text format, which
    // Prometheus's own checker passes.
    let (status, content_type, body) = get_accepting(port, "/metrics", "");
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    common::promtool_check_metrics(&body);
    assert_eq!(get(port, "/").0.split(' ').nth(1), Some("404"));
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    child.wait().unwrap();
}
