//! Candidates that really segfault, really hang past the timeout, really print a wrong answer,
//! exit non-zero or fail to build are each recorded as such, and the rest of the tuning
//! completes with a tuned table.

mod common;

use shoal_model::{FailureKind, JobState, Outcome};

#[test]
fn every_fault_is_recorded_with_its_kind_and_tuning_completes() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::run_ok(common::tune(dir.path(), "faulty/spec.toml").args(["-j", "2"]));
    let stdout = String::from_utf8_lossy(&out.stdout);

    let results = common::final_results(&dir.path().join("t.db"));
    assert_eq!(results.len(), 16, "8 builds x 2 shapes");
    let kind_of = |mode: &str| -> Vec<Option<FailureKind>> {
        results
            .iter()
            .filter(|r| r.compile_params.get("MODE") == Some(mode))
            .map(|r| r.failure)
            .collect()
    };
    assert_eq!(kind_of("1"), vec![Some(FailureKind::Crashed); 2]);
    assert_eq!(kind_of("2"), vec![Some(FailureKind::Timeout); 2]);
    assert_eq!(kind_of("3"), vec![Some(FailureKind::WrongAnswer); 2]);
    assert_eq!(kind_of("4"), vec![Some(FailureKind::RunFailed); 2]);
    assert_eq!(kind_of("5"), vec![Some(FailureKind::BuildFailed); 2]);
    for r in results
        .iter()
        .filter(|r| r.compile_params.get("MODE") != Some("0"))
    {
        assert_eq!(r.state, JobState::Errored);
        assert!(matches!(r.outcome, Some(Outcome::Failed { .. })), "{r:?}");
    }
    let crashed = results
        .iter()
        .find(|r| r.failure == Some(FailureKind::Crashed))
        .unwrap();
    assert!(
        crashed
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("SIGSEGV"),
        "{crashed:?}"
    );
    // The working candidates were all measured, and the table names a winner per shape.
    let ok: Vec<_> = results
        .iter()
        .filter(|r| r.compile_params.get("MODE") == Some("0"))
        .collect();
    assert_eq!(ok.len(), 6);
    assert!(
        ok.iter()
            .all(|r| r.state == JobState::Evaluated
                && matches!(r.outcome, Some(Outcome::Measured(_))))
    );
    let csv = std::fs::read_to_string(dir.path().join("out/tuned.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(lines[0].starts_with("arch,cu_num,N,MODE,WORK,us"), "{csv}");
    for line in &lines[1..] {
        // The cheapest working variant wins on both shapes.
        assert!(line.contains(",0,1,"), "{line}");
    }
    assert!(stdout.contains("crashed:1"), "{stdout}");

    // A second run finds everything done and redoes nothing.
    let again = common::run_ok(&mut common::tune(dir.path(), "faulty/spec.toml"));
    assert!(String::from_utf8_lossy(&again.stderr).contains("resumed"));
    assert!(common::result_rows_per_job(&dir.path().join("t.db"))
        .iter()
        .all(|(_, n)| *n == 1));

    // `status` counts the failures by kind, each with one of its messages.
    let status = common::run_ok(common::shoal(dir.path()).args(["--db", "t.db", "status"]));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("failures by kind"), "{status}");
    assert!(
        status.contains("progress: 16/16 done (100.0 %), finished"),
        "{status}"
    );
    let crashed_line = status
        .lines()
        .find(|l| l.trim_start().starts_with("crashed"))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(crashed_line.contains("SIGSEGV"), "{status}");
    let json = common::run_ok(common::shoal(dir.path()).args(["--db", "t.db", "status", "--json"]));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["states"]["evaluated"], 6, "{json}");
    assert_eq!(json["progress"]["done"], 16, "{json}");
    // The tuning process reported itself and said it stopped: no worker is live now.
    assert_eq!(json["fleet"]["live"], 0, "{json}");
    let kinds: Vec<(&str, u64)> = json["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["kind"].as_str().unwrap(), f["count"].as_u64().unwrap()))
        .collect();
    for kind in [
        "build_failed",
        "crashed",
        "run_failed",
        "timeout",
        "wrong_answer",
    ] {
        assert!(kinds.contains(&(kind, 2)), "{kind}: {json}");
    }
}
