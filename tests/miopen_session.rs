//! A whole MIOpen perf-tuning session in the embedded mode, against the stand-in `fin` (a test
//! double built from recorded fin fixtures; the real fin needs ROCm and an AMD GPU): import
//! resnet50, update solvers, open a session, update applicability, load jobs, run (compile and
//! eval), export the three databases — and the perf db opens with SQLite and holds one row per
//! (config, solver) that succeeded.

mod common;

use common::{miopen_shoal as shoal, stdout_of as stdout};

use std::path::Path;

#[test]
fn resnet50_perf_tuning_session_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let resnet = common::repo_root().join("crates/shoal-miopen/tests/driver_configs/resnet50.txt");

    let imported = stdout(
        shoal(d)
            .args(["import-configs", "-t", "resnet50", "-f"])
            .arg(&resnet),
    );
    assert!(imported.contains("rejected 0"), "{imported}");
    let again = stdout(
        shoal(d)
            .args(["import-configs", "-t", "resnet50", "-f"])
            .arg(&resnet),
    );
    assert!(
        again.contains("configs imported 0"),
        "import is idempotent: {again}"
    );

    let solvers = stdout(shoal(d).args(["solvers", "update"]));
    assert!(solvers.contains("tunable"), "{solvers}");

    let session = stdout(shoal(d).args([
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
    ]));
    assert_eq!(session.trim(), "1");

    let appl = stdout(shoal(d).args([
        "applicability",
        "update",
        "--session",
        "1",
        "-t",
        "resnet50",
    ]));
    assert!(appl.contains("applicable"), "{appl}");

    let loaded = stdout(shoal(d).args([
        "jobs",
        "load",
        "--session",
        "1",
        "-t",
        "resnet50",
        "--fin-steps",
        "miopen_perf_compile,miopen_perf_eval",
        "-l",
        "e2e",
    ]));
    // Only applicable pairs by default, as MITuna loads them.
    assert!(
        loaded.contains("new") && loaded.contains("not applicable"),
        "{loaded}"
    );

    common::run_ok(shoal(d).args(["run", "--session", "1", "-j", "2"]));
    // Every fin ran with MIOpen user-db and cache directories of its own worker slot: one per
    // compile slot and one per Evaluator, never shared between concurrent fin processes.
    let work = d.join("shoal.db.work");
    for slot in ["compile-0", "compile-1", "eval-fakegpu0"] {
        for sub in ["miopen/config/miopen", "miopen/cache"] {
            assert!(work.join(slot).join(sub).is_dir(), "{slot}/{sub} missing");
        }
    }

    let out = d.join("out");
    let exported = stdout(shoal(d).args(["export", "--session", "1", "-o"]).arg(&out));
    for name in [
        "gfx90a6e.HIP.fdb.txt",
        "gfx90a6e.db",
        "gfx90a6e.db.txt",
        "gfx90a6e.kdb",
    ] {
        assert!(
            out.join(name).exists(),
            "{name} missing; export said:\n{exported}"
        );
    }

    exports_never_destroy_what_is_there(d, &out);
    merging_into_a_base_keeps_it_and_never_writes_it(d, &out);
    golden_versions_start_from_shipped_databases_and_fold_sessions_in(d, &out);

    // The user databases an unmodified MIOpen reads from MIOPEN_USER_DB_PATH: the same entries
    // under MIOpen's user names.
    let user = d.join("user");
    stdout(
        shoal(d)
            .args(["export", "--session", "1", "--user-db", "--miopen-version"])
            .args(["3.2.0-2a1e2f3", "-o"])
            .arg(&user),
    );
    let names: Vec<String> = files_in(&user).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "gfx90a6e.HIP.3_2_0_2a1e2f3.udb.txt",
            "gfx90a6e.HIP.3_2_0_2a1e2f3.ufdb.txt",
            "gfx90a6e.ukdb",
            "gfx90a6e_1.1.0.udb",
        ]
    );
    assert_eq!(
        std::fs::read(user.join("gfx90a6e.HIP.3_2_0_2a1e2f3.ufdb.txt")).unwrap(),
        std::fs::read(out.join("gfx90a6e.HIP.fdb.txt")).unwrap()
    );

    // Exports filtered by config tag: the session's only tag gives the same find db; an unknown
    // tag is an error, not an empty database.
    let tagged = d.join("tagged");
    stdout(
        shoal(d)
            .args([
                "export",
                "--session",
                "1",
                "--find-db",
                "-t",
                "resnet50",
                "-o",
            ])
            .arg(&tagged),
    );
    assert_eq!(
        std::fs::read(tagged.join("gfx90a6e.HIP.fdb.txt")).unwrap(),
        std::fs::read(out.join("gfx90a6e.HIP.fdb.txt")).unwrap()
    );
    let unknown = shoal(d)
        .args(["export", "--session", "1", "-t", "nope", "-o"])
        .arg(d.join("nope"))
        .output()
        .unwrap();
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no config carries"));

    // The perf db: one perf_db row per (config, solver) whose job succeeded with a perf config.
    let db = rusqlite::Connection::open(d.join("shoal.db")).unwrap();
    let succeeded: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM job j JOIN result r ON r.job_id = j.id AND r.attempt = j.attempt \
             WHERE j.state = 'evaluated' AND r.status = 'ok' AND r.detail LIKE '%\"params\"%' \
             AND r.detail NOT LIKE '%[\"params\",\"\"]%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(succeeded > 10, "only {succeeded} jobs succeeded");
    let perf = rusqlite::Connection::open(out.join("gfx90a6e.db")).unwrap();
    let rows: i64 = perf
        .query_row("SELECT COUNT(*) FROM perf_db", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, succeeded);
    let distinct: i64 = perf
        .query_row(
            "SELECT COUNT(*) FROM (SELECT DISTINCT config, solver FROM perf_db)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(distinct, rows, "one row per (config, solver)");
    // Every job is final; none is left in flight.
    let open: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM job WHERE state NOT IN ('evaluated','errored','not_applicable')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(open, 0);

    find_tuning_fills_the_find_db_with_every_kind_of_solver(d);
}

