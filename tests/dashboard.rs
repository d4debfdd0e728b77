//! `shoal serve` on a real tuning: each page rendered by headless Chromium (Debian's `chromium`,
//! which scripts/setup-debian installs), asserted on through the DOM Chromium built, and saved as
//! a screenshot under the target directory; and the token rule off loopback.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `shoal serve` in `dir`, waiting until it accepts connections.
fn serve(dir: &Path, addr: &str, port: u16, token: Option<&str>) -> Child {
    let mut cmd = common::shoal(dir);
    cmd.args(["--db", "t.db", "serve", "--addr", addr])
        .env_remove("SHOAL_WEB_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(t) = token {
        cmd.env("SHOAL_WEB_TOKEN", t);
    }
    let mut child = cmd.spawn().unwrap();
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(child.try_wait().unwrap().is_none(), "shoal serve exited");
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "shoal serve never listened"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}

fn stop(mut child: Child) {
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    child.wait().unwrap();
}

fn chromium() -> PathBuf {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("headless Chromium is needed: run scripts/setup-debian (Debian's `chromium`)")
}

/// Chromium, headless, without the background traffic that this machine's closed network
/// refuses, in a profile of its own.
fn chrome(profile: &Path) -> Command {
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .stdin(Stdio::null())
    .stderr(Stdio::null());
    cmd
}

/// The DOM Chromium built from the page, serialised.
fn dom(profile: &Path, url: &str) -> String {
    let out = chrome(profile).args(["--dump-dom", url]).output().unwrap();
    assert!(out.status.success(), "chromium --dump-dom {url} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A screenshot of the page; returns its path.
fn screenshot(profile: &Path, url: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&png);
    let status = chrome(profile)
        .arg(format!("--screenshot={}", png.display()))
        .args(["--window-size=1280,1100", url])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "chromium --screenshot {url} failed");
    let bytes = std::fs::read(&png).unwrap();
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 5_000,
        "{}",
        png.display()
    );
    png
}

