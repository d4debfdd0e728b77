//! The GpuMonitor: one per host. Discovers the devices (the CPU always, GPUs when present),
//! probes their health periodically, publishes health events on the bus's events topic, and feeds
//! the Evaluators' pause switches.
//!
//! Probes may block (sysfs reads, later NVML and HIP calls), so they run on the blocking pool,
//! never on the actix thread that every actor shares.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use shoal_bus::Bus;
use shoal_gpu::{Device, SystemRoot};
use shoal_model::message::{DeviceHealth, Event};
use shoal_model::{envelope, Message};
use tokio::sync::watch;

use crate::shutdown::{DrainGuard, Signal};
use crate::supervise::{supervise, Backoff};
use crate::ActorError;

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
    /// Discovers the devices now, so the caller can start one Evaluator per device.
    pub fn new(
        bus: Arc<dyn Bus>,
        host: String,
        interval: Duration,
        stop: Signal,
        guard: DrainGuard,
    ) -> Self {
        let devices = shoal_gpu::discover(&SystemRoot::default());
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
                    interval,
                    stop.clone(),
                )
            },
        );
    }
}

async fn probe_loop(
    bus: Arc<dyn Bus>,
    host: String,
    devices: Vec<(Device, watch::Sender<bool>)>,
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
            switch.send_replace(health.healthy);
            let event = Message::Event(Event::Health(DeviceHealth {
                host: host.clone(),
                device: device.id.clone(),
                healthy: health.healthy,
                detail: health.detail,
            }));
            bus.publish_topic(
                &topic,
                &format!("health.{host}.{}", device.id),
                envelope::encode(&event),
            )
            .await?;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.triggered() => return Ok(()),
        }
    }
}
