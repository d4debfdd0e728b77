//! `shoal bench hostile`: publishes what an attacker with access to the broker, but without the
//! deployment's signing key, would send, so that a running cluster can be shown to refuse all of
//! it (`scripts/chaos` runs it while the cluster works and then looks for any effect).
//!
//! Why a command of the binary and not a script: the forgeries must be well-formed messages of
//! this build's wire format (`shoal_model::envelope`, `WIRE_VERSION`, HMAC-SHA256) about real jobs,
//! so that only the signature — or, for `--signed`, only the value checks — stands between them
//! and the store. Every message goes to the namespace's real queues and control topic:
//! - random garbage bytes, an empty message, and the 15-byte length bomb (a string length of
//!   2^62) on the results, compile and eval queues;
//! - forged replies about jobs read off the store (an `Evaluated` with a negative time and one
//!   with a plausible time, a `Compiled` build failure, a `Started` and a `HandedBack`), a
//!   compile request whose parameter is C code that would create `--marker`, an eval request,
//!   control orders (export to `--export-to`, drain, restart), and a command that would create
//!   a session (`<ns>.commands`, whose garbage it also gets) — each signed with a random
//!   key that is not the deployment's, unsigned in the version-1 form, and with a zero tag;
//! - with `--signed`, as a holder of the key gone wrong (`SHOAL_HMAC_KEY_FILE`): the values no
//!   honest worker sends (a negative time, C code as a parameter, an export outside the
//!   exporter's directory, a length bomb under a valid tag), which the value checks refuse.
//!
//! Forged replies name the worker [`FORGED_WORKER`] and carry [`FORGED_DETAIL`], so that any
//! effect in the store can be found afterwards. It prints one line of counts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use sha2::{Digest, Sha256};
use shoal_bus::Bus;
use shoal_model::envelope::{Codec, ID_BYTES, TAG_BYTES, WIRE_VERSION};
use shoal_model::message::Actor;
use shoal_model::message::{
    CompileReply, CompileRequest, Control, EvalItem, EvalReply, EvalRequest, Phase, ReplyBody,
};
use shoal_model::queue::ControlTarget;
use shoal_model::queue::Namespace;
use shoal_model::Step;
use shoal_model::{
    ConfigId, FailureKind, JobId, JobRef, JobState, Measurement, Message, Outcome, Params,
    SessionId,
};

/// The worker name every forged reply carries.
pub const FORGED_WORKER: &str = "hostile-forger";
/// Words in every forged failure detail and hand-back reason.
pub const FORGED_DETAIL: &str = "forged by shoal bench hostile";

#[derive(Debug, Args)]
pub struct HostileArgs {
    /// The file that the C code in a forged compile parameter would create if it were built.
    #[arg(long, default_value = "/tmp/shoal-hostile-pwned")]
    pub marker: PathBuf,
    /// The directory a forged export order asks the exporter to write (any path: the unsigned
    /// order must be ignored, and a signed one outside the export directory refused).
    #[arg(long, default_value = "/tmp/shoal-hostile-export")]
    pub export_to: String,
    /// Also send, signed with the deployment's key (SHOAL_HMAC_KEY_FILE), the forgeries that
    /// the value checks must refuse even from a key holder.
    #[arg(long)]
    pub signed: bool,
    /// Random garbage messages per queue.
    #[arg(long, default_value_t = 8)]
    pub garbage: usize,
    /// Act as an insider instead ([`insider`]): a host of the cluster with the deployment's key
    /// and its own broker user (SHOAL_BROKER, an eval host's), sending, correctly signed, what
    /// its role may not send and what speaks for other workers.
    #[arg(long, conflicts_with = "signed")]
    pub insider: bool,
}

mod insider;

/// Jobs to name in forgeries, read off the store: real ids at their current attempts.
struct Targets {
    session: SessionId,
    arch: String,
    num_cu: u32,
    compile: Vec<JobRef>,
    eval: Vec<JobRef>,
}

/// How long the tool waits for a broker or database that is restarting, or for a first session.
const WAIT: Duration = Duration::from_secs(30);

