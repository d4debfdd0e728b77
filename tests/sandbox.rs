//! Tuned code cannot reach what its worker holds. A hostile "kernel" (`probe.sh`, as its build
//! and as its run) tries, in the embedded mode and on a cluster worker:
//! - every `/proc/<pid>/environ` of the host, looking for a secret variable of the worker;
//! - the worker's memory (`/proc/<pid>/mem` at its first mapping);
//! - signalling the worker (`kill -0`, which succeeds exactly when a signal would be delivered);
//! - the key file and the config file the worker was given;
//! - the broker's port.
//!
//! Each success is a line `leaked: …`, and the candidate then fails with them in its error. In
//! the sandbox every candidate is measured (nothing leaked, on both the build and the run);
//! with `--sandbox off` the same probe reports every kind of leak: the proof that it looks in
//! the right places. The secrets live outside `/tmp` (under the build's target directory, like
//! `/etc/shoal` or `~/.config/shoal`) and inside the spec's own directory, the hardest case: the
//! spec's tree is shown to its commands, and the secrets in it must be hidden all the same.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::cluster::Cluster;
use shoal_model::JobState;

/// The secret variable planted in the worker's environment.
const CANARY: &str = "SHOAL_CANARY_SECRET";

/// Everything the probe tries, as the `leaked:` lines name them.
const LEAKS: [&str; 6] = [
    "environ",
    "memory",
    "signal",
    "key file",
    "config file",
    "broker",
];

/// The probe: both the build (`probe.sh build OUT`) and the run (`probe.sh run ARTIFACT`). The
/// build writes what it found into the artifact; the run adds what it finds and fails when
/// anything leaked.
fn probe_script(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"#!/bin/bash
# A hostile kernel: reaches for what its worker holds. Each success is one `leaked:` line.
step=$1
file=$2
found=""
leak() {{ found="$found
leaked: $step: $*"; }}
wpid=""
for _ in $(seq 1 100); do
    wpid=$(cat "{d}/worker.pid" 2>/dev/null) && [ -n "$wpid" ] && break
    sleep 0.05
done
for e in /proc/[0-9]*/environ; do
    if {{ tr '\0' '\n' <"$e"; }} 2>/dev/null | grep -q '^{CANARY}='; then leak "environ $e"; fi
done
for pid in $wpid; do
    start=$(head -n 1 "/proc/$pid/maps" 2>/dev/null | cut -d- -f1)
    if [ -n "$start" ] && [ -n "$(dd if=/proc/$pid/mem bs=16 count=1 iflag=skip_bytes skip=$((16#$start)) 2>/dev/null | od -An | head -c 8)" ]; then
        leak "memory of $pid"
    fi
    if kill -0 "$pid" 2>/dev/null; then leak "signal to $pid"; fi
done
if [ -n "$(cat "{d}/hmac.key" 2>/dev/null)" ]; then leak "key file"; fi
if grep -q canary-password "{d}/shoal.toml" 2>/dev/null; then leak "config file"; fi
if timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/5672' 2>/dev/null; then leak "broker port"; fi
if [ "$step" = build ]; then
    printf '%s\n' "$found" >"$file"
    exit 0
fi
all="$(cat "$file")$found"
if printf '%s\n' "$all" | grep -q leaked; then
    printf '%s\n' "$all" >&2
    exit 3
fi
echo "time_us=1 verdict=PASS"
"#
    )
}

const SPEC: &str = r#"name = "probe"
sources = ["probe.sh"]

[[shapes]]
N = 1

[build]
command = "bash {spec_dir}/probe.sh build {out}"
timeout_s = 30

[run]
command = "bash {spec_dir}/probe.sh run {artifact}"
timeout_s = 30
warmup = 0
repeat = 1

[output]
time = 'time_us=([0-9.eE+-]+)'
time_unit = "us"
pass = 'verdict=PASS'

[params.compile]
V = [1, 2]
"#;

/// A directory outside `/tmp` (the sandbox hides `/tmp` whole, which would make the test
/// easy) holding the spec, the probe, a key file, a config file with a password, and the file
/// the worker's pid is written to.
fn probe_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let d = dir.path();
    std::fs::write(d.join("probe.sh"), probe_script(d)).unwrap();
    std::fs::write(d.join("spec.toml"), SPEC).unwrap();
    common::cluster::write_key_file(&d.join("hmac.key"));
    common::cluster::write_private(
        &d.join("shoal.toml"),
        "db = \"mysql://shoal:canary-password@127.0.0.1:3306/nothing\"\n",
    );
    dir
}

