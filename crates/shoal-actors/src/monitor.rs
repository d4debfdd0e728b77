//! The GpuMonitor: one per host. Discovers the devices (the CPU always, GPUs when present),
//! probes their health periodically, publishes health events on the bus's events topic, and feeds
//! the Evaluators' pause switches.
//!
//! Probes may block (sysfs reads, later NVML and HIP calls), so they run on the blocking pool,
//! never on the actix thread that every actor shares.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use shoal_bus::Bus;
use shoal_gpu::{Device, SystemRoot};
use shoal_model::message::{DeviceHealth, Event};
use shoal_model::Message;
use tokio::sync::watch;

use crate::presence::Activity;
use crate::shutdown::{DrainGuard, Signal};
use crate::supervise::{Backoff, OwnAddress, RestartPace};
use crate::ActorError;

/// The GpuMonitor actor. Its state — each device's health switch and the devices an operator
/// paused — is its own; work arrives as messages: [`Probe`] from its timer, [`Pause`] and
/// [`Resume`] from the control topic's adapter. A probe that fails (the broker gone) stops it,
/// and actix's `Supervisor` starts it again after a backoff.
pub struct GpuMonitor {
    bus: Arc<dyn Bus>,
    host: String,
    devices: Vec<Device>,
    interval: Duration,
    /// Per device: the switch its Evaluators watch.
    switches: HashMap<String, watch::Sender<bool>>,
    /// Devices an operator paused: their switches stay off whatever their health.
    paused: HashSet<String>,
    /// Where each probe is recorded for this process's presence record ([`crate::presence`]),
    /// so that `shoal workers` shows the health the Evaluators act on.
    activity: Activity,
    stop: Signal,
    guard: DrainGuard,
    pace: RestartPace,
    finished: bool,
    /// Held while it may be started again (see [`OwnAddress`]).
    own: OwnAddress<Self>,
}

/// Probe every device now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Probe;

/// An operator paused `device`: its Evaluators stop consuming, whatever its health.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Pause(pub String);

/// An operator resumed `device`: healthy until the next probe says otherwise.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Resume(pub String);

impl GpuMonitor {
    /// Watches `devices` (the host's, as `shoal_gpu::discover` found them), so the caller can
    /// start one Evaluator per device.
    pub fn new(
        bus: Arc<dyn Bus>,
        host: String,
        devices: Vec<Device>,
        interval: Duration,
        activity: Activity,
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
            paused: HashSet::new(),
            activity,
            stop,
            guard,
            pace: RestartPace::new("gpu_monitor", Backoff::default()),
            finished: false,
            own: OwnAddress::new(),
        }
    }

    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The health switch of a device, for its Evaluator.
    pub fn health_switch(&self, device: &str) -> Option<watch::Receiver<bool>> {
        self.switches.get(device).map(|s| s.subscribe())
    }

    /// Starts the actor under actix's `Supervisor`.
    pub fn start_supervised(self) -> Addr<Self> {
        Supervisor::start(|_| self)
    }

    /// A run: the first probe now, the control topic's adapter, and the end at the stop signal.
    fn begin(&mut self, ctx: &mut Context<Self>) {
        self.own.hold(ctx);
        ctx.notify(Probe);
        let feed = control_feed(
            ctx.address(),
            self.bus.clone(),
            self.host.clone(),
            self.stop.clone(),
        );
        ctx.spawn(feed.into_actor(self).map(|out, act, ctx| match out {
            Ok(()) => act.finish(ctx),
            Err(e) => act.failed(ctx, e.to_string()),
        }));
    }

    fn failed(&mut self, ctx: &mut Context<Self>, failure: String) {
        if self
            .pace
            .stops_for_good(&failure, &self.stop, &self.guard.give_up())
        {
            return self.finish(ctx);
        }
        ctx.stop();
    }

    fn finish(&mut self, ctx: &mut Context<Self>) {
        self.finished = true;
        self.own.release();
        ctx.stop();
    }

    /// What a probe found: each switch follows its device's health, unless paused.
    fn probed(&mut self, healths: Vec<(String, shoal_gpu::Health)>) {
        for (device, health) in healths {
            let Some(switch) = self.switches.get(&device) else {
                continue;
            };
            if *switch.borrow() != health.healthy {
                tracing::warn!(device = %device, healthy = health.healthy, detail = %health.detail, "device health changed");
            }
            let is_paused = self.paused.contains(&device);
            switch.send_replace(health.healthy && !is_paused);
            self.activity.probed(&device, health, is_paused);
        }
    }
}

