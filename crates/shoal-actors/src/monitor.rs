//! The GpuMonitor: one per host. Discovers the devices (the CPU always, GPUs when present),
//! probes their health periodically, publishes health events on the bus's events topic, and feeds
//! the Evaluators' pause switches.
//!
//! Probes may block (sysfs reads, later NVML and HIP calls), so they run on the blocking pool,
//! never on the actix thread that every actor shares.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::prelude::*;
use shoal_bus::Bus;
use shoal_gpu::{Device, SystemRoot};
use shoal_model::message::{DeviceHealth, Event};
use shoal_model::Message;
use tokio::sync::watch;

use crate::shutdown::{DrainGuard, Signal};
use crate::supervise::{supervise, Backoff};
use crate::ActorError;

/// What the last probe of each device in this process found, and whether an operator paused it:
/// read by the presence record (`crate::presence`), so that `shoal workers` shows the health the
/// Evaluators act on, without probing a second time.
static LAST_HEALTH: Mutex<BTreeMap<String, (shoal_gpu::Health, bool)>> =
    Mutex::new(BTreeMap::new());

/// The last probe of `device` in this process and whether it is paused; `None` before the first.
pub fn last_health(device: &str) -> Option<(shoal_gpu::Health, bool)> {
    LAST_HEALTH
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(device)
        .cloned()
}

pub struct GpuMonitor {
    bus: Arc<dyn Bus>,
    host: String,
    devices: Vec<Device>,
    interval: Duration,
    /// Per device: the switch its Evaluator watches.
    switches: HashMap<String, watch::Sender<bool>>,
    stop: Signal,
    guard: DrainGuard,
}

impl GpuMonitor {
    /// Watches `devices` (the host's, as `shoal_gpu::discover` found them), so the caller can
    /// start one Evaluator per device.
    pub fn new(
        bus: Arc<dyn Bus>,
        host: String,
        devices: Vec<Device>,
        interval: Duration,
        stop: Signal,
        guard: DrainGuard,
    ) -> Self {
        for d in &devices {
            tracing::info!(device = %d.id, name = %d.name, arch = %d.arch, units = d.num_cu, "device found");
        }
        let switches = devices
            .iter()
            .map(|d| (d.id.clone(), watch::channel(true).0))
            .collect();
        GpuMonitor {
            bus,
            host,
            devices,
            interval,
            switches,
            stop,
            guard,
        }
    }

    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The health switch of a device, for its Evaluator.
    pub fn health_switch(&self, device: &str) -> Option<watch::Receiver<bool>> {
        self.switches.get(device).map(|s| s.subscribe())
    }
}

impl Actor for GpuMonitor {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        let bus = self.bus.clone();
        let host = self.host.clone();
        let devices = self.devices.clone();
        let switches: Vec<(Device, watch::Sender<bool>)> = devices
            .iter()
            .filter_map(|d| Some((d.clone(), self.switches.get(&d.id)?.clone())))
            .collect();
        let interval = self.interval;
        let stop = self.stop.clone();
        let paused: Arc<std::sync::Mutex<std::collections::HashSet<String>>> = Arc::default();
        {
            let (bus, host, switches, paused, stop) = (
                self.bus.clone(),
                self.host.clone(),
                switches.clone(),
                paused.clone(),
                self.stop.clone(),
            );
            supervise(
                "gpu_monitor.control".into(),
                Backoff::default(),
                self.stop.clone(),
                self.guard.clone(),
                move || {
                    control_loop(
                        bus.clone(),
                        host.clone(),
                        switches.clone(),
                        paused.clone(),
                        stop.clone(),
                    )
                },
            );
        }
        supervise(
            "gpu_monitor".into(),
            Backoff::default(),
            self.stop.clone(),
            self.guard.clone(),
            move || {
                probe_loop(
                    bus.clone(),
                    host.clone(),
                    switches.clone(),
                    paused.clone(),
                    interval,
                    stop.clone(),
                )
            },
        );
    }
}

type Paused = Arc<std::sync::Mutex<std::collections::HashSet<String>>>;

