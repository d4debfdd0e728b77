//! `shoal sessions` and `shoal status`: what the store says about the sessions in it, for people
//! (text) and programs (`--json`): per session its progress, rate and ETA
//! ([`shoal_model::progress`]), its jobs per state, its failed candidates grouped by kind and
//! error ([`shoal_export::failures`]), and a summary of the fleet that works on it (the presence
//! records, `shoal workers`); `shoal failures` lists every failed candidate.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use shoal_model::progress::{human_duration, Progress, RATE_WINDOW_MS};
use shoal_model::{JobState, Liveness};

use crate::store_open::session_or_newest;

pub async fn sessions(db: &Path, cluster: bool, json: bool) -> anyhow::Result<ExitCode> {
    let store = crate::fleet::store_for_reading(db, cluster).await?;
    let (cancelled, rows) = crate::waiting::on_stderr(async {
        let cancelled: std::collections::HashSet<_> =
            store.cancelled_sessions().await?.into_iter().collect();
        let mut rows = Vec::new();
        for s in store.sessions().await? {
            let (progress, _) = progress_of(&*store, s.id).await?;
            rows.push((s, progress));
        }
        anyhow::Ok((cancelled, rows))
    })
    .await?;
    if json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .map(|(s, p)| {
                let mut v = serde_json::to_value(s).unwrap_or_default();
                // The spec's whole text is the session's identity, not a listing's business.
                if let Some(o) = v.as_object_mut() {
                    o.remove("spec");
                }
                v["done"] = p.done.into();
                v["jobs"] = p.total.into();
                v["cancelled"] = cancelled.contains(&s.id).into();
                v["progress"] = serde_json::to_value(p).unwrap_or_default();
                v
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        println!("no session in {}", store.describe());
        return Ok(ExitCode::SUCCESS);
    }
    let mut lines = vec![[
        "session", "arch", "units", "backend", "done", "jobs", "rate", "eta", "spec",
    ]
    .map(String::from)
    .to_vec()];
    for (s, p) in &rows {
        lines.push(vec![
            s.id.to_string(),
            s.info.arch.clone(),
            s.info.num_cu.to_string(),
            s.info.backend.to_string(),
            p.done.to_string(),
            p.total.to_string(),
            p.per_s.map_or("-".into(), |r| format!("{r:.2}/s")),
            match p.eta_s {
                _ if cancelled.contains(&s.id) && p.done == p.total => "cancelled".into(),
                _ if cancelled.contains(&s.id) => "cancelling".into(),
                _ if p.done == p.total => "done".into(),
                Some(eta) => human_duration(eta),
                None => "-".into(),
            },
            s.info.spec_path.clone(),
        ]);
    }
    print!(
        "{}",
        shoal_export::text_columns(&lines, shoal_export::Align::Left, true)
    );
    Ok(ExitCode::SUCCESS)
}

/// A session's progress now (jobs final of all, rate and ETA) and its jobs per state: what
/// `sessions`, `status` and the dashboard show, read one way.
pub async fn progress_of(
    store: &dyn shoal_store::Store,
    id: shoal_model::SessionId,
) -> anyhow::Result<(Progress, BTreeMap<JobState, u64>)> {
    let counts = store.state_counts(id).await?;
    let total: u64 = counts.values().sum();
    let done: u64 = counts
        .iter()
        .filter(|(st, _)| st.is_terminal())
        .map(|(_, n)| n)
        .sum();
    let now = shoal_actors::now_ms();
    if total > 0 && done == total {
        let times = store.finish_times(id, 0).await?;
        return Ok((Progress::finished(total, &times), counts));
    }
    let times = store.finish_times(id, now - RATE_WINDOW_MS).await?;
    Ok((Progress::new(done, total, &times, now), counts))
}

pub async fn status(
    db: &Path,
    cluster: bool,
    session: Option<i64>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let store = crate::fleet::store_for_reading(db, cluster).await?;
    let now = shoal_actors::now_ms();
    let (info, progress, counts, failures, fleet) = crate::waiting::on_stderr(async {
        let info = session_or_newest(&*store, session).await?;
        let (progress, counts) = progress_of(&*store, info.id).await?;
        let failures = shoal_export::failures::failure_groups(&store.final_results(info.id).await?);
        let fleet = FleetSummary::of(&store.workers().await?, now);
        anyhow::Ok((info, progress, counts, failures, fleet))
    })
    .await?;
    let id = info.id;
    if json {
        let states: serde_json::Map<String, serde_json::Value> = JobState::ALL
            .iter()
            .map(|st| {
                (
                    st.as_str().to_string(),
                    counts.get(st).copied().unwrap_or(0).into(),
                )
            })
            .collect();
        // Per group: kind, count, the error line, Shoal's line, the tool's first lines, and
        // every candidate's parameters; `example` (the whole first message) as before.
        let failures: Vec<serde_json::Value> = failures
            .iter()
            .map(|g| {
                serde_json::json!({
                    "kind": g.kind,
                    "count": g.count(),
                    "error": g.error,
                    "example": std::iter::once(g.headline.as_str())
                        .chain(g.output.iter().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join("\n"),
                    "output": g.output,
                    "candidates": g.candidates,
                })
            })
            .collect();
        let v = serde_json::json!({
            "session": id.0,
            "progress": progress,
            "states": states,
            "failures": failures,
            "fleet": fleet,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "session {id}: {} on {} ({} units), {} backend",
        info.info.spec_path, info.info.arch, info.info.num_cu, info.info.backend
    );
    println!("progress: {}", progress_line(&progress));
    println!("jobs");
    for st in JobState::ALL {
        println!(
            "  {:<15} {}",
            st.as_str(),
            counts.get(&st).copied().unwrap_or(0)
        );
    }
    if !failures.is_empty() {
        let n: usize = failures.iter().map(|g| g.count()).sum();
        println!(
            "failures: {n} candidate{}, {} kind{} of error",
            if n == 1 { "" } else { "s" },
            failures.len(),
            if failures.len() == 1 { "" } else { "s" }
        );
        for line in shoal_export::failures::failure_text(&failures, Some(FAILED_SHOWN)) {
            println!("{line}");
        }
    }
    println!("fleet: {}", fleet.line());
    Ok(ExitCode::SUCCESS)
}

/// `shoal failures`: every failed candidate of a session, grouped by kind and error.
pub async fn failures(
    db: &Path,
    cluster: bool,
    session: Option<i64>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let store = crate::fleet::store_for_reading(db, cluster).await?;
    let (info, groups) = crate::waiting::on_stderr(async {
        let info = session_or_newest(&*store, session).await?;
        let results = store.final_results(info.id).await?;
        anyhow::Ok((info, shoal_export::failures::failure_groups(&results)))
    })
    .await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&groups)?);
        return Ok(ExitCode::SUCCESS);
    }
    if groups.is_empty() {
        println!("session {}: no failed candidates", info.id);
        return Ok(ExitCode::SUCCESS);
    }
    let n: usize = groups.iter().map(|g| g.count()).sum();
    println!(
        "session {}: {n} failed candidate{} in {} group{}",
        info.id,
        if n == 1 { "" } else { "s" },
        groups.len(),
        if groups.len() == 1 { "" } else { "s" }
    );
    for line in shoal_export::failures::failure_text(&groups, None) {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// How many failed candidates of each group `status` names (`shoal failures` names them all).
const FAILED_SHOWN: usize = 3;

/// `120/540 done (22.2 %), 3.20 jobs/s over the last 5 min, ETA 2m 11s`.
fn progress_line(p: &Progress) -> String {
    let mut line = format!("{}/{} done ({:.1} %)", p.done, p.total, p.percent());
    match (p.per_s, p.eta_s) {
        _ if p.done == p.total => {
            line.push_str(", finished");
            if let (Some(secs), Some(r)) = (p.finished_in_s, p.per_s) {
                line.push_str(&format!(
                    " in {} (first to last job) at {r:.2} jobs/s",
                    human_duration(secs)
                ));
            }
        }
        (Some(r), Some(eta)) => line.push_str(&format!(
            ", {r:.2} jobs/s over the last {} min, ETA {}",
            RATE_WINDOW_MS / 60_000,
            human_duration(eta)
        )),
        _ => line.push_str(&format!(
            ", nothing finished in the last {} min",
            RATE_WINDOW_MS / 60_000
        )),
    }
    line
}

/// What the workers reporting to the store add up to.
#[derive(Debug, Default, serde::Serialize)]
struct FleetSummary {
    live: usize,
    stale: usize,
    devices: usize,
    unhealthy_devices: usize,
    jobs_held: usize,
}

impl FleetSummary {
    fn of(workers: &[shoal_model::WorkerPresence], now: i64) -> Self {
        let mut f = FleetSummary::default();
        for w in workers {
            match w.liveness(now) {
                Liveness::Live => {
                    f.live += 1;
                    f.devices += w.devices.len();
                    f.unhealthy_devices += w.devices.iter().filter(|d| !d.healthy).count();
                    f.jobs_held += w.jobs.len();
                }
                Liveness::Stale => f.stale += 1,
                Liveness::Stopped => {}
            }
        }
        f
    }

    fn line(&self) -> String {
        if self.live + self.stale == 0 {
            return "no worker is reporting (`shoal workers` lists those that did)".into();
        }
        format!(
            "{} live workers{}, {} devices{}, holding {} jobs",
            self.live,
            if self.stale > 0 {
                format!(" ({} stale)", self.stale)
            } else {
                String::new()
            },
            self.devices,
            if self.unhealthy_devices > 0 {
                format!(" ({} unhealthy)", self.unhealthy_devices)
            } else {
                String::new()
            },
            self.jobs_held
        )
    }
}
