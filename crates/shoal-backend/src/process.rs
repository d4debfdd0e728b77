//! Child processes: the one place in Shoal that starts them.
//!
//! Everything a backend runs (a compiler, a benchmark, MIOpen's `fin`) is tuned code or code
//! driven by tuned code, so it may hang, crash, fork helpers that outlive it, or print without
//! end. [`run`] contains all of that:
//!
//! - the child gets **its own process group** (`setpgid(0, 0)`), so that it and every process it
//!   starts can be killed together with `kill(-pgid, SIGKILL)`;
//! - a **timeout**: when it passes, the whole group is killed, the child is reaped and the result
//!   is [`ChildEnd::TimedOut`];
//! - after a **normal exit** the group is killed too, so that stray grandchildren (a
//!   backgrounded helper, a compiler server) do not outlive the job or hold its pipes open;
//! - if the future is **dropped** (an actor shutting down mid-run), a guard kills the group;
//! - every live group is registered, so that [`kill_all`] (a second Ctrl-C) can kill them all;
//! - stdout and stderr are **drained concurrently** (a child blocked on a full pipe would look
//!   like a hang) and only their last `output_limit` bytes are kept;
//! - the child's environment is the parent's **without its secrets** ([`crate::child_env`]:
//!   the store's and broker's URLs, the signing key file);
//! - when the host installed one, the child runs in the **sandbox** ([`crate::sandbox`]): it
//!   sees no other process, no network, the host read-only and no secret file, and writes only
//!   where [`ChildSpec::writable`] says;
//! - stdin is `/dev/null`, core dumps are disabled (`RLIMIT_CORE = 0`: a crashing candidate
//!   must not write gigabytes into the work directory), and the child can be pinned to one CPU.
//!
//! The process group id is the child's pid. The group is killed after the child is reaped;
//! Linux does not hand out a pid again while a group of that id has members, and allocates
//! pids cyclically, so the late kill cannot reach an unrelated process in practice.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};

/// How long the output pipes may stay open after the group was killed (a process that left
/// the group with `setsid` may still hold them); after that they are abandoned.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// What to run and under which limits.
#[derive(Clone, Debug)]
pub struct ChildSpec {
    /// Program and arguments; no shell is involved.
    pub argv: Vec<String>,
    /// Working directory of the child.
    pub cwd: PathBuf,
    /// Variables added to the inherited environment (secrets are removed all the same).
    pub env: Vec<(String, String)>,
    /// Wall-clock limit; the whole process group is killed when it passes.
    pub timeout: Duration,
    /// Pin the child (and what it starts) to this CPU.
    pub cpu: Option<usize>,
    /// Bytes of stdout and of stderr kept (the tail).
    pub output_limit: usize,
    /// Directories the child reads besides `cwd` (a spec's tree, an artifact's directory),
    /// where the host hides the rest (`/tmp` in the sandbox).
    pub readable: Vec<PathBuf>,
    /// Directories the child may write (its output directory); in the sandbox nothing else is
    /// writable but a private `/tmp`.
    pub writable: Vec<PathBuf>,
}

impl ChildSpec {
    /// A spec with no extra environment, no pinning and 64 KiB of output kept.
    pub fn new(argv: Vec<String>, cwd: impl Into<PathBuf>, timeout: Duration) -> Self {
        ChildSpec {
            argv,
            cwd: cwd.into(),
            env: Vec::new(),
            timeout,
            cpu: None,
            output_limit: 64 * 1024,
            readable: Vec::new(),
            writable: Vec::new(),
        }
    }
}

/// How the child ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChildEnd {
    /// It exited with this code.
    Exited(i32),
    /// It was killed by a signal (not ours), e.g. `SIGSEGV`.
    Signaled { signal: i32, name: String },
    /// It ran past the timeout and was killed with its group.
    TimedOut,
}

/// The end of a child and the tails of its output.
#[derive(Clone, Debug)]
pub struct ChildOutput {
    pub end: ChildEnd,
    pub stdout: String,
    pub stderr: String,
    pub duration: Duration,
}

impl ChildOutput {
    pub fn success(&self) -> bool {
        self.end == ChildEnd::Exited(0)
    }
}

/// The conventional name of a signal (`SIGSEGV`), or `SIG<n>` for one without a name here.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("SIG{signal}"),
    };
    name.to_string()
}

