//! Device discovery and health probes for the GpuMonitor.
//!
//! What is here reads files only (`/proc/cpuinfo`, the amdgpu KFD topology under `/sys`), so it
//! builds and runs on every machine; GPU vendor libraries come in behind run-time loading (NVML,
//! [`nvml`]) or cargo features and report "no device" cleanly where they are absent.
//!
//! Devices are named for routing the way MIOpen names AMD GPUs: an architecture string (`gfx90a`,
//! `sm_90`, or the CPU's `x86_64`) and a compute-unit count (CUs, SMs, or CPU cores). Eval queues
//! are split by exactly that pair.

#[cfg(feature = "hip")]
pub mod hip;
pub mod nvml;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What kind of processor evaluates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeviceKind {
    Cpu,
    AmdGpu,
    NvidiaGpu,
    /// A GPU that is not there, declared with `SHOAL_TEST_FAKE_GPU=<arch>:<units>` so that tests
    /// on machines without one can run the GPU path against a stand-in tool (MIOpen's `fin`
    /// stand-in). A test double: never set it on a real host.
    TestDouble,
}

/// One device that can evaluate candidates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// Stable name on this host: `cpu`, `amdgpu0`, `nvidia0`.
    pub id: String,
    pub kind: DeviceKind,
    /// Marketing or model name, for people.
    pub name: String,
    /// Routing architecture.
    pub arch: String,
    /// Compute units (AMD), SMs (NVIDIA) or logical CPU cores.
    pub num_cu: u32,
    pub memory_bytes: u64,
    /// Index to put in `HIP_VISIBLE_DEVICES` / `CUDA_VISIBLE_DEVICES`; `None` for the CPU.
    pub visible_index: Option<u32>,
    /// For amdgpu devices: the DRM render node (`/dev/dri/renderD<n>`), whose sysfs directory
    /// has the busy percentage and the temperature sensors.
    #[serde(default)]
    pub drm_render_minor: Option<u32>,
}

/// Result of one health probe.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Health {
    pub healthy: bool,
    pub detail: String,
    pub temperature_c: Option<f64>,
    pub busy_percent: Option<f64>,
    /// The graphics (shader) clock now, where the driver tells it (NVML).
    pub clock_mhz: Option<f64>,
}

/// Where to read system files from; tests point it at a fixture tree.
#[derive(Clone, Debug)]
pub struct SystemRoot(pub PathBuf);

impl Default for SystemRoot {
    fn default() -> Self {
        SystemRoot(PathBuf::from("/"))
    }
}

impl SystemRoot {
    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel.trim_start_matches('/'))
    }
}

/// Every device this host can evaluate on: the CPU always, then the GPUs found, then the test
/// double `fake` declares (`<arch>:<units>`: the CLI's `SHOAL_TEST_FAKE_GPU`), if any.
pub fn discover(root: &SystemRoot, fake: Option<&str>) -> Vec<Device> {
    let mut devices = vec![cpu_device(root)];
    devices.extend(amd_gpus(root));
    devices.extend(nvml::nvidia_gpus());
    if let Some(spec) = fake {
        match test_double(spec) {
            Some(d) => devices.push(d),
            None => {
                tracing::warn!(value = %spec, "SHOAL_TEST_FAKE_GPU must be <arch>:<units>, e.g. gfx90a:110; ignored")
            }
        }
    }
    devices
}

/// The test-double GPU of `SHOAL_TEST_FAKE_GPU=<arch>:<units>`.
pub fn test_double(spec: &str) -> Option<Device> {
    let (arch, units) = spec.split_once(':')?;
    let num_cu: u32 = units.parse().ok()?;
    if arch.is_empty() || num_cu == 0 {
        return None;
    }
    Some(Device {
        id: "fakegpu0".into(),
        kind: DeviceKind::TestDouble,
        name: format!("test double {arch} (SHOAL_TEST_FAKE_GPU)"),
        arch: arch.to_string(),
        num_cu,
        memory_bytes: 0,
        visible_index: Some(0),
        drm_render_minor: None,
    })
}

/// The architecture of [`simulated`] devices, which no real device has.
pub const SIMULATED_ARCH: &str = "sim";

/// `n` simulated GPUs (`sim0`, `sim1`, …; architecture [`SIMULATED_ARCH`], one unit), always
/// healthy: what `shoal-bench fleet` gives each eval worker, whose no-op items sleep for their
/// recorded time. A benchmark aid, never a real host's devices.
pub fn simulated(n: u32) -> Vec<Device> {
    (0..n)
        .map(|i| Device {
            id: format!("sim{i}"),
            kind: DeviceKind::TestDouble,
            name: "simulated GPU (shoal-bench fleet)".into(),
            arch: SIMULATED_ARCH.into(),
            num_cu: 1,
            memory_bytes: 0,
            visible_index: None,
            drm_render_minor: None,
        })
        .collect()
}

