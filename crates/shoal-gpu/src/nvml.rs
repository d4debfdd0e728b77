//! NVIDIA GPUs through NVML, loaded at run time (nvml-wrapper opens `libnvidia-ml.so.1` with
//! libloading), so the binary builds and starts on hosts without an NVIDIA driver and finds no
//! device there.
//!
//! NVIDIA devices are named for routing like AMD ones: an architecture from the compute
//! capability (`sm_90`) and a unit count, here the SM count.

use std::sync::OnceLock;

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use crate::{Device, DeviceKind, Health};

/// The library, initialised once per process; `Err` says why there is none (no driver).
fn nvml() -> Result<&'static Nvml, &'static NvmlError> {
    static NVML: OnceLock<Result<Nvml, NvmlError>> = OnceLock::new();
    NVML.get_or_init(Nvml::init).as_ref()
}

/// `sm_<major><minor>`, as nvcc names targets.
pub fn sm_arch(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// CUDA cores per SM by compute capability (NVML reports cores, not SMs).
pub fn cores_per_sm(major: i32, minor: i32) -> u32 {
    match (major, minor) {
        (7, _) => 64,
        (8, 0) => 64,
        (8, _) => 128,
        (9, _) => 128,
        (10, _) | (12, _) => 128,
        (6, 0) => 64,
        (6, _) => 128,
        _ => 128,
    }
}

/// Every NVIDIA GPU NVML sees; none (with a debug log) where there is no driver.
pub fn nvidia_gpus() -> Vec<Device> {
    let nvml = match nvml() {
        Ok(n) => n,
        Err(e) => {
            tracing::debug!(reason = %e, "no NVIDIA devices (NVML unavailable)");
            return Vec::new();
        }
    };
    let count = nvml.device_count().unwrap_or(0);
    let mut out = Vec::new();
    for i in 0..count {
        let Ok(dev) = nvml.device_by_index(i) else {
            continue;
        };
        let cc = dev.cuda_compute_capability().ok();
        let (major, minor) = cc.map(|c| (c.major, c.minor)).unwrap_or((0, 0));
        let cores = dev.num_cores().unwrap_or(0);
        out.push(Device {
            id: format!("nvidia{i}"),
            kind: DeviceKind::NvidiaGpu,
            name: dev.name().unwrap_or_else(|_| "NVIDIA GPU".into()),
            arch: sm_arch(major, minor),
            num_cu: cores / cores_per_sm(major, minor).max(1),
            memory_bytes: dev.memory_info().map(|m| m.total).unwrap_or(0),
            visible_index: Some(i),
            drm_render_minor: None,
        });
    }
    out
}

/// Health of an NVIDIA GPU: NVML answers for it, with temperature, utilization and clock.
pub fn probe(index: u32) -> Health {
    let failed = |detail: String| Health {
        healthy: false,
        detail,
        temperature_c: None,
        busy_percent: None,
        clock_mhz: None,
    };
    let nvml = match nvml() {
        Ok(n) => n,
        Err(e) => return failed(format!("NVML unavailable: {e}")),
    };
    let dev = match nvml.device_by_index(index) {
        Ok(d) => d,
        Err(e) => return failed(format!("NVML lost device {index}: {e}")),
    };
    let temperature = dev.temperature(TemperatureSensor::Gpu).ok();
    let busy = dev.utilization_rates().ok().map(|u| u.gpu);
    let clock = dev.clock_info(Clock::Graphics).ok();
    Health {
        healthy: true,
        detail: format!(
            "{} °C, {}% busy, graphics clock {} MHz",
            temperature.map(|t| t.to_string()).unwrap_or("?".into()),
            busy.map(|b| b.to_string()).unwrap_or("?".into()),
            clock.map(|c| c.to_string()).unwrap_or("?".into())
        ),
        temperature_c: temperature.map(f64::from),
        busy_percent: busy.map(f64::from),
        clock_mhz: clock.map(f64::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_devices_are_named_like_amd_ones() {
        assert_eq!(sm_arch(9, 0), "sm_90");
        assert_eq!(16896 / cores_per_sm(9, 0), 132, "H100 SXM: 132 SMs");
        assert_eq!(6912 / cores_per_sm(8, 0), 108, "A100: 108 SMs");
    }

    #[test]
    fn no_driver_means_no_device_not_a_crash() {
        // On machines without libnvidia-ml this finds nothing; with a driver it finds GPUs
        // whose names follow the routing convention.
        for d in nvidia_gpus() {
            assert!(d.arch.starts_with("sm_") && d.num_cu > 0, "{d:?}");
        }
    }
}
