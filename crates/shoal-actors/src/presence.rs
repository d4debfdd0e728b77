//! A process's presence in the store: what `shoal workers` lists. [`run`] writes this process's
//! [`WorkerPresence`] when it starts, every [`PRESENCE_EVERY`] after, and once more, marked
//! stopped, when it stops cleanly; a process that dies stops writing, and readers call it stale
//! ([`WorkerPresence::liveness`]).
//!
//! The jobs a process holds are those it is building or timing right now: every build and
//! evaluation already runs inside [`crate::with_heartbeats`] (the per-job lease renewals), which
//! records its jobs in the process's [`Activity`] for as long as it runs ([`Activity::hold`]).
//! Device health is the GpuMonitor's last probe, kept there too, not a probe of its own.
//!
//! A write that fails (the database restarting) is logged and tried at the next beat: presence
//! is for people, and never stops the work.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use shoal_gpu::Device;
use shoal_model::presence::PRESENCE_EVERY;
use shoal_model::{DevicePresence, JobId, WorkerPresence};
use shoal_store::Store;

use crate::shutdown::Signal;

/// What this process is doing now, as its presence record shows it: the jobs it is building or
/// timing (with how many holders each has), and each device's last probe with whether an
/// operator paused it. One per process, created by the command that starts the actors and
/// handed to them and to the presence writer ([`run`]); cheap to clone (the clones share it).
#[derive(Clone, Debug, Default)]
pub struct Activity {
    held: Arc<Mutex<BTreeMap<JobId, usize>>>,
    health: Arc<Mutex<BTreeMap<String, (shoal_gpu::Health, bool)>>>,
}

/// Jobs held while this value lives.
pub(crate) struct Holding {
    jobs: Vec<JobId>,
    held: Arc<Mutex<BTreeMap<JobId, usize>>>,
}

impl Activity {
    /// Records `jobs` as held by this process until the returned value is dropped.
    pub(crate) fn hold(&self, jobs: impl IntoIterator<Item = JobId>) -> Holding {
        let jobs: Vec<JobId> = jobs.into_iter().collect();
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        for j in &jobs {
            *held.entry(*j).or_default() += 1;
        }
        Holding {
            jobs,
            held: self.held.clone(),
        }
    }

    /// The jobs this process is building or timing now, in id order.
    pub fn held_jobs(&self) -> Vec<JobId> {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect()
    }

    /// Records the GpuMonitor's last probe of `device`, and whether it is paused.
    pub(crate) fn probed(&self, device: &str, health: shoal_gpu::Health, paused: bool) {
        self.health
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(device.to_string(), (health, paused));
    }

    /// The last probe of `device` in this process and whether it is paused; `None` before the
    /// first.
    pub fn last_health(&self, device: &str) -> Option<(shoal_gpu::Health, bool)> {
        self.health
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(device)
            .cloned()
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        for j in &self.jobs {
            if let Some(n) = held.get_mut(j) {
                *n -= 1;
                if *n == 0 {
                    held.remove(j);
                }
            }
        }
    }
}

/// Who this process is, for its presence record.
#[derive(Clone, Debug)]
pub struct Identity {
    pub host: String,
    pub pid: u32,
    pub version: String,
    pub roles: Vec<String>,
    /// The devices whose health each beat reports.
    pub devices: Vec<Device>,
    pub started_ms: i64,
    /// What the process's actors are doing, which each beat reports.
    pub activity: Activity,
}

impl Identity {
    /// The record at `now_ms`, with each device's health as the GpuMonitor last saw it.
    fn record(&self, now_ms: i64, every: Duration, health: Vec<DevicePresence>) -> WorkerPresence {
        WorkerPresence {
            id: WorkerPresence::id_of(&self.host, self.pid, self.started_ms),
            host: self.host.clone(),
            pid: self.pid,
            version: self.version.clone(),
            roles: self.roles.clone(),
            devices: health,
            jobs: self.activity.held_jobs(),
            heartbeat_ms: i64::try_from(every.as_millis()).unwrap_or(i64::MAX),
            started_ms: self.started_ms,
            last_seen_ms: now_ms,
            stopped_ms: None,
        }
    }
}