/// A second export into the same directory stops before writing anything, names the files it
/// would have replaced, and leaves them byte for byte (here: a stand-in for a shipped database);
/// with `--force` it replaces them whole, leaving no partial file behind.
fn exports_never_destroy_what_is_there(d: &Path, out: &Path) {
    let shipped = out.join("gfx90a6e.db.txt");
    std::fs::write(&shipped, "shipped perf db\n").unwrap();
    let before: Vec<(String, Vec<u8>)> = files_in(out);
    let again = shoal(d)
        .args(["export", "--session", "1", "-o"])
        .arg(out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success(), "{err}");
    for name in [
        "gfx90a6e.HIP.fdb.txt",
        "gfx90a6e.db",
        "gfx90a6e.db.txt",
        "gfx90a6e.kdb",
    ] {
        assert!(err.contains(name), "{name} not named:\n{err}");
    }
    assert!(err.contains("--force"), "{err}");
    assert_eq!(files_in(out), before, "nothing on disk changed");

    let forced = stdout(
        shoal(d)
            .args(["export", "--session", "1", "--force", "-o"])
            .arg(out),
    );
    assert!(forced.contains("gfx90a6e.db.txt"), "{forced}");
    assert_ne!(std::fs::read(&shipped).unwrap(), b"shipped perf db\n");
    let names: Vec<String> = files_in(out).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "gfx90a6e.HIP.fdb.txt",
            "gfx90a6e.db",
            "gfx90a6e.db.txt",
            "gfx90a6e.kdb"
        ],
        "no partial or probe file left"
    );

    // An export killed (SIGKILL) at several moments leaves every database whole: each file is
    // the old one or the new one (here the same bytes), never half of either.
    let whole = files_in(out);
    for delay_ms in [50, 200, 400, 700, 1000] {
        let mut child = shoal(d)
            .args(["export", "--session", "1", "--force", "-o"])
            .arg(out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        child.wait().unwrap();
        let after: Vec<(String, Vec<u8>)> = files_in(out)
            .into_iter()
            .filter(|(n, _)| !n.starts_with('.'))
            .collect();
        assert_eq!(after, whole, "killed after {delay_ms} ms");
    }
}

