//! The replay backend in a real tuning: `shoal tune` of a spec that names a recorded space (T4
//! format, written here with a known optimum and recorded failures) answers every candidate
//! from the recording. Exhaustively, the winner is the recorded optimum and each recorded
//! failure comes back as its kind; with a search, exactly the budget is tried; and the
//! recording is what `shoal export --format t4` writes back.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use shoal_model::{FailureKind, JobState, Outcome};

fn write_spec(dir: &Path, search: &str) {
    common::write_replay_space(&dir.join("space.json"));
    std::fs::write(
        dir.join("spec.toml"),
        format!("name = \"replayed\"\nbackend = \"replay\"\nspace = \"space.json\"\n{search}"),
    )
    .unwrap();
}

fn tune(dir: &Path) {
    common::run_ok(common::shoal(dir).args(["tune", "spec.toml", "--db", "t.db", "--out", "out"]));
}

#[test]
fn an_exhaustive_replay_finds_the_recorded_optimum_and_failures() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_spec(d, "");
    tune(d);
    let results = common::final_results(&d.join("t.db"));
    assert_eq!(
        results.len(),
        119,
        "every recorded configuration, and only those"
    );
    let mut kinds = BTreeMap::new();
    let mut best = (f64::MAX, String::new());
    for r in &results {
        match (&r.outcome, r.failure) {
            (Some(Outcome::Measured(m)), _) => {
                assert_eq!(m.samples_us.len(), 3, "the recorded runs");
                if m.time_us < best.0 {
                    best = (m.time_us, r.compile_params.key());
                }
            }
            (_, Some(kind)) => *kinds.entry(kind).or_insert(0) += 1,
            other => panic!("job {:?} ended {:?} with {other:?}", r.job, r.state),
        }
    }
    assert_eq!(best, (1000.0, "A=7,B=3".to_string()));
    assert_eq!(
        kinds,
        BTreeMap::from([(FailureKind::BuildFailed, 10), (FailureKind::RunFailed, 1)])
    );
    let csv = std::fs::read_to_string(d.join("out/tuned.csv")).unwrap();
    let winner = csv.lines().nth(1).unwrap();
    assert!(winner.contains(",7,3,1000.000"), "{csv}");

    // Written back as a recorded space, the session is the recording's correct part again.
    common::run_ok(common::shoal(d).args([
        "export",
        "--db",
        "t.db",
        "--session",
        "1",
        "--format",
        "t4",
        "--out",
        "t4",
    ]));
    let written: Vec<_> = std::fs::read_dir(d.join("t4"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let again = shoal_backend::replay::t4::read(&written[0]).unwrap();
    let valid: Vec<_> = again.entries.iter().filter(|e| e.valid).collect();
    assert_eq!(valid.len(), 108);
    let best = valid
        .iter()
        .map(|e| e.time_ms.unwrap())
        .fold(f64::MAX, f64::min);
    assert!((best - 1.0).abs() < 1e-9, "{best}");
}

#[test]
fn a_searched_replay_tries_exactly_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_spec(
        d,
        "[search]\nstrategy = \"forest\"\nbudget = 30\nseed = 7\n",
    );
    tune(d);
    let results = common::final_results(&d.join("t.db"));
    let tried = results
        .iter()
        .filter(|r| matches!(r.state, JobState::Evaluated | JobState::Errored))
        .count();
    let skipped = results
        .iter()
        .filter(|r| r.state == JobState::Skipped)
        .count();
    assert_eq!((tried, skipped), (30, 89));
}

/// The best time a session measured, and how many it tried.
fn best_of(db: &Path, session: i64) -> (f64, usize) {
    let results = common::final_results_of(db, Some(shoal_model::SessionId(session)));
    let tried = results
        .iter()
        .filter(|r| matches!(r.state, JobState::Evaluated | JobState::Errored))
        .count();
    let best = results
        .iter()
        .filter_map(|r| match &r.outcome {
            Some(Outcome::Measured(m)) => Some(m.time_us),
            _ => None,
        })
        .fold(f64::MAX, f64::min);
    (best, tried)
}

#[test]
fn a_warm_started_search_begins_with_the_priors_best() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Six of 119: cold, seed 7 draws them at random and misses the optimum (1000 us).
    write_spec(d, "[search]\nstrategy = \"forest\"\nbudget = 6\nseed = 7\n");
    tune(d);
    let (cold, tried) = best_of(&d.join("t.db"), 1);
    assert_eq!(tried, 6);
    assert!(
        cold > 1000.0,
        "the cold search found the optimum: pick another seed"
    );
    // The recording itself as the prior: the initial design starts with its fastest.
    let out = common::run_ok(common::shoal(d).args([
        "tune",
        "spec.toml",
        "--db",
        "w.db",
        "--out",
        "out",
        "--prior",
        "space.json",
    ]));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("starting from the results of"), "{said}");
    assert_eq!(best_of(&d.join("w.db"), 1), (1000.0, 6));

    // A session of the same store as the prior: an exhaustive tuning, then a searched one of
    // another spec (another session) that names it.
    write_spec(d, "");
    tune(d);
    std::fs::write(
        d.join("warm.toml"),
        "name = \"warm\"\nbackend = \"replay\"\nspace = \"space.json\"\n\
         [search]\nstrategy = \"forest\"\nbudget = 6\nseed = 7\nprior = \"session:2\"\n",
    )
    .unwrap();
    common::run_ok(common::shoal(d).args(["tune", "warm.toml", "--db", "t.db", "--out", "o2"]));
    assert_eq!(best_of(&d.join("t.db"), 3), (1000.0, 6));
}

#[test]
fn a_prior_that_is_not_there_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_spec(
        d,
        "[search]\nstrategy = \"forest\"\nbudget = 6\nprior = \"earlier.T4.json\"\n",
    );
    let out = common::shoal(d)
        .args(["tune", "spec.toml", "--db", "t.db"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("search.prior") && err.contains("earlier.T4.json"),
        "{err}"
    );
    assert!(!d.join("t.db").exists(), "nothing written");
    // --prior on a spec without [search] says what is missing.
    write_spec(d, "");
    let out = common::shoal(d)
        .args(["tune", "spec.toml", "--db", "t.db", "--prior", "space.json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--prior") && err.contains("[search]"), "{err}");
}
