//! A budgeted search in a real tuning: `[search] strategy = "forest", budget = 24` over 192
//! candidates per shape (`tests/fixtures/searched`, whose best candidate is known). The
//! Scheduler evaluates exactly the budget per shape, skips the rest, never evaluates a
//! candidate twice, and after a SIGKILL midway the same command goes on with the same search
//! to the same budget.

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use shoal_model::{FinalResult, JobState, Outcome};

const BUDGET: usize = 24;
const CANDIDATES: usize = 192;

/// Per shape: (evaluated or errored, skipped, anything else) and the best time found.
fn per_shape(results: &[FinalResult]) -> BTreeMap<i64, (usize, usize, usize, f64)> {
    let mut shapes = BTreeMap::new();
    for r in results {
        let e = shapes.entry(r.config.0).or_insert((0, 0, 0, f64::MAX));
        match (r.state, &r.outcome) {
            (JobState::Evaluated, Some(Outcome::Measured(m))) => {
                e.0 += 1;
                e.3 = e.3.min(m.time_us);
            }
            (JobState::Evaluated | JobState::Errored, _) => e.0 += 1,
            (JobState::Skipped, _) => e.1 += 1,
            _ => e.2 += 1,
        }
    }
    shapes
}

fn check_finished(dir: &std::path::Path) {
    let results = common::final_results(&dir.join("t.db"));
    let shapes = per_shape(&results);
    assert_eq!(shapes.len(), 2);
    for (config, (tried, skipped, other, best)) in shapes {
        assert_eq!(
            (tried, skipped, other),
            (BUDGET, CANDIDATES - BUDGET, 0),
            "shape {config}: the budget tried, the rest skipped"
        );
        // Near the floor (100): a sanity check that outcomes reach the search. (Which strategy
        // is better is for `shoal-bench search` to show; 24 draws at random come this close
        // about two times in three.)
        assert!(best <= 110.0, "shape {config}: best found {best}");
    }
    for (job, n) in common::result_rows_per_job(&dir.join("t.db")) {
        assert!(n <= 1, "job {job} was evaluated {n} times");
    }
    let csv = std::fs::read_to_string(dir.join("out/tuned.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
}

#[test]
fn a_budgeted_search_tries_its_budget_and_resumes_after_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut child = common::tune(d, "searched/spec.toml")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once some of the slow shape's candidates are measured.
    let t0 = Instant::now();
    loop {
        assert!(child.try_wait().unwrap().is_none(), "tuning ended early");
        let done = rusqlite::Connection::open(d.join("t.db"))
            .and_then(|c| c.query_row("SELECT COUNT(*) FROM result", [], |r| r.get::<_, i64>(0)))
            .unwrap_or(0);
        if done >= 30 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = per_shape(&common::final_results(&d.join("t.db")));
    assert!(
        before.values().any(|s| s.0 < BUDGET),
        "killed before the end: {before:?}"
    );

    let out = common::run_ok(&mut common::tune(d, "searched/spec.toml"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("resumed"));
    check_finished(d);
}