/// The CPU as a device. Its architecture is the machine architecture (`x86_64`, `aarch64`).
pub fn cpu_device(root: &SystemRoot) -> Device {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    let cpuinfo = std::fs::read_to_string(root.path("/proc/cpuinfo")).unwrap_or_default();
    let name = cpuinfo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "model name").then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| "cpu".to_string());
    let memory_bytes = std::fs::read_to_string(root.path("/proc/meminfo"))
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| {
                let rest = l.strip_prefix("MemTotal:")?;
                let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
                Some(kb * 1024)
            })
        })
        .unwrap_or(0);
    Device {
        id: "cpu".into(),
        kind: DeviceKind::Cpu,
        name,
        arch: std::env::consts::ARCH.to_string(),
        num_cu: cores,
        memory_bytes,
        visible_index: None,
        drm_render_minor: None,
    }
}

/// AMD GPUs from the KFD topology (`/sys/class/kfd/kfd/topology/nodes/N/properties`), which the
/// amdgpu driver provides without ROCm. CPU nodes (no SIMDs) are skipped.
pub fn amd_gpus(root: &SystemRoot) -> Vec<Device> {
    let nodes = root.path("/sys/class/kfd/kfd/topology/nodes");
    let Ok(entries) = std::fs::read_dir(&nodes) else {
        return Vec::new();
    };
    let mut dirs: Vec<(u32, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
        .collect();
    dirs.sort();
    let mut out = Vec::new();
    for (_, dir) in dirs {
        let Some(dev) = parse_kfd_node(&dir, out.len() as u32) else {
            continue;
        };
        out.push(dev);
    }
    out
}

fn parse_kfd_node(dir: &Path, index: u32) -> Option<Device> {
    let props = std::fs::read_to_string(dir.join("properties")).ok()?;
    let get = |key: &str| -> Option<u64> {
        props.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == key).then(|| it.next()?.parse().ok())?
        })
    };
    let simd_count = get("simd_count")?;
    if simd_count == 0 {
        return None;
    }
    let simd_per_cu = get("simd_per_cu").unwrap_or(4).max(1);
    let gfx = get("gfx_target_version").unwrap_or(0);
    let name = std::fs::read_to_string(dir.join("name"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "amdgpu".into());
    Some(Device {
        id: format!("amdgpu{index}"),
        kind: DeviceKind::AmdGpu,
        name,
        arch: gfx_name(gfx),
        num_cu: (simd_count / simd_per_cu) as u32,
        memory_bytes: 0,
        visible_index: Some(index),
        drm_render_minor: get("drm_render_minor").map(|m| m as u32),
    })
}

/// `gfx_target_version` 90010 → `gfx90a`, 90008 → `gfx908`, 110000 → `gfx1100`: major, then
/// minor and stepping as hex digits, as LLVM names AMD targets.
pub fn gfx_name(version: u64) -> String {
    let major = version / 10000;
    let minor = (version / 100) % 100;
    let step = version % 100;
    format!("gfx{major}{minor:x}{step:x}")
}

/// At or above this edge temperature an AMD GPU is reported unhealthy and its Evaluators pause
/// (MI200/MI300 throttle from about 100 °C).
pub const AMDGPU_TOO_HOT_C: f64 = 100.0;

/// The amdgpu driver's sysfs sensors of a render node, without ROCm: `gpu_busy_percent` and the
/// first hwmon `temp1_input` (millidegrees).
fn amdgpu_sensors(root: &SystemRoot, render_minor: u32) -> (Option<f64>, Option<f64>) {
    let dev = root.path(&format!("/sys/class/drm/renderD{render_minor}/device"));
    let busy = std::fs::read_to_string(dev.join("gpu_busy_percent"))
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok());
    let temp = std::fs::read_dir(dev.join("hwmon"))
        .ok()
        .and_then(|mut entries| {
            entries.find_map(|e| {
                let text = std::fs::read_to_string(e.ok()?.path().join("temp1_input")).ok()?;
                text.trim().parse::<f64>().ok().map(|m| m / 1000.0)
            })
        });
    (busy, temp)
}

