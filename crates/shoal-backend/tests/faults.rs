//! Real programs that really segfault, hang, print a wrong answer, exit non-zero or fail to
//! build: each is recorded with its kind while the rest of the tuning completes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use shoal_backend::exec::{self, ArtifactCache};
use shoal_backend::spec::{self, TuningSpec};
use shoal_model::{FailureKind, Outcome, Params};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .join("spec.toml")
}

/// The first CPU this process may run on (CPU 0 may be outside a container's set).
fn first_cpu() -> usize {
    // SAFETY: sched_getaffinity fills the zeroed set; CPU_ISSET only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &set))
            .unwrap_or(0)
    }
}

fn mode(value: &str) -> Params {
    let mut p = Params::new();
    p.push("MODE", value);
    p
}

fn kind_of(outcome: &Outcome) -> Option<FailureKind> {
    match outcome {
        Outcome::Measured(_) => None,
        Outcome::Failed { kind, .. } => Some(*kind),
    }
}

fn detail(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Measured(_) => "",
        Outcome::Failed { detail, .. } => detail,
    }
}

/// Tunes the whole spec the way the actors do: build each compile set once, install it,
/// evaluate every candidate of every shape that uses it. Returns (shape, compile, run) → outcome.
async fn tune(spec: &TuningSpec, work: &Path) -> BTreeMap<(String, String, String), Outcome> {
    let cache = ArtifactCache::new(work.join("cache")).unwrap();
    let mut outcomes = BTreeMap::new();
    for compile in spec.compile_sets().unwrap() {
        let built = exec::build(spec, &compile, &work.join("build")).await;
        for shape in &spec.shapes {
            for (c, run) in spec.candidates(shape).unwrap() {
                if c != compile {
                    continue;
                }
                let outcome = match &built {
                    Err((kind, detail)) => Outcome::failed(*kind, detail.clone()),
                    Ok(artifact) => {
                        let path = cache.install(&artifact.hash, &artifact.packed).unwrap();
                        exec::evaluate(spec, &path, shape, &compile, &run, None, None).await
                    }
                };
                outcomes.insert((shape.key(), compile.key(), run.key()), outcome);
            }
        }
    }
    outcomes
}

#[tokio::test]
async fn every_fault_is_recorded_and_the_tuning_completes() {
    let spec = spec::load(&fixture("faults")).unwrap();
    assert!(spec.warnings.is_empty(), "{:?}", spec.warnings);
    assert_eq!(spec.compile_sets().unwrap().len(), 6);
    let work = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let outcomes = tune(&spec, work.path()).await;
    // 2 shapes * 2 ITERS * 5 modes + the one hanging candidate the rule allows.
    assert_eq!(outcomes.len(), 21);
    assert!(started.elapsed() < Duration::from_secs(60));

    for ((shape, compile, run), outcome) in &outcomes {
        let what = format!("{shape} {compile} {run}: {outcome:?}");
        match compile.as_str() {
            "MODE=0" => match outcome {
                Outcome::Measured(m) => {
                    assert_eq!(m.samples_us.len(), 3, "{what}");
                    assert!(m.time_us >= 0.0 && m.time_us < 1e6, "{what}");
                    let mut s = m.samples_us.clone();
                    s.sort_by(f64::total_cmp);
                    assert_eq!(m.time_us, s[1], "median of 3: {what}");
                    assert_eq!(m.workspace, 0);
                }
                _ => panic!("{what}"),
            },
            "MODE=1" => {
                assert_eq!(kind_of(outcome), Some(FailureKind::Crashed), "{what}");
                assert!(detail(outcome).contains("SIGSEGV"), "{what}");
            }
            "MODE=2" => {
                assert_eq!((shape.as_str(), run.as_str()), ("N=100", "ITERS=1"));
                assert_eq!(kind_of(outcome), Some(FailureKind::Timeout), "{what}");
                assert!(detail(outcome).contains("warm-up run 1"), "{what}");
            }
            "MODE=3" => {
                assert_eq!(kind_of(outcome), Some(FailureKind::WrongAnswer), "{what}");
                assert!(detail(outcome).contains("verdict=FAIL (expected"), "{what}");
            }
            "MODE=4" => {
                assert_eq!(kind_of(outcome), Some(FailureKind::RunFailed), "{what}");
                assert!(detail(outcome).contains("code 3"), "{what}");
                assert!(
                    detail(outcome).contains("cannot allocate workspace"),
                    "{what}"
                );
            }
            "MODE=5" => {
                assert_eq!(kind_of(outcome), Some(FailureKind::BuildFailed), "{what}");
                assert!(detail(outcome).contains("MODE 5 does not build"), "{what}");
            }
            other => panic!("unexpected compile set {other}"),
        }
    }

    // After all of that, the good candidate still measures, pinned to a CPU this time.
    let ok = exec::build(&spec, &mode("0"), &work.path().join("build"))
        .await
        .unwrap();
    let cache = ArtifactCache::new(work.path().join("cache")).unwrap();
    let path = cache.path(&ok.hash).expect("installed during the tuning");
    let mut run = Params::new();
    run.push("ITERS", "2");
    let outcome = exec::evaluate(
        &spec,
        &path,
        &spec.shapes[1],
        &mode("0"),
        &run,
        Some(first_cpu()),
        None,
    )
    .await;
    assert!(matches!(outcome, Outcome::Measured(_)), "{outcome:?}");
    // The build directories were all cleaned up.
    assert_eq!(
        std::fs::read_dir(work.path().join("build"))
            .unwrap()
            .count(),
        0
    );
}

