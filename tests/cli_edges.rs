//! The command line as a new user meets it: commands that only read never create a store, a
//! session that does not exist is an error that says which ones do, listings have headers and
//! JSON, `check` shows how far the rules cut the space, and logs written to a file or a pipe
//! carry no colour codes.

mod common;

use std::path::Path;

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn commands_that_read_refuse_a_store_that_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for args in [
        vec!["sessions"],
        vec!["status"],
        vec!["status", "--session", "1"],
        vec!["export", "-o", "out"],
        vec!["export", "--session", "1", "--format", "t4", "-o", "out"],
        vec!["compare", "1", "2"],
        vec!["run", "--session", "1"],
    ] {
        let out = common::shoal(d)
            .args(["--db", "typo.db"])
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr_of(&out).contains("typo.db: no such store"),
            "{args:?}: {}",
            stderr_of(&out)
        );
        assert!(!d.join("typo.db").exists(), "{args:?} created the store");
    }
}

#[test]
fn sessions_are_listed_with_a_header_and_a_missing_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    common::run_ok(&mut common::session_init(d, "t.db"));
    let list = common::run_ok(common::shoal(d).args(["--db", "t.db", "sessions"]));
    let list = String::from_utf8_lossy(&list.stdout).into_owned();
    let header: Vec<&str> = list.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["session", "arch", "units", "backend", "done", "jobs", "rate", "eta", "spec"],
        "{list}"
    );
    assert!(list.lines().nth(2).unwrap().contains("gfx90a"), "{list}");
    let json = common::run_ok(common::shoal(d).args(["--db", "t.db", "sessions", "--json"]));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json[0]["id"], 1, "{json}");
    assert_eq!(json[0]["num_cu"], 110, "{json}");

    for args in [["status", "--session", "99"], ["jobs", "load", "--session"]] {
        let mut cmd = common::shoal(d);
        cmd.args(["--db", "t.db"]).args(args);
        if args[0] == "jobs" {
            cmd.args([
                "99",
                "-t",
                "x",
                "--fin-steps",
                "miopen_perf_compile,miopen_perf_eval",
            ]);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = stderr_of(&out);
        assert!(
            err.contains("session 99 is not in the store") && err.contains("it has session 1"),
            "{args:?}: {err}"
        );
    }
    // Without --session, the newest.
    let status = common::run_ok(common::shoal(d).args(["--db", "t.db", "status"]));
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(status.starts_with("session 1: "), "{status}");
    assert!(status.contains("progress: 0/0 done"), "{status}");
    assert!(status.contains("fleet: no worker is reporting"), "{status}");
}

#[test]
fn check_shows_how_far_the_rules_cut_the_space() {
    let dir = tempfile::tempdir().unwrap();
    let spec = common::repo_root().join("examples/cpu-gemm/spec.toml");
    let out = common::run_ok(common::shoal(dir.path()).args(["check", spec.to_str().unwrap()]));
    let text = String::from_utf8_lossy(&out.stdout);
    // 2 BM × 3 BN × 3 BK × 4 UNROLL × 3 ORDER = 216 per shape, of which the four rules keep
    // fewer.
    let first = text.lines().next().unwrap();
    assert!(first.contains(": 216 combinations, "), "{text}");
    let kept: usize = first
        .split(", ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(kept > 0 && kept < 216, "{text}");
    assert!(text.contains("combinations before the rules"), "{text}");
}

#[test]
fn logs_off_a_terminal_have_no_colour_codes_and_migrations_are_debug() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let init = |db: &str, level: &str| {
        let out = common::session_init(d, db)
            .env("RUST_LOG", level)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr_of(&out));
        stderr_of(&out)
    };
    // A fresh store is migrated: logged at debug, so shown here, without escape codes.
    let debug = init("a.db", "debug");
    assert!(debug.contains("migration"), "{debug}");
    assert!(!debug.contains('\u{1b}'), "escape codes in {debug:?}");
    // Not at the default level.
    let info = init("b.db", "info");
    assert!(
        !info.contains("migration"),
        "migrations logged at info: {info}"
    );
    assert!(Path::new(&d.join("b.db")).exists());
}

#[test]
fn devices_are_listed_as_json_too() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::run_ok(common::shoal(dir.path()).args(["devices", "--json"]));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Every host has its CPU.
    let cpu = list
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "cpu")
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(cpu["healthy"], true, "{list}");
    assert!(cpu["units"].as_u64().unwrap() >= 1, "{list}");
}