async fn targets(settings: &crate::connect::Settings) -> anyhow::Result<Targets> {
    let url = settings
        .db
        .as_deref()
        .context("shoal bench hostile: no database to read jobs from: set SHOAL_DB")?;
    crate::connect::require_cluster_store(&settings.db_from, url)?;
    let store = crate::connect::open_store_url(&settings.db_from, url, WAIT)
        .await
        .context("shoal bench hostile: reading jobs to forge replies about")?;
    // Loading may still be under way: wait, bounded, for its session.
    let t0 = std::time::Instant::now();
    let session = loop {
        if let Some(s) = store.sessions().await?.into_iter().max_by_key(|s| s.id.0) {
            break s;
        }
        if t0.elapsed() > WAIT {
            anyhow::bail!(
                "shoal bench hostile: no session in the store after {WAIT:?} to forge messages about"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let refs = |states: &'static [JobState]| {
        let store = store.clone();
        async move {
            let mut out = Vec::new();
            for &state in states {
                for job in store.jobs_in_state(session.id, state, 4).await? {
                    out.push(job.job_ref());
                }
            }
            anyhow::Ok(out)
        }
    };
    let mut compile = refs(&[JobState::CompileQueued, JobState::Compiling, JobState::New]).await?;
    let mut eval = refs(&[
        JobState::EvalQueued,
        JobState::Evaluating,
        JobState::Compiled,
    ])
    .await?;
    // Nothing in that phase now: name the session's first job, which exists.
    for list in [&mut compile, &mut eval] {
        if list.is_empty() {
            list.push(JobRef {
                job: JobId(1),
                attempt: 1,
            });
        }
    }
    Ok(Targets {
        session: session.id,
        arch: session.info.arch,
        num_cu: session.info.num_cu,
        compile,
        eval,
    })
}

/// Bytes from the operating system's random source.
fn random_bytes(n: usize) -> anyhow::Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").context("opening /dev/urandom")?,
        &mut buf,
    )
    .context("reading /dev/urandom")?;
    Ok(buf)
}

/// The eval-request length bomb: version 1, `Message::Eval`, session 7, then a string length of
/// 2^62 as a bincode varint, padded to 15 bytes.
fn length_bomb() -> Vec<u8> {
    let mut bomb = vec![1u8, 1, 7, 0xFD];
    bomb.extend_from_slice(&(1u64 << 62).to_le_bytes());
    bomb.extend_from_slice(&[0; 3]);
    bomb
}

/// HMAC-SHA256 (RFC 2104) of `msg` under `key`, to sign a hostile body that `Codec::encode`
/// would never produce. Checked against the codec's own tags in the tests below.
fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// `[version][tag][message id][body]` with the tag computed under `key`, the id all zeroes.
fn signed_raw(key: &[u8], body: &[u8]) -> Vec<u8> {
    let mut signed = vec![0u8; ID_BYTES];
    signed.extend_from_slice(body);
    let mut tagged = vec![WIRE_VERSION];
    tagged.extend_from_slice(&signed);
    let tag = hmac_sha256(key, &tagged);
    let mut out = vec![WIRE_VERSION];
    out.extend_from_slice(&tag);
    out.extend_from_slice(&signed);
    out
}

/// The three forms of a forgery without the key: signed with a stranger's key, the version-1
/// unsigned form, and this version (`WIRE_VERSION`) with a zero tag.
fn unkeyed_forms(stranger: &Codec, msg: &Message) -> [Vec<u8>; 3] {
    let signed = stranger.encode(msg);
    let body = &signed[1 + TAG_BYTES..];
    let mut v1 = vec![1u8];
    v1.extend_from_slice(body);
    let mut zero = vec![WIRE_VERSION];
    zero.extend_from_slice(&[0; TAG_BYTES]);
    zero.extend_from_slice(body);
    [signed, v1, zero]
}

fn measured(time_us: f64) -> Outcome {
    Outcome::Measured(Measurement {
        time_us,
        samples_us: vec![time_us],
        workspace: 0,
        details: Params::new(),
    })
}

