//! Helpers for tests that run the real `shoal` binary in a temporary directory, as a user would.

#![allow(dead_code)]

pub mod cluster;
pub mod own_mariadb;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use shoal_model::{FinalResult, SessionId};
use shoal_store::{SqliteStore, Store};

/// The stand-in `fin` (a test double built from recorded fin fixtures; the real fin needs ROCm
/// and an AMD GPU), built beside the shoal binary by `cargo test --workspace`.
pub fn standin_fin() -> PathBuf {
    let fin = PathBuf::from(env!("CARGO_BIN_EXE_shoal")).with_file_name("fin");
    assert!(
        fin.exists(),
        "{} is missing: build the stand-in with `cargo build -p shoal-fin-standin` (scripts/test does)",
        fin.display()
    );
    fin
}

/// [`shoal`] for a MIOpen workflow: the stand-in fin, and a simulated gfx90a with 110 CUs.
pub fn miopen_shoal(dir: &Path) -> Command {
    let mut cmd = shoal(dir);
    cmd.env("SHOAL_FIN", standin_fin())
        .env("SHOAL_TEST_FAKE_GPU", "gfx90a:110");
    cmd
}

/// Runs a command that must succeed, and gives its standard output.
pub fn stdout_of(cmd: &mut Command) -> String {
    String::from_utf8(run_ok(cmd).stdout).unwrap()
}

/// The repository root (tests live in `<root>/tests`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

pub fn fixture(rel: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(rel)
}

/// A command for the `shoal` binary, run in `dir`, isolated from the user's settings.
pub fn shoal(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
    cmd.current_dir(dir)
        .env_remove("SHOAL_DB_FILE")
        .env_remove("SHOAL_DB")
        .env_remove("SHOAL_BROKER")
        .env_remove("SHOAL_NAMESPACE")
        .env_remove("SHOAL_HMAC_KEY_FILE")
        .env("RUST_LOG", "warn");
    cmd
}

/// `shoal tune <fixture spec> --db t.db --out out`, in `dir`.
pub fn tune(dir: &Path, spec_fixture: &str) -> Command {
    let spec = fixture(spec_fixture);
    let mut cmd = shoal(dir);
    cmd.args([
        "tune",
        spec.to_str().unwrap(),
        "--db",
        "t.db",
        "--out",
        "out",
    ]);
    cmd
}

/// `shoal --db DB session init` for a gfx90a with 110 CUs (ROCm 6.2.0, MIOpen 3.2.0), in `dir`:
/// the quickest way to a store with a session (no build, no run).
pub fn session_init(dir: &Path, db: &str) -> Command {
    let mut cmd = shoal(dir);
    cmd.args([
        "--db",
        db,
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
        "test",
    ]);
    cmd
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("shoal runs");
    assert!(
        out.status.success(),
        "shoal failed ({:?}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The final results of the only session in a store file.
pub fn final_results(db: &Path) -> Vec<FinalResult> {
    final_results_of(db, None)
}

/// The final results of `session` in a store file; `None`: of its only session.
pub fn final_results_of(db: &Path, session: Option<SessionId>) -> Vec<FinalResult> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = SqliteStore::open(db).unwrap();
        let session = match session {
            Some(s) => s,
            None => {
                let sessions = store.sessions().await.unwrap();
                assert_eq!(sessions.len(), 1, "one session expected");
                SessionId(sessions[0].id.0)
            }
        };
        store.final_results(session).await.unwrap()
    })
}

/// Number of result rows per job in a store file, straight from SQL: the acceptance query.
pub fn result_rows_per_job(db: &Path) -> Vec<(i64, i64)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT j.id, COUNT(r.job_id) FROM job j LEFT JOIN result r ON r.job_id = j.id \
             GROUP BY j.id ORDER BY j.id",
        )
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

/// A recorded space in the T4 format: 12 × 10 configurations, time `1 + (A-7)² + (B-3)²` ms: the optimum is A=7, B=3 at 1 ms.
/// A=1 failed to compile, A=2 with B=0 failed at run time, and A=12, B=9 was never recorded.
pub fn write_replay_space(path: &Path) {
    let mut results = Vec::new();
    for a in 1..=12i64 {
        for b in 0..10i64 {
            if (a, b) == (12, 9) {
                continue;
            }
            let t = 1.0 + ((a - 7) * (a - 7) + (b - 3) * (b - 3)) as f64;
            let invalidity = match (a, b) {
                (1, _) => "compile",
                (2, 0) => "runtime",
                _ => "correct",
            };
            let valid = invalidity == "correct";
            results.push(serde_json::json!({
                "configuration": {"A": a, "B": b},
                "invalidity": invalidity,
                "times": {
                    "compilation": 500.0,
                    "runtimes": if valid { vec![t, t * 1.01, t * 0.99] } else { vec![] },
                },
                "measurements": if valid {
                    vec![serde_json::json!({"name": "time", "value": t, "unit": "ms"})]
                } else {
                    vec![]
                },
                "objectives": ["time"],
            }));
        }
    }
    let doc = serde_json::json!({"schema_version": "1.0.0", "metadata": {"timeunit": "milliseconds"}, "results": results});
    std::fs::write(path, serde_json::to_vec(&doc).unwrap()).unwrap();
}

/// Prometheus's own checker: `promtool check metrics` must pass `text` (the classic text format)
/// with nothing to say. promtool is Debian's (`prometheus` package), unpacked by
/// scripts/setup-debian under `~/.cache/shoal/prometheus` without installing the server; one on
/// `PATH` is used first.
pub fn promtool_check_metrics(text: &str) {
    use std::io::Write;
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    let unpacked = cache.map(|c| c.join("shoal/prometheus/usr/bin/promtool"));
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("promtool"))
            .find(|p| p.is_file())
    });
    let promtool = on_path
        .or(unpacked.filter(|p| p.is_file()))
        .expect("promtool is needed: run scripts/setup-debian (it unpacks Debian's `prometheus`)");
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics ({:?}): {said}\n{text}",
        out.status
    );
}