/// The process groups of the children now running (their leaders' pids).
static LIVE_GROUPS: Mutex<Vec<libc::pid_t>> = Mutex::new(Vec::new());

fn live_groups() -> std::sync::MutexGuard<'static, Vec<libc::pid_t>> {
    LIVE_GROUPS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Kills the process group of every child that [`run`] has started and not yet finished.
/// For an immediate stop (a second Ctrl-C) just before the process exits; safe to call from
/// any thread.
pub fn kill_all() {
    for pgid in live_groups().iter() {
        // SAFETY: kill(2) on a process group; no memory is touched.
        unsafe {
            libc::kill(-*pgid, libc::SIGKILL);
        }
    }
}

/// Registers a child's process group while it lives, and kills the group when dropped
/// unless disarmed.
pub(crate) struct GroupGuard {
    pgid: libc::pid_t,
    armed: bool,
}

impl GroupGuard {
    pub(crate) fn new(pgid: libc::pid_t) -> Self {
        live_groups().push(pgid);
        GroupGuard { pgid, armed: true }
    }

    pub(crate) fn kill(&self) {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
        unsafe {
            libc::kill(-self.pgid, libc::SIGKILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            self.kill();
        }
        let mut live = live_groups();
        if let Some(i) = live.iter().position(|&p| p == self.pgid) {
            live.swap_remove(i);
        }
    }
}

/// The last `limit` bytes of a stream, and how many were dropped before them.
pub(crate) struct Tail {
    buf: Vec<u8>,
    limit: usize,
    dropped: u64,
}

impl Tail {
    pub(crate) fn new(limit: usize) -> Self {
        Tail {
            buf: Vec::new(),
            limit,
            dropped: 0,
        }
    }

    pub(crate) fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        // Trim only when twice over the limit, so that trimming stays amortised O(1) per byte.
        if self.buf.len() > self.limit.saturating_mul(2).max(8192) {
            self.trim();
        }
    }

    fn trim(&mut self) {
        if self.buf.len() > self.limit {
            let cut = self.buf.len() - self.limit;
            self.buf.drain(..cut);
            self.dropped += cut as u64;
        }
    }

    /// The kept bytes as text, without consuming.
    pub(crate) fn text(&self) -> String {
        let start = self.buf.len().saturating_sub(self.limit);
        String::from_utf8_lossy(&self.buf[start..]).into_owned()
    }

    fn into_string(mut self) -> String {
        self.trim();
        let text = String::from_utf8_lossy(&self.buf);
        if self.dropped > 0 {
            format!("[… {} bytes dropped …]\n{text}", self.dropped)
        } else {
            text.into_owned()
        }
    }
}

async fn drain(mut pipe: Option<impl AsyncRead + Unpin>, tail: &mut Tail) {
    let Some(pipe) = pipe.as_mut() else { return };
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => tail.push(&chunk[..n]),
        }
    }
}

fn cpu_set_for(cpu: usize) -> io::Result<libc::cpu_set_t> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is beyond the CPU set size"),
        ));
    }
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set, and `cpu` was
    // checked to be inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        Ok(set)
    }
}

/// What every child gets between fork and exec: no core dumps (a crashing candidate must not
/// write gigabytes into the work directory) and, when given, pinning to one CPU.
pub(crate) fn limit_child(cmd: &mut tokio::process::Command, cpu: Option<usize>) -> io::Result<()> {
    let cpu_set = cpu.map(cpu_set_for).transpose()?;
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system
    // calls (setrlimit, sched_setaffinity) on values prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            if let Some(set) = cpu_set.as_ref() {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    Ok(())
}

/// What to start for `argv`: `argv` itself, or, where the host installed a sandbox, the
/// sandbox's command around it, seeing `readable` and writing `writable` (see
/// [`crate::sandbox::Sandbox::argv`]). Fails as a spawn would when the program cannot be started
/// ([`check_program`]). Every child Shoal starts goes through here.
pub(crate) fn confined_argv(
    argv: &[String],
    cwd: &std::path::Path,
    readable: &[PathBuf],
    writable: &[PathBuf],
) -> io::Result<Vec<String>> {
    let program = argv
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    check_program(program, cwd)?;
    Ok(match crate::sandbox::current() {
        Some(sb) => sb.argv(argv, cwd, readable, writable),
        None => argv.to_vec(),
    })
}

