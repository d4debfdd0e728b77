//! Library mode end to end with the real `shoal` binary and a real runner process: candidates
//! are shared objects loaded by one runner per device. One that segfaults the runner, one that
//! hangs it, one that reports a device fault, a wrong answer and a build failure are each
//! recorded as such, the runner is restarted, and the rest of the space is tuned. Each problem
//! is prepared once per runner, not once per candidate.

mod common;

use shoal_model::{FailureKind, JobState, Outcome};

#[test]
fn faults_in_library_mode_are_recorded_and_the_runner_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::run_ok(common::tune(dir.path(), "faulty-lib/spec.toml").args(["-j", "2"]));
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
    assert_eq!(kind_of("4"), vec![Some(FailureKind::Crashed); 2]);
    assert_eq!(kind_of("5"), vec![Some(FailureKind::BuildFailed); 2]);
    let error_of = |mode: &str| -> String {
        results
            .iter()
            .find(|r| r.compile_params.get("MODE") == Some(mode))
            .and_then(|r| r.last_error.clone())
            .unwrap_or_default()
    };
    assert!(error_of("1").contains("SIGSEGV"), "{}", error_of("1"));
    assert!(error_of("2").contains("timeout"), "{}", error_of("2"));
    assert!(error_of("3").contains("expected"), "{}", error_of("3"));
    assert!(
        error_of("4").contains("illegal memory access"),
        "{}",
        error_of("4")
    );

    let ok: Vec<_> = results
        .iter()
        .filter(|r| r.compile_params.get("MODE") == Some("0"))
        .collect();
    assert_eq!(ok.len(), 6);
    for r in &ok {
        assert_eq!(r.state, JobState::Evaluated, "{r:?}");
        let Some(Outcome::Measured(m)) = &r.outcome else {
            panic!("{r:?}")
        };
        assert_eq!(m.samples_us.len(), 3, "repeat = 3: {m:?}");
    }
    let csv = std::fs::read_to_string(dir.path().join("out/tuned.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    for line in &lines[1..] {
        // The cheapest working variant (MODE 0, WORK 1) wins on both shapes.
        assert!(line.contains(",0,1,"), "{line}");
    }
    assert!(stdout.contains("crashed:2"), "{stdout}");
}

#[test]
fn each_problem_is_prepared_once_per_runner() {
    let dir = tempfile::tempdir().unwrap();
    common::run_ok(common::tune(dir.path(), "faulty-lib/good.toml").args(["-j", "2"]));
    let results = common::final_results(&dir.path().join("t.db"));
    assert_eq!(results.len(), 6, "3 builds x 2 shapes");
    let mut prepared = 0;
    let mut loaded = 0;
    for r in &results {
        let Some(Outcome::Measured(m)) = &r.outcome else {
            panic!("every candidate works: {r:?}")
        };
        prepared += m.details.get("prepare_us").is_some() as usize;
        loaded += m.details.get("load_us").is_some() as usize;
    }
    // One runner, never restarted: two problems prepared once each, while every candidate's
    // library was loaded (a candidate is timed on both shapes back to back, so at least once per
    // build).
    assert_eq!(prepared, 2, "{results:#?}");
    assert!((3..=6).contains(&loaded), "loaded {loaded} times");
}