/// A database setting that looks like a URL but is not one (no `://`) is refused by every
/// command that reads the cluster's store, and its password is printed nowhere: it used to be
/// taken for a SQLite file, created, and shown by `sessions`, `workers` and `status`.
#[test]
fn a_mistyped_database_url_is_refused_and_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for value in [
        "mysql//user:hunter2@h/db",
        "mysql:user:hunter2@h/db",
        "user:hunter2@host/db",
    ] {
        for args in [
            vec!["sessions", "--cluster"],
            vec!["workers", "--cluster"],
            vec!["status", "--cluster"],
        ] {
            let out = common::shoal(d)
                .env("SHOAL_DB", value)
                .env("SHOAL_CONFIG", "/dev/null")
                .args(&args)
                .output()
                .unwrap();
            let all = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                stderr_of(&out)
            );
            assert!(!out.status.success(), "{args:?} {value}: {all}");
            assert!(all.contains("SHOAL_DB"), "{args:?} {value}: {all}");
            assert!(!all.contains("hunter2"), "{args:?} {value}: {all}");
        }
    }
    // The same for the local store's --db.
    for value in ["mysql//user:hunter2@h/db", "mysql://user:hunter2@h/db"] {
        for args in [vec!["sessions"], vec!["status"], vec!["workers"]] {
            let out = common::shoal(d)
                .args(["--db", value])
                .args(&args)
                .output()
                .unwrap();
            let all = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                stderr_of(&out)
            );
            assert!(!out.status.success(), "{args:?} {value}: {all}");
            assert!(all.contains("--db"), "{args:?} {value}: {all}");
            assert!(!all.contains("hunter2"), "{args:?} {value}: {all}");
        }
    }
    assert_eq!(
        std::fs::read_dir(d).unwrap().count(),
        0,
        "a file was created"
    );
}

/// A session whose spec directory was moved away since it was tuned still exports, from the
/// store alone: the shape columns are the problem's own, and a warning says what is missing.
#[test]
fn a_session_whose_spec_directory_moved_still_exports() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let spec_dir = d.join("kernel");
    std::fs::create_dir(&spec_dir).unwrap();
    for f in ["spec.toml", "kernel.c"] {
        std::fs::copy(common::fixture("steady").join(f), spec_dir.join(f)).unwrap();
    }
    common::run_ok(common::shoal(d).args([
        "tune",
        "kernel/spec.toml",
        "--db",
        "t.db",
        "--out",
        "out",
    ]));
    std::fs::rename(&spec_dir, d.join("moved")).unwrap();

    let out = common::shoal(d)
        .args(["export", "--db", "t.db", "--session", "1", "-o", "again"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("cannot be read where the session was tuned"),
        "{}",
        stderr_of(&out)
    );
    let csv = std::fs::read_to_string(d.join("again/tuned.csv")).unwrap();
    let first = std::fs::read_to_string(d.join("out/tuned.csv")).unwrap();
    let winners = |t: &str| -> Vec<String> {
        t.lines()
            .skip(1)
            .map(|l| {
                l.split(',')
                    .find(|f| f.contains("WORK"))
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    };
    assert!(csv.lines().next().unwrap().contains('N'), "{csv}");
    assert_eq!(csv.lines().count(), 3, "a header and two shapes:\n{csv}");
    assert_eq!(winners(&csv), winners(&first), "{csv}\n{first}");
}

/// The commands a `--help` lists: the first word of each line of its `Commands:` section.
fn commands_listed(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// The release `shoal` carries no developer tool: no command its help lists, at any depth, is a
/// bench or the hostile publisher (those are `shoal-bench`'s), and naming one is an error.
#[test]
fn shoal_lists_no_bench_or_hostile_command() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut visit: Vec<Vec<String>> = vec![vec![]];
    let mut listed = 0;
    while let Some(path) = visit.pop() {
        let out = common::run_ok(common::shoal(d).args(&path).arg("--help"));
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        for command in commands_listed(&help) {
            listed += 1;
            assert!(
                !command.contains("bench") && !command.contains("hostile"),
                "`shoal {} --help` lists `{command}`:\n{help}",
                path.join(" ")
            );
            if command != "help" {
                visit.push([path.clone(), vec![command]].concat());
            }
        }
    }
    assert!(
        listed > 30,
        "only {listed} commands found: is the parsing broken?"
    );
    let help = common::run_ok(common::shoal(d).arg("help"));
    let top = commands_listed(&String::from_utf8_lossy(&help.stdout));
    assert!(top.contains(&"tune".to_string()), "{top:?}");
    assert!(
        !top.iter().any(|c| c == "bench" || c == "hostile"),
        "{top:?}"
    );
    for args in [
        vec!["bench", "dispatch"],
        vec!["bench", "hostile"],
        vec!["hostile"],
    ] {
        let out = common::shoal(d).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr_of(&out).contains("unrecognized subcommand"),
            "{args:?}: {}",
            stderr_of(&out)
        );
    }
}
