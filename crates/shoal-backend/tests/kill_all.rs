//! `process::kill_all` kills every running child group. In its own test binary: it would kill
//! the children of tests running beside it.

use std::time::{Duration, Instant};

use shoal_backend::process::{self, ChildEnd, ChildSpec};

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
            !matches!(state, Some('Z') | Some('X'))
        })
        .unwrap_or(false)
}

#[tokio::test]
async fn kill_all_kills_running_groups() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("sleep 1000 & echo $! > {}; wait", pidfile.display());
    let spec = ChildSpec::new(
        vec!["sh".into(), "-c".into(), script],
        dir.path(),
        Duration::from_secs(60),
    );
    let started = Instant::now();
    let (out, ()) = tokio::join!(process::run(&spec), async {
        while !std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n')) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        process::kill_all();
    });
    let out = out.unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        out.end,
        ChildEnd::Signaled {
            signal: libc::SIGKILL,
            name: "SIGKILL".into()
        }
    );
    let grandchild: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while alive(grandchild) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(grandchild));
}
