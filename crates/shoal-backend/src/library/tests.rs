//! The Evaluator's side of library mode against stand-in runners: small shell scripts that speak
//! (or break) the protocol, run as real child processes. The real runner with real shared
//! objects is exercised end to end by `tests/library_mode.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use shoal_model::{FailureKind, Outcome, Params};

use super::{evaluate, RunnerSlot};
use crate::context::RunContext;
use crate::spec::{parse, TuningSpec};

struct Fixture {
    dir: tempfile::TempDir,
    spec: TuningSpec,
    artifact: PathBuf,
}

fn fixture(timeout_s: f64) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "name = \"t\"\n[build]\ncommand = \"cc -o {{out}} x.c\"\n[run]\nmode = \"library\"\n\
         timeout_s = {timeout_s}\nrepeat = 3\n[[shapes]]\nN = 1\n"
    );
    let spec = parse(&text, &dir.path().join("spec.toml")).unwrap();
    let artifact = dir.path().join("candidate.so");
    std::fs::write(&artifact, b"not really a library").unwrap();
    Fixture {
        dir,
        spec,
        artifact,
    }
}

/// A runner that is the shell `script`; every start appends a line to `<dir>/starts`.
fn slot(dir: &Path, script: &str) -> RunnerSlot {
    let starts = dir.join("starts");
    RunnerSlot::new(vec![
        "sh".into(),
        "-c".into(),
        format!("echo started >> '{}'; {script}", starts.display()),
    ])
}