/// Each device as the GpuMonitor of this process last saw it ([`Activity::last_health`]);
/// before its first probe, healthy (as the Evaluators' switches start) and said not probed yet.
fn device_health(devices: &[Device], activity: &Activity) -> Vec<DevicePresence> {
    devices
        .iter()
        .map(|d| {
            let (healthy, detail) = match activity.last_health(&d.id) {
                Some((h, paused)) => (
                    h.healthy,
                    if paused {
                        format!("{}; paused by an operator", h.detail)
                    } else {
                        h.detail
                    },
                ),
                None => (true, "not probed yet".to_string()),
            };
            DevicePresence {
                id: d.id.clone(),
                name: d.name.clone(),
                arch: d.arch.clone(),
                units: d.num_cu,
                healthy,
                detail,
            }
        })
        .collect()
}

/// Writes `me`'s presence every `every` until `stop`, then once more as stopped.
pub async fn run(store: Arc<dyn Store>, me: Identity, every: Duration, mut stop: Signal) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.triggered() => break,
        }
        let record = me.record(
            crate::now_ms(),
            every,
            device_health(&me.devices, &me.activity),
        );
        if let Err(e) = store.put_worker(&record).await {
            tracing::warn!(error = %e, "presence not written; trying again at the next beat");
        }
    }
    let mut record = me.record(
        crate::now_ms(),
        every,
        device_health(&me.devices, &me.activity),
    );
    record.stopped_ms = Some(record.last_seen_ms);
    if let Err(e) = store.put_worker(&record).await {
        tracing::warn!(error = %e, "the stop was not recorded; readers will call this worker stale");
    }
}

/// [`run`] with the standard period.
pub async fn run_standard(store: Arc<dyn Store>, me: Identity, stop: Signal) {
    run(store, me, PRESENCE_EVERY, stop).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_jobs_are_those_of_live_holdings() {
        let activity = Activity::default();
        let a = activity.hold([JobId(900_001), JobId(900_002)]);
        let b = activity.clone().hold([JobId(900_002)]);
        assert_eq!(activity.held_jobs(), vec![JobId(900_001), JobId(900_002)]);
        drop(a);
        assert_eq!(activity.held_jobs(), vec![JobId(900_002)]);
        drop(b);
        assert!(activity.held_jobs().is_empty());
    }

    #[tokio::test]
    async fn a_process_is_recorded_while_it_runs_and_stopped_when_it_stops() {
        let store: Arc<dyn Store> = Arc::new(shoal_store::SqliteStore::open_in_memory().unwrap());
        store.migrate().await.unwrap();
        let me = Identity {
            host: "h".into(),
            pid: 42,
            version: "0.1.0".into(),
            roles: vec!["eval".into()],
            devices: shoal_gpu::simulated(2),
            started_ms: crate::now_ms(),
            activity: Activity::default(),
        };
        let activity = me.activity.clone();
        let (trigger, signal) = crate::shutdown::channel();
        let task = tokio::spawn(run(store.clone(), me, Duration::from_millis(20), signal));
        let _held = activity.hold([JobId(900_100)]);
        tokio::time::sleep(Duration::from_millis(120)).await;
        let live = store.workers().await.unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].devices.len(), 2);
        assert!(live[0].jobs.contains(&JobId(900_100)), "{live:?}");
        assert_eq!(
            live[0].liveness(crate::now_ms()),
            shoal_model::Liveness::Live
        );
        trigger.trigger();
        task.await.unwrap();
        let stopped = store.workers().await.unwrap();
        assert_eq!(
            stopped[0].liveness(crate::now_ms()),
            shoal_model::Liveness::Stopped
        );
    }
}
