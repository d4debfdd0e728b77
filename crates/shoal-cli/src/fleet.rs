//! `shoal workers`: the fleet as the store knows it, from the presence record every worker
//! process writes (`shoal_actors::presence`): which processes are live, stale or stopped, on
//! which hosts, with which roles and devices, holding which jobs.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use shoal_model::progress::human_duration;
use shoal_model::{Liveness, WorkerPresence};
use shoal_store::Store;

/// Records of processes stopped or silent for longer than this are left out unless `--all`.
const RECENT: Duration = Duration::from_secs(3600);

#[derive(Debug, clap::Args)]
pub struct WorkersArgs {
    /// Print JSON (one object per worker, with its `state`) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also list processes that stopped or went silent more than an hour ago.
    #[arg(long)]
    pub all: bool,
    /// Read the cluster's database (SHOAL_DB or the config file) instead of --db.
    #[arg(long)]
    pub cluster: bool,
}

/// The store a reading command reads: with `--cluster` the cluster's database (SHOAL_DB or the
/// config file), else the `--db` file, which must exist.
pub async fn store_for_reading(db: &Path, cluster: bool) -> anyhow::Result<Arc<dyn Store>> {
    if !cluster {
        return crate::store_open::open_existing(db).await;
    }
    let settings = crate::connect::Settings::load(None)?;
    let url = settings.db.as_ref().ok_or_else(|| {
        anyhow::anyhow!("--cluster: no database configured (SHOAL_DB or `db` in the config file)")
    })?;
    // A database that does not answer yet is waited for, saying so (see `waiting`).
    crate::waiting::on_stderr(crate::connect::open_store_url(
        &settings.db_from,
        url,
        shoal_store::patient::DEFAULT_PATIENCE,
    ))
    .await
}

pub async fn workers(args: WorkersArgs, db: &Path) -> anyhow::Result<ExitCode> {
    let store = store_for_reading(db, args.cluster).await?;
    let now = shoal_actors::now_ms();
    let recent_ms = i64::try_from(RECENT.as_millis()).unwrap_or(i64::MAX);
    let listed: Vec<(WorkerPresence, Liveness)> = store
        .workers()
        .await?
        .into_iter()
        .map(|w| {
            let l = w.liveness(now);
            (w, l)
        })
        .filter(|(w, l)| args.all || *l == Liveness::Live || now - w.last_seen_ms <= recent_ms)
        .collect();
    if args.json {
        let list: Vec<serde_json::Value> = listed
            .iter()
            .map(|(w, l)| {
                let mut v = serde_json::to_value(w).unwrap_or_default();
                v["state"] = l.as_str().into();
                v
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    if listed.is_empty() {
        println!("no worker has reported to {}", store.describe());
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", table(&listed, now));
    let count = |want: Liveness| listed.iter().filter(|(_, l)| *l == want).count();
    println!(
        "{} live, {} stale (silent for more than {} heartbeats), {} stopped",
        count(Liveness::Live),
        count(Liveness::Stale),
        shoal_model::presence::STALE_AFTER_BEATS,
        count(Liveness::Stopped)
    );
    Ok(ExitCode::SUCCESS)
}

/// The workers as text columns: one line per process.
fn table(listed: &[(WorkerPresence, Liveness)], now: i64) -> String {
    let mut lines = vec![[
        "worker", "state", "roles", "jobs", "devices", "up", "seen", "version",
    ]
    .map(String::from)
    .to_vec()];
    for (w, l) in listed {
        let devices: Vec<String> = w
            .devices
            .iter()
            .map(|d| {
                format!(
                    "{} {}{}",
                    d.id,
                    d.arch,
                    if d.healthy { "" } else { " UNHEALTHY" }
                )
            })
            .collect();
        lines.push(vec![
            format!("{}:{}", w.host, w.pid),
            l.as_str().to_string(),
            w.roles.join(","),
            w.jobs.len().to_string(),
            if devices.is_empty() {
                "-".into()
            } else {
                devices.join(", ")
            },
            human_duration((w.stopped_ms.unwrap_or(now) - w.started_ms) as f64 / 1000.0),
            format!(
                "{} ago",
                human_duration((now - w.last_seen_ms) as f64 / 1000.0)
            ),
            w.version.clone(),
        ]);
    }
    shoal_export::text_columns(&lines, shoal_export::Align::Left, true)
}
