//! Where tuned code runs: a sandbox that hides the worker from it.
//!
//! Every child Shoal starts (a build, a candidate, the library runner, `fin`) runs code that a
//! kernel author wrote or chose, and a kernel author is not trusted with the cluster. Without a
//! boundary, a child of the same user reads `/proc/<worker>/environ` (the broker's and the
//! database's passwords), `/proc/<worker>/mem`, and the signing key file (mode 600, but the same
//! user), signals the worker, and connects to the broker, the database or its unix socket.
//!
//! The boundary is [bubblewrap](https://github.com/containers/bubblewrap) (`bwrap`, Debian's
//! `bubblewrap`, the sandbox Flatpak runs on): Linux namespaces that an unprivileged user can
//! create, with every capability dropped. [`Sandbox::argv`] is the one place that decides what a
//! child sees:
//!
//! - **its own pid namespace and a fresh `/proc`**: no other process of the host is visible, so
//!   none can be read, traced or signalled (`kill(-1)` reaches only the sandbox);
//! - **no network** (its own network namespace, loopback down): it cannot reach the broker or the
//!   database, with or without credentials;
//! - **the host read-only**, with a private empty `/tmp` and `/run` (so no unix socket of a
//!   server is reachable: MariaDB's `/run/mysqld/mysqld.sock` would let a root child in as the
//!   database's root), a minimal `/dev` with the GPU's device nodes bound in, and Shoal's secret
//!   paths (the key file, the config and credential files and their directories) covered by an
//!   empty directory or `/dev/null`;
//! - **what a kernel needs**: its spec's directory tree and the files its links point to
//!   (`TuningSpec::tree_roots`) and the directories the step names (the artifact, the work
//!   directory) read-only, and its output directory writable; none of them uncovers a private
//!   directory above which it lies (a needed `/var` leaves `/var/tmp` private);
//! - **no capabilities, its own session**, and killed with its parent (`--die-with-parent`), so
//!   the process-group kill of [`crate::process`] still takes everything it started.
//!
//! The worker also makes itself undumpable at start (the CLI calls [`harden_this_process`]):
//! its `/proc` files become root's and a process of the same user cannot attach to it, a second
//! layer wherever the sandbox is off.
//!
//! The policy is the host's, installed once at start-up by the CLI ([`install`]), and applied by
//! [`crate::process::run`] and the library runner to every child; with none installed (the
//! crate's own unit tests) children run unconfined.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Device nodes a GPU kernel needs, bound into the sandbox's `/dev` when they exist: NVIDIA's
/// (every `/dev/nvidia*` and the `nvidia-caps` directory), AMD's KFD and the DRM render nodes.
const GPU_NODE_PREFIXES: [&str; 1] = ["nvidia"];
const GPU_NODES: [&str; 2] = ["/dev/kfd", "/dev/dri"];

/// Directories of the host that tuned code never sees, whatever the configuration: where
/// servers keep their unix sockets and the host's temporary files (another process's, a
/// private broker's or database's data directory in tests), replaced by empty ones.
const PRIVATE_DIRS: [&str; 3] = ["/tmp", "/run", "/var/tmp"];

/// Paths under `/run` a GPU stack may use, bound back in when they exist.
const RUN_KEEP: [&str; 1] = ["/run/nvidia-persistenced"];

/// How children are confined on this host.
#[derive(Clone, Debug)]
pub enum Confinement {
    /// Every child in a [`Sandbox`].
    Sandbox(Sandbox),
    /// Children run as this process's user, unconfined: chosen explicitly (`--sandbox off`).
    Off,
}

/// A bubblewrap sandbox: the program, and the secret paths it hides.
#[derive(Clone, Debug)]
pub struct Sandbox {
    program: PathBuf,
    /// Files and directories that tuned code must not see (the key file, credential files).
    hidden: Vec<PathBuf>,
    /// GPU device nodes bound into the sandbox's `/dev`.
    devices: Vec<PathBuf>,
}

/// Why the sandbox cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "bubblewrap (`bwrap`) is not installed, and tuned code is run only in its sandbox: \
         install it (Debian: `apt-get install bubblewrap`; scripts/setup-debian does), or pass \
         `--sandbox off` to run tuned code as this user, able to read this process's secrets"
    )]
    NotInstalled,
    #[error(
        "the sandbox does not start on this host (`{program}`: {detail}); tuned code is run \
         only in it. Unprivileged user namespaces may be disabled (sysctl \
         kernel.unprivileged_userns_clone, or an AppArmor rule for bwrap); or pass \
         `--sandbox off` to run tuned code unconfined"
    )]
    Broken { program: String, detail: String },
}

