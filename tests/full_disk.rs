//! Embedded mode on a disk that fills up, or that turns read-only, stops with a clear error and a
//! non-zero exit in bounded time, rather than retrying forever; once the disk is writable again,
//! the same command finishes the tuning with one result per candidate, so nothing committed was
//! lost and nothing was done twice.
//!
//! The disk is a real one: a 16 MiB tmpfs mounted for the test, then filled while `shoal tune`
//! writes to it, or remounted read-only between a killed run and the next. Mounting needs root (CI has it); elsewhere the
//! tests say so and do nothing.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A tmpfs mounted on a directory, unmounted (lazily, so a leftover handle cannot keep it) on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "shoal-test-disk",
            ])
            .arg(at)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn tune(dir: &Path) -> Command {
    let spec = common::fixture("sleepy/spec.toml");
    let mut cmd = common::shoal(dir);
    cmd.args([
        "tune",
        spec.to_str().unwrap(),
        "--db",
        "disk/t.db",
        "--out",
        "out",
    ]);
    cmd
}

fn results(db: &Path) -> usize {
    rusqlite::Connection::open(db)
        .and_then(|c| c.query_row("SELECT COUNT(*) FROM result", [], |r| r.get::<_, i64>(0)))
        .map(|n| n as usize)
        .unwrap_or(0)
}

fn wait(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// How the disk is taken away from the running tuning, and given back.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Full,
    ReadOnly,
}

impl Fault {
    fn apply(self, disk: &Path) {
        match self {
            Fault::Full => {
                let mut f = std::fs::File::create(disk.join("filler")).unwrap();
                let chunk = vec![0u8; 64 * 1024];
                while f.write_all(&chunk).is_ok() {}
            }
            Fault::ReadOnly => remount(disk, "ro"),
        }
    }

    fn undo(self, disk: &Path) {
        match self {
            Fault::Full => std::fs::remove_file(disk.join("filler")).unwrap(),
            Fault::ReadOnly => remount(disk, "rw"),
        }
    }
}

/// Remounts the test disk; tried for up to 10 s, since the killed tuning's orphaned children (a
/// compiler, a candidate) may hold files open for writing for a moment.
fn remount(disk: &Path, mode: &str) {
    let mut last = String::new();
    for _ in 0..100 {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(disk)
            .output()
            .unwrap();
        if out.status.success() {
            return;
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("remount {mode} failed: {last}");
}

/// Runs a tuning on the test disk, takes the disk away midway, checks that `shoal tune` ends by
/// itself with a message naming the cause, then gives the disk back and reruns to completion.
fn stops_then_finishes(fault: Fault, causes: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let Some(_mounted) = Tmpfs::mount(&disk, "16m") else {
        eprintln!("full_disk: cannot mount a tmpfs here (needs root): not run");
        return;
    };
    let db = disk.join("t.db");
    let log = dir.path().join("tune.log");
    let mut child = tune(dir.path())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();

    // Some work committed, then the disk is taken away under the running tuning.
    let t0 = Instant::now();
    while results(&db) < 3 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "tuning ended too early"
        );
        assert!(t0.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Fault::ReadOnly = fault {
        // A mount with files open for writing cannot turn read-only: the tuning is killed
        // first, and the store is read-only when the same command starts again.
        child.kill().unwrap();
        child.wait().unwrap();
        fault.apply(&disk);
        child = tune(dir.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
    } else {
        fault.apply(&disk);
    }

    // It stops by itself, non-zero, saying why and what to do.
    let status = wait(&mut child, Duration::from_secs(120)).unwrap_or_else(|| {
        let _ = child.kill();
        panic!(
            "{fault:?}: shoal tune still running two minutes later:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{stderr}");
    // The last words name the cause (whichever loop gave up first: a worker that could not
    // write, or the store), and, for a run that had started, what to do.
    let last = stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("shoal:") || l.contains("stopped:"))
        .unwrap_or_else(|| panic!("{fault:?}: no last words:\n{stderr}"));
    assert!(causes.iter().any(|c| last.contains(c)), "{fault:?}: {last}");
    if let Fault::Full = fault {
        assert!(last.contains("run the same command again"), "{last}");
    }

    // The disk back: the same command finishes, one result per candidate.
    fault.undo(&disk);
    common::run_ok(&mut tune(dir.path()));
    let per_job = common::result_rows_per_job(&db);
    assert_eq!(per_job.len(), 60);
    for (job, n) in &per_job {
        assert_eq!(*n, 1, "{fault:?}: job {job} has {n} results");
    }
    let finals = common::final_results(&db);
    let not_measured: Vec<_> = finals
        .iter()
        .filter(|r| r.state != shoal_model::JobState::Evaluated)
        .map(|r| (r.job, r.state, r.failure, r.last_error.clone()))
        .collect();
    assert!(not_measured.is_empty(), "{fault:?}: {not_measured:#?}");
}

#[test]
fn a_full_disk_stops_tune_with_a_clear_error_and_a_rerun_finishes() {
    stops_then_finishes(Fault::Full, &["cannot write its disk", "disk is full"]);
}

#[test]
fn a_read_only_disk_stops_tune_with_a_clear_error_and_a_rerun_finishes() {
    stops_then_finishes(
        Fault::ReadOnly,
        &["cannot write its disk", "readonly", "Read-only"],
    );
}

/// An export into a directory on a read-only disk says which directory, before it computes or
/// writes anything, and the files there stay as they were.
#[test]
fn an_export_into_a_read_only_directory_names_it_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let exports = dir.path().join("exports");
    std::fs::create_dir(&exports).unwrap();
    let Some(_mounted) = Tmpfs::mount(&exports, "1m") else {
        eprintln!("full_disk: cannot mount a tmpfs here (needs root): not run");
        return;
    };
    std::fs::create_dir(disk_dir(dir.path())).unwrap();
    common::run_ok(&mut tune(dir.path()));
    std::fs::write(exports.join("tuned.csv"), "kept\n").unwrap();
    remount(&exports, "ro");
    let out = common::shoal(dir.path())
        .args([
            "export",
            "--db",
            "disk/t.db",
            "--session",
            "1",
            "--force",
            "-o",
        ])
        .arg(&exports)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("cannot write into") && err.contains("exports"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(exports.join("tuned.csv")).unwrap(),
        "kept\n"
    );
    remount(&exports, "rw");
}

fn disk_dir(dir: &Path) -> PathBuf {
    dir.join("disk")
}
