//! `shoal serve`: the read-only web dashboard. axum over HTTP/1; each request reads the store
//! and renders a page with `shoal_web` (server-side HTML, inline SVG, no JavaScript).
//!
//! Access: on a loopback address anyone on this host may read. Any other address needs a token
//! (from `--token-file` or `SHOAL_WEB_TOKEN`, never the command line, where `ps` would show it):
//! a request must carry it as `Authorization: Bearer …`, or as the cookie `shoal_token`, which a
//! first visit to `/?token=…` sets (then redirects to the page without it, so it does not stay in
//! the address bar or the history). Without it: 401.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use shoal_actors::backends::SessionBackends;
use shoal_model::progress::Progress;
use shoal_model::{JobState, Outcome, SessionId};
use shoal_store::Store;
use shoal_web::chart::ShapeTimes;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Where to listen. A bare port (`8080`) listens on loopback; any other address needs a
    /// token (--token-file or SHOAL_WEB_TOKEN).
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = crate::metrics_endpoint::parse_addr)]
    pub addr: SocketAddr,
    /// A file whose first line is the token every request must carry (required off loopback;
    /// SHOAL_WEB_TOKEN works too). Keep it mode 600.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Read the cluster's database (SHOAL_DB or the config file) instead of --db.
    #[arg(long)]
    pub cluster: bool,
}

struct Web {
    store: Arc<dyn Store>,
    backends: SessionBackends,
    token: Option<String>,
}

/// The token, from the file or the environment; `None` when neither gives one.
fn token(args: &ServeArgs) -> anyhow::Result<Option<String>> {
    if let Some(f) = &args.token_file {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("--token-file {}", f.display()))?;
        let t = text.lines().next().unwrap_or("").trim().to_string();
        anyhow::ensure!(
            t.len() >= 16,
            "--token-file {}: the token must be at least 16 characters",
            f.display()
        );
        return Ok(Some(t));
    }
    Ok(std::env::var("SHOAL_WEB_TOKEN")
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty()))
}

pub async fn serve(args: ServeArgs, db: &Path) -> anyhow::Result<ExitCode> {
    let token = token(&args)?;
    if !args.addr.ip().is_loopback() && token.is_none() {
        anyhow::bail!(
            "--addr {}: not a loopback address, so the dashboard needs a token (--token-file FILE or SHOAL_WEB_TOKEN)",
            args.addr
        );
    }
    let store = crate::fleet::store_for_reading(db, args.cluster).await?;
    let web = Arc::new(Web {
        store,
        backends: SessionBackends::new(crate::host::fin_path(None)),
        token,
    });
    let app = Router::new()
        .route("/", get(sessions))
        .route("/session/{id}", get(session))
        .route("/session/{id}/{file}", get(download))
        .route("/fleet", get(fleet))
        .route("/metrics", get(metrics))
        .with_state(web);
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    let addr = listener.local_addr()?;
    eprintln!("shoal: dashboard on http://{addr}/ (Ctrl-C stops it)");
    let mut stop = crate::signals::install()?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.triggered().await })
        .await?;
    Ok(ExitCode::SUCCESS)
}

/// `None` when the request may read; else the response to give instead: 401, or the redirect
/// that turns `?token=` into a cookie.
fn refusal(web: &Web, headers: &HeaderMap, uri: &Uri) -> Option<Response> {
    let Some(want) = &web.token else {
        return None;
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix("shoal_token="));
    if [bearer, cookie]
        .into_iter()
        .flatten()
        .any(|t| same(t, want))
    {
        return None;
    }
    if let Some(t) = query_param(uri, "token") {
        if same(&t, want) {
            let cookie = format!("shoal_token={want}; HttpOnly; SameSite=Strict; Path=/");
            return Some(
                (
                    StatusCode::SEE_OTHER,
                    [
                        (header::SET_COOKIE, cookie),
                        (header::LOCATION, uri.path().to_string()),
                    ],
                )
                    .into_response(),
            );
        }
    }
    Some(
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a token is required: Authorization: Bearer TOKEN, or open /?token=TOKEN once\n",
        )
            .into_response(),
    )
}

/// Compares in time independent of where the first difference is.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn query_param(uri: &Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| v.to_string())
    })
}

fn failure(status: StatusCode, msg: &str) -> Response {
    (
        status,
        Html(shoal_web::page(
            "Error",
            &format!("<p class=\"bad\">{}</p>", shoal_web::esc(msg)),
        )),
    )
        .into_response()
}