static CONFINEMENT: OnceLock<Confinement> = OnceLock::new();

/// Sets this process's confinement of children, once, before any child starts. A second call
/// changes nothing and returns `false`.
pub fn install(confinement: Confinement) -> bool {
    CONFINEMENT.set(confinement).is_ok()
}

/// The sandbox children start in, if one is installed.
pub(crate) fn current() -> Option<&'static Sandbox> {
    match CONFINEMENT.get() {
        Some(Confinement::Sandbox(s)) => Some(s),
        _ => None,
    }
}

/// Makes this process undumpable: its `/proc/<pid>/{environ,mem,maps}` become root's, and no
/// process without `CAP_SYS_PTRACE` may attach to it or read its memory, even one of the same
/// user. (Its core dumps are gone too.) Errors only if the kernel refuses, which it does not.
pub fn harden_this_process() -> io::Result<()> {
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) changes a flag of this process; no memory is passed.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Sandbox {
    /// The sandbox of this host: `bwrap` from `PATH`, hiding `secrets` (files or directories;
    /// those that do not exist are skipped) and binding the GPU nodes found under `/dev`.
    pub fn find(secrets: Vec<PathBuf>) -> Result<Sandbox, SandboxError> {
        let program = crate::spec::find_program("bwrap", Path::new("/"))
            .map_err(|_| SandboxError::NotInstalled)?;
        Ok(Sandbox::new(program, secrets, gpu_nodes(Path::new("/dev"))))
    }

    /// A sandbox with this program, secrets and device nodes.
    pub fn new(program: PathBuf, secrets: Vec<PathBuf>, devices: Vec<PathBuf>) -> Sandbox {
        let mut hidden: Vec<PathBuf> = secrets
            .into_iter()
            .filter_map(|p| std::path::absolute(&p).ok())
            .collect();
        hidden.sort();
        hidden.dedup();
        Sandbox {
            program,
            hidden,
            devices,
        }
    }

    /// The secret paths this sandbox hides.
    pub fn hidden(&self) -> &[PathBuf] {
        &self.hidden
    }

    /// Starts `true` in the sandbox: an error that says why when it cannot start (no user
    /// namespaces), so that a worker fails at start rather than every candidate later.
    pub fn check(&self) -> Result<(), SandboxError> {
        let cwd = std::env::temp_dir();
        let argv = self.argv(&["true".to_string()], &cwd, &[], &[]);
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| SandboxError::Broken {
                program: self.program.display().to_string(),
                detail: e.to_string(),
            })?;
        if out.status.success() {
            return Ok(());
        }
        Err(SandboxError::Broken {
            program: self.program.display().to_string(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }

    /// The argv that runs `argv` in the sandbox, in `cwd`, seeing `readable` (and `cwd`)
    /// read-only and `writable` read-write. Every path must exist when the child starts.
    pub fn argv(
        &self,
        argv: &[String],
        cwd: &Path,
        readable: &[PathBuf],
        writable: &[PathBuf],
    ) -> Vec<String> {
        let mut a: Vec<OsString> = vec![self.program.clone().into()];
        let mut push = |words: &[&std::ffi::OsStr]| a.extend(words.iter().map(|w| w.into()));
        let s = |x: &'static str| std::ffi::OsStr::new(x);
        // Namespaces: user (where allowed), pid, network, ipc, uts, cgroup; no capabilities; a
        // new session (no terminal to inject into); killed with its parent.
        push(&[
            s("--unshare-all"),
            s("--die-with-parent"),
            s("--new-session"),
            s("--cap-drop"),
            s("ALL"),
        ]);
        // The host, read-only; a fresh /proc of the sandbox's own pid namespace; a minimal /dev.
        push(&[s("--ro-bind"), s("/"), s("/")]);
        push(&[s("--proc"), s("/proc"), s("--dev"), s("/dev")]);
        for d in &self.devices {
            push(&[s("--dev-bind-try"), d.as_os_str(), d.as_os_str()]);
        }
        for d in PRIVATE_DIRS {
            push(&[s("--tmpfs"), s(d)]);
        }
        for d in RUN_KEEP {
            push(&[s("--ro-bind-try"), s(d), s(d)]);
        }
        // What the step needs, then the secrets: covered last, so that no directory a step
        // names can uncover one (a key file inside a spec's directory stays hidden).
        let mut needed: Vec<(&Path, bool)> = vec![(cwd, false)];
        needed.extend(readable.iter().map(|p| (p.as_path(), false)));
        needed.extend(writable.iter().map(|p| (p.as_path(), true)));
        fn bind(p: &Path, rw: bool) -> [&std::ffi::OsStr; 3] {
            let how = if rw { "--bind" } else { "--ro-bind" };
            [how.as_ref(), p.as_os_str(), p.as_os_str()]
        }
        for &(p, rw) in &needed {
            // `/` is bound read-only already; binding it again would only uncover the
            // private directories.
            if p != Path::new("/") || rw {
                push(&bind(p, rw));
            }
        }
        // A needed directory above a private one (`/var` above `/var/tmp`) shows the host's
        // copy of it: cover that again, and bind back what the step needs inside it.
        for d in PRIVATE_DIRS.map(Path::new) {
            let above = |p: &Path| d.starts_with(p) && p != d && p != Path::new("/");
            if !needed.iter().any(|&(p, _)| above(p)) {
                continue;
            }
            push(&[s("--tmpfs"), d.as_os_str()]);
            for keep in RUN_KEEP
                .map(Path::new)
                .into_iter()
                .filter(|k| k.starts_with(d))
            {
                push(&[s("--ro-bind-try"), keep.as_os_str(), keep.as_os_str()]);
            }
            for &(p, rw) in needed.iter().filter(|(p, _)| p.starts_with(d)) {
                push(&bind(p, rw));
            }
        }
        for p in &self.hidden {
            // A secret in a private directory is gone already, unless a needed one shows it.
            let private = PRIVATE_DIRS.iter().any(|d| p.starts_with(d));
            let shown = std::iter::once(cwd)
                .chain(readable.iter().map(PathBuf::as_path))
                .chain(writable.iter().map(PathBuf::as_path))
                .any(|n| p.starts_with(n));
            if private && !shown {
                continue;
            }
            match std::fs::metadata(p) {
                Ok(m) if m.is_dir() => push(&[s("--tmpfs"), p.as_os_str()]),
                Ok(_) => push(&[s("--ro-bind"), s("/dev/null"), p.as_os_str()]),
                Err(_) => {}
            }
        }
        push(&[s("--chdir"), cwd.as_os_str(), s("--")]);
        a.extend(argv.iter().map(OsString::from));
        a.into_iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect()
    }
}

/// The GPU device nodes under `dev` (normally `/dev`).
fn gpu_nodes(dev: &Path) -> Vec<PathBuf> {
    let mut nodes: Vec<PathBuf> = std::fs::read_dir(dev)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            GPU_NODE_PREFIXES.iter().any(|p| name.starts_with(p))
        })
        .map(|e| e.path())
        .collect();
    nodes.extend(
        GPU_NODES
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.starts_with(dev) && p.exists()),
    );
    nodes.sort();
    nodes
}

