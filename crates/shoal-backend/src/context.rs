//! The leaf types every backend step takes: where and on what it runs ([`RunContext`]), one
//! evaluation's inputs ([`EvalInput`]) and the environment that picks a GPU ([`device_env`]).
//!
//! They live apart from `session.rs` so that the dependencies run one way: `session` (the
//! [`SessionBackend`](crate::SessionBackend) the actors call) depends on the backends
//! (`exec`, `library`, `miopen`), and the backends depend on this module, never on
//! `session`.

use std::path::Path;

use shoal_model::Params;

/// Where and on what a step runs.
#[derive(Clone, Debug)]
pub struct RunContext<'a> {
    /// A directory of this worker slot alone (builds, MIOpen user-db and cache directories).
    pub work_dir: &'a Path,
    /// Pin runs to this CPU core (CPU evaluation).
    pub cpu: Option<usize>,
    /// The GPU to make visible to the child (`HIP_VISIBLE_DEVICES` / `CUDA_VISIBLE_DEVICES`).
    pub gpu_index: Option<u32>,
    /// The device's long-lived runner, for library-mode specs (the Evaluator owns it).
    pub runner: Option<&'a crate::runner_slot::RunnerSlot>,
}

/// The environment that makes only GPU `index` visible to a child, by the index the GpuMonitor
/// found it at. CUDA is told to number devices in PCI order, as NVML and the sysfs walk do, not
/// fastest first.
pub fn device_env(gpu_index: Option<u32>) -> Vec<(String, String)> {
    let Some(i) = gpu_index else {
        return Vec::new();
    };
    vec![
        ("HIP_VISIBLE_DEVICES".into(), i.to_string()),
        ("CUDA_VISIBLE_DEVICES".into(), i.to_string()),
        ("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()),
    ]
}

/// One evaluation's inputs, as the Evaluator has them.
#[derive(Clone, Copy, Debug)]
pub struct EvalInput<'a> {
    /// The eval step of the job (MIOpen: perf or find eval).
    pub step: shoal_model::Step,
    pub config: &'a Params,
    pub compile: &'a Params,
    pub run: &'a Params,
    /// The compiled artifact, installed as a local file.
    pub artifact: &'a Path,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_chosen_gpu_is_visible_numbered_in_pci_order() {
        assert!(device_env(None).is_empty(), "the CPU hides nothing");
        let env = device_env(Some(3));
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("3"));
        assert_eq!(get("HIP_VISIBLE_DEVICES"), Some("3"));
        assert_eq!(get("CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
    }
}
