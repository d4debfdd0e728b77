//! Worker presence rows (`schemas/*/…_worker.sql`), the same in both stores: the statements,
//! and the one encoding of a [`WorkerPresence`] as column values (lists as JSON text), so the
//! SQLite and MySQL halves differ only in how they bind and read.

use std::sync::LazyLock;

use shoal_model::{JobId, WorkerPresence};

use crate::encoding::to_json;
use crate::{Result, StoreError};

/// The columns, in the order [`Encoded`] binds them.
const COLUMNS: &str = "id, host, pid, version, roles, devices, jobs, heartbeat_ms, \
     started_ms, last_seen_ms, stopped_ms";

/// The columns written on a repeat heartbeat (all but the id).
const UPDATED: [&str; 10] = [
    "host",
    "pid",
    "version",
    "roles",
    "devices",
    "jobs",
    "heartbeat_ms",
    "started_ms",
    "last_seen_ms",
    "stopped_ms",
];

/// Insert, or replace the row with that id: SQLite's spelling (3.24+).
pub(crate) static UPSERT_SQLITE: LazyLock<String> = LazyLock::new(|| {
    let set: Vec<String> = UPDATED
        .iter()
        .map(|c| format!("{c} = excluded.{c}"))
        .collect();
    format!(
        "INSERT INTO worker ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
         ON CONFLICT (id) DO UPDATE SET {}",
        set.join(", ")
    )
});

/// The same upsert in MariaDB's spelling.
pub(crate) static UPSERT_MYSQL: LazyLock<String> = LazyLock::new(|| {
    let set: Vec<String> = UPDATED
        .iter()
        .map(|c| format!("{c} = VALUES({c})"))
        .collect();
    format!(
        "INSERT INTO worker ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE {}",
        set.join(", ")
    )
});

/// Every row, most recently seen first; the id breaks ties so the order is total.
pub(crate) const SELECT_ALL: &str =
    "SELECT id, host, pid, version, roles, devices, jobs, heartbeat_ms, started_ms, \
     last_seen_ms, stopped_ms FROM worker ORDER BY last_seen_ms DESC, id";

/// One row's values in [`COLUMNS`] order, the lists as JSON text.
pub(crate) struct Encoded<'a> {
    pub w: &'a WorkerPresence,
    pub roles: String,
    pub devices: String,
    pub jobs: String,
}

pub(crate) fn encode(w: &WorkerPresence) -> Result<Encoded<'_>> {
    let jobs: Vec<i64> = w.jobs.iter().map(|j| j.0).collect();
    Ok(Encoded {
        w,
        roles: to_json("worker roles", &w.roles)?,
        devices: to_json("worker devices", &w.devices)?,
        jobs: to_json("worker jobs", &jobs)?,
    })
}

/// The raw columns of one row, in [`SELECT_ALL`] order.
pub(crate) struct Raw {
    pub id: String,
    pub host: String,
    pub pid: i64,
    pub version: String,
    pub roles: String,
    pub devices: String,
    pub jobs: String,
    pub heartbeat_ms: i64,
    pub started_ms: i64,
    pub last_seen_ms: i64,
    pub stopped_ms: Option<i64>,
}

pub(crate) fn decode(raw: Raw) -> Result<WorkerPresence> {
    let bad = |col: &str, e: serde_json::Error| {
        StoreError::Invalid(format!("worker {}: column `{col}`: {e}", raw.id))
    };
    let jobs: Vec<i64> = serde_json::from_str(&raw.jobs).map_err(|e| bad("jobs", e))?;
    Ok(WorkerPresence {
        roles: serde_json::from_str(&raw.roles).map_err(|e| bad("roles", e))?,
        devices: serde_json::from_str(&raw.devices).map_err(|e| bad("devices", e))?,
        jobs: jobs.into_iter().map(JobId).collect(),
        pid: u32::try_from(raw.pid)
            .map_err(|_| StoreError::Invalid(format!("worker {}: pid {}", raw.id, raw.pid)))?,
        id: raw.id,
        host: raw.host,
        version: raw.version,
        heartbeat_ms: raw.heartbeat_ms,
        started_ms: raw.started_ms,
        last_seen_ms: raw.last_seen_ms,
        stopped_ms: raw.stopped_ms,
    })
}