fn starts(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("starts"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

async fn eval(f: &Fixture, slot: &RunnerSlot) -> Outcome {
    let ctx = RunContext {
        work_dir: f.dir.path(),
        cpu: None,
        gpu_index: None,
        runner: Some(slot),
    };
    evaluate(
        &f.spec,
        &f.artifact,
        &f.spec.shapes[0],
        &Params::new(),
        &ctx,
    )
    .await
}

fn failure(o: &Outcome) -> (FailureKind, &str) {
    match o {
        Outcome::Failed { kind, detail } => (*kind, detail.as_str()),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn one_runner_serves_many_candidates_and_its_samples_become_the_statistic() {
    let f = fixture(5.0);
    let s = slot(
        f.dir.path(),
        r#"while read line; do echo '{"status":"pass","samples_us":[3.0,1.0,2.0],"prepare_us":7}'; done"#,
    );
    for _ in 0..3 {
        match eval(&f, &s).await {
            Outcome::Measured(m) => {
                assert_eq!(m.time_us, 2.0, "the median of the runner's samples");
                assert_eq!(m.samples_us, vec![3.0, 1.0, 2.0]);
                assert_eq!(m.details.get("prepare_us"), Some("7"));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(starts(f.dir.path()), 1, "one runner for every candidate");
    s.stop().await;
}

#[tokio::test]
async fn a_runner_killed_by_a_signal_is_a_crash_and_is_replaced() {
    let f = fixture(5.0);
    let s = slot(
        f.dir.path(),
        r#"read line; echo 'the kernel wrote somewhere' >&2; kill -SEGV $$"#,
    );
    let o = eval(&f, &s).await;
    let (kind, detail) = failure(&o);
    assert_eq!(kind, FailureKind::Crashed, "{detail}");
    assert!(detail.contains("SIGSEGV"), "{detail}");
    assert!(detail.contains("the kernel wrote somewhere"), "{detail}");
    let (kind, _) = failure(&eval(&f, &s).await);
    assert_eq!(kind, FailureKind::Crashed);
    assert_eq!(
        starts(f.dir.path()),
        2,
        "a fresh runner for the next candidate"
    );
}

#[tokio::test]
async fn a_runner_that_does_not_answer_is_killed_at_the_timeout() {
    let f = fixture(0.5);
    let s = slot(f.dir.path(), "read line; sleep 30");
    let t0 = std::time::Instant::now();
    let o = eval(&f, &s).await;
    let (kind, detail) = failure(&o);
    assert_eq!(kind, FailureKind::Timeout, "{detail}");
    assert!(detail.contains("SIGKILL"), "{detail}");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "killed, not waited for"
    );
    let _ = eval(&f, &s).await;
    assert_eq!(starts(f.dir.path()), 2);
}

#[tokio::test]
async fn a_reported_device_fault_is_a_crash_and_the_runner_is_not_reused() {
    let f = fixture(5.0);
    let s = slot(
        f.dir.path(),
        r#"read line; echo '{"status":"fatal","message":"an illegal memory access was encountered"}'; exit 3"#,
    );
    let o = eval(&f, &s).await;
    let (kind, detail) = failure(&o);
    assert_eq!(kind, FailureKind::Crashed);
    assert!(
        detail.contains("an illegal memory access was encountered"),
        "{detail}"
    );
    let _ = eval(&f, &s).await;
    assert_eq!(starts(f.dir.path()), 2);
}

#[tokio::test]
async fn wrong_answers_and_garbled_replies_have_their_kinds() {
    let f = fixture(5.0);
    let wrong = slot(
        f.dir.path(),
        r#"while read line; do echo '{"status":"wrong_answer","message":"C[3][4] = 1, want 2"}'; done"#,
    );
    let o = eval(&f, &wrong).await;
    let (kind, detail) = failure(&o);
    assert_eq!(kind, FailureKind::WrongAnswer);
    assert!(detail.contains("C[3][4] = 1, want 2"), "{detail}");
    // A wrong answer does not break the runner: it stays.
    let _ = eval(&f, &wrong).await;
    assert_eq!(starts(f.dir.path()), 1);
    wrong.stop().await;

    let g = fixture(5.0);
    let garbled = slot(
        g.dir.path(),
        "read line; echo 'Segmentation fault?'; sleep 30",
    );
    let o = eval(&g, &garbled).await;
    let (kind, detail) = failure(&o);
    assert_eq!(kind, FailureKind::Infrastructure, "{detail}");
    assert!(detail.contains("not a reply"), "{detail}");
}

#[tokio::test]
async fn without_a_runner_slot_library_mode_is_an_infrastructure_failure() {
    let f = fixture(5.0);
    let ctx = RunContext {
        work_dir: f.dir.path(),
        cpu: None,
        gpu_index: None,
        runner: None,
    };
    let o = evaluate(
        &f.spec,
        &f.artifact,
        &f.spec.shapes[0],
        &Params::new(),
        &ctx,
    )
    .await;
    assert_eq!(failure(&o).0, FailureKind::Infrastructure);
}

#[tokio::test]
async fn a_missing_runner_program_is_an_infrastructure_failure() {
    let f = fixture(5.0);
    let s = RunnerSlot::new(vec!["/nonexistent/shoal-runner".into()]);
    let o = eval(&f, &s).await;
    let (kind, detail) = failure(&o);
    assert_eq!(kind, FailureKind::Infrastructure);
    assert!(detail.contains("cannot start the runner"), "{detail}");
}

#[tokio::test]
async fn a_call_cancelled_midway_does_not_leave_a_stale_reply_for_the_next() {
    let f = fixture(5.0);
    // A runner that answers every request, slowly.
    let s = slot(
        f.dir.path(),
        r#"while read line; do sleep 0.5; echo '{"status":"pass","samples_us":[1.0]}'; done"#,
    );
    // The Evaluator is stopped while the runner works: the future is dropped mid-call.
    let cancelled = tokio::time::timeout(Duration::from_millis(100), eval(&f, &s)).await;
    assert!(cancelled.is_err(), "cancelled before the reply");
    // The next candidate must not read the first one's late reply: a fresh runner answers it.
    assert!(matches!(eval(&f, &s).await, Outcome::Measured(_)));
    assert_eq!(
        starts(f.dir.path()),
        2,
        "the runner in the middle of a call was replaced"
    );
    s.stop().await;
}
