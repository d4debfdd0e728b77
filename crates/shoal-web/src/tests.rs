//! The pages as strings: what each shows, and that what comes from users is escaped.

use super::*;
use shoal_model::{Backend, DevicePresence, NewSession, Params, SessionId};

fn session(id: i64) -> Session {
    Session {
        id: SessionId(id),
        created_ms: 0,
        info: NewSession {
            reason: "r".into(),
            arch: "x86_64".into(),
            num_cu: 2,
            backend: Backend::Exec,
            spec: String::new(),
            spec_path: "examples/<gemm>/spec.toml".into(),
            library_version: String::new(),
            driver_version: String::new(),
            max_retries: 3,
        },
    }
}

fn params(pairs: &[(&str, &str)]) -> Params {
    let mut p = Params::new();
    for (n, v) in pairs {
        p.push(*n, *v);
    }
    p
}

#[test]
fn sessions_show_progress_and_escape_what_users_wrote() {
    let html = sessions_page(&[SessionSummary {
        session: session(3),
        progress: Progress::new(25, 100, &[1_000, 2_000, 3_000], 4_000),
        failed: 2,
    }]);
    assert!(html.contains("aria-valuenow=\"25.0\""), "{html}");
    assert!(html.contains("href=\"/session/3\""), "{html}");
    assert!(html.contains("examples/&lt;gemm&gt;/spec.toml"), "{html}");
    assert!(!html.contains("<gemm>"));
}

#[test]
fn a_session_shows_failures_winners_and_the_chart_of_one_shape() {
    let failures = vec![shoal_export::failures::FailureGroup {
        kind: "build_failed".into(),
        error: "kernel.c:3:1: error: expected ';' before '<' token".into(),
        headline: "build exited with code 1; stderr:".into(),
        output: vec!["kernel.c:3:1: error: expected ';' before '<' token".into()],
        candidates: (0..12)
            .map(|i| shoal_export::failures::FailedCandidate {
                job: i,
                shape: "M=64".into(),
                params: format!("BM={}", 16 << i),
            })
            .collect(),
    }];
    let row = TunedRow {
        arch: "x86_64".into(),
        num_cu: 2,
        config: shoal_model::ConfigId(1),
        shape: params(&[("M", "64")]),
        solver: "s".into(),
        best: Some(params(&[("BM", "32")])),
        time_us: Some(10.0),
        spread_pct: Some(2.0),
        gflops: None,
        speedup: Some(3.0),
        slowest_valid_us: Some(30.0),
        candidates: 5,
        valid: 3,
        failures: [("crashed".to_string(), 2)].into_iter().collect(),
        pending: 0,
        runner_up: Some(params(&[("BM", "64")])),
        runner_up_us: Some(10.1),
        tie: true,
    };
    let times = chart::ShapeTimes {
        candidates: vec![
            ("BM=32".into(), 10.0),
            ("BM=64".into(), 10.1),
            ("BM=16".into(), 30.0),
        ],
        winner_runs: vec![9.9, 10.0, 10.2],
        failed: 2,
    };
    let html = session_page(&SessionView {
        session: &session(1),
        progress: &Progress::new(5, 5, &[], 0),
        failures: &failures,
        rows: &[row],
        chart: Some((0, times)),
    });
    assert!(
        html.contains(
            "<code class=\"error\">kernel.c:3:1: error: expected &#39;;&#39; before &#39;&lt;&#39; \
             token</code>"
        ),
        "{html}"
    );
    assert!(
        html.contains("build exited with code 1; stderr:\nkernel.c:3:1"),
        "{html}"
    );
    assert!(html.contains("<code>BM=16</code>"), "{html}");
    assert_eq!(
        html.matches("<td><code>BM=").count(),
        10,
        "ten listed: {html}"
    );
    assert!(html.contains("… and 2 more"), "{html}");
    // Finished: no reload; the three downloads are offered.
    assert!(!html.contains("http-equiv=\"refresh\""), "{html}");
    for file in ["tuned.csv", "tuned.json", "t4.json"] {
        assert!(
            html.contains(&format!("href=\"/session/1/{file}\"")),
            "{html}"
        );
    }
    let running = session_page(&SessionView {
        session: &session(1),
        progress: &Progress::new(2, 5, &[], 0),
        failures: &[],
        rows: &[],
        chart: None,
    });
    assert!(
        running.contains("<meta http-equiv=\"refresh\" content=\"5\">"),
        "a running session reloads itself: {running}"
    );
    assert!(html.contains("class=\"tie\""), "{html}");
    assert_eq!(
        html.matches("<circle class=\"winner\"").count(),
        1,
        "{html}"
    );
    assert_eq!(
        html.matches("<circle class=\"candidate\"").count(),
        2,
        "{html}"
    );
    assert!(html.contains("<rect class=\"spread\""), "{html}");
    assert!(html.contains("<svg id=\"best-so-far\""), "{html}");
    assert!(
        html.contains("<svg class=\"effect\" data-param=\"BM\""),
        "{html}"
    );
    assert!(html.contains("(2 failed, not drawn)"), "{html}");
    assert!(html.contains(">done<") || html.contains("done ("), "{html}");
}

#[test]
fn the_fleet_shows_each_worker_and_its_devices() {
    let w = WorkerPresence {
        id: "h:1:0".into(),
        host: "gpu-a".into(),
        pid: 1,
        version: "0.1.0".into(),
        roles: vec!["eval".into()],
        devices: vec![DevicePresence {
            id: "nvidia0".into(),
            name: "H100".into(),
            arch: "sm_90".into(),
            units: 132,
            healthy: false,
            detail: "95 °C".into(),
        }],
        jobs: vec![shoal_model::JobId(4)],
        heartbeat_ms: 5_000,
        started_ms: 0,
        last_seen_ms: 10_000,
        stopped_ms: None,
    };
    let html = fleet_page(&[(w, Liveness::Stale)], 40_000);
    assert!(
        html.contains("1 live, 0 stale") || html.contains("0 live, 1 stale"),
        "{html}"
    );
    assert!(html.contains("data-state=\"stale\""), "{html}");
    assert!(html.contains("unhealthy"), "{html}");
    assert!(html.contains("30s ago"), "{html}");
}