/// Probes a device. The CPU is healthy when its load leaves room to time on it; an AMD GPU is
/// healthy while its sysfs node answers.
pub fn probe(root: &SystemRoot, device: &Device) -> Health {
    match device.kind {
        DeviceKind::Cpu => {
            let load = std::fs::read_to_string(root.path("/proc/loadavg"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok());
            Health {
                healthy: true,
                detail: match load {
                    Some(l) => format!("load average {l:.2}"),
                    None => "load average unknown".into(),
                },
                temperature_c: None,
                busy_percent: None,
                clock_mhz: None,
            }
        }
        DeviceKind::AmdGpu => {
            let node = root.path(&format!(
                "/sys/class/kfd/kfd/topology/nodes/{}/properties",
                device.visible_index.unwrap_or(0) + 1
            ));
            if !node.exists() {
                return Health {
                    healthy: false,
                    detail: format!("{} is gone", node.display()),
                    temperature_c: None,
                    busy_percent: None,
                    clock_mhz: None,
                };
            }
            let (busy, temp) = match device.drm_render_minor {
                Some(minor) => amdgpu_sensors(root, minor),
                None => (None, None),
            };
            let hot = temp.is_some_and(|t| t >= AMDGPU_TOO_HOT_C);
            Health {
                healthy: !hot,
                detail: format!(
                    "kfd node present, {}% busy, {} °C{}",
                    busy.map(|b| format!("{b:.0}")).unwrap_or("?".into()),
                    temp.map(|t| format!("{t:.0}")).unwrap_or("?".into()),
                    if hot { " (too hot)" } else { "" }
                ),
                temperature_c: temp,
                busy_percent: busy,
                clock_mhz: None,
            }
        }
        DeviceKind::TestDouble => Health {
            healthy: true,
            detail: "test double".into(),
            temperature_c: None,
            busy_percent: None,
            clock_mhz: None,
        },
        DeviceKind::NvidiaGpu => nvml::probe(device.visible_index.unwrap_or(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfx_names_match_llvm() {
        assert_eq!(gfx_name(90010), "gfx90a");
        assert_eq!(gfx_name(90008), "gfx908");
        assert_eq!(gfx_name(90400), "gfx940");
        assert_eq!(gfx_name(90402), "gfx942");
        assert_eq!(gfx_name(110000), "gfx1100");
    }

    #[test]
    fn discovers_amd_gpus_from_a_kfd_tree() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = dir.path().join("sys/class/kfd/kfd/topology/nodes");
        std::fs::create_dir_all(nodes.join("0")).unwrap();
        std::fs::write(
            nodes.join("0/properties"),
            "cpu_cores_count 64\nsimd_count 0\n",
        )
        .unwrap();
        std::fs::create_dir_all(nodes.join("1")).unwrap();
        std::fs::write(
            nodes.join("1/properties"),
            "simd_count 440\nsimd_per_cu 4\ngfx_target_version 90010\n",
        )
        .unwrap();
        std::fs::write(nodes.join("1/name"), "aldebaran\n").unwrap();
        let mut props = std::fs::read_to_string(nodes.join("1/properties")).unwrap();
        props.push_str("drm_render_minor 128\n");
        std::fs::write(nodes.join("1/properties"), props).unwrap();
        let drm = dir.path().join("sys/class/drm/renderD128/device");
        std::fs::create_dir_all(drm.join("hwmon/hwmon3")).unwrap();
        std::fs::write(drm.join("gpu_busy_percent"), "42\n").unwrap();
        std::fs::write(drm.join("hwmon/hwmon3/temp1_input"), "61000\n").unwrap();
        let root = SystemRoot(dir.path().to_path_buf());
        let devs = discover(&root, None);
        assert_eq!(devs[0].kind, DeviceKind::Cpu);
        assert_eq!(devs.len(), 2);
        assert_eq!(devs[1].arch, "gfx90a");
        assert_eq!(devs[1].num_cu, 110);
        assert_eq!(devs[1].name, "aldebaran");
        let h = probe(&root, &devs[1]);
        assert!(h.healthy, "{h:?}");
        assert_eq!((h.busy_percent, h.temperature_c), (Some(42.0), Some(61.0)));
        std::fs::write(drm.join("hwmon/hwmon3/temp1_input"), "104000\n").unwrap();
        assert!(!probe(&root, &devs[1]).healthy, "too hot");
        std::fs::remove_dir_all(nodes.join("1")).unwrap();
        assert!(!probe(&root, &devs[1]).healthy);
    }

    #[test]
    fn a_test_double_gpu_is_declared_by_arch_and_units() {
        let d = test_double("gfx90a:110").unwrap();
        assert_eq!((d.arch.as_str(), d.num_cu), ("gfx90a", 110));
        assert_eq!(d.kind, DeviceKind::TestDouble);
        assert!(test_double("gfx90a").is_none());
        assert!(test_double("gfx90a:x").is_none());
        assert!(test_double(":4").is_none());
    }

    #[test]
    fn the_cpu_is_always_there() {
        let devs = discover(&SystemRoot::default(), None);
        assert_eq!(devs[0].id, "cpu");
        assert!(devs[0].num_cu >= 1);
        assert!(probe(&SystemRoot::default(), &devs[0]).healthy);
    }
}