fn files_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// `--base DIR`: the session's databases merged into the ones in DIR (here: shipped find-db
/// lines and a reference perf db, under this export's names, plus the session's own earlier
/// export for the SQLite and kernel dbs), written to -o. The base's other keys come through
/// byte for byte, the session's keys are all there, DIR is not written, and a corrupt base
/// stops the export with its name before anything is written.
fn merging_into_a_base_keeps_it_and_never_writes_it(d: &Path, out: &Path) {
    let golden = common::repo_root().join("crates/shoal-miopen/tests/golden");
    let base = d.join("base");
    std::fs::create_dir(&base).unwrap();
    let shipped_find = std::fs::read_to_string(golden.join("gfx942130.HIP.fdb.txt")).unwrap();
    std::fs::write(base.join("gfx90a6e.HIP.fdb.txt"), &shipped_find).unwrap();
    let shipped_perf = std::fs::read_to_string(golden.join("perf_db_reference.db.txt")).unwrap();
    std::fs::write(base.join("gfx90a6e.db.txt"), &shipped_perf).unwrap();
    for name in ["gfx90a6e.db", "gfx90a6e.kdb"] {
        std::fs::copy(out.join(name), base.join(name)).unwrap();
    }
    let base_before = files_in(&base);

    let merged = d.join("merged");
    let said = stdout(
        shoal(d)
            .args(["export", "--session", "1", "--base"])
            .arg(&base)
            .arg("-o")
            .arg(&merged),
    );
    assert!(
        said.contains("merging into") && said.contains("kept"),
        "{said}"
    );
    assert_eq!(files_in(&base), base_before, "the base is only read");
    let find = std::fs::read_to_string(merged.join("gfx90a6e.HIP.fdb.txt")).unwrap();
    let lines: std::collections::HashSet<&str> = find.lines().collect();
    for line in shipped_find.lines() {
        assert!(
            lines.contains(line),
            "a shipped line changed or went missing: {line}"
        );
    }
    let session_find = std::fs::read_to_string(out.join("gfx90a6e.HIP.fdb.txt")).unwrap();
    assert_eq!(
        find.lines().count(),
        shipped_find.lines().count() + session_find.lines().count(),
        "every key of both (the shipped keys are not the session's)"
    );
    let perf = std::fs::read_to_string(merged.join("gfx90a6e.db.txt")).unwrap();
    for line in shipped_perf.lines() {
        assert!(perf.lines().any(|l| l == line), "{line}");
    }
    // The SQLite perf db merged into itself gains no pair of the session's, but gains the
    // pairs only the base's text perf db had, so that the two agree row for row.
    let rows = |p: &Path| -> i64 {
        rusqlite::Connection::open(p)
            .unwrap()
            .query_row("SELECT COUNT(*) FROM perf_db", [], |r| r.get(0))
            .unwrap()
    };
    let text_only = shipped_perf
        .lines()
        .map(|l| l.matches(';').count() as i64 + 1)
        .sum::<i64>();
    assert_eq!(
        rows(&merged.join("gfx90a6e.db")),
        rows(&out.join("gfx90a6e.db")) + text_only
    );
    assert!(
        said.contains("agree") || !said.contains("disagree"),
        "{said}"
    );
    assert_eq!(
        perf.lines()
            .map(|l| l.matches(';').count() as i64 + 1)
            .sum::<i64>(),
        rows(&merged.join("gfx90a6e.db")),
        "the text perf db holds every row of the SQLite one"
    );

    // A truncated base database: named, and nothing written.
    std::fs::write(
        base.join("gfx90a6e.HIP.fdb.txt"),
        &shipped_find[..shipped_find.len() / 2],
    )
    .unwrap();
    let bad = d.join("bad");
    let failed = shoal(d)
        .args(["export", "--session", "1", "--base"])
        .arg(&base)
        .arg("-o")
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "{err}");
    assert!(
        err.contains("gfx90a6e.HIP.fdb.txt") && err.contains("line"),
        "{err}"
    );
    assert!(!bad.exists(), "nothing written");
    // The base as the output: refused.
    let same = shoal(d)
        .args(["export", "--session", "1", "--force", "--base"])
        .arg(&base)
        .arg("-o")
        .arg(&base)
        .output()
        .unwrap();
    assert!(!same.status.success());
    assert!(String::from_utf8_lossy(&same.stderr).contains("only read"));
}

/// The find steps, end to end through the stand-in fin: jobs for every applicable solver of each
/// config (not only the tunable ones), compiled on the find compile queue and timed on the find
/// eval queue, and the exported find db made of those results, so that it holds the kinds of
/// solvers MIOpen's shipped find dbs hold.
fn find_tuning_fills_the_find_db_with_every_kind_of_solver(d: &Path) {
    let loaded = stdout(shoal(d).args([
        "jobs",
        "load",
        "--session",
        "1",
        "-t",
        "resnet50",
        "--fin-steps",
        "miopen_find_compile,miopen_find_eval",
        "-l",
        "find",
    ]));
    assert!(loaded.contains("new"), "{loaded}");
    common::run_ok(shoal(d).args(["run", "--session", "1", "-j", "2"]));
    let db = rusqlite::Connection::open(d.join("shoal.db")).unwrap();
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    let find_jobs = count("SELECT COUNT(*) FROM job WHERE eval_step = 'miopen_find_eval'");
    let find_done = count(
        "SELECT COUNT(*) FROM job WHERE eval_step = 'miopen_find_eval' AND state = 'evaluated'",
    );
    let untunable = count(
        "SELECT COUNT(*) FROM job j JOIN solver s ON s.id = j.solver_id \
         WHERE j.eval_step = 'miopen_find_eval' AND j.state = 'evaluated' AND s.tunable = 0",
    );
    assert!(
        find_jobs > 0 && find_done > 0,
        "{find_done} of {find_jobs} find jobs evaluated"
    );
    assert!(
        untunable > 0,
        "no solver without perf configs was timed by the find steps"
    );

    let out = d.join("find-out");
    let said = stdout(
        shoal(d)
            .args(["export", "--session", "1", "--find-db", "-o"])
            .arg(&out),
    );
    let find = std::fs::read_to_string(out.join("gfx90a6e.HIP.fdb.txt")).unwrap();
    assert!(!find.is_empty(), "{said}");
    let untunable_names: Vec<String> = db
        .prepare("SELECT name FROM solver WHERE tunable = 0")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert!(
        untunable_names
            .iter()
            .any(|n| find.contains(&format!("{n}:"))),
        "the find db holds no solver without perf configs:\n{find}"
    );
    for line in find.lines() {
        let (key, records) = line.split_once('=').expect("KEY=RECORDS");
        assert!(!key.is_empty());
        let records: Vec<&str> = records.split(';').collect();
        assert!((1..=4).contains(&records.len()), "{line}");
        for r in records {
            let (_, rest) = r.split_once(':').expect("SOLVER:TIME,WS,ALGO");
            let fields: Vec<&str> = rest.split(',').collect();
            assert_eq!(fields.len(), 3, "{r}");
            assert!(fields[0].parse::<f32>().unwrap() > 0.0, "{r}");
            assert!(fields[2].starts_with("miopenConvolution"), "{r}");
        }
    }
}

