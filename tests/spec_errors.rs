//! A bad spec is refused before anything is written, with an error naming the file and the line
//! or field.

mod common;

use std::path::Path;

fn refuse(dir: &Path, spec_text: &str, expect: &[&str]) {
    let spec = dir.join("bad.toml");
    std::fs::write(&spec, spec_text).unwrap();
    std::fs::copy(common::fixture("faulty/kernel.c"), dir.join("kernel.c")).unwrap();
    let out = common::shoal(dir)
        .args(["tune", "bad.toml", "--db", "bad.db"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for e in expect {
        assert!(stderr.contains(e), "expected `{e}` in:\n{stderr}");
    }
    assert!(
        !dir.join("bad.db").exists(),
        "nothing may be written for a bad spec"
    );
}

fn good_spec() -> String {
    std::fs::read_to_string(common::fixture("faulty/spec.toml")).unwrap()
}

#[test]
fn a_toml_syntax_error_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let text = good_spec().replace("[run]", "[run\n");
    let line = text.lines().position(|l| l == "[run").unwrap() + 1;
    refuse(dir.path(), &text, &["bad.toml", &format!(":{line}")]);
}

#[test]
fn a_rule_naming_an_unknown_parameter_names_the_rule_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let text = good_spec().replace("MODE == 0 || WORK == 1", "MODE == 0 || WORKS == 1");
    let line = text.lines().position(|l| l.starts_with("rules")).unwrap() + 1;
    refuse(
        dir.path(),
        &text,
        &["bad.toml", &format!(":{line}"), "rules[0]", "WORKS"],
    );
}

#[test]
fn a_build_command_that_does_not_exist_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let text = good_spec().replace("command = \"cc ", "command = \"no-such-compiler-xyz ");
    let line = text
        .lines()
        .position(|l| l.contains("no-such-compiler-xyz"))
        .unwrap()
        + 1;
    refuse(
        dir.path(),
        &text,
        &[
            "bad.toml",
            &format!(":{line}"),
            "build.command",
            "no-such-compiler-xyz",
        ],
    );
}

/// `shoal check --list-builds` gives scripts the same space `shoal tune` builds: one line per
/// distinct compile set, with the shapes it has candidates for and its build command.
#[test]
fn list_builds_prints_every_build_with_its_shapes_and_command() {
    let dir = tempfile::tempdir().unwrap();
    let spec = common::fixture("faulty/spec.toml");
    let out = common::run_ok(
        common::shoal(dir.path())
            .args(["check", "--list-builds"])
            .arg(&spec),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    // MODE 0 with WORK 1, 4, 16, and MODES 1-5 with WORK 1 only (the rule).
    assert_eq!(lines.len(), 8, "{text}");
    assert_eq!(lines[0][0], "MODE=0,WORK=1");
    assert!(lines.iter().all(|l| l.len() == 3), "{text}");
    assert!(lines.iter().all(|l| l[1] == "N=20000;N=40000"), "{text}");
    let modes: Vec<&str> = lines.iter().map(|l| l[0]).collect();
    assert!(modes.contains(&"MODE=5,WORK=1") && !modes.contains(&"MODE=5,WORK=4"));
    for l in &lines {
        let (mode, work) = l[0].split_once(',').unwrap();
        assert!(l[2].contains(&format!("-D{mode}")) && l[2].contains(&format!("-D{work}")));
        assert!(l[2].contains("-o {out}"), "{}", l[2]);
    }
}

#[test]
fn a_search_with_an_unknown_strategy_or_no_budget_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\n[search]\nstrategy = \"annealing\"\nbudget = \"5%\"\n",
        good_spec()
    );
    let line = text.lines().position(|l| l.contains("annealing")).unwrap() + 1;
    refuse(
        dir.path(),
        &text,
        &[
            &format!("bad.toml:{line}"),
            "search.strategy",
            "annealing",
            "forest",
        ],
    );
    let text = format!("{}\n[search]\nstrategy = \"forest\"\n", good_spec());
    refuse(dir.path(), &text, &["search.budget", "a share such as"]);
    let text = format!(
        "{}\n[search]\nstrategy = \"random\"\nbudget = \"120%\"\n",
        good_spec()
    );
    refuse(dir.path(), &text, &["search.budget", "120%"]);
    let text = format!(
        "{}\n[search]\nstrategy = \"forest\"\nbudget = 40\nin_flight = 0\n",
        good_spec()
    );
    let line = text.lines().position(|l| l.contains("in_flight")).unwrap() + 1;
    refuse(
        dir.path(),
        &text,
        &[&format!("bad.toml:{line}"), "search.in_flight", "1 or more"],
    );
}
