//! `shoal-bench dispatch --preload N`: the store already holds N finished jobs of an earlier
//! session when the timed run starts, and the run's last line says what the run cost in memory
//! and on disk.
//!
//! Why: a deployment's store is never empty. Issue 35 found that dispatch slowed from 4,600 to
//! 830 jobs/s once the job table outgrew InnoDB's buffer pool, which a benchmark on an empty
//! store never shows. Preloading puts the timed run on top of a big table without timing the
//! hours a real history took: the jobs are inserted and finished in batches of [`CHUNK`], each
//! batch one `insert_jobs` and one `apply` of the changes a Scheduler would make
//! (`new → compile_queued → compiled → eval_queued → evaluated`, with a result row each, the
//! build records and the one no-op artifact). Only the `Store` trait's public methods are used,
//! so the preload follows the schema wherever it goes.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use shoal_model::{
    JobState, Measurement, NewJob, Outcome, Params, ResultRow, SessionId, Transition,
};
use shoal_store::{Batch, BuildRecord, Change, Store};

/// Jobs inserted and finished per round: 20,000 changes and 5,000 result rows in one `apply`,
/// which both stores take in one transaction of about a second on the 2-core machine.
pub const CHUNK: usize = 5000;

/// The worker and device the preloaded results name.
const WORKER: &str = "preload/cpu0";