/// How a child that was started with [`confined_argv`] ended: in the sandbox, bwrap's exit
/// status of 128 + n is the child's death by signal n.
pub(crate) fn child_end(status: std::process::ExitStatus) -> ChildEnd {
    let signaled = |signal| ChildEnd::Signaled {
        signal,
        name: signal_name(signal),
    };
    match (status.code(), status.signal()) {
        (Some(code), _) if crate::sandbox::current().is_some() => {
            match crate::sandbox::child_status(code) {
                crate::sandbox::SandboxedEnd::Exited(code) => ChildEnd::Exited(code),
                crate::sandbox::SandboxedEnd::Signaled(signal) => signaled(signal),
            }
        }
        (Some(code), _) => ChildEnd::Exited(code),
        (None, Some(signal)) => signaled(signal),
        (None, None) => ChildEnd::Exited(-1),
    }
}

/// Fails as a spawn would when `program` cannot be started: a path (relative to `cwd`) that is
/// not an executable file, or a name found on no directory of `PATH`. Checked before the
/// sandbox starts it, since there a missing program would look like a child that ran and
/// failed.
fn check_program(program: &str, cwd: &std::path::Path) -> io::Result<()> {
    crate::spec::find_program(program, cwd)
        .map(|_| ())
        .map_err(|e| io::Error::new(io::ErrorKind::NotFound, e))
}

