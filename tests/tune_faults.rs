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

    // `status` groups the failures by kind and error, each with the tool's own output.
    let status = common::run_ok(common::shoal(dir.path()).args(["--db", "t.db", "status"]));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("failures: 10 candidates"), "{status}");
    assert!(
        status.contains("progress: 16/16 done (100.0 %), finished"),
        "{status}"
    );
    let lines: Vec<&str> = status.lines().collect();
    let crashed = lines
        .iter()
        .position(|l| l.trim_start().starts_with("crashed × 2"))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(
        lines[crashed..crashed + 3].join("\n").contains("SIGSEGV"),
        "{status}"
    );
    // The build failure shows the compiler's own line, not only Shoal's.
    assert!(
        status.contains("error: #error \"this candidate does not compile\""),
        "{status}"
    );
    assert!(status.contains("candidate MODE=5,WORK=1"), "{status}");
    let json = common::run_ok(common::shoal(dir.path()).args(["--db", "t.db", "status", "--json"]));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["states"]["evaluated"], 6, "{json}");
    assert_eq!(json["progress"]["done"], 16, "{json}");
    // The tuning process reported itself and said it stopped: no worker is live now.
    assert_eq!(json["fleet"]["live"], 0, "{json}");
    let mut kinds: std::collections::BTreeMap<&str, u64> = Default::default();
    for f in json["failures"].as_array().unwrap() {
        *kinds.entry(f["kind"].as_str().unwrap()).or_default() += f["count"].as_u64().unwrap();
        assert_eq!(
            f["candidates"].as_array().unwrap().len() as u64,
            f["count"].as_u64().unwrap(),
            "{json}"
        );
    }
    for kind in [
        "build_failed",
        "crashed",
        "run_failed",
        "timeout",
        "wrong_answer",
    ] {
        assert_eq!(kinds.get(kind), Some(&2), "{kind}: {json}");
    }
}

/// A spec whose every build fails: `tune` exits 3 and says why (the compiler's line and the
/// candidates it hit), and `status` and `shoal failures` show the same.
#[test]
fn a_spec_whose_every_build_fails_exits_3_with_the_compilers_message() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        common::fixture("faulty/kernel.c"),
        dir.path().join("kernel.c"),
    )
    .unwrap();
    let spec = std::fs::read_to_string(common::fixture("faulty/spec.toml"))
        .unwrap()
        .replace("MODE = [0, 1, 2, 3, 4, 5]", "MODE = [5]")
        .replace("WORK = [1, 4, 16]", "WORK = [1, 4]")
        .replace("rules = [\"MODE == 0 || WORK == 1\"]", "");
    std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
    let out = common::shoal(dir.path())
        .args(["tune", "spec.toml", "--db", "t.db", "--out", "out"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("2 of 2 shapes have no valid candidate"),
        "{stderr}"
    );
    assert!(
        stderr.contains("4 candidates failed, 1 kind of error"),
        "{stderr}"
    );
    assert!(
        stderr.contains("build_failed × 4: ")
            && stderr.contains("error: #error \"this candidate does not compile\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("candidate MODE=5,WORK=1 (shape N=20000"),
        "{stderr}"
    );

    let status = common::run_ok(common::shoal(dir.path()).args(["--db", "t.db", "status"]));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("this candidate does not compile"),
        "{status}"
    );
    assert!(status.contains("candidate MODE=5,WORK=4"), "{status}");

    let listed =
        common::run_ok(common::shoal(dir.path()).args(["--db", "t.db", "failures", "--json"]));
    let groups: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let groups = groups.as_array().unwrap();
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0]["kind"], "build_failed");
    let params: Vec<&str> = groups[0]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["params"].as_str().unwrap())
        .collect();
    assert_eq!(params.len(), 4, "{params:?}");
    assert!(
        params.iter().all(|p| p.starts_with("MODE=5,WORK=")),
        "{params:?}"
    );
}
