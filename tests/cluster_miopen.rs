//! The MIOpen workflow in cluster mode, driven by commands: `import-configs`, `solvers update`,
//! `session init`, `applicability update` and `jobs load` with `--cluster` publish commands that
//! the Scheduler applies (the CLI has no database URL at all), the compile and eval workers then
//! tune the jobs through the stand-in `fin` (a test double built from recorded fin fixtures; the
//! real fin needs ROCm and an AMD GPU) on a fake gfx90a, and the exporter role writes MIOpen's
//! databases on `export --cluster`.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::standin_fin;
use shoal_model::{JobState, SessionId};

/// `shoal <args> --cluster` as an operator runs it, with the broker's settings and the signing
/// key only: no database URL at all, so a command that tried to write (or read) the store
/// would fail.
fn operator(cluster: &Cluster, dir: &Path, args: &[&str]) -> String {
    let mut cmd = operator_command(cluster, dir);
    cmd.args(args);
    String::from_utf8(common::run_ok(&mut cmd).stdout).unwrap()
}

/// A CLI process with the cluster's broker settings and no database URL.
fn operator_command(cluster: &Cluster, dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
    cmd.current_dir(dir).env("RUST_LOG", "warn");
    cluster.env(&mut cmd).env_remove("SHOAL_DB");
    cmd
}

