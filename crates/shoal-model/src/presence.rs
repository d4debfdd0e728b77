//! Which Shoal processes are alive, where, and what they hold: the record each `shoal worker`
//! writes to the store every [`PRESENCE_EVERY`], and the one rule that reads it
//! ([`WorkerPresence::liveness`]), shared by `shoal workers`, `shoal status` and the dashboard.
//!
//! A process that stops cleanly says so (`stopped_ms`); one that dies says nothing, and is known
//! dead only by silence: [`STALE_AFTER_BEATS`] missed heartbeats.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ids::JobId;

/// How often a worker writes its presence record.
pub const PRESENCE_EVERY: Duration = Duration::from_secs(5);

/// Heartbeats a worker may miss before it is shown as stale.
pub const STALE_AFTER_BEATS: i64 = 3;

/// One device of a worker's host, as its GpuMonitor last saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DevicePresence {
    /// The host's name for it (`cpu`, `nvidia0`, `amdgpu1`).
    pub id: String,
    pub name: String,
    pub arch: String,
    pub units: u32,
    pub healthy: bool,
    /// What the probe read: temperature, utilisation, clocks, or why it is unhealthy.
    pub detail: String,
}

/// One worker process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerPresence {
    /// `host:pid:started_ms`: unique even when a pid is reused.
    pub id: String,
    pub host: String,
    pub pid: u32,
    /// The `shoal` version it runs.
    pub version: String,
    /// `scheduler`, `compile`, `eval`, `monitor`, `exporter`, in that order.
    pub roles: Vec<String>,
    pub devices: Vec<DevicePresence>,
    /// The jobs it is building or timing right now.
    pub jobs: Vec<JobId>,
    /// Its heartbeat period, so that a reader judges silence by the writer's own clock.
    pub heartbeat_ms: i64,
    pub started_ms: i64,
    pub last_seen_ms: i64,
    /// Set by a clean stop.
    pub stopped_ms: Option<i64>,
}

/// What a reader concludes about a worker at a given time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// Seen within [`STALE_AFTER_BEATS`] heartbeats.
    Live,
    /// Silent for longer: crashed, hung, or cut off from the database.
    Stale,
    /// Stopped cleanly.
    Stopped,
}

impl Liveness {
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Live => "live",
            Liveness::Stale => "stale",
            Liveness::Stopped => "stopped",
        }
    }
}

impl WorkerPresence {
    /// Live, stale or stopped at `now_ms`.
    pub fn liveness(&self, now_ms: i64) -> Liveness {
        if self.stopped_ms.is_some() {
            Liveness::Stopped
        } else if now_ms - self.last_seen_ms > STALE_AFTER_BEATS * self.heartbeat_ms.max(1) {
            Liveness::Stale
        } else {
            Liveness::Live
        }
    }

    /// The id a process started at `started_ms` on `host` with `pid` records itself under.
    pub fn id_of(host: &str, pid: u32, started_ms: i64) -> String {
        format!("{host}:{pid}:{started_ms}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(last_seen_ms: i64, stopped_ms: Option<i64>) -> WorkerPresence {
        WorkerPresence {
            id: WorkerPresence::id_of("h", 7, 0),
            host: "h".into(),
            pid: 7,
            version: "0".into(),
            roles: vec!["eval".into()],
            devices: Vec::new(),
            jobs: Vec::new(),
            heartbeat_ms: 5_000,
            started_ms: 0,
            last_seen_ms,
            stopped_ms,
        }
    }

    #[test]
    fn a_worker_is_stale_after_three_missed_heartbeats_and_stopped_when_it_said_so() {
        let w = worker(100_000, None);
        assert_eq!(w.liveness(100_000), Liveness::Live);
        assert_eq!(w.liveness(115_000), Liveness::Live);
        assert_eq!(w.liveness(115_001), Liveness::Stale);
        assert_eq!(
            worker(100_000, Some(100_000)).liveness(100_001),
            Liveness::Stopped
        );
        assert_eq!(
            worker(100_000, Some(100_000)).liveness(999_999),
            Liveness::Stopped
        );
        assert_eq!(w.id, "h:7:0");
    }
}
