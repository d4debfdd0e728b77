//! What this host offers the actors, read here once: its devices (with the test-double GPU of
//! `SHOAL_TEST_FAKE_GPU`), the program of a library-mode runner (`SHOAL_RUNNER`) and where
//! MIOpen's `fin` is (`--fin`, `SHOAL_FIN`). The crates below take these as values, so only the
//! CLI reads the environment (the tidy test holds it to that).

use std::path::{Path, PathBuf};

use shoal_gpu::{Device, SystemRoot};

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
    flag.or_else(|| std::env::var_os("SHOAL_FIN").map(PathBuf::from))
        .unwrap_or_else(|| Path::new(shoal_backend::session::DEFAULT_FIN).to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

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