/// Waits for a child, killing it past the bound.
fn wait_bounded(child: &mut std::process::Child, bound: Duration) -> std::process::ExitStatus {
    let t0 = std::time::Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if t0.elapsed() > bound {
            let _ = child.kill();
            panic!("shoal did not finish within {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What leaked, from the candidates' errors (empty when every candidate was measured).
fn leaks(results: &[shoal_model::FinalResult]) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.state != JobState::Evaluated)
        .map(|r| {
            format!(
                "job {} {:?}: {}",
                r.job,
                r.state,
                r.last_error.clone().unwrap_or_default()
            )
        })
        .collect()
}

/// `shoal tune` on the probe, embedded, with the worker's secrets in its environment.
fn tune_embedded(dir: &Path, sandbox: &str) -> Vec<shoal_model::FinalResult> {
    let _ = std::fs::remove_file(dir.join("worker.pid"));
    let db = dir.join(format!("t-{sandbox}.db"));
    let mut child = common::shoal(dir)
        .args(["--sandbox", sandbox, "tune", "spec.toml", "--out", "out"])
        .arg("--db")
        .arg(&db)
        .env("SHOAL_HMAC_KEY_FILE", dir.join("hmac.key"))
        .env("SHOAL_CONFIG", dir.join("shoal.toml"))
        .env(CANARY, "42")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::fs::write(dir.join("worker.pid"), child.id().to_string()).unwrap();
    let status = wait_bounded(&mut child, Duration::from_secs(120));
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    // Unconfined, the probe finds what it looks for and fails every candidate on purpose, so
    // the shape has no valid candidate: `tune` says so with exit status 3.
    let expected = if sandbox == "on" { 0 } else { 3 };
    assert_eq!(status.code(), Some(expected), "{err}");
    common::final_results(&db)
}

#[test]
fn embedded_tuned_code_reaches_no_secret_and_no_process() {
    let dir = probe_dir();
    let sandboxed = tune_embedded(dir.path(), "on");
    assert_eq!(sandboxed.len(), 2);
    assert_eq!(leaks(&sandboxed), Vec::<String>::new());
    // The same probe, unconfined, finds each of them: it looks where the secrets are.
    let open = tune_embedded(dir.path(), "off");
    let found = leaks(&open).join("\n");
    assert_eq!(open.len(), 2);
    for leak in LEAKS {
        assert!(
            found.contains(leak),
            "`{leak}` not found unconfined:\n{found}"
        );
    }
}

/// A cluster of one worker process with every role, its secrets in its environment and its
/// config file; the operator ships the probe with `tune --cluster`.
fn tune_cluster(dir: &Path, sandbox: &str) -> Vec<shoal_model::FinalResult> {
    let work = dir.join(format!("cluster-{sandbox}"));
    std::fs::create_dir_all(&work).unwrap();
    let mut cluster = Cluster::new(&format!("sb{sandbox}"), &work);
    // The cluster's key beside the probe's secrets: the probe looks for `hmac.key` there.
    std::fs::remove_file(&cluster.key_file).unwrap();
    cluster.key_file = dir.join("hmac.key");
    let _ = std::fs::remove_file(dir.join("worker.pid"));
    let log = work.join("worker.log");
    let mut worker = Command::new(env!("CARGO_BIN_EXE_shoal"));
    worker
        .args(["--sandbox", sandbox, "worker"])
        .args(["--role", "scheduler", "--role", "compile", "--role", "eval"])
        .arg("--config")
        .arg(dir.join("shoal.toml"))
        .arg("--work-dir")
        .arg(work.join("w"))
        .current_dir(&work)
        .env(CANARY, "42")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    cluster.env(&mut worker);
    let worker = worker.spawn().unwrap();
    std::fs::write(dir.join("worker.pid"), worker.id().to_string()).unwrap();
    cluster.workers.push(("all".into(), worker));
    let mut tune = Command::new(env!("CARGO_BIN_EXE_shoal"));
    tune.current_dir(&work)
        .env("RUST_LOG", "warn")
        .args(["tune", "--cluster", "--out", "out"])
        .arg(dir.join("spec.toml"));
    cluster.env(&mut tune);
    let out = tune.output().unwrap();
    assert!(
        out.status.success(),
        "{}\nworker log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        cluster.log("worker")
    );
    let store = cluster.store();
    let sessions = store.sessions();
    let results = store.final_results(sessions[0].id);
    cluster.stop_workers(Duration::from_secs(60));
    results
}

#[test]
fn a_cluster_workers_tuned_code_reaches_no_secret_and_no_process() {
    let dir = probe_dir();
    let sandboxed = tune_cluster(dir.path(), "on");
    assert_eq!(sandboxed.len(), 2);
    assert_eq!(leaks(&sandboxed), Vec::<String>::new());
    let open = tune_cluster(dir.path(), "off");
    let found = leaks(&open).join("\n");
    for leak in LEAKS {
        assert!(
            found.contains(leak),
            "`{leak}` not found unconfined:\n{found}"
        );
    }
}

/// Without bubblewrap, a command that runs tuned code refuses to start, and says what to do.
#[test]
fn no_sandbox_no_tuning() {
    let dir = probe_dir();
    let out = common::shoal(dir.path())
        .args(["tune", "spec.toml", "--db", "t.db", "--out", "out"])
        .env("PATH", empty_path(dir.path()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("bubblewrap") && err.contains("--sandbox off"),
        "{err}"
    );
}

/// A PATH with `bash` on it and no `bwrap`.
fn empty_path(dir: &Path) -> PathBuf {
    let p = dir.join("bin");
    std::fs::create_dir_all(&p).unwrap();
    std::os::unix::fs::symlink("/bin/bash", p.join("bash")).unwrap();
    p
}

/// A spec under `/tmp` whose source is a link to a checkout elsewhere (as
/// `scripts/bench-gpu-scaling` lays out the example) still gets a private, writable `/tmp` in
/// its build and its run, where compilers write their temporary files, and sees nothing of the
/// host's `/tmp`. The spec's tree was once taken as the common ancestor of the links' targets,
/// `/`, and showing `/` made the host's `/tmp` the step's, read-only: every `nvcc` failed.
#[test]
fn a_spec_linked_from_elsewhere_keeps_a_private_writable_tmp() {
    let checkout = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let kernel = checkout.path().join("kernel.sh");
    std::fs::write(
        &kernel,
        r#"#!/bin/bash
# Writes a temporary file as a compiler would, and looks for the host's /tmp.
step=$1
file=$2
host_tmp_mark=$3
scratch=$(mktemp /tmp/tmpxft_XXXXXX) || { echo "cannot write /tmp in $step" >&2; exit 4; }
rm -f "$scratch"
if [ -e "$host_tmp_mark" ]; then echo "the host's /tmp is visible in $step" >&2; exit 5; fi
if [ "$step" = build ]; then echo ok >"$file"; exit 0; fi
echo "time_us=1 verdict=PASS"
"#,
    )
    .unwrap();
    let host_tmp = tempfile::tempdir().unwrap();
    let mark = host_tmp.path().join("mark");
    std::fs::write(&mark, "host").unwrap();
    let bench = tempfile::tempdir().unwrap();
    let spec_dir = bench.path().join("space/k");
    std::fs::create_dir_all(&spec_dir).unwrap();
    std::os::unix::fs::symlink(&kernel, spec_dir.join("kernel.sh")).unwrap();
    let spec = SPEC
        .replace(r#"name = "probe""#, r#"name = "linked""#)
        .replace(
            "probe.sh build {out}",
            &format!("kernel.sh build {{out}} {}", mark.display()),
        )
        .replace(
            "probe.sh run {artifact}",
            &format!("kernel.sh run {{artifact}} {}", mark.display()),
        )
        .replace("probe.sh", "kernel.sh");
    std::fs::write(spec_dir.join("spec.toml"), spec).unwrap();
    let db = bench.path().join("t.db");
    // Bounded: a build that cannot write `/tmp` reads as a worker whose disk is full, which
    // waits for the disk rather than failing the candidate.
    let mut child = common::shoal(&spec_dir)
        .args(["--sandbox", "on", "tune", "spec.toml", "--out", "out"])
        .arg("--db")
        .arg(&db)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_bounded(&mut child, Duration::from_secs(120));
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    let results = common::final_results(&db);
    assert_eq!(results.len(), 2);
    assert_eq!(leaks(&results), Vec::<String>::new());
}
