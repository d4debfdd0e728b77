//! `shoal-bench hostile`: publishes what an attacker with access to the broker, but without the
//! deployment's signing key, would send, so that a running cluster can be shown to refuse all of
//! it (`scripts/chaos` runs it while the cluster works and then looks for any effect).
//!
//! Why a Rust program and not a script: the forgeries must be well-formed messages of this
//! build's wire format about real jobs, so that only the signature — or, for `--signed`, only
//! the value checks — stands between them and the store. So every one is made from this build's
//! own encoding ([`Codec`], `shoal_model::envelope`): a genuine-looking message is encoded by a
//! codec, and a forgery is that encoding signed with another key, its tag zeroed, or cut down to
//! the unsigned form of wire version 1 ([`unkeyed_forms`]); the length bomb is a real eval
//! request's body cut where a string starts ([`bomb_body`]). When the wire format changes, the
//! forgeries change with it. Every message goes to the namespace's real queues and control
//! topic:
//! - random garbage bytes, an empty message, and the 15-byte length bomb (a string length of
//!   2^62, in the unsigned version-1 form) on the results, compile and eval queues;
//! - forged replies about jobs read off the store (an `Evaluated` with a negative time and one
//!   with a plausible time, a `Compiled` build failure, a `Started` and a `HandedBack`), a
//!   compile request whose parameter is C code that would create `--marker`, an eval request,
//!   control orders (export to `--export-to`, drain, restart), and a command that would create
//!   a session (`<ns>.commands`, whose garbage it also gets) — each in the three unkeyed forms;
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
use shoal_bus::Bus;
use shoal_model::envelope::{Codec, ID_BYTES, TAG_BYTES};
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
pub const FORGED_DETAIL: &str = "forged by shoal-bench hostile";

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