/// How a child in the sandbox ended, from the status of `bwrap`, which exits with the child's
/// code, or 128 + the signal that killed it (so a candidate that exits with 139 of its own
/// accord reads as killed by SIGSEGV: the convention of every shell).
pub(crate) fn child_status(code: i32) -> SandboxedEnd {
    if (129..=128 + 64).contains(&code) {
        SandboxedEnd::Signaled(code - 128)
    } else {
        SandboxedEnd::Exited(code)
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SandboxedEnd {
    Exited(i32),
    Signaled(i32),
}

/// Whether a sandboxed child's output says that the sandbox itself did not start it (bwrap's
/// own errors, `bwrap: …`, such as a program it could not execute): the child never ran.
pub(crate) fn sandbox_failed(code: i32, stderr: &str) -> bool {
    code == 1 && stderr.starts_with("bwrap: ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(a: &[String]) -> String {
        a.join(" ")
    }

    #[test]
    fn the_sandbox_hides_the_host_and_shows_what_the_step_needs() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("hmac.key");
        std::fs::write(&key, "k").unwrap();
        let creds = dir.path().join("creds");
        std::fs::create_dir(&creds).unwrap();
        let missing = dir.path().join("not-there");
        // A secret under /tmp that no needed directory shows is gone with /tmp already.
        let elsewhere = tempfile::tempdir().unwrap();
        let gone = elsewhere.path().join("other.key");
        std::fs::write(&gone, "k").unwrap();
        let sb = Sandbox::new(
            "/usr/bin/bwrap".into(),
            vec![key.clone(), creds.clone(), missing.clone(), gone.clone()],
            vec!["/dev/nvidia0".into()],
        );
        // The spec's directory holds the secrets here: they stay hidden all the same.
        let cwd = dir.path().to_path_buf();
        let out = PathBuf::from("/tmp/w/build-1");
        let art = PathBuf::from("/tmp/w/artifacts");
        let a = sb.argv(
            &["cc".into(), "-o".into(), "x".into()],
            &cwd,
            &[art],
            &[out],
        );
        let w = words(&a);
        assert_eq!(a[0], "/usr/bin/bwrap");
        for needed in [
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop ALL",
            "--ro-bind / /",
            "--proc /proc",
            "--dev /dev",
            "--dev-bind-try /dev/nvidia0 /dev/nvidia0",
            "--tmpfs /tmp",
            "--tmpfs /run",
            "--ro-bind /tmp/w/artifacts /tmp/w/artifacts",
            "--bind /tmp/w/build-1 /tmp/w/build-1",
        ] {
            assert!(w.contains(needed), "`{needed}` missing from {w}");
        }
        let cwd_text = cwd.display().to_string();
        assert!(
            w.contains(&format!("--ro-bind {cwd_text} {cwd_text}")),
            "{w}"
        );
        assert!(w.contains(&format!("--chdir {cwd_text} -- cc -o x")), "{w}");
        assert!(!w.contains(&gone.display().to_string()), "{w}");
        // Secrets last, after the binds (a needed directory cannot uncover them).
        let hide_key = format!("--ro-bind /dev/null {}", key.display());
        let hide_creds = format!("--tmpfs {}", creds.display());
        assert!(w.find(&hide_key).unwrap() > w.find("--bind /tmp/w/build-1").unwrap());
        assert!(w.contains(&hide_creds), "{w}");
        assert!(!w.contains(&missing.display().to_string()), "{w}");
        // The command is last, after `--`, untouched.
        assert_eq!(&a[a.len() - 4..], ["--", "cc", "-o", "x"]);
    }

    /// A step shown a directory above a private one keeps the private one private: `/` is not
    /// bound again (which would show the host's `/tmp` and `/run`), and a needed `/var` is
    /// followed by a fresh `/var/tmp` with what the step needs inside it bound back.
    #[test]
    fn a_needed_directory_above_a_private_one_does_not_uncover_it() {
        let sb = Sandbox::new("/usr/bin/bwrap".into(), vec![], vec![]);
        let a = sb.argv(
            &["cc".into()],
            Path::new("/tmp/w/spec"),
            &["/".into(), "/var".into(), "/var/tmp/w/lib".into()],
            &["/tmp/w/out".into()],
        );
        let w = words(&a);
        assert_eq!(w.matches("--ro-bind / /").count(), 1, "{w}");
        let last = |needle: &str| w.rfind(needle).unwrap_or_else(|| panic!("{needle}: {w}"));
        assert!(
            last("--tmpfs /tmp") < last("--ro-bind /tmp/w/spec /tmp/w/spec"),
            "{w}"
        );
        assert!(
            last("--tmpfs /tmp") < last("--bind /tmp/w/out /tmp/w/out"),
            "{w}"
        );
        assert!(
            last("--ro-bind /var /var") < last("--tmpfs /var/tmp"),
            "{w}"
        );
        assert!(
            last("--tmpfs /var/tmp") < last("--ro-bind /var/tmp/w/lib /var/tmp/w/lib"),
            "{w}"
        );
        // /run is below nothing needed: covered once, at the start.
        assert_eq!(w.matches("--tmpfs /run").count(), 1, "{w}");
    }

    #[test]
    fn a_status_of_128_plus_n_is_signal_n() {
        assert_eq!(child_status(0), SandboxedEnd::Exited(0));
        assert_eq!(child_status(3), SandboxedEnd::Exited(3));
        assert_eq!(child_status(128), SandboxedEnd::Exited(128));
        assert_eq!(child_status(139), SandboxedEnd::Signaled(11));
        assert_eq!(child_status(137), SandboxedEnd::Signaled(9));
        assert_eq!(child_status(255), SandboxedEnd::Exited(255));
        assert!(sandbox_failed(
            1,
            "bwrap: execvp x: No such file or directory"
        ));
        assert!(!sandbox_failed(1, "error: x"));
        assert!(!sandbox_failed(2, "bwrap: x"));
    }

    #[test]
    fn gpu_nodes_are_found_by_name() {
        let dev = tempfile::tempdir().unwrap();
        for n in ["nvidia0", "nvidiactl", "nvidia-uvm", "null", "sda"] {
            std::fs::write(dev.path().join(n), "").unwrap();
        }
        let found: Vec<String> = gpu_nodes(dev.path())
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(found, ["nvidia-uvm", "nvidia0", "nvidiactl"]);
    }
}