/// How long a page waits for the database before it answers without it.
const PAGE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The page while the database does not answer: what is going on, and a reload in a few
/// seconds (a `Refresh` header: the dashboard has no JavaScript), so it carries on by itself.
fn waiting(msg: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::REFRESH, "5"), (header::RETRY_AFTER, "5")],
        Html(shoal_web::page(
            "Waiting for the database",
            &format!("<p class=\"bad\">{}</p>", shoal_web::esc(msg)),
        )),
    )
        .into_response()
}

/// Runs a page's reads of the store, unless the database does not answer: then, at once or
/// within [`PAGE_WAIT`], the waiting page instead (the reads go on waiting in the store's own
/// layer, for whoever asks next).
async fn reading<T>(work: impl std::future::Future<Output = T>) -> Result<T, Response> {
    let outage = || shoal_store::patient::outages().waiting_message();
    if let Some(m) = outage() {
        return Err(waiting(&m));
    }
    match tokio::time::timeout(PAGE_WAIT, work).await {
        Ok(v) => Ok(v),
        Err(_) => Err(match outage() {
            Some(m) => waiting(&m),
            None => failure(
                StatusCode::GATEWAY_TIMEOUT,
                &format!(
                    "the database took longer than {} s to answer",
                    PAGE_WAIT.as_secs()
                ),
            ),
        }),
    }
}

/// A session's progress now, and its failed jobs.
async fn progress(store: &dyn Store, id: SessionId) -> anyhow::Result<(Progress, u64)> {
    let (progress, counts) = crate::status::progress_of(store, id).await?;
    let failed = counts.get(&JobState::Errored).copied().unwrap_or(0);
    Ok((progress, failed))
}

async fn sessions(State(web): State<Arc<Web>>, headers: HeaderMap, uri: Uri) -> Response {
    if let Some(r) = refusal(&web, &headers, &uri) {
        return r;
    }
    let result = async {
        let mut all = web.store.sessions().await?;
        all.sort_by_key(|s| std::cmp::Reverse(s.id));
        let mut out = Vec::new();
        for s in all {
            let (progress, failed) = progress(&*web.store, s.id).await?;
            out.push(shoal_web::SessionSummary {
                session: s,
                progress,
                failed,
            });
        }
        anyhow::Ok(shoal_web::sessions_page(&out))
    };
    let result = match reading(result).await {
        Ok(r) => r,
        Err(page) => return page,
    };
    match result {
        Ok(html) => Html(html).into_response(),
        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}")),
    }
}

async fn session(
    State(web): State<Arc<Web>>,
    UrlPath(id): UrlPath<i64>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Some(r) = refusal(&web, &headers, &uri) {
        return r;
    }
    let shape: usize = query_param(&uri, "shape")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let result = async {
        let Some(info) = web.store.session(SessionId(id)).await? else {
            return Ok(None);
        };
        let (progress, _) = progress(&*web.store, info.id).await?;
        let results = web.store.final_results(info.id).await?;
        let failures = shoal_export::failures::failure_groups(&results);
        let rows =
            shoal_actors::exporter::tuned_rows_of(&*web.store, &web.backends, &info, &results)
                .await?;
        let chart = rows
            .get(shape)
            .map(|row| (shape, shape_times(&results, row)));
        anyhow::Ok(Some(shoal_web::session_page(&shoal_web::SessionView {
            session: &info,
            progress: &progress,
            failures: &failures,
            rows: &rows,
            chart,
        })))
    };
    let result = match reading(result).await {
        Ok(r) => r,
        Err(page) => return page,
    };
    match result {
        Ok(Some(html)) => Html(html).into_response(),
        Ok(None) => failure(
            StatusCode::NOT_FOUND,
            &format!("session {id} is not in the store"),
        ),
        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}")),
    }
}

