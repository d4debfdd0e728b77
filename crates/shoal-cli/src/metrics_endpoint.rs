//! `--metrics-addr` of `shoal worker` and `shoal tune` (and `/metrics` of `shoal serve`, through
//! [`refresh_from_store`]): starts the `/metrics` endpoint
//! (`shoal_metrics::serve`) with what this process can read when scraped: the jobs per state of
//! the sessions it schedules (from the store) and the depths of the queues it uses (from the
//! broker).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use shoal_bus::Bus;
use shoal_metrics::{Collect, MetricsServer};
use shoal_model::SessionId;
use shoal_store::Store;

/// Sessions whose jobs a scrape counts, at most: the newest.
const SESSIONS_COUNTED: usize = 50;

/// `127.0.0.1:9464`, `[::1]:9464`, or a bare port (`9464`, `:9464`) on loopback.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let port = s.strip_prefix(':').unwrap_or(s);
    if let Ok(port) = port.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    s.parse()
        .map_err(|e| format!("`{s}`: expected HOST:PORT such as 127.0.0.1:9464, or a port ({e})"))
}

/// Which sessions a scrape counts the jobs of.
#[derive(Clone)]
pub enum Counted {
    /// None: this process does not schedule (its database identity may not read jobs).
    Nothing,
    /// The one session an embedded run tunes.
    One(SessionId),
    /// The newest sessions of the store (the Scheduler role).
    Newest,
}

/// How long a scrape waits for the job counts before answering without a fresh reading.
const COLLECT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Starts the endpoint when `addr` is given.
pub async fn start(
    addr: Option<SocketAddr>,
    store: Arc<dyn Store>,
    counted: Counted,
    bus: Option<(Arc<dyn Bus>, Vec<String>)>,
) -> anyhow::Result<Option<MetricsServer>> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "metrics are served beyond this host: anyone who can reach the address can read them");
    }
    let collect: Collect = Arc::new(move || {
        let (store, counted, bus) = (store.clone(), counted.clone(), bus.clone());
        Box::pin(async move {
            refresh_from_store(&*store, &counted).await;
            if let Some((bus, queues)) = bus {
                let mut depths = Vec::new();
                for q in queues {
                    match bus.queue_depth(&q).await {
                        Ok(n) => depths.push((q, n)),
                        Err(e) => tracing::debug!(queue = %q, error = %e, "queue depth unknown"),
                    }
                }
                shoal_metrics::metrics().set_queue_depths(depths);
            }
        })
    });
    Ok(Some(shoal_metrics::serve(addr, Some(collect)).await?))
}

/// Reads into the process's metrics what a scrape reports of the store and the outages: the
/// outage counters, and the jobs per state of the `counted` sessions (also `shoal serve`'s
/// `/metrics`).
pub async fn refresh_from_store(store: &dyn Store, counted: &Counted) {
    let outages = shoal_store::patient::outages();
    shoal_metrics::metrics().set_store_outages(
        outages.count,
        outages.total().as_secs_f64(),
        outages.current.is_some(),
    );
    let broker = shoal_bus::outages::outages();
    shoal_metrics::metrics().set_broker_outages(
        broker.count,
        (broker.ended_total + broker.current.unwrap_or_default()).as_secs_f64(),
    );
    // A scrape while the database does not answer must not wait for it: the job counts keep
    // their last reading.
    if outages.current.is_none() {
        let read = collect_jobs(store, counted);
        if tokio::time::timeout(COLLECT_WAIT, read).await.is_err() {
            tracing::debug!("job counts not read within the scrape's time");
        }
    }
}

async fn collect_jobs(store: &dyn Store, counted: &Counted) {
    let sessions: Vec<SessionId> = match counted {
        Counted::Nothing => return,
        Counted::One(s) => vec![*s],
        Counted::Newest => match store.sessions().await {
            Ok(all) => {
                let mut ids: Vec<SessionId> = all.iter().map(|s| s.id).collect();
                ids.sort_unstable_by(|a, b| b.cmp(a));
                ids.truncate(SESSIONS_COUNTED);
                ids
            }
            Err(e) => {
                tracing::debug!(error = %e, "sessions unknown to the metrics");
                return;
            }
        },
    };
    let mut counts = Vec::new();
    for s in sessions {
        match store.state_counts(s).await {
            Ok(c) => counts.extend(
                c.into_iter()
                    .map(|(state, n)| (s.to_string(), state.as_str().to_string(), n)),
            ),
            Err(e) => {
                tracing::debug!(session = %s, error = %e, "job counts unknown to the metrics")
            }
        }
    }
    shoal_metrics::metrics().set_jobs(counts);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_port_is_loopback() {
        assert_eq!(parse_addr("9464").unwrap().to_string(), "127.0.0.1:9464");
        assert_eq!(parse_addr(":9464").unwrap().to_string(), "127.0.0.1:9464");
        assert_eq!(parse_addr("0.0.0.0:80").unwrap().to_string(), "0.0.0.0:80");
        assert!(parse_addr("localhost:x").is_err());
    }
}
