//! Throughput of the MySQL store's batch writes. Prints figures; asserts only correctness.
//!
//! ```text
//! cargo test -p shoal-store --release --test mysql_bench -- --ignored --nocapture
//! ```
//! Environment: `SHOAL_TEST_MYSQL` (server URL), `SHOAL_BENCH_JOBS` (default 10000),
//! `SHOAL_BENCH_BATCH` (changes per batch, default 500).

use std::time::Instant;

use shoal_model::{JobId, JobState, NewJob, Transition};
use shoal_store::conformance::{measured, new_job, world};
use shoal_store::mysql::ScratchDb;
use shoal_store::{Batch, Change, Store};
use JobState::*;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Applies `changes` in batches of `batch`; returns changes per second.
async fn run(db: &ScratchDb, changes: Vec<Change>, batch: usize) -> (f64, usize) {
    let n = changes.len();
    let start = Instant::now();
    let mut applied = 0;
    for chunk in changes.chunks(batch) {
        let out = db
            .apply(&Batch {
                changes: chunk.to_vec(),
                builds: vec![],
            })
            .await
            .unwrap();
        applied += out.iter().filter(|a| **a).count();
    }
    (n as f64 / start.elapsed().as_secs_f64(), applied)
}

#[tokio::test]
#[ignore = "benchmark: run with --ignored --nocapture"]
async fn apply_throughput() {
    let jobs = env("SHOAL_BENCH_JOBS", 10_000);
    let batch = env("SHOAL_BENCH_BATCH", 500);
    let db = ScratchDb::new("shoal_bench").await.unwrap();
    db.migrate().await.unwrap();
    let w = world(&db).await;

    let new: Vec<NewJob> = (0..jobs)
        .map(|i| new_job(&w, &i.to_string(), &format!("b{}", i / 4)))
        .collect();
    let start = Instant::now();
    for chunk in new.chunks(1000) {
        db.insert_jobs(chunk).await.unwrap();
    }
    let insert_rate = jobs as f64 / start.elapsed().as_secs_f64();
    let ids: Vec<JobId> = db
        .jobs_in_state(w.session, New, jobs as u32)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(ids.len(), jobs);

    // 1. Dispatch: new → compile_queued, one change per job.
    let dispatch: Vec<Change> = ids
        .iter()
        .map(|id| {
            Transition::new(*id, New, 0, CompileQueued)
                .unwrap()
                .with_lease(1_000)
                .into()
        })
        .collect();
    let (dispatch_rate, n) = run(&db, dispatch, batch).await;
    assert_eq!(n, jobs);

    // 2. The rest of a job's life as the Scheduler writes it: every reply as two alternative
    //    compare-and-sets (from queued, from started) of which one applies, per-job workers,
    //    leases and artifacts, and a result row per evaluated job.
    let mut rest: Vec<Change> = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let worker = format!("host-{}/w{}", i % 4, i % 16);
        rest.push(
            Transition::new(*id, CompileQueued, 1, Compiling)
                .unwrap()
                .with_worker(worker.clone())
                .with_lease(2_000 + i as i64)
                .into(),
        );
    }
    for (i, id) in ids.iter().enumerate() {
        for from in [Compiling, CompileQueued] {
            rest.push(
                Transition::new(*id, from, 1, Compiled)
                    .unwrap()
                    .with_artifact(format!("sha256:{:064x}", i / 4))
                    .into(),
            );
        }
    }
    for id in &ids {
        rest.push(
            Transition::new(*id, Compiled, 1, EvalQueued)
                .unwrap()
                .with_lease(3_000)
                .into(),
        );
    }
    for (i, id) in ids.iter().enumerate() {
        rest.push(
            Transition::new(*id, EvalQueued, 2, Evaluating)
                .unwrap()
                .with_worker(format!("gpu{}", i % 8))
                .with_lease(4_000 + i as i64)
                .into(),
        );
    }
    for (i, id) in ids.iter().enumerate() {
        for from in [Evaluating, EvalQueued] {
            rest.push(Change {
                transition: Transition::new(*id, from, 2, Evaluated)
                    .unwrap()
                    .with_worker(format!("gpu{}", i % 8)),
                result: Some(measured(&w, *id, 2, i as f64)),
            });
        }
    }
    let changes = rest.len();
    let (rest_rate, n) = run(&db, rest, batch).await;
    assert_eq!(n, 5 * jobs, "five transitions per job applied");
    let counts = db.state_counts(w.session).await.unwrap();
    assert_eq!(counts.get(&Evaluated), Some(&(jobs as u64)));

    println!(
        "mysql store ({}), {jobs} jobs, batches of {batch} changes:",
        if db.store().bulk_writes() {
            "bulk writes"
        } else {
            "row-by-row writes"
        }
    );
    println!("  insert_jobs (1000 per call)           {insert_rate:>9.0} jobs/s");
    println!("  apply new→compile_queued              {dispatch_rate:>9.0} changes/s");
    println!(
        "  apply the rest of the life ({changes} changes, 5 of them applied per job, results) \
         {rest_rate:>9.0} changes/s = {:.0} jobs/s",
        rest_rate * jobs as f64 / changes as f64
    );
}