/// Golden versions: `import-db` starts one from shipped databases, `golden update` folds the
/// session in (the new version replacing the old whole), `export --golden-v` writes it out.
fn golden_versions_start_from_shipped_databases_and_fold_sessions_in(d: &Path, out: &Path) {
    let golden = common::repo_root().join("crates/shoal-miopen/tests/golden");
    let shipped = d.join("shipped");
    std::fs::create_dir(&shipped).unwrap();
    let shipped_find = std::fs::read_to_string(golden.join("gfx942130.HIP.fdb.txt")).unwrap();
    std::fs::write(shipped.join("gfx90a6e.HIP.fdb.txt"), &shipped_find).unwrap();
    std::fs::copy(
        golden.join("perf_db_reference.db.txt"),
        shipped.join("gfx90a6e.db.txt"),
    )
    .unwrap();
    let said = stdout(
        shoal(d)
            .args(["import-db", "--golden-v", "1"])
            .arg(&shipped),
    );
    assert!(said.contains("golden version 1"), "{said}");

    let updated = stdout(shoal(d).args(["golden", "update", "--session", "1", "--golden-v", "1"]));
    assert!(
        updated.contains("kept") && updated.contains("added"),
        "{updated}"
    );
    // The version had a find db and a text perf db: those are what it has now. The session's
    // SQLite perf db and kernel db alone are not added (they would stand in for MIOpen's).
    assert!(updated.contains("not written"), "{updated}");
    let listed = stdout(shoal(d).args(["golden", "list"]));
    assert_eq!(
        listed.trim(),
        "1\tgfx90a6e.HIP.fdb.txt, gfx90a6e.db.txt",
        "{listed}"
    );
    let listed: serde_json::Value =
        serde_json::from_str(&stdout(shoal(d).args(["golden", "list", "--json"]))).unwrap();
    assert_eq!(listed[0]["version"], 1, "{listed}");
    assert!(
        listed[0]["files"]
            .as_array()
            .unwrap()
            .contains(&"gfx90a6e.db.txt".into()),
        "{listed}"
    );

    let exported = d.join("golden-out");
    stdout(
        shoal(d)
            .args(["export", "--golden-v", "1", "-o"])
            .arg(&exported),
    );
    let find = std::fs::read_to_string(exported.join("gfx90a6e.HIP.fdb.txt")).unwrap();
    let session_find = std::fs::read_to_string(out.join("gfx90a6e.HIP.fdb.txt")).unwrap();
    assert_eq!(
        find.lines().count(),
        shipped_find.lines().count() + session_find.lines().count()
    );
    for line in shipped_find.lines() {
        assert!(find.lines().any(|l| l == line), "{line}");
    }
    // Folding the same session in again changes nothing.
    let again = stdout(shoal(d).args(["golden", "update", "--session", "1", "--golden-v", "1"]));
    let merged_lines: Vec<&str> = again.lines().filter(|l| l.contains("kept")).collect();
    assert!(!merged_lines.is_empty(), "{again}");
    for line in merged_lines {
        assert!(
            line.contains("added 0, improved 0, worse 0, updated 0"),
            "{again}"
        );
    }

    // A corrupt database is refused by name before anything is copied.
    let bad = d.join("bad-shipped");
    std::fs::create_dir(&bad).unwrap();
    std::fs::write(bad.join("gfx90a6e.HIP.fdb.txt"), "no records here").unwrap();
    let refused = shoal(d)
        .args(["import-db", "--golden-v", "2"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("gfx90a6e.HIP.fdb.txt"));
    assert!(!d.join("shoal.db.golden/v2").exists());
}