/// Runs one child to its end (or its timeout) and returns how it ended with its output.
///
/// `Err` only when the child cannot be started (the program is missing, not executable, the
/// working directory does not exist …); every way a started child can end is an `Ok`.
pub async fn run(spec: &ChildSpec) -> io::Result<ChildOutput> {
    let argv = confined_argv(&spec.argv, &spec.cwd, &spec.readable, &spec.writable)?;
    let (program, args) = argv.split_first().expect("not empty");

    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    crate::child_env::scrub(&mut cmd);
    limit_child(&mut cmd, spec.cpu)?;

    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| io::Error::other("child exited before its pid was read"))?;
    let mut guard = GroupGuard::new(pid as libc::pid_t);
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut out_tail = Tail::new(spec.output_limit);
    let mut err_tail = Tail::new(spec.output_limit);
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();

    let waiter = async {
        let waited = tokio::time::timeout(spec.timeout, child.wait()).await;
        let result = match waited {
            Ok(status) => status.map(Some),
            Err(_elapsed) => {
                guard.kill();
                let _ = child.start_kill(); // in case it left its group
                child.wait().await.map(|_| None)
            }
        };
        // The leader is gone; kill what is left of its group (stray grandchildren).
        guard.kill();
        let _ = done_tx.send(());
        result
    };
    let readers = async {
        let both = async {
            tokio::join!(drain(stdout, &mut out_tail), drain(stderr, &mut err_tail));
        };
        let grace = async {
            let _ = done_rx.await;
            tokio::time::sleep(DRAIN_GRACE).await;
        };
        tokio::select! {
            _ = both => {}
            _ = grace => {}
        }
    };
    let (status, ()) = tokio::join!(waiter, readers);
    guard.armed = false;
    let duration = started.elapsed();

    let stderr = err_tail.into_string();
    let end = match status? {
        None => ChildEnd::TimedOut,
        Some(status) => {
            if let Some(code) = status.code() {
                if crate::sandbox::current().is_some()
                    && crate::sandbox::sandbox_failed(code, &stderr)
                {
                    return Err(io::Error::other(format!(
                        "the sandbox did not start `{}`: {}",
                        spec.argv[0],
                        stderr.trim()
                    )));
                }
            }
            child_end(status)
        }
    };
    Ok(ChildOutput {
        end,
        stdout: out_tail.into_string(),
        stderr,
        duration,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout_ms: u64) -> ChildSpec {
        ChildSpec::new(
            vec!["sh".into(), "-c".into(), script.into()],
            std::env::temp_dir(),
            Duration::from_millis(timeout_ms),
        )
    }

    /// True while `pid` names a live (not zombie) process.
    fn alive(pid: i32) -> bool {
        // SAFETY: signal 0 only checks for existence.
        if unsafe { libc::kill(pid, 0) } != 0 {
            return false;
        }
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => {
                let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
                !matches!(state, Some('Z') | Some('X'))
            }
            Err(_) => false,
        }
    }

    /// The first CPU this process may run on.
    fn first_allowed_cpu() -> usize {
        // SAFETY: sched_getaffinity fills the zeroed set; CPU_ISSET only reads it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
            (0..libc::CPU_SETSIZE as usize)
                .find(|&c| libc::CPU_ISSET(c, &set))
                .unwrap_or(0)
        }
    }

    async fn gone_soon(pid: i32) -> bool {
        for _ in 0..100 {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    #[tokio::test]
    async fn exit_code_and_output() {
        let out = run(&sh("echo hello; echo oops >&2; exit 3", 5000))
            .await
            .unwrap();
        assert_eq!(out.end, ChildEnd::Exited(3));
        assert_eq!(out.stdout, "hello\n");
        assert_eq!(out.stderr, "oops\n");
        assert!(!out.success());
    }

    #[tokio::test]
    async fn signal_is_named() {
        let out = run(&sh("kill -SEGV $$", 5000)).await.unwrap();
        assert_eq!(
            out.end,
            ChildEnd::Signaled {
                signal: libc::SIGSEGV,
                name: "SIGSEGV".into()
            }
        );
    }

    #[tokio::test]
    async fn missing_program_is_an_io_error() {
        let spec = ChildSpec::new(
            vec!["/definitely/not/here".into()],
            std::env::temp_dir(),
            Duration::from_secs(1),
        );
        assert!(run(&spec).await.is_err());
        let empty = ChildSpec::new(vec![], std::env::temp_dir(), Duration::from_secs(1));
        assert!(run(&empty).await.is_err());
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let script = "sleep 1000 & echo $!; while :; do :; done";
        let started = Instant::now();
        let out = run(&sh(script, 1500)).await.unwrap();
        assert_eq!(out.end, ChildEnd::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(5));
        let grandchild: i32 = out.stdout.trim().parse().unwrap();
        assert!(
            gone_soon(grandchild).await,
            "grandchild {grandchild} survived"
        );
    }

    #[tokio::test]
    async fn stray_grandchild_is_killed_after_a_normal_exit() {
        // The grandchild keeps stdout open: without the group kill, draining would never end.
        let started = Instant::now();
        let out = run(&sh("sleep 1000 & echo $!; exit 0", 30_000))
            .await
            .unwrap();
        assert_eq!(out.end, ChildEnd::Exited(0));
        assert!(started.elapsed() < Duration::from_secs(5));
        let grandchild: i32 = out.stdout.trim().parse().unwrap();
        assert!(gone_soon(grandchild).await);
    }

    #[tokio::test]
    async fn dropping_the_future_kills_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let script = format!("sleep 1000 & echo $! > {}; wait", pidfile.display());
        let spec = sh(&script, 60_000);
        tokio::select! {
            _ = run(&spec) => panic!("should not finish"),
            _ = async {
                while !std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n')) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            } => {}
        }
        let grandchild: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(gone_soon(grandchild).await);
    }

    #[tokio::test]
    async fn output_keeps_the_tail() {
        let mut spec = sh("seq 1 100000", 10_000);
        spec.output_limit = 100;
        let out = run(&spec).await.unwrap();
        assert!(out.stdout.starts_with("[… "), "{}", &out.stdout[..40]);
        assert!(out.stdout.ends_with("99999\n100000\n"));
        assert!(out.stdout.len() < 200);
    }

    #[tokio::test]
    async fn env_cwd_and_cpu_pinning() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = sh(
            "echo $SHOAL_X; pwd; grep Cpus_allowed_list /proc/self/status",
            5000,
        );
        spec.cwd = dir.path().to_path_buf();
        spec.env.push(("SHOAL_X".into(), "42".into()));
        let cpu = first_allowed_cpu();
        spec.cpu = Some(cpu);
        let out = run(&spec).await.unwrap();
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines[0], "42");
        assert_eq!(
            std::fs::canonicalize(lines[1]).unwrap(),
            std::fs::canonicalize(dir.path()).unwrap()
        );
        assert!(lines[2].ends_with(&format!("\t{cpu}")), "{}", lines[2]);
    }
}
