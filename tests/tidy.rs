//! Tidy rules checked as ordinary tests (after rust-analyzer's `tidy.rs`): every source file of
//! every crate opens with a `//!` comment saying what it is and why; only the command lines
//! (`shoal`, `shoal-bench`) read the environment; no Rust file is past 600 lines;
//! ARCHITECTURE.md names only paths that exist;
//! the production grants file is generated from the one place grants are decided.

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

/// A file past 600 lines is asking to be split: it holds more than one concern, or one that
/// wants a module of its own. Every Rust file of the repository counts (sources, their unit
/// tests, the integration tests), since a reader pays for each the same way.
#[test]
fn no_rust_file_is_past_600_lines() {
    const LIMIT: usize = 600;
    let root = common::repo_root();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        let krate = krate.unwrap().path();
        for dir in ["src", "tests", "benches", "examples"] {
            if krate.join(dir).is_dir() {
                rust_files(&krate.join(dir), &mut files);
            }
        }
    }
    rust_files(&root.join("tests"), &mut files);
    assert!(files.len() > 100, "found only {} files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > LIMIT).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "files past {LIMIT} lines: {long:#?}");
}

/// Only the CLI (`shoal`, and the developers' `shoal-bench`) reads settings from the
/// environment: every crate below it takes what it needs as values (options, arguments), so a
/// setting has one place where it is read, documented and checked, and a test can run the
/// crates without touching the process environment. The few exceptions read something that is
/// not a Shoal setting, and say why.
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
        // The command lines: the `shoal` users get, and the developers' `shoal-bench`.
        if krate
            .file_name()
            .is_some_and(|n| n == "shoal-cli" || n == "shoal-bench")
        {
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

/// ARCHITECTURE.md is a map, and a map that names what is not there misleads: every repository
/// path it names in backticks must exist, and it stays short enough to read in ten minutes.
///
/// A backticked token (outside fenced code blocks) is taken for a path when, after a trailing
/// `#anchor` or `:line` is stripped, it contains a `/` or ends in `.rs`, `.md`, `.toml`, `.sql` or
/// `.sh`, and it has no space, `::`, `<`, `{` or `*` and does not start with `-` or `http`. So
/// `crates/shoal-store/src/mysql/apply.rs:189`, `schemas/mysql/` and `BENCHMARKS.md` are checked,
/// while `Store::apply`, `<ns>.results`, `--sandbox off` and `shoal tune spec.toml` are not. A
/// path that leaves the repository (absolute, or through `..`) is refused: the map names only
/// what is in the repository.
#[test]
fn architecture_names_only_paths_that_exist() {
    const MAX_LINES: usize = 300;
    let root = common::repo_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines <= MAX_LINES,
        "ARCHITECTURE.md has {lines} lines; the map keeps to {MAX_LINES} at most (move detail to docs/)"
    );
    let mut named = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code spans: the odd pieces of a line split on backticks.
        for token in line.split('`').skip(1).step_by(2) {
            if let Some(path) = repository_path(token) {
                named.push((n + 1, path));
            }
        }
    }
    assert!(
        named.len() > 20,
        "found only {} paths in ARCHITECTURE.md: is the extraction broken?",
        named.len()
    );
    let missing: Vec<String> = named
        .iter()
        .filter(|(_, path)| {
            let outside = path.starts_with('/') || path.split('/').any(|part| part == "..");
            outside || !root.join(path).exists()
        })
        .map(|(n, path)| format!("ARCHITECTURE.md:{n}: {path}"))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that are not in the repository: {missing:#?}"
    );
}

/// The repository path that a backticked `token` names, if it looks like one (see
/// [`architecture_names_only_paths_that_exist`]), without a trailing `#anchor` or `:line`.
fn repository_path(token: &str) -> Option<&str> {
    if token.starts_with('-') || token.starts_with("http") {
        return None;
    }
    if [" ", "::", "<", "{", "*"]
        .iter()
        .any(|bad| token.contains(bad))
    {
        return None;
    }
    let mut path = token.split('#').next().unwrap_or(token);
    // `:line`, or `:line:column`.
    while let Some((head, tail)) = path.rsplit_once(':') {
        if tail.is_empty() || !tail.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        path = head;
    }
    let looks_like_a_path = path.contains('/')
        || [".rs", ".md", ".toml", ".sql", ".sh"]
            .iter()
            .any(|ext| path.ends_with(ext));
    (looks_like_a_path && !path.is_empty()).then_some(path)
}

/// `deploy/mysql/roles.sql`, the grants a production cluster is set up with, is what
/// `scripts/roles-sql` prints from `shoal_role_db_grants` in `scripts/lib/services.sh`: the grants
/// that `scripts/services-up` sets and `scripts/check-privileges` proves. A file edited by hand
/// drifts (it once gave the cli user writes on `job` and the Scheduler no grant on `command`).
#[test]
fn roles_sql_is_generated_from_the_grants_services_up_sets() {
    let root = common::repo_root();
    let out = std::process::Command::new("bash")
        .arg(root.join("scripts/roles-sql"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/roles-sql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).unwrap();
    let in_tree = std::fs::read_to_string(root.join("deploy/mysql/roles.sql")).unwrap();
    assert!(
        generated == in_tree,
        "deploy/mysql/roles.sql is not what scripts/roles-sql prints: run \
         scripts/roles-sql > deploy/mysql/roles.sql"
    );
    for role in ["scheduler", "compile", "eval", "exporter", "cli"] {
        assert!(
            in_tree.contains(&format!(
                "REVOKE ALL PRIVILEGES, GRANT OPTION FROM 'shoal_{role}'@'CLUSTER_NET';"
            )),
            "{role}"
        );
    }
    let cli_writes = in_tree
        .lines()
        .filter(|l| l.contains("'shoal_cli'") && l.starts_with("GRANT "))
        .filter(|l| ["INSERT", "UPDATE", "DELETE"].iter().any(|w| l.contains(w)))
        .collect::<Vec<_>>();
    assert!(cli_writes.is_empty(), "the cli only reads: {cli_writes:#?}");
}
