//! `shoal-bench hostile --insider`: a host of the cluster turned hostile. It holds what such a
//! host holds, the deployment's key (`SHOAL_HMAC_KEY_FILE`) and its own broker user (an eval
//! host's, `SHOAL_BROKER`), and it sends, every message correctly signed:
//! - everything the outsider sends ([`super::forged`]): replies naming the worker
//!   [`FORGED_WORKER`], compile and eval requests with C code, control orders, a command;
//! - replies for work other workers have started, under **their** worker names (read off the
//!   store): results with times of 1e-300 and 0.001 µs, hand-backs, heartbeats and started
//!   notices;
//! - the same replies under **its own** worker name, for work it does not hold;
//! - every message above a second time, byte for byte (a replay).
//!
//! The cluster must refuse all of it by who sent it: another role's messages by role, another
//! host's names by host, another holder's leases by lease. Anything it accepted shows in the
//! store: a time no job reports, [`FORGED_DETAIL`], or a hand-back counted. It prints one line.

use std::process::ExitCode;

use anyhow::Context;
use shoal_model::identity::Identity;
use shoal_model::message::{Phase, ReplyBody};
use shoal_model::{EvalReply, JobRef, JobState, Message, SessionId, Step};

use super::{measured, To, FORGED_DETAIL, FORGED_WORKER, WAIT};

/// Started work of other workers: (job at its attempt, the worker holding it).
struct Held {
    session: SessionId,
    eval: Vec<(JobRef, String)>,
    compile: Vec<(JobRef, String)>,
}

async fn held(settings: &shoal_cli::connect::Settings) -> anyhow::Result<Held> {
    let url = settings
        .db
        .as_deref()
        .context("shoal-bench hostile --insider: no database to read jobs from: set SHOAL_DB")?;
    let store = shoal_cli::connect::open_store_url(&settings.db_from, url, WAIT).await?;
    let session = store
        .sessions()
        .await?
        .into_iter()
        .max_by_key(|s| s.id.0)
        .context("shoal-bench hostile --insider: no session to forge messages about")?;
    // Work shows as started only when it outlasts the Scheduler's second of holding notices
    // back: look, bounded, until some is.
    let t0 = std::time::Instant::now();
    loop {
        let mut out = Held {
            session: session.id,
            eval: Vec::new(),
            compile: Vec::new(),
        };
        for (state, list) in [
            (JobState::Evaluating, &mut out.eval),
            (JobState::Compiling, &mut out.compile),
        ] {
            // The database may be restarting (the chaos suite kills it): look again, bounded.
            match store.jobs_in_state(session.id, state, 8).await {
                Ok(jobs) => list.extend(
                    jobs.into_iter()
                        .filter_map(|j| Some((j.job_ref(), j.worker.clone()?))),
                ),
                Err(e) if t0.elapsed() < WAIT => {
                    tracing::warn!(error = %e, "reading started work; trying again");
                }
                Err(e) => return Err(e.into()),
            }
        }
        if !out.eval.is_empty() || t0.elapsed() > WAIT {
            return Ok(out);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// What an insider says about work held by others, as `worker`.
fn about(held: &Held, worker: impl Fn(&str) -> String) -> Vec<Message> {
    let mut out = Vec::new();
    let s = held.session;
    for (job, holder) in &held.eval {
        let w = worker(holder);
        for time in [1e-300, 0.001] {
            out.push(Message::Reply(ReplyBody::Evaluated(EvalReply {
                session: s,
                step: Step::ExecRun,
                outcomes: vec![(*job, measured(time))],
                worker: w.clone(),
                device: "cpu".into(),
                busy_us: 1,
            })));
        }
        out.push(Message::Reply(ReplyBody::HandedBack {
            session: s,
            phase: Phase::Eval,
            jobs: vec![*job],
            reason: FORGED_DETAIL.into(),
            count_retry: true,
            worker: w.clone(),
        }));
        for notice in [true, false] {
            let (session, phase, jobs, worker) = (s, Phase::Eval, vec![*job], w.clone());
            out.push(Message::Reply(if notice {
                ReplyBody::Started {
                    session,
                    phase,
                    jobs,
                    worker,
                }
            } else {
                ReplyBody::Heartbeat {
                    session,
                    phase,
                    jobs,
                    worker,
                }
            }));
        }
    }
    for (job, holder) in &held.compile {
        out.push(Message::Reply(ReplyBody::HandedBack {
            session: s,
            phase: Phase::Compile,
            jobs: vec![*job],
            reason: FORGED_DETAIL.into(),
            count_retry: true,
            worker: worker(holder),
        }));
    }
    out
}

pub(super) async fn run(args: &super::HostileArgs) -> anyhow::Result<ExitCode> {
    let settings = shoal_cli::connect::Settings::load(None)?;
    let url = settings
        .broker
        .clone()
        .context("shoal-bench hostile --insider: no broker: set SHOAL_BROKER (the host's own)")?;
    let ns = settings.namespace()?;
    let codec = shoal_cli::connect::cluster_codec()?;
    let t = super::targets(&settings).await?;
    let held = held(&settings).await?;
    let queues = super::Queues {
        results: ns.results_queue(),
        compile: ns.compile_queue(Step::ExecBuild, &t.arch),
        eval: ns.eval_queue(Step::ExecRun, &t.arch, t.num_cu),
        commands: ns.commands_queue(),
    };
    // Its own worker name: the host of its broker user, as a worker of that host names itself.
    let bus = super::connect(&url, &ns, codec.clone()).await?;
    let me = Identity::of_user(shoal_bus::Bus::publisher(&*bus));
    let own = format!(
        "{}:{}/evaluator[cpu]",
        me.host.as_deref().unwrap_or("insider"),
        std::process::id()
    );

    let mut messages: Vec<(To, Message)> = super::forged(&t, &queues, args);
    let results = To::Queue(queues.results.clone());
    for m in about(&held, |holder| holder.to_string()) {
        messages.push((results.clone(), m));
    }
    for m in about(&held, |_| own.clone()) {
        messages.push((results.clone(), m));
    }
    let mut out = Vec::new();
    for (to, m) in &messages {
        let bytes = codec.encode(m);
        out.push((to.clone(), "insider", bytes.clone()));
        out.push((to.clone(), "replayed", bytes));
    }
    let (published, skipped, by_kind) = super::send(&bus, &ns, out).await?;
    let kinds: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k}={n}")).collect();
    println!(
        "hostile insider user={} published={published} skipped={skipped} {} session={} held_eval={} held_compile={} forged_worker={FORGED_WORKER}",
        me.user,
        kinds.join(" "),
        held.session,
        held.eval.len(),
        held.compile.len(),
    );
    Ok(ExitCode::SUCCESS)
}