#[tokio::test]
async fn build_faults_are_recorded_by_kind() {
    let spec = spec::load(&fixture("scripts")).unwrap();
    let work = tempfile::tempdir().unwrap();
    let build = |m: &'static str| {
        let spec = &spec;
        let dir = work.path().join("build");
        async move { exec::build(spec, &mode(m), &dir).await }
    };

    let started = Instant::now();
    let (kind, detail) = build("slow").await.unwrap_err();
    assert_eq!(kind, FailureKind::BuildTimeout, "{detail}");
    assert!(started.elapsed() < Duration::from_secs(10));

    let (kind, detail) = build("noout").await.unwrap_err();
    assert_eq!(kind, FailureKind::BuildFailed);
    assert!(detail.contains("left no artifact"), "{detail}");

    let (kind, detail) = build("fail").await.unwrap_err();
    assert_eq!(kind, FailureKind::BuildFailed);
    assert!(detail.contains("code 2"), "{detail}");
    assert!(detail.contains("syntax error in kernel"), "{detail}");

    let (kind, detail) = build("crash").await.unwrap_err();
    assert_eq!(kind, FailureKind::BuildFailed);
    assert!(detail.contains("SIGSEGV"), "{detail}");

    // The good one builds, is content-addressed, and runs (wall time unused: a time regex
    // in milliseconds is given).
    let a = build("ok").await.unwrap();
    assert_eq!(a.hash, exec::sha256_hex(&exec::unpack(&a.packed).unwrap()));
    assert_eq!(
        build("ok").await.unwrap().hash,
        a.hash,
        "builds are reproducible"
    );
    let cache = ArtifactCache::new(work.path().join("cache")).unwrap();
    let path = cache.install(&a.hash, &a.packed).unwrap();
    let outcome = exec::evaluate(
        &spec,
        &path,
        &spec.shapes[0],
        &mode("ok"),
        &Params::new(),
        None,
        None,
    )
    .await;
    match outcome {
        Outcome::Measured(m) => {
            assert_eq!(m.samples_us, vec![250.0, 250.0]);
            assert_eq!(m.time_us, 250.0);
        }
        other => panic!("{other:?}"),
    }

    // A missing artifact is the machinery's fault, not the candidate's.
    let gone = exec::evaluate(
        &spec,
        &work.path().join("nope"),
        &spec.shapes[0],
        &mode("ok"),
        &Params::new(),
        None,
        None,
    )
    .await;
    assert_eq!(kind_of(&gone), Some(FailureKind::Infrastructure));
}

