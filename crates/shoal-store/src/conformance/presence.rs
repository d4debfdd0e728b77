//! Conformance cases for worker presence: a heartbeat replaces its own row and no other, and the
//! listing reads back every field, most recently seen first.

use super::*;
use shoal_model::{DevicePresence, WorkerPresence};

fn worker(host: &str, pid: u32, seen: i64) -> WorkerPresence {
    WorkerPresence {
        id: WorkerPresence::id_of(host, pid, 1_000),
        host: host.into(),
        pid,
        version: "0.1.0".into(),
        roles: vec!["compile".into(), "eval".into()],
        devices: vec![DevicePresence {
            id: "nvidia0".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            arch: "sm_90".into(),
            units: 132,
            healthy: true,
            detail: "temp 41 C, util 97 %, sm 1980 MHz".into(),
        }],
        jobs: vec![JobId(7), JobId(9)],
        heartbeat_ms: 5_000,
        started_ms: 1_000,
        last_seen_ms: seen,
        stopped_ms: None,
    }
}

pub async fn worker_presence_is_upserted_and_listed_newest_first(store: &dyn Store) {
    assert!(store.workers().await.unwrap().is_empty());
    let a = worker("gpu-a", 11, 2_000);
    let b = worker("gpu-b", 12, 3_000);
    store.put_worker(&a).await.unwrap();
    store.put_worker(&b).await.unwrap();
    assert_eq!(store.workers().await.unwrap(), vec![b.clone(), a.clone()]);

    // A later heartbeat of `a` replaces its row: seen later, other jobs, a sick device.
    let mut a2 = a.clone();
    a2.last_seen_ms = 4_000;
    a2.jobs = Vec::new();
    a2.devices[0].healthy = false;
    a2.devices[0].detail = "temp 95 C".into();
    store.put_worker(&a2).await.unwrap();
    assert_eq!(store.workers().await.unwrap(), vec![a2.clone(), b.clone()]);

    // A clean stop is recorded as such.
    let mut a3 = a2.clone();
    a3.stopped_ms = Some(4_500);
    a3.last_seen_ms = 4_500;
    store.put_worker(&a3).await.unwrap();
    let listed = store.workers().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0], a3);
    assert_eq!(listed[0].stopped_ms, Some(4_500));
}