/// Operators pause and resume devices with control messages (`<host>.monitor` or
/// `any.monitor`): a paused device's Evaluators stop consuming, whatever its health.
async fn control_loop(
    bus: Arc<dyn Bus>,
    host: String,
    devices: Vec<(Device, watch::Sender<bool>)>,
    paused: Paused,
    mut stop: Signal,
) -> Result<(), ActorError> {
    let mut inbox =
        crate::control::ControlInbox::open(&*bus, &host, shoal_model::message::Actor::Monitor)
            .await?;
    use shoal_model::message::Control;
    while let Some(c) = inbox.next(&mut stop).await? {
        match c {
            Control::Pause { device } => {
                if let Some((_, switch)) = devices.iter().find(|(d, _)| d.id == device) {
                    paused
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(device.clone());
                    switch.send_replace(false);
                    tracing::warn!(%device, "device paused by an operator");
                }
            }
            Control::Resume { device } => {
                if let Some((_, switch)) = devices.iter().find(|(d, _)| d.id == device) {
                    paused
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&device);
                    // Healthy until the next probe says otherwise.
                    switch.send_replace(true);
                    tracing::info!(%device, "device resumed by an operator");
                }
            }
            _ => {}
        }
    }
    Ok(())
}

async fn probe_loop(
    bus: Arc<dyn Bus>,
    host: String,
    devices: Vec<(Device, watch::Sender<bool>)>,
    paused: Paused,
    interval: Duration,
    mut stop: Signal,
) -> Result<(), ActorError> {
    let topic = bus.namespace().events_topic();
    loop {
        for (device, switch) in &devices {
            let d = device.clone();
            let health =
                tokio::task::spawn_blocking(move || shoal_gpu::probe(&SystemRoot::default(), &d))
                    .await
                    .map_err(|e| ActorError::Other(format!("probe task: {e}")))?;
            if *switch.borrow() != health.healthy {
                tracing::warn!(device = %device.id, healthy = health.healthy, detail = %health.detail, "device health changed");
            }
            shoal_metrics::metrics().device_probed(
                &device.id,
                health.healthy,
                health.temperature_c,
                health.busy_percent,
                health.clock_mhz,
            );
            let is_paused = paused
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&device.id);
            switch.send_replace(health.healthy && !is_paused);
            LAST_HEALTH
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(device.id.clone(), (health.clone(), is_paused));
            let event = Message::Event(Event::Health(DeviceHealth {
                host: host.clone(),
                device: device.id.clone(),
                healthy: health.healthy,
                detail: health.detail,
            }));
            bus.publish_topic(
                &topic,
                &format!("health.{host}.{}", device.id),
                bus.codec().encode(&event),
            )
            .await?;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.triggered() => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shutdown::{channel, Drain};
    use shoal_model::message::Control;

    #[actix::test]
    async fn operators_pause_and_resume_a_device() {
        let bus: Arc<dyn Bus> =
            shoal_bus::MemoryBus::new(shoal_model::queue::Namespace::new("mon").unwrap());
        let (trigger, signal) = channel();
        let drain = Drain::new();
        let monitor = GpuMonitor::new(
            bus.clone(),
            "host1:77".into(),
            shoal_gpu::discover(&SystemRoot::default(), None),
            Duration::from_secs(60),
            signal,
            drain.guard(),
        );
        let mut switch = monitor.health_switch("cpu").unwrap();
        monitor.start();
        let send = |c: Control| {
            let bus = bus.clone();
            async move {
                bus.publish_topic(
                    &bus.namespace().control_topic(),
                    "host1.monitor",
                    bus.codec().encode(&Message::Control(c)),
                )
                .await
                .unwrap()
            }
        };
        // Topics are at-most-once: repeat until the monitor, subscribing, has heard it.
        let wait_for = |want: bool, switch: &mut watch::Receiver<bool>| {
            let ok = *switch.borrow() == want;
            let _ = switch.borrow_and_update();
            ok
        };
        let mut paused = false;
        for _ in 0..100 {
            send(Control::Pause {
                device: "cpu".into(),
            })
            .await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            if wait_for(false, &mut switch) {
                paused = true;
                break;
            }
        }
        assert!(paused, "the device was not paused");
        send(Control::Resume {
            device: "cpu".into(),
        })
        .await;
        tokio::time::timeout(Duration::from_secs(5), switch.wait_for(|h| *h))
            .await
            .expect("the device was not resumed")
            .unwrap();
        trigger.trigger();
        drain.wait().await;
    }
}
