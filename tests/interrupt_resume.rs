//! Interrupted tunings resume and redo nothing that finished: after SIGKILL midway, and after a
//! Ctrl-C (SIGINT), the same command finishes the work, and the store holds exactly one final
//! result per candidate.

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

fn start(dir: &Path) -> Child {
    common::tune(dir, "sleepy/spec.toml")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until at least `n` result rows are committed.
fn wait_for_results(db: &Path, n: usize, child: &mut Child) {
    let t0 = Instant::now();
    loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "tuning ended too early"
        );
        if db.exists() {
            if let Ok(conn) = rusqlite::Connection::open(db) {
                let count: Result<i64, _> =
                    conn.query_row("SELECT COUNT(*) FROM result", [], |r| r.get(0));
                if count.map(|c| c as usize >= n).unwrap_or(false) {
                    return;
                }
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `shoal workers --json --all` on the test's store.
fn workers(dir: &Path) -> Vec<serde_json::Value> {
    let out =
        common::run_ok(common::shoal(dir).args(["--db", "t.db", "workers", "--json", "--all"]));
    serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap()
}

fn finish_and_check(dir: &Path) {
    let out = common::run_ok(&mut common::tune(dir, "sleepy/spec.toml"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("resumed"));
    let per_job = common::result_rows_per_job(&dir.join("t.db"));
    assert_eq!(per_job.len(), 60);
    for (job, n) in &per_job {
        assert_eq!(*n, 1, "job {job} has {n} results");
    }
    let results = common::final_results(&dir.join("t.db"));
    assert!(results
        .iter()
        .all(|r| r.state == shoal_model::JobState::Evaluated));
    let csv = std::fs::read_to_string(dir.join("out/tuned.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv.lines().skip(1).all(|l| l.contains(",0,")), "{csv}");
}

#[test]
fn sigkill_midway_then_rerun_finishes_with_one_result_per_candidate() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = start(dir.path());
    wait_for_results(&dir.path().join("t.db"), 10, &mut child);
    // The tuning process reports itself, live, with its roles and device.
    let listed = workers(dir.path());
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["pid"], child.id(), "{listed:?}");
    assert_eq!(listed[0]["state"], "live", "{listed:?}");
    assert!(listed[0]["roles"]
        .as_array()
        .unwrap()
        .contains(&"eval".into()));
    assert_eq!(listed[0]["devices"][0]["id"], "cpu", "{listed:?}");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = common::result_rows_per_job(&dir.path().join("t.db"));
    let done_before: Vec<i64> = before
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(j, _)| *j)
        .collect();
    assert!(done_before.len() >= 10 && done_before.len() < 60);
    finish_and_check(dir.path());
}

#[test]
fn ctrl_c_stops_cleanly_and_rerun_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = start(dir.path());
    wait_for_results(&dir.path().join("t.db"), 5, &mut child);
    let t0 = Instant::now();
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "a clean stop must not wait for the whole tuning"
    );
    assert_eq!(status.code(), Some(130), "{status:?}");
    // Nothing is left in flight: in-flight jobs were handed back before exit.
    let conn = rusqlite::Connection::open(dir.path().join("t.db")).unwrap();
    let in_flight: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM job WHERE state IN ('compile_queued','compiling','eval_queued','evaluating')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(in_flight, 0);
    drop(conn);
    // It said it stopped, and holds nothing.
    let listed = workers(dir.path());
    assert_eq!(listed[0]["state"], "stopped", "{listed:?}");
    assert_eq!(listed[0]["jobs"], serde_json::json!([]), "{listed:?}");
    finish_and_check(dir.path());
}
