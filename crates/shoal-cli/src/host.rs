//! What this host offers the actors, read here once: its devices (with the test-double GPU of
//! `SHOAL_TEST_FAKE_GPU`), the program of a library-mode runner (`SHOAL_RUNNER`) and where
//! MIOpen's `fin` is (`--fin`, `SHOAL_FIN`). The crates below take these as values, so only the
//! CLI reads the environment (the tidy test holds it to that). And how its tuned code is
//! confined ([`confine_children`]): the sandbox, and the secret paths it hides. And its name
//! ([`hostname`]).

use std::path::{Path, PathBuf};

use shoal_gpu::{Device, SystemRoot};

/// `--sandbox`: whether tuned code runs in the sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SandboxMode {
    On,
    Off,
}

static SANDBOX_MODE: std::sync::OnceLock<SandboxMode> = std::sync::OnceLock::new();

/// Records `--sandbox` for [`confine_children`] (once, at start).
pub fn set_sandbox_mode(mode: SandboxMode) {
    let _ = SANDBOX_MODE.set(mode);
}

/// Confines every child this process starts from now on, as `--sandbox` says: in the
/// sandbox (an error that says what to do when it is missing or cannot start), or unconfined
/// with a warning. Every command that runs tuned code (a build, a candidate, fin) calls it
/// before starting anything; `config` is the config file it read, hidden with the other
/// secrets ([`secret_paths`]).
pub fn confine_children(config: Option<&Path>) -> anyhow::Result<()> {
    use shoal_backend::sandbox::{self, Confinement, Sandbox};
    let mode = SANDBOX_MODE.get().copied().unwrap_or(SandboxMode::On);
    let confinement = match mode {
        SandboxMode::Off => {
            tracing::warn!(
                "--sandbox off: tuned code runs unconfined, as this user; it can read this \
                 process's key and credential files and signal it"
            );
            Confinement::Off
        }
        SandboxMode::On => {
            let sb = Sandbox::find(secret_paths(config))?;
            sb.check()?;
            tracing::debug!(hidden = ?sb.hidden(), "tuned code runs in the sandbox");
            Confinement::Sandbox(sb)
        }
    };
    sandbox::install(confinement);
    Ok(())
}

/// The files and directories that hold this process's secrets, which tuned code must not see:
/// the value of every secret variable of the environment (`shoal_backend::child_env::is_secret`:
/// `SHOAL_HMAC_KEY_FILE`, a TLS key …) that is the path of an existing file or directory; the
/// config file (`config`, else `SHOAL_CONFIG`) and `/etc/shoal`; and Shoal's directory of
/// credentials and role files, `${XDG_CONFIG_HOME:-~/.config}/shoal` (scripts/services-up), with
/// `SHOAL_CREDENTIALS_FILE` and `SHOAL_ROLES_DIR` where they point elsewhere.
pub fn secret_paths(config: Option<&Path>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::env::vars_os()
        .filter(|(k, _)| shoal_backend::child_env::is_secret(&k.to_string_lossy()))
        .map(|(_, v)| PathBuf::from(v))
        .filter(|p| p.is_absolute() && p.exists())
        .collect();
    out.extend(config.map(Path::to_path_buf));
    for var in ["SHOAL_CONFIG", "SHOAL_CREDENTIALS_FILE", "SHOAL_ROLES_DIR"] {
        out.extend(std::env::var_os(var).map(PathBuf::from));
    }
    out.push(PathBuf::from("/etc/shoal"));
    let config_home = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    out.extend(config_home.map(|d| d.join("shoal")));
    out.retain(|p| p.exists());
    out
}

/// This host's name, as workers and sessions record it (`localhost` when the kernel has none).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// `SHOAL_TEST_FAKE_GPU=<arch>:<units>`: a GPU that is not there, for tests of the GPU path on
/// machines without one.
fn fake_gpu() -> Option<String> {
    std::env::var("SHOAL_TEST_FAKE_GPU").ok()
}

/// Every device this host can evaluate on (see [`shoal_gpu::discover`]).
pub fn devices() -> Vec<Device> {
    devices_under(&SystemRoot::default())
}

/// [`devices`] with at most `max_gpus` GPUs, the first ones the host lists (`--devices N`):
/// how a tuning or a worker is held to part of a host's GPUs. The CPU always stays.
pub fn devices_limited(max_gpus: Option<usize>) -> Vec<Device> {
    limit_gpus(devices(), max_gpus)
}

fn limit_gpus(devices: Vec<Device>, max_gpus: Option<usize>) -> Vec<Device> {
    let Some(max) = max_gpus else {
        return devices;
    };
    let mut gpus = 0;
    devices
        .into_iter()
        .filter(|d| {
            if d.kind == shoal_gpu::DeviceKind::Cpu {
                return true;
            }
            gpus += 1;
            gpus <= max
        })
        .collect()
}

/// [`devices`] with sysfs read under another root (tests of the discovery).
pub fn devices_under(root: &SystemRoot) -> Vec<Device> {
    shoal_gpu::discover(root, fake_gpu().as_deref())
}

/// The argv that starts a library-mode runner: `SHOAL_RUNNER` (split on whitespace), else this
/// executable's `runner` subcommand.
pub fn runner_program() -> Vec<String> {
    shoal_backend::library::runner_program(std::env::var("SHOAL_RUNNER").ok().as_deref())
}

/// Where MIOpen's `fin` is: `flag`, else `SHOAL_FIN`, else ROCm's default.
pub fn fin_path(flag: Option<PathBuf>) -> PathBuf {
    let fin = flag
        .or_else(|| std::env::var_os("SHOAL_FIN").map(PathBuf::from))
        .unwrap_or_else(|| Path::new(shoal_backend::session::DEFAULT_FIN).to_path_buf());
    absolute_if_relative(fin, std::env::current_dir().ok().as_deref())
}

/// fin runs in a working directory of its own (its slot's), so a relative path such as
/// `./fin` or `build/bin/fin` is made absolute against the directory the command was started
/// in. A bare name (`fin`) is left to the `PATH` lookup, which does not depend on the working
/// directory.
fn absolute_if_relative(path: PathBuf, cwd: Option<&Path>) -> PathBuf {
    match cwd {
        Some(cwd) if path.is_relative() && path.components().count() > 1 => cwd.join(path),
        _ => path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_fin_path_is_made_absolute_but_a_bare_name_is_not() {
        let cwd = Path::new("/home/u/miopen");
        let abs = |p: &str| absolute_if_relative(PathBuf::from(p), Some(cwd));
        assert_eq!(abs("./fin"), Path::new("/home/u/miopen/./fin"));
        assert_eq!(
            abs("build/bin/fin"),
            Path::new("/home/u/miopen/build/bin/fin")
        );
        assert_eq!(abs("fin"), Path::new("fin"));
        assert_eq!(abs("/opt/rocm/bin/fin"), Path::new("/opt/rocm/bin/fin"));
    }

    #[test]
    fn a_limit_keeps_the_cpu_and_the_first_gpus() {
        let mut all = shoal_gpu::simulated(4);
        all.insert(0, shoal_gpu::cpu_device(&SystemRoot::default()));
        let ids = |v: Vec<Device>| v.into_iter().map(|d| d.id).collect::<Vec<_>>();
        let kept = ids(limit_gpus(all.clone(), Some(2)));
        assert_eq!(kept.len(), 3, "{kept:?}");
        assert_eq!(kept[0], "cpu");
        assert_eq!(kept[1..], ids(all.clone())[1..3]);
        assert_eq!(limit_gpus(all.clone(), None).len(), 5);
    }
}