async fn targets(settings: &shoal_cli::connect::Settings) -> anyhow::Result<Targets> {
    let url = settings
        .db
        .as_deref()
        .context("shoal-bench hostile: no database to read jobs from: set SHOAL_DB")?;
    shoal_cli::connect::require_cluster_store(&settings.db_from, url)?;
    let store = shoal_cli::connect::open_store_url(&settings.db_from, url, WAIT)
        .await
        .context("shoal-bench hostile: reading jobs to forge replies about")?;
    // Loading may still be under way: wait, bounded, for its session.
    let t0 = std::time::Instant::now();
    let session = loop {
        if let Some(s) = store.sessions().await?.into_iter().max_by_key(|s| s.id.0) {
            break s;
        }
        if t0.elapsed() > WAIT {
            anyhow::bail!(
                "shoal-bench hostile: no session in the store after {WAIT:?} to forge messages about"
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

/// The body of an encoded message: what follows the version, the tag and the id.
fn body_of(encoded: &[u8]) -> &[u8] {
    &encoded[1 + TAG_BYTES + ID_BYTES..]
}

/// `body` in the unsigned form of wire version 1, `[1][body]`: what a consumer that read
/// version 1 took as it came; a downgrade, refused now by its version.
fn version_1(body: &[u8]) -> Vec<u8> {
    let mut out = vec![1u8];
    out.extend_from_slice(body);
    out
}

/// The body of a length bomb: this build's encoding of an eval request, cut where its first
/// string (the step's name) starts, with that string's length claimed to be 2^62 (a bincode
/// varint: 0xFD, then the u64). A decoder that believed the length would allocate 4 EiB.
fn bomb_body() -> Vec<u8> {
    let step = Step::ExecRun;
    let request = Message::Eval(EvalRequest {
        session: SessionId(7),
        step,
        items: Vec::new(),
    });
    let encoded = shoal_bus::random_codec().encode(&request);
    let body = body_of(&encoded);
    let name = step.as_str().as_bytes();
    let at = body
        .windows(name.len())
        .position(|w| w == name)
        .expect("an eval request carries its step by name");
    // A length under 251 is one byte of bincode's varint, just before the string.
    assert_eq!(body[at - 1] as usize, name.len(), "the step name's length");
    let mut bomb = body[..at - 1].to_vec();
    bomb.push(0xFD);
    bomb.extend_from_slice(&(1u64 << 62).to_le_bytes());
    bomb
}

/// The unsigned length bomb: [`bomb_body`] in the version-1 form, with the three bytes of
/// padding of the 15-byte message that once aborted every consumer.
fn length_bomb() -> Vec<u8> {
    let mut bomb = version_1(&bomb_body());
    bomb.extend_from_slice(&[0; 3]);
    bomb
}

/// The three forms of a forgery without the key, each made from this build's encoding of
/// `msg`: signed with a stranger's key (well-formed, the tag wrong), the version-1 unsigned
/// form (tag and id stripped, version 1), and the stranger's encoding with its tag zeroed.
fn unkeyed_forms(stranger: &Codec, msg: &Message) -> [Vec<u8>; 3] {
    let signed = stranger.encode(msg);
    let v1 = version_1(body_of(&signed));
    let mut zero_tag = signed.clone();
    zero_tag[1..1 + TAG_BYTES].fill(0);
    [signed, v1, zero_tag]
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
        step: shoal_model::Step::ExecRun,
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
        step: Step::ExecBuild,
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
        step: Step::ExecRun,
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
    let settings = shoal_cli::connect::Settings::load(None)?;
    let url = settings
        .broker
        .clone()
        .context("shoal-bench hostile: no broker: set SHOAL_BROKER")?;
    let ns = settings.namespace()?;
    let t = targets(&settings).await?;
    let queues = Queues {
        results: ns.results_queue(),
        compile: ns.compile_queue(Step::ExecBuild, &t.arch),
        eval: ns.eval_queue(Step::ExecRun, &t.arch, t.num_cu),
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
                        backend: shoal_model::Backend::Exec,
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
    // The deployment's codec as each of its processes makes it (a random origin for the ids),
    // so that nothing but the values tells these from genuine messages: each one, the bomb on
    // every queue too, with an id of its own.
    let codec = shoal_cli::connect::cluster_codec().context("shoal-bench hostile --signed")?;
    let signed_bomb = || codec.seal(&bomb_body());
    let messages = [
        (
            To::Queue(queues.results.clone()),
            codec.encode(&evaluated(t, -1.0)),
        ),
        (To::Queue(queues.results.clone()), signed_bomb()),
        (
            To::Queue(queues.compile.clone()),
            codec.encode(&compile_request(t, &args.marker)),
        ),
        (To::Queue(queues.compile.clone()), signed_bomb()),
        (
            To::Queue(queues.eval.clone()),
            codec.encode(&eval_request(t, &args.marker)),
        ),
        (To::Queue(queues.eval.clone()), signed_bomb()),
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
                "shoal-bench hostile: connecting to {}",
                shoal_cli::connect::redact(url)
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
            Err(e) => return Err(e).context("shoal-bench hostile: publishing"),
        }
    }
    bus.close().await?;
    Ok((published, skipped, by_kind))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_model::envelope::DecodeError;

    #[test]
    fn forgeries_are_made_from_the_encoding_and_refused() {
        let codec = Codec::new(&[9u8; 32]).unwrap();
        let msg = Message::Control(Control::Drain);
        let [stranger, v1, zero_tag] = unkeyed_forms(&shoal_bus::random_codec(), &msg);
        assert_eq!(codec.decode(&stranger), Err(DecodeError::BadSignature));
        assert_eq!(codec.decode(&zero_tag), Err(DecodeError::BadSignature));
        assert_eq!(
            codec.decode(&v1),
            Err(DecodeError::UnknownVersion { found: 1 })
        );
        // The version-1 form carries this build's body: signed, it is the message.
        assert_eq!(codec.decode(&codec.seal(&v1[1..])), Ok(msg));
    }

    #[test]
    fn the_length_bomb_is_refused_unsigned_and_signed() {
        let codec = Codec::new(&[9u8; 32]).unwrap();
        let bomb = length_bomb();
        assert_eq!(bomb.len(), 15);
        assert_eq!(
            codec.decode(&bomb),
            Err(DecodeError::UnknownVersion { found: 1 })
        );
        // Under a valid tag, the bomb reaches the body's decoder, which refuses the length.
        assert!(matches!(
            codec.decode(&codec.seal(&bomb_body())),
            Err(DecodeError::Corrupt(_))
        ));
    }
}