#[tokio::test]
async fn missing_time_and_missing_pass_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("run.sh");
    std::fs::write(&script, "#!/bin/sh\necho \"say=$1\"\n").unwrap();
    let text = r#"name = "verdicts"
[[shapes]]
SAY = "hello"
[build]
command = "true {out}"
[run]
command = "sh {spec_dir}/run.sh {SAY}"
timeout_s = 5
[output]
time = 'time_us=([0-9.]+)'
"#;
    std::fs::write(dir.path().join("spec.toml"), text).unwrap();
    let spec = spec::load(&dir.path().join("spec.toml")).unwrap();
    let o = exec::evaluate(
        &spec,
        &script,
        &spec.shapes[0],
        &Params::new(),
        &Params::new(),
        None,
        None,
    )
    .await;
    assert_eq!(kind_of(&o), Some(FailureKind::RunFailed));
    assert!(detail(&o).contains("no time in output"), "{o:?}");
    assert!(detail(&o).contains("say=hello"), "{o:?}");

    let with_pass = text.replace("[output]", "[output]\npass = 'verdict=PASS'");
    std::fs::write(dir.path().join("spec.toml"), with_pass).unwrap();
    let spec = spec::load(&dir.path().join("spec.toml")).unwrap();
    let o = exec::evaluate(
        &spec,
        &script,
        &spec.shapes[0],
        &Params::new(),
        &Params::new(),
        None,
        None,
    )
    .await;
    assert_eq!(kind_of(&o), Some(FailureKind::WrongAnswer), "{o:?}");

    // Without a time regex the wall time of the run is the sample.
    let wall = text.replace("time = 'time_us=([0-9.]+)'\n", "");
    std::fs::write(dir.path().join("spec.toml"), wall).unwrap();
    let spec = spec::load(&dir.path().join("spec.toml")).unwrap();
    let o = exec::evaluate(
        &spec,
        &script,
        &spec.shapes[0],
        &Params::new(),
        &Params::new(),
        None,
        None,
    )
    .await;
    match o {
        Outcome::Measured(m) => assert!(m.time_us > 0.0 && m.time_us < 5e6),
        other => panic!("{other:?}"),
    }
}

/// A build program that the spec names but this host lacks is the host's fault, not the
/// build's: `Infrastructure`, which the Scheduler retries on another worker and never caches
/// for the build's other jobs (one host without the compiler used to fail the build for good).
#[tokio::test]
async fn a_build_program_missing_on_this_host_is_an_infrastructure_fault() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let compiler = dir.path().join("cc-here");
    std::fs::write(&compiler, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&compiler, std::fs::Permissions::from_mode(0o755)).unwrap();
    let text = std::fs::read_to_string(fixture("scripts"))
        .unwrap()
        .replace(
            r#"["sh", "{spec_dir}/build.sh", "{MODE}", "{out}"]"#,
            r#"["{spec_dir}/cc-here", "{MODE}", "{out}"]"#,
        )
        .replace(r#"sources = ["build.sh"]"#, "sources = []");
    let path = dir.path().join("spec.toml");
    std::fs::write(&path, text).unwrap();
    let spec = spec::load(&path).unwrap();
    std::fs::remove_file(&compiler).unwrap();

    let (kind, detail) = exec::build(&spec, &mode("ok"), &dir.path().join("build"))
        .await
        .unwrap_err();
    assert_eq!(kind, FailureKind::Infrastructure, "{detail}");
    assert!(!kind.is_candidate_fault());
    assert!(
        detail.contains("cannot start") && detail.contains("cc-here"),
        "{detail}"
    );
}