fn evaluated(t: &Targets, time_us: f64) -> Message {
    Message::Reply(ReplyBody::Evaluated(EvalReply {
        session: t.session,
        step: shoal_model::Step::CommandRun,
        outcomes: t.eval.iter().map(|r| (*r, measured(time_us))).collect(),
        worker: FORGED_WORKER.into(),
        device: "cpu0".into(),
        busy_us: 0,
    }))
}

fn compile_request(t: &Targets, marker: &std::path::Path) -> Message {
    let mut evil = Params::new();
    evil.push("VAR", format!("(system(\"touch {}\")*0)", marker.display()));
    Message::Compile(CompileRequest {
        session: t.session,
        step: Step::CommandBuild,
        build_key: "forged".into(),
        config_params: Params::from_key("S=0").unwrap_or_default(),
        compile_params: evil,
        jobs: t.compile.clone(),
    })
}

fn eval_request(t: &Targets, marker: &std::path::Path) -> Message {
    let mut evil = Params::new();
    evil.push("R", format!("$(touch {})", marker.display()));
    let mut compile = Params::new();
    compile.push("VAR", "0");
    Message::Eval(EvalRequest {
        session: t.session,
        step: Step::CommandRun,
        items: vec![EvalItem {
            job: t.eval[0],
            config: ConfigId(1),
            config_params: Params::from_key("S=0").unwrap_or_default(),
            compile_params: compile,
            run_params: evil,
            artifact: "forged".into(),
        }],
    })
}

/// Where a message goes: a queue, or the control topic, to an actor of every host.
#[derive(Clone)]
enum To {
    Queue(String),
    Control(Actor),
}