/// `/metrics`: what `--metrics-addr` of `tune` and `worker` serves, for the store this
/// dashboard reads: the jobs per state of the newest sessions and the store's outages, in the
/// OpenMetrics text format for Prometheus and the classic one for anything else
/// (`shoal_metrics::Exposition`), HELP and TYPE on every metric.
async fn metrics(State(web): State<Arc<Web>>, headers: HeaderMap, uri: Uri) -> Response {
    if let Some(r) = refusal(&web, &headers, &uri) {
        return r;
    }
    crate::metrics_endpoint::refresh_from_store(
        &*web.store,
        &crate::metrics_endpoint::Counted::Newest,
    )
    .await;
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (content_type, body) = shoal_metrics::metrics().scrape(accept);
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The files a session page offers: what `shoal export` writes (`tuned.csv`, `tuned.json`), and
/// every candidate's time as T4 spaces, one per shape, in one JSON list (`t4.json`).
pub const DOWNLOADS: [&str; 3] = ["tuned.csv", "tuned.json", "t4.json"];

/// `/session/{id}/{file}`: one of [`DOWNLOADS`], as an attachment.
async fn download(
    State(web): State<Arc<Web>>,
    UrlPath((id, file)): UrlPath<(i64, String)>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Some(r) = refusal(&web, &headers, &uri) {
        return r;
    }
    if !DOWNLOADS.contains(&file.as_str()) {
        return failure(
            StatusCode::NOT_FOUND,
            &format!(
                "no file `{file}`: a session offers {}",
                DOWNLOADS.join(", ")
            ),
        );
    }
    let result = async {
        let Some(info) = web.store.session(SessionId(id)).await? else {
            return Ok(None);
        };
        let results = web.store.final_results(info.id).await?;
        let body = if file == "t4.json" {
            let device = format!("{} ({} units)", info.info.arch, info.info.num_cu);
            let spaces: Vec<serde_json::Value> = shoal_export::t4::spaces(&results, &device)
                .into_iter()
                .map(|s| s.json)
                .collect();
            serde_json::to_vec_pretty(&spaces)?
        } else {
            let (_, csv, json) =
                shoal_actors::exporter::tuned_files_of(&*web.store, &web.backends, &info, &results)
                    .await?;
            if file == "tuned.csv" {
                csv
            } else {
                json
            }
        };
        anyhow::Ok(Some(body))
    };
    let body = match reading(result).await {
        Ok(Ok(Some(body))) => body,
        Ok(Ok(None)) => {
            return failure(
                StatusCode::NOT_FOUND,
                &format!("session {id} is not in the store"),
            )
        }
        Ok(Err(e)) => return failure(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}")),
        Err(page) => return page,
    };
    let kind = if file.ends_with(".csv") {
        "text/csv; charset=utf-8"
    } else {
        "application/json"
    };
    // The file name is one of DOWNLOADS, never the request's own text.
    let name = DOWNLOADS
        .iter()
        .find(|d| **d == file)
        .copied()
        .unwrap_or("download");
    (
        [
            (header::CONTENT_TYPE, kind.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"session-{id}-{name}\""),
            ),
        ],
        body,
    )
        .into_response()
}

/// Every candidate of `row`'s problem, for its chart.
fn shape_times(results: &[shoal_model::FinalResult], row: &shoal_export::TunedRow) -> ShapeTimes {
    let mut t = ShapeTimes::default();
    for r in results.iter().filter(|r| r.config == row.config) {
        let params = r.compile_params.chain(&r.run_params);
        match (&r.state, &r.outcome) {
            (JobState::Evaluated, Some(Outcome::Measured(m))) => {
                if row.best.as_ref() == Some(&params) {
                    t.winner_runs = m.samples_us.clone();
                }
                t.candidates.push((params.to_string(), m.time_us));
            }
            _ if shoal_export::failure_of(r).is_some() => t.failed += 1,
            _ => {}
        }
    }
    t
}

async fn fleet(State(web): State<Arc<Web>>, headers: HeaderMap, uri: Uri) -> Response {
    if let Some(r) = refusal(&web, &headers, &uri) {
        return r;
    }
    let workers = match reading(web.store.workers()).await {
        Ok(r) => r,
        Err(page) => return page,
    };
    match workers {
        Ok(workers) => {
            let now = shoal_actors::now_ms();
            let listed: Vec<_> = workers
                .into_iter()
                .map(|w| {
                    let l = w.liveness(now);
                    (w, l)
                })
                .collect();
            Html(shoal_web::fleet_page(&listed, now)).into_response()
        }
        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same("abcdefgh12345678", "abcdefgh12345678"));
        assert!(!same("abcdefgh12345678", "abcdefgh12345679"));
        assert!(!same("abc", "abcd"));
        let uri: Uri = "/session/1?shape=2&token=xyz".parse().unwrap();
        assert_eq!(query_param(&uri, "token").as_deref(), Some("xyz"));
        assert_eq!(query_param(&uri, "shape").as_deref(), Some("2"));
    }
}