/// Fills `store` with `n` evaluated jobs of a new no-op session for the device kind
/// (`arch`, `num_cu`), `builds` builds shared in turn as in the timed run; reports progress on
/// stderr every few seconds. Returns the session.
pub async fn preload(
    store: &dyn Store,
    n: u64,
    builds: u64,
    (arch, num_cu): (&str, u32),
) -> anyhow::Result<SessionId> {
    let started = Instant::now();
    let reason = format!("bench-dispatch preload {n} jobs");
    let (session, config, solver) =
        crate::dispatch::noop_session(store, &reason, (arch, num_cu)).await?;
    let artifact = shoal_backend::noop::build(&Params::new()).await;
    store.put_artifact(&artifact.hash, &artifact.packed).await?;
    let builds = builds.max(1);
    let mut recorded: HashSet<String> = HashSet::new();
    let mut done = 0u64;
    let mut last_report = Instant::now();
    while done < n {
        let count = (n - done).min(CHUNK as u64);
        let jobs: Vec<NewJob> = (done..done + count)
            .map(|i| {
                let (compile, run) = crate::dispatch::noop_params(i, builds);
                crate::dispatch::noop_job(session, config, solver, compile, run)
            })
            .collect();
        let inserted = store.insert_jobs(&jobs).await?;
        anyhow::ensure!(
            inserted == count,
            "preload: inserted {inserted} of {count} jobs"
        );
        let new = store
            .jobs_in_state(session, JobState::New, CHUNK as u32)
            .await?;
        anyhow::ensure!(
            new.len() as u64 == count,
            "preload: found {} new jobs of the {count} just inserted",
            new.len()
        );
        let keys: Vec<String> = new
            .iter()
            .map(|j| j.build_key.clone())
            .filter(|k| recorded.insert(k.clone()))
            .collect();
        let now = shoal_actors::now_ms();
        let mut batch = Batch {
            changes: Vec::with_capacity(new.len() * 4),
            builds: keys
                .into_iter()
                .map(|build_key| BuildRecord {
                    session,
                    build_key,
                    result: Ok(artifact.hash.clone()),
                })
                .collect(),
        };
        for job in &new {
            batch
                .changes
                .extend(finished(job.id, session, &artifact.hash, now)?);
        }
        let applied = store.apply(&batch).await?;
        let missed = applied.iter().filter(|a| !**a).count();
        anyhow::ensure!(missed == 0, "preload: {missed} changes did not apply");
        done += count;
        if last_report.elapsed() > Duration::from_secs(5) || done == n {
            eprintln!(
                "preload: {done}/{n} jobs finished ({:.0} jobs/s)",
                done as f64 / started.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
    }
    Ok(session)
}

/// The changes that take a new job through one compile and one evaluation, as the Scheduler
/// writes them when replies come back: leases on the queued states, the artifact on
/// `compiled`, the worker and a 1 µs measurement on `evaluated`.
fn finished(
    job: shoal_model::JobId,
    session: SessionId,
    artifact: &str,
    now: i64,
) -> anyhow::Result<Vec<Change>> {
    use JobState::*;
    let lease = now + 60_000;
    let row = ResultRow {
        job,
        session,
        attempt: 2,
        outcome: Outcome::Measured(Measurement {
            time_us: 1.0,
            samples_us: vec![1.0],
            workspace: 0,
            details: Params::new(),
        }),
        worker: WORKER.to_string(),
        device: "cpu".to_string(),
        created_ms: now,
    };
    Ok(vec![
        Transition::new(job, New, 0, CompileQueued)?
            .with_lease(lease)
            .into(),
        Transition::new(job, CompileQueued, 1, Compiled)?
            .with_artifact(artifact)
            .with_worker(WORKER)
            .into(),
        Transition::new(job, Compiled, 1, EvalQueued)?
            .with_lease(lease)
            .into(),
        Change {
            transition: Transition::new(job, EvalQueued, 2, Evaluated)?.with_worker(WORKER),
            result: Some(row),
        },
    ])
}

/// The peak resident memory (`VmHWM`) of process `pid`, or of this process for `None`, in KiB;
/// `None` where /proc does not say (the process is gone).
pub fn peak_rss_kib(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/self/status".to_string(),
    };
    vm_hwm_kib(&std::fs::read_to_string(path).ok()?)
}

/// The `VmHWM:` line of a /proc status file, in KiB.
fn vm_hwm_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let mut words = line.split_whitespace().skip(1);
    let n = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_read_from_the_status_file() {
        let status = "Name:\tshoal\nVmPeak:\t  900 kB\nVmHWM:\t   51234 kB\nVmRSS:\t 40000 kB\n";
        assert_eq!(vm_hwm_kib(status), Some(51234));
        assert_eq!(
            vm_hwm_kib("Name:\tzombie\n"),
            None,
            "a zombie has no memory lines"
        );
        assert_eq!(vm_hwm_kib("VmHWM:\t12 MB\n"), None, "only kB is understood");
        let own = peak_rss_kib(None).expect("this process has a status file");
        assert!(own > 100, "a test process holds more than 100 KiB: {own}");
    }

    #[test]
    fn the_last_line_divides_the_store_by_every_job_preloaded_or_timed() {
        let args = crate::dispatch::DispatchArgs {
            mode: crate::dispatch::Mode::Cluster,
            jobs: 100_000,
            builds: 100,
            eval_batch: 256,
            preload: 900_000,
        };
        let f = crate::dispatch::Figures {
            secs: 20.0,
            evaluated: 100_000,
            peak_rss_kib: 1025,
            db_bytes: 1_000_000_000,
        };
        assert_eq!(
            crate::dispatch::figures_line("cluster", &args, &f),
            "dispatch mode=cluster jobs=100000 secs=20.00 jobs_per_s=5000 preload=900000 \
             peak_rss_mb=2 db_bytes_per_job=1000"
        );
    }

    #[tokio::test]
    async fn preloaded_jobs_are_all_evaluated_with_one_result_each() {
        let (_dir, store) = crate::dispatch::embedded_store().await.unwrap();
        // Two rounds and a bit: the chunking and the last partial round.
        let n = 2 * CHUNK as u64 + 7;
        let session = preload(&*store, n, 3, ("cpu", 1)).await.unwrap();
        let counts = store.state_counts(session).await.unwrap();
        assert_eq!(counts.get(&JobState::Evaluated), Some(&n), "{counts:?}");
        assert_eq!(counts.len(), 1, "nothing left in another state: {counts:?}");
        let results = store.final_results(session).await.unwrap();
        assert_eq!(results.len() as u64, n);
        assert!(results.iter().all(|r| r.outcome.is_some()));
        let keys: Vec<String> = (0..3)
            .map(|b| shoal_backend::session::noop_build_key(&crate::dispatch::noop_params(b, 3).0))
            .collect();
        let builds = store.builds(session, &keys).await.unwrap();
        assert_eq!(builds.len(), 3, "one record per build: {builds:?}");
        // A second preload beside it is a session of its own: the timed run's is a third.
        let other = preload(&*store, 10, 3, ("cpu", 1)).await.unwrap();
        assert_ne!(other, session);
        assert_eq!(
            store
                .state_counts(other)
                .await
                .unwrap()
                .get(&JobState::Evaluated),
            Some(&10)
        );
    }
}