#[test]
fn every_page_renders_in_chromium_from_a_real_tuning() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    common::run_ok(&mut common::tune(d, "faulty/spec.toml"));
    let port = free_port();
    let server = serve(d, &port.to_string(), port, None);
    let profile = d.join("chromium-profile");
    let base = format!("http://127.0.0.1:{port}");

    let sessions = dom(&profile, &format!("{base}/"));
    assert!(sessions.contains("<table id=\"sessions\">"), "{sessions}");
    assert!(sessions.contains("data-session=\"1\""), "{sessions}");
    assert!(sessions.contains("aria-valuenow=\"100.0\""), "{sessions}");
    assert!(sessions.contains(">16/16<"), "{sessions}");

    let session = dom(&profile, &format!("{base}/session/1?shape=0"));
    // Two shapes, each with its winner; five failure kinds, each with an example.
    assert_eq!(
        session.matches("<tr class=\"winner\">").count(),
        2,
        "{session}"
    );
    for kind in [
        "build_failed",
        "crashed",
        "run_failed",
        "timeout",
        "wrong_answer",
    ] {
        assert!(
            session.contains(&format!("data-kind=\"{kind}\"")),
            "{kind}: {session}"
        );
    }
    assert!(session.contains("SIGSEGV"), "{session}");
    assert!(session.contains("<svg id=\"candidate-chart\""), "{session}");
    // The shape's history and each parameter's effect (WORK varies among the valid ones).
    assert!(session.contains("<svg id=\"best-so-far\""), "{session}");
    assert!(session.contains("data-param=\"WORK\""), "{session}");
    assert!(
        !session.contains("data-param=\"MODE\""),
        "one valid MODE: {session}"
    );
    assert_eq!(
        session.matches("<circle class=\"winner\"").count(),
        1,
        "{session}"
    );
    assert_eq!(
        session.matches("<circle class=\"candidate\"").count(),
        2,
        "{session}"
    );

    // The downloads: the tuned table as `shoal export` writes it, and the T4 spaces.
    let csv = get(port, "/session/1/tuned.csv", "");
    assert!(csv.starts_with("HTTP/1.1 200"), "{csv}");
    assert!(
        csv.contains("attachment; filename=\"session-1-tuned.csv\""),
        "{csv}"
    );
    assert!(csv.contains("\r\n\r\narch,cu_num,N,MODE,WORK,us"), "{csv}");
    let json = get(port, "/session/1/tuned.json", "");
    assert!(json.contains("\"best\""), "{json}");
    let t4 = get(port, "/session/1/t4.json", "");
    assert_eq!(
        t4.matches("\"results\"").count(),
        2,
        "one space per shape: {t4}"
    );
    let other = get(port, "/session/1/..%2f..%2fetc%2fpasswd", "");
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");

    // `/metrics` beside the pages: the store's jobs per state, every metric with HELP and TYPE.
    let metrics = get(port, "/metrics", "");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains("shoal_jobs{session=\"1\",state=\"evaluated\"} 6"),
        "{metrics}"
    );
    let types = metrics.lines().filter(|l| l.starts_with("# TYPE ")).count();
    let helps = metrics.lines().filter(|l| l.starts_with("# HELP ")).count();
    assert!(
        types > 5 && helps == types,
        "{types} TYPE, {helps} HELP: {metrics}"
    );
    let (_, body) = metrics.split_once("\r\n\r\n").unwrap();
    common::promtool_check_metrics(body);

    let fleet = dom(&profile, &format!("{base}/fleet"));
    // The tuning process reported itself and said it stopped.
    assert!(fleet.contains("data-state=\"stopped\""), "{fleet}");
    assert!(fleet.contains("class=\"device\""), "{fleet}");

    let missing = dom(&profile, &format!("{base}/session/99"));
    assert!(
        missing.contains("session 99 is not in the store"),
        "{missing}"
    );

    for (path, name) in [
        ("/", "sessions"),
        ("/session/1?shape=0", "session"),
        ("/fleet", "fleet"),
    ] {
        let png = screenshot(&profile, &format!("{base}{path}"), name);
        eprintln!("screenshot: {}", png.display());
    }
    stop(server);
}

/// `GET path` with optional extra header lines; returns the whole reply.
fn get(port: u16, path: &str, extra: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    reply
}

#[test]
fn off_loopback_the_dashboard_needs_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    common::run_ok(&mut common::session_init(d, "t.db"));
    let port = free_port();
    let addr = format!("0.0.0.0:{port}");
    // Without a token it does not start.
    let out = common::shoal(d)
        .args(["--db", "t.db", "serve", "--addr", &addr])
        .env_remove("SHOAL_WEB_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a token"));

    let token = "s3cret-token-0123456789";
    let server = serve(d, &addr, port, Some(token));
    assert!(get(port, "/", "").starts_with("HTTP/1.1 401"));
    assert!(get(
        port,
        "/fleet",
        "Authorization: Bearer wrong-token-000000\r\n"
    )
    .starts_with("HTTP/1.1 401"));
    assert!(
        get(port, "/", &format!("Authorization: Bearer {token}\r\n")).starts_with("HTTP/1.1 200")
    );
    // A first visit with ?token= gets a cookie and the page without the token in its address.
    let first = get(port, &format!("/session/1?token={token}"), "");
    assert!(first.starts_with("HTTP/1.1 303"), "{first}");
    assert!(first.contains("location: /session/1\r\n"), "{first}");
    assert!(
        first.contains(&format!("set-cookie: shoal_token={token}; HttpOnly")),
        "{first}"
    );
    assert!(get(
        port,
        "/session/1",
        &format!("Cookie: shoal_token={token}\r\n")
    )
    .starts_with("HTTP/1.1 200"));
    stop(server);
}
