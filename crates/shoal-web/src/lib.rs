//! The dashboard's pages (`shoal serve`): server-rendered HTML with inline SVG charts, no
//! JavaScript, as pure functions from plain data to a page. The server (`shoal-cli`'s `web.rs`)
//! reads the store and calls these; keeping them free of I/O lets them be tested as strings and
//! lets the pages be read by `curl`, a browser, or a headless Chromium in the tests.
//!
//! Every value from the store is escaped ([`esc`]) before it reaches the page: parameter names
//! and failure messages come from users' specs and from tuned code's output.
//!
//! Pages:
//! - [`sessions_page`]: every session with a progress bar, rate and ETA;
//! - [`session_page`]: one session: progress, failures by kind with an example, the winner of
//!   every shape, and for one shape a chart of every candidate's time with the winner and its
//!   spread marked ([`chart`]);
//! - [`fleet_page`]: the workers, their devices and health.

pub mod chart;
pub mod plots;

use std::fmt::Write;

use shoal_export::TunedRow;
use shoal_model::progress::{human_duration, Progress};
use shoal_model::{Liveness, Session, WorkerPresence};

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}\
header{background:#1d2330;color:#fff;padding:10px 24px;display:flex;gap:24px;align-items:baseline}\
header a{color:#cfd8e6;text-decoration:none}header strong{font-size:18px}\
main{padding:16px 24px}table{border-collapse:collapse;background:#fff;margin:8px 0 20px}\
th,td{padding:5px 10px;border-bottom:1px solid #e3e6eb;text-align:left;font-size:14px;vertical-align:top}\
th{background:#eef1f5}td.num{text-align:right;font-variant-numeric:tabular-nums}\
.bar{width:220px;height:12px;background:#e3e6eb;border-radius:6px;overflow:hidden}\
.bar>div{height:12px;background:#2f7d4f}.live{color:#2f7d4f}.stale{color:#b5651d}\
.stopped{color:#777}.bad{color:#b3261e;font-weight:600}.tie{color:#b5651d}\
h1{font-size:20px}h2{font-size:16px;margin-top:24px}.muted{color:#666;font-size:13px}\
svg{background:#fff;border:1px solid #e3e6eb}\
td{overflow-wrap:anywhere}td.num,td a{white-space:nowrap;overflow-wrap:normal}\
pre.output{white-space:pre-wrap;overflow-wrap:anywhere;background:#fff;border:1px solid #e3e6eb;\
padding:6px 10px;font-size:13px;margin:4px 0}";

/// A whole page: header with the navigation, then `body`.
pub fn page(title: &str, body: &str) -> String {
    page_refreshing(title, body, None)
}

/// How often a page of work in progress reloads itself, in seconds.
pub const REFRESH_S: u32 = 5;

/// [`page`], reloading itself every `refresh_s` seconds when given (a `<meta http-equiv=
/// "refresh">`: the dashboard has no JavaScript).
pub fn page_refreshing(title: &str, body: &str, refresh_s: Option<u32>) -> String {
    let refresh = refresh_s.map_or(String::new(), |s| {
        format!("<meta http-equiv=\"refresh\" content=\"{s}\">")
    });
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{refresh}\
         <title>{t} · Shoal</title><style>{STYLE}</style></head><body>\
         <header><strong>Shoal</strong><a href=\"/\">Sessions</a><a href=\"/fleet\">Fleet</a></header>\
         <main><h1>{t}</h1>{body}</main></body></html>\n",
        t = esc(title)
    )
}

/// One session as the sessions page lists it.
pub struct SessionSummary {
    pub session: Session,
    pub progress: Progress,
    /// Failed jobs (every kind together).
    pub failed: u64,
}

fn progress_bar(p: &Progress) -> String {
    format!(
        "<div class=\"bar\" role=\"progressbar\" aria-valuenow=\"{pct:.1}\" aria-valuemin=\"0\" \
         aria-valuemax=\"100\"><div style=\"width:{pct:.1}%\"></div></div>",
        pct = p.percent()
    )
}

fn rate_and_eta(p: &Progress) -> (String, String) {
    let rate = p.per_s.map_or("-".into(), |r| format!("{r:.2}/s"));
    let eta = if p.done == p.total {
        p.finished_in_s
            .map_or("done".into(), |s| format!("done in {}", human_duration(s)))
    } else {
        p.eta_s.map_or("-".into(), human_duration)
    };
    (rate, eta)
}

/// `/`: every session, newest first.
pub fn sessions_page(sessions: &[SessionSummary]) -> String {
    let mut body = String::new();
    if sessions.is_empty() {
        body.push_str(
            "<p>No session in the store yet: <code>shoal tune SPEC</code> starts one.</p>",
        );
        return page("Sessions", &body);
    }
    body.push_str(
        "<table id=\"sessions\"><tr><th>Session</th><th>Spec</th><th>Device</th><th>Backend</th>\
         <th>Progress</th><th>Done</th><th>Failed</th><th>Rate</th><th>ETA</th></tr>",
    );
    for s in sessions {
        let info = &s.session.info;
        let (rate, eta) = rate_and_eta(&s.progress);
        let _ = write!(
            body,
            "<tr class=\"session\" data-session=\"{id}\"><td><a href=\"/session/{id}\">{id}</a></td>\
             <td>{spec}</td><td>{arch} ({units} units)</td><td>{backend}</td><td>{bar}</td>\
             <td class=\"num done\">{done}/{total}</td><td class=\"num\">{failed}</td>\
             <td class=\"num\">{rate}</td><td class=\"num eta\">{eta}</td></tr>",
            id = s.session.id,
            spec = esc(&info.spec_path),
            arch = esc(&info.arch),
            units = info.num_cu,
            backend = esc(&info.backend.to_string()),
            bar = progress_bar(&s.progress),
            done = s.progress.done,
            total = s.progress.total,
            failed = s.failed,
        );
    }
    body.push_str("</table>");
    let running = sessions.iter().any(|s| s.progress.done < s.progress.total);
    page_refreshing("Sessions", &body, running.then_some(REFRESH_S))
}

/// What the session page shows.
pub struct SessionView<'a> {
    pub session: &'a Session,
    pub progress: &'a Progress,
    /// Failed candidates grouped by kind and error ([`shoal_export::failures`]).
    pub failures: &'a [shoal_export::failures::FailureGroup],
    pub rows: &'a [TunedRow],
    /// The shape whose candidates are charted (an index into `rows`), with every valid
    /// candidate's time and the winner's timed runs.
    pub chart: Option<(usize, chart::ShapeTimes)>,
}

/// How many failed candidates of a group the session page lists (`shoal failures` lists all).
const FAILED_LISTED: usize = 10;

/// The failed candidates, one block per group: kind, count and the error line; the tool's own
/// first lines of output; the candidates' shapes and parameters.
fn failures_section(
    body: &mut String,
    groups: &[shoal_export::failures::FailureGroup],
    session: impl std::fmt::Display,
) {
    if groups.is_empty() {
        body.push_str("<p id=\"failures\">None.</p>");
        return;
    }
    body.push_str("<div id=\"failures\">");
    for g in groups {
        let _ = write!(
            body,
            "<div class=\"failure\" data-kind=\"{k}\"><p><span class=\"bad\">{k}</span> × \
             <span class=\"num\">{n}</span>: <code class=\"error\">{e}</code></p>\
             <pre class=\"output\">{out}</pre><table class=\"failed\"><tr><th>Shape</th>\
             <th>Parameters</th><th>Job</th></tr>",
            k = esc(&g.kind),
            n = g.count(),
            e = esc(&g.error),
            out = esc(&std::iter::once(g.headline.as_str())
                .chain(g.output.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join("\n")),
        );
        for c in g.candidates.iter().take(FAILED_LISTED) {
            let _ = write!(
                body,
                "<tr><td>{}</td><td><code>{}</code></td><td class=\"num\">{}</td></tr>",
                esc(&c.shape),
                esc(&c.params),
                c.job
            );
        }
        body.push_str("</table>");
        if g.count() > FAILED_LISTED {
            let _ = write!(
                body,
                "<p class=\"muted\">… and {} more: <code>shoal failures --session {session}</code> \
                 lists them all.</p>",
                g.count() - FAILED_LISTED
            );
        }
        body.push_str("</div>");
    }
    body.push_str("</div>");
}

/// `/session/{id}`.
pub fn session_page(v: &SessionView<'_>) -> String {
    let info = &v.session.info;
    let id = v.session.id;
    let mut body = String::new();
    let (rate, eta) = rate_and_eta(v.progress);
    let _ = write!(
        body,
        "<p class=\"muted\">{spec} on {arch} ({units} units), {backend} backend</p>\
         <div id=\"progress\">{bar}<p><span class=\"done\">{done}/{total}</span> done ({pct:.1} %), \
         rate {rate}, ETA <span class=\"eta\">{eta}</span></p></div>",
        spec = esc(&info.spec_path),
        arch = esc(&info.arch),
        units = info.num_cu,
        backend = esc(&info.backend.to_string()),
        bar = progress_bar(v.progress),
        done = v.progress.done,
        total = v.progress.total,
        pct = v.progress.percent(),
    );

    let _ = write!(
        body,
        "<p id=\"downloads\">Download: <a href=\"/session/{id}/tuned.csv\">tuned.csv</a> · \
         <a href=\"/session/{id}/tuned.json\">tuned.json</a> (winners per shape, as \
         <code>shoal export</code> writes them) · <a href=\"/session/{id}/t4.json\">t4.json</a> \
         (every candidate's time, one T4 space per shape)</p>"
    );
    body.push_str("<h2>Failures</h2>");
    failures_section(&mut body, v.failures, id);

    body.push_str("<h2>Winners per shape</h2>");
    body.push_str(
        "<table id=\"winners\"><tr><th>Shape</th><th>Winner</th><th>Time (µs)</th>\
         <th>Spread</th><th>Runner-up</th><th>Valid</th><th>Failed</th><th></th></tr>",
    );
    for (i, r) in v.rows.iter().enumerate() {
        let best = r.best.as_ref().map_or("-".into(), |p| esc(&p.to_string()));
        let time = r.time_us.map_or("-".into(), |t| format!("{t:.2}"));
        let spread = r.spread_pct.map_or("-".into(), |s| format!("{s:.1} %"));
        let runner = match (&r.runner_up, r.runner_up_us) {
            (Some(p), Some(t)) => format!(
                "{} ({t:.2} µs){}",
                esc(&p.to_string()),
                if r.tie {
                    " <span class=\"tie\">tie</span>"
                } else {
                    ""
                }
            ),
            _ => "-".into(),
        };
        let failed: u32 = r.failures.values().sum();
        let _ = write!(
            body,
            "<tr class=\"winner\"><td>{shape}</td><td>{best}</td><td class=\"num\">{time}</td>\
             <td class=\"num\">{spread}</td><td>{runner}</td><td class=\"num\">{valid}/{cands}</td>\
             <td class=\"num\">{failed}</td><td><a href=\"/session/{id}?shape={i}#chart\">chart</a></td></tr>",
            shape = esc(&r.shape.to_string()),
            valid = r.valid,
            cands = r.candidates,
        );
    }
    body.push_str("</table>");

    if let Some((i, times)) = &v.chart {
        if let Some(r) = v.rows.get(*i) {
            let _ = write!(
                body,
                "<h2 id=\"chart\">Every candidate of {shape}</h2>{}\
                 <h2 id=\"history\">Best so far on {shape}</h2>{}\
                 <h2 id=\"effects\">Each parameter's effect on {shape}</h2>{}",
                chart::candidate_times(times),
                plots::best_so_far(times),
                plots::parameter_effects(times),
                shape = esc(&r.shape.to_string()),
            );
        }
    }
    let running = v.progress.done < v.progress.total;
    page_refreshing(
        &format!("Session {id}"),
        &body,
        running.then_some(REFRESH_S),
    )
}

/// `/fleet`.
pub fn fleet_page(workers: &[(WorkerPresence, Liveness)], now_ms: i64) -> String {
    let mut body = String::new();
    if workers.is_empty() {
        body.push_str(
            "<p>No worker has reported to this store. Workers report every 5 s once started \
             (<code>shoal worker</code>, or an embedded <code>shoal tune</code>).</p>",
        );
        return page("Fleet", &body);
    }
    let count = |l: Liveness| workers.iter().filter(|(_, x)| *x == l).count();
    let _ = write!(
        body,
        "<p id=\"fleet-summary\">{} live, {} stale, {} stopped</p>",
        count(Liveness::Live),
        count(Liveness::Stale),
        count(Liveness::Stopped)
    );
    body.push_str(
        "<table id=\"workers\"><tr><th>Worker</th><th>State</th><th>Roles</th><th>Jobs held</th>\
         <th>Devices</th><th>Last seen</th><th>Version</th></tr>",
    );
    for (w, l) in workers {
        let mut devices = String::new();
        for d in &w.devices {
            let _ = write!(
                devices,
                "<div class=\"device\">{id} · {name} · {arch} · {units} units · <span class=\"{cls}\">{health}</span> <span class=\"muted\">{detail}</span></div>",
                id = esc(&d.id),
                name = esc(&d.name),
                arch = esc(&d.arch),
                units = d.units,
                cls = if d.healthy { "live" } else { "bad" },
                health = if d.healthy { "healthy" } else { "unhealthy" },
                detail = esc(&d.detail),
            );
        }
        if devices.is_empty() {
            devices.push('-');
        }
        let _ = write!(
            body,
            "<tr class=\"worker\" data-state=\"{state}\"><td>{host}:{pid}</td><td class=\"{state}\">{state}</td>\
             <td>{roles}</td><td class=\"num\">{jobs}</td><td>{devices}</td><td>{seen} ago</td><td>{version}</td></tr>",
            state = l.as_str(),
            host = esc(&w.host),
            pid = w.pid,
            roles = esc(&w.roles.join(", ")),
            jobs = w.jobs.len(),
            seen = human_duration((now_ms - w.last_seen_ms) as f64 / 1000.0),
            version = esc(&w.version),
        );
    }
    body.push_str("</table>");
    page("Fleet", &body)
}

#[cfg(test)]
mod tests;