impl Actor for GpuMonitor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.finished || self.stop.is_triggered() {
            self.finished = true;
            ctx.stop();
            return;
        }
        let wait = self.pace.backoff(&self.stop);
        crate::supervise::begin_after(wait, self, ctx, Self::begin, Self::finish);
    }
}

impl Supervised for GpuMonitor {}

impl Handler<Probe> for GpuMonitor {
    type Result = ();

    /// Probes every device on the blocking pool (probes may block), publishes each health
    /// event, then sets the switches; the next probe after the interval.
    fn handle(&mut self, _: Probe, ctx: &mut Context<Self>) {
        let (bus, host, devices) = (self.bus.clone(), self.host.clone(), self.devices.clone());
        let probe = async move {
            let topic = bus.namespace().events_topic();
            let mut healths = Vec::with_capacity(devices.len());
            for device in devices {
                let d = device.clone();
                let health = tokio::task::spawn_blocking(move || {
                    shoal_gpu::probe(&SystemRoot::default(), &d)
                })
                .await
                .map_err(|source| ActorError::Task {
                    what: "probe",
                    source,
                })?;
                shoal_metrics::metrics().device_probed(
                    &device.id,
                    health.healthy,
                    health.temperature_c,
                    health.busy_percent,
                    health.clock_mhz,
                );
                let event = Message::Event(Event::Health(DeviceHealth {
                    host: host.clone(),
                    device: device.id.clone(),
                    healthy: health.healthy,
                    detail: health.detail.clone(),
                }));
                bus.publish_topic(
                    &topic,
                    &format!("health.{host}.{}", device.id),
                    bus.codec().encode(&event),
                )
                .await?;
                healths.push((device.id, health));
            }
            Ok::<_, ActorError>(healths)
        };
        // Spawned, not awaited with `ctx.wait`: the control feed goes on being polled (it may hold
        // the bus's channel lock), and a pause or resume meanwhile is applied at once.
        ctx.spawn(probe.into_actor(self).map(|out, act, ctx| match out {
            Ok(healths) => {
                act.probed(healths);
                if !act.stop.is_triggered() {
                    ctx.notify_later(Probe, act.interval);
                }
            }
            Err(e) => act.failed(ctx, e.to_string()),
        }));
    }
}

impl Handler<Pause> for GpuMonitor {
    type Result = ();

    fn handle(&mut self, Pause(device): Pause, _: &mut Context<Self>) {
        if let Some(switch) = self.switches.get(&device) {
            switch.send_replace(false);
            tracing::warn!(%device, "device paused by an operator");
            self.paused.insert(device);
        }
    }
}

impl Handler<Resume> for GpuMonitor {
    type Result = ();

    fn handle(&mut self, Resume(device): Resume, _: &mut Context<Self>) {
        if let Some(switch) = self.switches.get(&device) {
            // Healthy until the next probe says otherwise.
            switch.send_replace(true);
            tracing::info!(%device, "device resumed by an operator");
            self.paused.remove(&device);
        }
    }
}

/// The control topic's adapter: operators pause and resume devices with control messages
/// (`<host>.monitor` or `any.monitor`), sent on to the monitor as [`Pause`] and [`Resume`].
/// Ends at the stop signal.
async fn control_feed(
    monitor: Addr<GpuMonitor>,
    bus: Arc<dyn Bus>,
    host: String,
    mut stop: Signal,
) -> Result<(), ActorError> {
    let mut inbox =
        crate::control::ControlInbox::open(&*bus, &host, shoal_model::message::Actor::Monitor)
            .await?;
    use shoal_model::message::Control;
    while let Some(c) = inbox.next(&mut stop).await? {
        let sent = match c {
            Control::Pause { device } => monitor.send(Pause(device)).await,
            Control::Resume { device } => monitor.send(Resume(device)).await,
            _ => Ok(()),
        };
        if sent.is_err() {
            break;
        }
    }
    Ok(())
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
            Activity::default(),
            signal,
            drain.guard(),
        );
        let mut switch = monitor.health_switch("cpu").unwrap();
        monitor.start_supervised();
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