#[test]
fn a_miopen_session_loaded_by_commands_is_tuned_by_the_workers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut cluster = Cluster::new("mi", d);
    let fin = format!("SHOAL_FIN={}", standin_fin().display());
    // The Scheduler's host has fin too: applicability is asked there.
    cluster.start_worker("scheduler", &["env", &fin], &["--role", "scheduler"]);
    cluster.start_worker(
        "compile",
        &["env", &fin],
        &["--role", "compile", "--arch", "gfx90a", "-j", "2"],
    );
    cluster.start_worker(
        "eval",
        &["env", &fin, "SHOAL_TEST_FAKE_GPU=gfx90a:110"],
        &["--role", "eval"],
    );
    // (Started first: export orders are broadcasts, heard by the exporters listening then.)
    let exports = d.join("exports");
    cluster.start_worker(
        "exporter",
        &[],
        &[
            "--role",
            "exporter",
            "--export-dir",
            exports.to_str().unwrap(),
        ],
    );
    // One 1x1 and two 3x3 forward convolutions of resnet50.
    let configs = d.join("configs.txt");
    std::fs::write(
        &configs,
        "./bin/MIOpenDriver conv -n 32 -c 64 -H 56 -W 56 -k 256 -y 1 -x 1 -p 0 -q 0 -u 1 -v 1 -l 1 -j 1 -m conv -g 1 -F 1 -t 1\n\
         ./bin/MIOpenDriver conv -n 32 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 -j 1 -m conv -g 1 -F 1 -t 1\n\
         ./bin/MIOpenDriver conv -n 32 -c 128 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 -j 1 -m conv -g 1 -F 1 -t 1\n\
         not a driver line\n",
    )
    .unwrap();
    let configs = configs.to_str().unwrap();
    let imported = operator(
        &cluster,
        d,
        &["import-configs", "-t", "net", "-f", configs, "--cluster"],
    );
    assert!(
        imported.contains("configs imported 3") && imported.contains("rejected 1"),
        "{imported}"
    );
    let again = operator(
        &cluster,
        d,
        &["import-configs", "-t", "net", "-f", configs, "--cluster"],
    );
    assert!(
        again.contains("configs imported 0, already present 3"),
        "{again}"
    );
    let solvers = operator(
        &cluster,
        d,
        &["solvers", "update", "--builtin", "--cluster"],
    );
    assert!(solvers.contains("tunable"), "{solvers}");
    let init = [
        "session",
        "init",
        "--arch",
        "gfx90a",
        "--num-cu",
        "110",
        "--rocm-version",
        "6.2.0",
        "--miopen-version",
        "3.2.0",
        "-l",
        "e2e",
        "--cluster",
    ];
    assert_eq!(operator(&cluster, d, &init).trim(), "1");
    assert_eq!(
        operator(&cluster, d, &init).trim(),
        "1",
        "the same identity"
    );
    let applicability = operator(
        &cluster,
        d,
        &["applicability", "update", "-t", "net", "--cluster"],
    );
    assert!(
        applicability.contains("session 1: 3 configs,") && applicability.contains("applicable"),
        "{applicability}"
    );
    // Only the applicable pairs, as MITuna loads them: the 1x1 solver for the 1x1 config, the
    // 3x3 one for the 3x3 configs.
    let loaded = operator(
        &cluster,
        d,
        &[
            "jobs",
            "load",
            "-t",
            "net",
            "--solvers",
            "ConvAsm1x1U,ConvAsm3x3U",
            "-l",
            "e2e",
            "--cluster",
        ],
    );
    assert!(
        loaded.contains(
            "session 1: 3 configs, 3 (config, solver) jobs, 3 new, 3 pairs skipped as not applicable"
        ),
        "{loaded}"
    );

    // The workers tune them: every job ends, and each config has a solver that worked.
    let store = cluster.store();
    let t0 = Instant::now();
    let results = loop {
        let results = store.final_results(SessionId(1));
        if results.len() == 3 && results.iter().all(|r| r.state.is_terminal()) {
            break results;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "not done: {:?}\nscheduler:\n{}\ncompile:\n{}\neval:\n{}",
            results.iter().map(|r| r.state).collect::<Vec<_>>(),
            cluster.log("scheduler"),
            cluster.log("compile"),
            cluster.log("eval")
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let evaluated: std::collections::BTreeSet<_> = results
        .iter()
        .filter(|r| r.state == JobState::Evaluated)
        .map(|r| r.config)
        .collect();
    assert_eq!(evaluated.len(), 3, "{results:#?}");

    // The exporter role writes MIOpen's databases for it, on an operator's order.
    operator(
        &cluster,
        d,
        &["export", "--session", "1", "--cluster", "-o", "nightly"],
    );
    let nightly = exports.join("nightly");
    let files = [
        "gfx90a6e.HIP.fdb.txt",
        "gfx90a6e.db",
        "gfx90a6e.db.txt",
        "gfx90a6e.kdb",
    ];
    let t0 = Instant::now();
    while !files.iter().all(|f| nightly.join(f).exists()) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the exporter wrote {:?}:\n{}",
            std::fs::read_dir(&nightly).map(|d| d.count()),
            cluster.log("exporter")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let find_db = std::fs::read_to_string(nightly.join("gfx90a6e.HIP.fdb.txt")).unwrap();
    assert_eq!(
        find_db.lines().count(),
        3,
        "one line per config:\n{find_db}"
    );

    // With options: the find db only, merged into a base on the exporter's host that has one
    // problem the session did not tune.
    let base = exports.join("shipped");
    std::fs::create_dir_all(&base).unwrap();
    let first = find_db.lines().next().unwrap();
    let (key, records) = first.split_once('=').unwrap();
    let other_key = format!("{key}-elsewhere");
    std::fs::write(
        base.join("gfx90a6e.HIP.fdb.txt"),
        format!("{other_key}={records}\n"),
    )
    .unwrap();
    operator(
        &cluster,
        d,
        &[
            "export",
            "--session",
            "1",
            "--cluster",
            "--find-db",
            "-t",
            "net",
            "--base",
            "shipped",
            "-o",
            "merged",
        ],
    );
    let merged = exports.join("merged/gfx90a6e.HIP.fdb.txt");
    let t0 = Instant::now();
    while !merged.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the exporter wrote no merged find db:\n{}",
            cluster.log("exporter")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let merged_text = std::fs::read_to_string(&merged).unwrap();
    assert_eq!(merged_text.lines().count(), 4, "{merged_text}");
    assert!(merged_text.contains(&other_key), "{merged_text}");
    assert!(
        !exports.join("merged/gfx90a6e.db").exists(),
        "only the find db was asked for"
    );
    // A base outside the export directory is refused by the CLI, before anything is sent.
    let mut outside = operator_command(&cluster, d);
    outside.args([
        "export",
        "--session",
        "1",
        "--cluster",
        "--find-db",
        "--base",
        "../x",
        "-o",
        "m2",
    ]);
    let out = outside.output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--base with --cluster"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.stop_workers(Duration::from_secs(20));
}
