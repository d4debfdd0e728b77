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
