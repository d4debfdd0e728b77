//! Tidy rules checked as ordinary tests (after rust-analyzer's `tidy.rs`): every source file of
//! every crate opens with a `//!` comment saying what it is and why.

mod common;

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_source_file_starts_with_a_module_doc() {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(common::repo_root().join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 20, "found only {} files", files.len());
    let missing: Vec<String> = files
        .iter()
        .filter(|f| {
            !std::fs::read_to_string(f)
                .unwrap()
                .trim_start()
                .starts_with("//!")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files without a `//!` header: {missing:#?}"
    );
}

/// Only the CLI reads settings from the environment: every crate below it takes what it needs
/// as values (options, arguments), so a setting has one place where it is read, documented and
/// checked, and a test can run the crates without touching the process environment. The few
/// exceptions read something that is not a Shoal setting, and say why.
#[test]
fn only_the_cli_reads_the_environment() {
    const ALLOWED: [(&str, &str); 4] = [
        // Reads which variables exist, to keep the worker's secrets out of every child.
        (
            "shoal-backend/src/child_env.rs",
            "scrubs children's environment",
        ),
        // `PATH`, to find a build program the way the shell that runs it will.
        (
            "shoal-backend/src/spec/commands.rs",
            "resolves a program on PATH",
        ),
        // The stand-in fin is a program of its own; its fault switches are its command line.
        ("shoal-fin-standin/src/", "a separate program"),
        // Test support (feature `test-support`): the scratch database's server for tests.
        ("shoal-store/src/mysql/scratch.rs", "test support"),
    ];
    let mut files = Vec::new();
    for krate in std::fs::read_dir(common::repo_root().join("crates")).unwrap() {
        let krate = krate.unwrap().path();
        if krate.file_name().is_some_and(|n| n == "shoal-cli") {
            continue;
        }
        let src = krate.join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    let crates = common::repo_root().join("crates");
    let mut readers = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&crates).unwrap().display().to_string();
        if ALLOWED.iter().any(|(prefix, _)| rel.starts_with(prefix)) {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if ["env::var(", "env::var_os(", "env::vars(", "env::vars_os("]
                .iter()
                .any(|call| code.contains(call))
            {
                readers.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        readers.is_empty(),
        "settings read from the environment outside the CLI (pass them down as values): {readers:#?}"
    );
}