/// One message to publish: where, the kind it is counted under, and its bytes.
type Outgoing = (To, &'static str, Vec<u8>);

/// The namespace's queues the forgeries go to.
struct Queues {
    results: String,
    compile: String,
    eval: String,
    commands: String,
}

pub async fn hostile(args: HostileArgs) -> anyhow::Result<ExitCode> {
    if args.insider {
        return insider::run(&args).await;
    }
    let settings = crate::connect::Settings::load(None)?;
    let url = settings
        .broker
        .clone()
        .context("shoal bench hostile: no broker: set SHOAL_BROKER")?;
    let ns = settings.namespace()?;
    let t = targets(&settings).await?;
    let queues = Queues {
        results: ns.results_queue(),
        compile: ns.compile_queue(Step::CommandBuild, &t.arch),
        eval: ns.eval_queue(Step::CommandRun, &t.arch, t.num_cu),
        commands: ns.commands_queue(),
    };
    let stranger = shoal_bus::random_codec();

    let mut out = garbage(&queues, args.garbage)?;
    for (to, msg) in &forged(&t, &queues, &args) {
        for bytes in unkeyed_forms(&stranger, msg) {
            let to = match to {
                To::Queue(q) => To::Queue(q.clone()),
                To::Control(a) => To::Control(*a),
            };
            out.push((to, "unkeyed", bytes));
        }
    }
    if args.signed {
        out.extend(signed(&t, &queues, &args)?);
    }

    let (published, skipped, by_kind) = publish(&url, &ns, stranger, out).await?;
    let kinds: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k}={n}")).collect();
    println!(
        "hostile published={published} skipped={skipped} {} session={} compile_jobs={} eval_jobs={}",
        kinds.join(" "),
        t.session,
        t.compile.len(),
        t.eval.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Random garbage, an empty message and the length bomb on each queue: bytes that are no
/// message at all, which a consumer must drop without stopping.
fn garbage(queues: &Queues, per_queue: usize) -> anyhow::Result<Vec<Outgoing>> {
    let mut out = Vec::new();
    for q in [
        &queues.results,
        &queues.compile,
        &queues.eval,
        &queues.commands,
    ] {
        for _ in 0..per_queue {
            let len = 1 + random_bytes(1)?[0] as usize;
            out.push((To::Queue(q.clone()), "garbage", random_bytes(len)?));
        }
        out.push((To::Queue(q.clone()), "garbage", Vec::new()));
        out.push((To::Queue(q.clone()), "bomb", length_bomb()));
    }
    Ok(out)
}

/// The well-formed messages an attacker without the key would send about real jobs: replies
/// that would finish, fail, start or hand back jobs, requests that would build and run C code,
/// and control orders. Sent only in unkeyed forms, each must be refused by its signature alone.
fn forged(t: &Targets, queues: &Queues, args: &HostileArgs) -> Vec<(To, Message)> {
    let results = &queues.results;
    vec![
        (To::Queue(results.clone()), evaluated(t, -1.0)),
        (To::Queue(results.clone()), evaluated(t, 1.0)),
        (
            To::Queue(results.clone()),
            Message::Reply(ReplyBody::Compiled(CompileReply {
                session: t.session,
                jobs: t.compile.clone(),
                build_key: "forged".into(),
                result: Err((FailureKind::BuildFailed, FORGED_DETAIL.into())),
                worker: FORGED_WORKER.into(),
                duration_ms: 1,
            })),
        ),
        (
            To::Queue(results.clone()),
            Message::Reply(ReplyBody::Started {
                session: t.session,
                phase: Phase::Compile,
                jobs: t.compile.clone(),
                worker: FORGED_WORKER.into(),
            }),
        ),
        (
            To::Queue(results.clone()),
            Message::Reply(ReplyBody::HandedBack {
                session: t.session,
                phase: Phase::Eval,
                jobs: t.eval.clone(),
                reason: FORGED_DETAIL.into(),
                count_retry: true,
                worker: FORGED_WORKER.into(),
            }),
        ),
        (
            To::Queue(queues.compile.clone()),
            compile_request(t, &args.marker),
        ),
        (
            To::Queue(queues.eval.clone()),
            eval_request(t, &args.marker),
        ),
        (
            To::Control(Actor::Exporter),
            Message::Control(Control::Export {
                session: t.session,
                out_dir: args.export_to.clone(),
            }),
        ),
        (
            To::Queue(queues.commands.clone()),
            Message::Command(shoal_model::command::CommandRequest {
                id: "hostile".into(),
                reply_to: format!(
                    "{}.reply.hostile",
                    queues.commands.trim_end_matches(".commands")
                ),
                command: shoal_model::command::Command::CreateSession {
                    identity: shoal_model::NewSession {
                        reason: FORGED_DETAIL.into(),
                        arch: t.arch.clone(),
                        num_cu: t.num_cu,
                        backend: shoal_model::Backend::Command,
                        spec: String::new(),
                        spec_path: String::new(),
                        library_version: String::new(),
                        driver_version: String::new(),
                        max_retries: 0,
                    },
                },
            }),
        ),
        (To::Control(Actor::Worker), Message::Control(Control::Drain)),
        (
            To::Control(Actor::Worker),
            Message::Control(Control::Restart {
                actor: Actor::Scheduler,
            }),
        ),
    ]
}

/// `--signed`: what a holder of the deployment's key gone wrong could send, correctly signed.
/// The signature passes, so the value checks must refuse each: a negative time, C code as a
/// parameter, an export outside the exporter's directory, a length bomb under a valid tag.
fn signed(t: &Targets, queues: &Queues, args: &HostileArgs) -> anyhow::Result<Vec<Outgoing>> {
    let key = crate::connect::signing_key_from_env()?.context(
        "shoal bench hostile --signed: SHOAL_HMAC_KEY_FILE must name the deployment's key",
    )?;
    let codec = Codec::new(&key).context("SHOAL_HMAC_KEY_FILE")?;
    let signed_bomb = signed_raw(&key, &length_bomb()[1..12]);
    let messages = [
        (
            To::Queue(queues.results.clone()),
            codec.encode(&evaluated(t, -1.0)),
        ),
        (To::Queue(queues.results.clone()), signed_bomb.clone()),
        (
            To::Queue(queues.compile.clone()),
            codec.encode(&compile_request(t, &args.marker)),
        ),
        (To::Queue(queues.compile.clone()), signed_bomb.clone()),
        (
            To::Queue(queues.eval.clone()),
            codec.encode(&eval_request(t, &args.marker)),
        ),
        (To::Queue(queues.eval.clone()), signed_bomb),
        (
            To::Control(Actor::Exporter),
            codec.encode(&Message::Control(Control::Export {
                session: t.session,
                out_dir: args.export_to.clone(),
            })),
        ),
        (
            To::Control(Actor::Exporter),
            codec.encode(&Message::Control(Control::Export {
                session: t.session,
                out_dir: format!("../../..{}", args.export_to),
            })),
        ),
    ];
    Ok(messages
        .into_iter()
        .map(|(to, bytes)| (to, "signed", bytes))
        .collect())
}

/// Publishes every message as it is, through a connection whose codec is the stranger's, never
/// the deployment's. Returns the counts:
/// published, skipped (a queue no worker declared yet, so nothing consumes it and there is
/// nothing to test), and published per kind.
async fn publish(
    url: &str,
    ns: &Namespace,
    stranger: Codec,
    out: Vec<Outgoing>,
) -> anyhow::Result<(usize, usize, BTreeMap<&'static str, usize>)> {
    send(&*connect(url, ns, stranger).await?, ns, out).await
}

/// The broker at `url`, as its user, with `codec` (what it signs nothing with: every message is
/// published as bytes already made).
async fn connect(
    url: &str,
    ns: &Namespace,
    codec: Codec,
) -> anyhow::Result<std::sync::Arc<shoal_bus::RabbitBus>> {
    let options = shoal_bus::RabbitOptions {
        codec,
        publish_retry_for: WAIT,
        connect_wait: WAIT,
        ..Default::default()
    };
    shoal_bus::RabbitBus::connect_with(url, ns.clone(), options)
        .await
        .with_context(|| {
            format!(
                "shoal bench hostile: connecting to {}",
                crate::connect::redact(url)
            )
        })
}

/// Publishes every message as it is, then closes the bus; the counts of [`publish`].
async fn send(
    bus: &shoal_bus::RabbitBus,
    ns: &Namespace,
    out: Vec<Outgoing>,
) -> anyhow::Result<(usize, usize, BTreeMap<&'static str, usize>)> {
    let (mut published, mut skipped) = (0usize, 0usize);
    let mut by_kind = BTreeMap::<&str, usize>::new();
    for (to, kind, bytes) in out {
        let sent = match &to {
            To::Queue(q) => bus.publish(q, vec![bytes]).await,
            To::Control(actor) => {
                let key = ControlTarget::any(*actor).routing_key();
                bus.publish_topic(&ns.control_topic(), &key, bytes).await
            }
        };
        match sent {
            Ok(()) => {
                published += 1;
                *by_kind.entry(kind).or_default() += 1;
            }
            // A queue no worker has declared yet: nothing consumes it, so nothing to test.
            Err(shoal_bus::BusError::NoSuchQueue(q)) => {
                tracing::warn!(queue = %q, "queue absent; message skipped");
                skipped += 1;
            }
            Err(e) => return Err(e).context("shoal bench hostile: publishing"),
        }
    }
    bus.close().await?;
    Ok((published, skipped, by_kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_the_codec_and_forms_are_refused() {
        let key = [9u8; 32];
        let codec = Codec::new(&key).unwrap();
        let msg = Message::Control(Control::Drain);
        let real = codec.encode(&msg);
        assert_eq!(signed_raw(&key, &real[1 + TAG_BYTES + ID_BYTES..]), real);
        for form in unkeyed_forms(&shoal_bus::random_codec(), &msg) {
            assert!(codec.decode(&form).is_err());
        }
        assert!(codec.decode(&length_bomb()).is_err());
        // Under a valid tag, the bomb reaches the body's decoder, which refuses the length.
        assert!(matches!(
            codec.decode(&signed_raw(&key, &length_bomb()[1..12])),
            Err(shoal_model::envelope::DecodeError::Corrupt(_))
        ));
        assert_eq!(length_bomb().len(), 15);
    }
}
