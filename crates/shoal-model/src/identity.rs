//! Who sent a message, and what each sender may send: the one rule.
//!
//! The deployment's key ([`crate::envelope`]) says that a message comes from *someone in the
//! deployment*; it does not say who, and every host holds it. Who is said by the broker: every
//! process connects with its own broker user and stamps each message it publishes with that
//! user (the AMQP `user_id` property), and RabbitMQ refuses a publish whose `user_id` is not the
//! connection's user ("validated user-id"). So a consumer knows, for every delivery, which
//! broker user published it, and no holder of the key can speak for another user.
//!
//! A broker user's name says its role, and optionally its host ([`Identity::of_user`]):
//!
//! | user | role | may send |
//! |---|---|---|
//! | `<prefix>_scheduler` | [`Role::Scheduler`] | compile and eval requests, command replies, progress |
//! | `<prefix>_compile[.<host>]` | [`Role::Compile`] | a compile phase's started, heartbeat, hand-back and result |
//! | `<prefix>_eval[.<host>]` | [`Role::Eval`] | an eval phase's started, heartbeat, hand-back and result; health; pause and resume |
//! | `<prefix>_exporter` | [`Role::Exporter`] | nothing (it only listens) |
//! | `<prefix>_cli` | [`Role::Operator`] | commands and control orders |
//! | a name without `_` or `.` (`shoal`) | [`Role::Admin`] | everything |
//! | any other name (`shoal_evil`, `gpu_host7`) | [`Role::Unknown`] | nothing |
//!
//! A user with a host (`shoal_eval.gpu07`) is one host's identity: its replies must name a
//! worker of that host (`gpu07/evaluator[0]`), and its health reports that host. That is what
//! makes the lease holder an authenticated identity rather than a name a message asserts: the
//! Scheduler keeps, with each lease, the user whose started notice took it, and a result from
//! any other user is refused. Hosts that share a role's user (`shoal_eval`) can speak for each
//! other's workers, so a deployment gives each host its own (scripts/services-up `--host`,
//! deploy/README.md).
//!
//! A plain name is an administrator's (`shoal`, the admin user of scripts/services-up, or the
//! in-process bus of the embedded mode, [`Identity::in_process`]): it may send everything, as it
//! may already do everything on the broker (purge, delete, publish anywhere). It is given to no
//! worker host. A name that looks like a role's but names none is nobody's: refused.

use crate::message::{Control, Event, Message, Phase, ReplyBody};

/// What a sender is trusted to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Scheduler,
    Compile,
    Eval,
    Exporter,
    /// An operator's CLI (the broker user `<prefix>_cli`).
    Operator,
    /// Everything: the deployment's administrator, or the embedded mode's own bus.
    Admin,
    /// A name that follows no rule: nothing.
    Unknown,
}

impl Role {
    /// The role a user name's suffix names (`scheduler`, `compile`, `eval`, `exporter`, `cli`).
    fn from_suffix(s: &str) -> Option<Role> {
        Some(match s {
            "scheduler" => Role::Scheduler,
            "compile" => Role::Compile,
            "eval" => Role::Eval,
            "exporter" => Role::Exporter,
            "cli" => Role::Operator,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::Scheduler => "scheduler",
            Role::Compile => "compile",
            Role::Eval => "eval",
            Role::Exporter => "exporter",
            Role::Operator => "operator",
            Role::Admin => "admin",
            Role::Unknown => "no role",
        }
    }
}

/// A sender, as the bus authenticated it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The broker user (or `in-process`).
    pub user: String,
    pub role: Role,
    /// The one host this identity may speak for; `None`: any host of its role.
    pub host: Option<String>,
}

/// The user name of the embedded mode's in-process bus.
pub const IN_PROCESS_USER: &str = "in-process";

/// Why a message is refused from its sender.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no authenticated sender (the message has no user id)")]
    Anonymous,
    #[error("{user} ({role}) may not send {what}")]
    NotItsRole {
        user: String,
        role: &'static str,
        what: String,
    },
    #[error("{user} speaks for host {host} only, and the message names {named}")]
    OtherHost {
        user: String,
        host: String,
        named: String,
    },
}

impl Identity {
    /// The identity of broker user `user`, by the naming rule of the module docs: the last
    /// `_`-separated word of the name (before an optional `.<host>`) is the role.
    pub fn of_user(user: &str) -> Identity {
        let (base, host) = match user.split_once('.') {
            Some((b, h)) if !h.is_empty() => (b, Some(h.to_string())),
            _ => (user, None),
        };
        let role = base
            .rsplit_once('_')
            .and_then(|(prefix, suffix)| (!prefix.is_empty()).then_some(suffix))
            .and_then(Role::from_suffix);
        match role {
            Some(role) => Identity {
                user: user.to_string(),
                role,
                host,
            },
            None => Identity {
                user: user.to_string(),
                role: if user.contains(['_', '.']) || user.is_empty() {
                    Role::Unknown
                } else {
                    Role::Admin
                },
                host: None,
            },
        }
    }

    /// The sender of every message on the embedded mode's in-process bus: the process itself.
    pub fn in_process() -> Identity {
        Identity {
            user: IN_PROCESS_USER.to_string(),
            role: Role::Admin,
            host: None,
        }
    }

    /// The identity of a delivery's publisher, `None` when the bus said nothing (a message
    /// published without a user id): refused.
    pub fn of_publisher(publisher: Option<&str>) -> Result<Identity, Refusal> {
        publisher.map(Identity::of_user).ok_or(Refusal::Anonymous)
    }

    /// Why a process of `host` running `roles` cannot publish as this identity, if it cannot:
    /// every message of a role it is not would be refused, so a worker checks at start.
    pub fn misfit(&self, host: &str, roles: &[Role]) -> Option<String> {
        if self.role == Role::Admin {
            return None;
        }
        if let Some(bad) = roles.iter().find(|r| **r != self.role) {
            return Some(format!(
                "the broker user {} is the {} role's, and this process runs the {} role: give \
                 each role its own process and user",
                self.user,
                self.role.name(),
                bad.name()
            ));
        }
        match &self.host {
            Some(h) if h != host => Some(format!(
                "the broker user {} speaks for host {h}, and this process is host {host} \
                 (--host, else the machine's hostname)",
                self.user
            )),
            _ => None,
        }
    }

    /// Whether this sender may send `msg`: its role's messages only, and for a host's identity,
    /// only about its own host.
    pub fn may_send(&self, msg: &Message) -> Result<(), Refusal> {
        if self.role == Role::Admin {
            return Ok(());
        }
        let allowed: &[Role] = match msg {
            Message::Compile(_) | Message::Eval(_) | Message::CommandReply(_) => &[Role::Scheduler],
            Message::Event(Event::Progress { .. }) => &[Role::Scheduler],
            Message::Event(Event::Health(_)) => &[Role::Eval],
            Message::Reply(r) => match reply_phase(r) {
                Phase::Compile => &[Role::Compile],
                Phase::Eval => &[Role::Eval],
            },
            // The GpuMonitor (with the eval role's user) pauses and resumes its devices.
            Message::Control(Control::Pause { .. } | Control::Resume { .. }) => {
                &[Role::Operator, Role::Eval]
            }
            Message::Control(_) | Message::Command(_) => &[Role::Operator],
        };
        if !allowed.contains(&self.role) {
            return Err(Refusal::NotItsRole {
                user: self.user.clone(),
                role: self.role.name(),
                what: kind(msg),
            });
        }
        if let (Some(host), Some(named)) = (&self.host, named_host(msg)) {
            if named != host {
                return Err(Refusal::OtherHost {
                    user: self.user.clone(),
                    host: host.clone(),
                    named: named.to_string(),
                });
            }
        }
        Ok(())
    }
}

/// The phase a reply is about.
fn reply_phase(r: &ReplyBody) -> Phase {
    match r {
        ReplyBody::Started { phase, .. }
        | ReplyBody::Heartbeat { phase, .. }
        | ReplyBody::HandedBack { phase, .. } => *phase,
        ReplyBody::Compiled(_) => Phase::Compile,
        ReplyBody::Evaluated(_) => Phase::Eval,
    }
}

/// The host a message speaks for, where it names one: a reply's worker (`<host>/<actor>`) and
/// a health report's host.
fn named_host(msg: &Message) -> Option<&str> {
    let worker = match msg {
        Message::Reply(ReplyBody::Started { worker, .. })
        | Message::Reply(ReplyBody::Heartbeat { worker, .. })
        | Message::Reply(ReplyBody::HandedBack { worker, .. }) => worker,
        Message::Reply(ReplyBody::Compiled(c)) => &c.worker,
        Message::Reply(ReplyBody::Evaluated(e)) => &e.worker,
        Message::Event(Event::Health(h)) => &h.host,
        _ => return None,
    };
    // `<host>:<pid>/<actor>`, or `<host>/<actor>`.
    let host = worker.split_once('/').map_or(worker.as_str(), |(h, _)| h);
    Some(host.split_once(':').map_or(host, |(h, _)| h))
}

/// A message's kind, for refusals.
fn kind(msg: &Message) -> String {
    match msg {
        Message::Compile(_) => "compile requests".into(),
        Message::Eval(_) => "eval requests".into(),
        Message::Reply(r) => format!("{}s", r.kind()),
        Message::Event(Event::Health(_)) => "health events".into(),
        Message::Event(Event::Progress { .. }) => "progress events".into(),
        Message::Control(c) => {
            let name = format!("{c:?}");
            let name = name
                .split([' ', '(', '{'])
                .next()
                .unwrap_or("?")
                .to_string();
            format!("control orders ({name})")
        }
        Message::Command(_) => "commands".into(),
        Message::CommandReply(_) => "command replies".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::*;
    use crate::{JobId, JobRef, SessionId};

    fn started(phase: Phase, worker: &str) -> Message {
        Message::Reply(ReplyBody::Started {
            session: SessionId(1),
            phase,
            jobs: vec![JobRef {
                job: JobId(1),
                attempt: 1,
            }],
            worker: worker.into(),
        })
    }

    #[test]
    fn a_users_name_says_its_role_and_host() {
        let id = Identity::of_user("shoal_eval.gpu07");
        assert_eq!((id.role, id.host.as_deref()), (Role::Eval, Some("gpu07")));
        let id = Identity::of_user("shoal_compile");
        assert_eq!((id.role, id.host), (Role::Compile, None));
        assert_eq!(Identity::of_user("shoal_cli").role, Role::Operator);
        assert_eq!(
            Identity::of_user("prod_shoal_scheduler").role,
            Role::Scheduler
        );
        for admin in ["shoal", "guest"] {
            assert_eq!(Identity::of_user(admin).role, Role::Admin, "{admin}");
        }
        for nobody in [
            "_eval",
            "shoal_evil",
            "shoal_eval_x",
            "gpu_host7",
            "a.b",
            "",
        ] {
            let id = Identity::of_user(nobody);
            assert_eq!(id.role, Role::Unknown, "{nobody}");
            assert!(id.may_send(&Message::Control(Control::Drain)).is_err());
        }
        assert_eq!(Identity::of_publisher(None), Err(Refusal::Anonymous));
    }

    #[test]
    fn each_role_sends_only_its_own_messages() {
        let eval = Identity::of_user("shoal_eval");
        let compile = Identity::of_user("shoal_compile");
        let cli = Identity::of_user("shoal_cli");
        let scheduler = Identity::of_user("shoal_scheduler");
        let exporter = Identity::of_user("shoal_exporter");
        let drain = Message::Control(Control::Drain);
        let pause = Message::Control(Control::Pause { device: "0".into() });
        let progress = Message::Event(Event::Progress {
            session: SessionId(1),
            done: 1,
            total: 2,
        });
        let ok = |id: &Identity, m: &Message| id.may_send(m).is_ok();
        assert!(ok(&eval, &started(Phase::Eval, "h/evaluator[0]")));
        assert!(!ok(&eval, &started(Phase::Compile, "h/compiler")));
        assert!(ok(&compile, &started(Phase::Compile, "h/compiler")));
        assert!(!ok(&compile, &started(Phase::Eval, "h/evaluator[0]")));
        assert!(!ok(&eval, &drain));
        assert!(ok(&eval, &pause), "the GpuMonitor pauses its devices");
        assert!(ok(&cli, &drain));
        assert!(!ok(&cli, &started(Phase::Eval, "h/evaluator[0]")));
        assert!(!ok(&eval, &progress));
        assert!(ok(&scheduler, &progress));
        assert!(!ok(&scheduler, &drain));
        assert!(!ok(&exporter, &pause));
        let err = eval.may_send(&drain).unwrap_err().to_string();
        assert_eq!(err, "shoal_eval (eval) may not send control orders (Drain)");
        let admin = Identity::of_user("shoal");
        assert!(ok(&admin, &drain) && ok(&admin, &started(Phase::Eval, "x")));
    }

    #[test]
    fn a_process_must_fit_its_user() {
        let id = Identity::of_user("shoal_eval.gpu07");
        assert_eq!(id.misfit("gpu07", &[Role::Eval]), None);
        assert!(id
            .misfit("gpu08", &[Role::Eval])
            .unwrap()
            .contains("host gpu07"));
        assert!(id.misfit("gpu07", &[Role::Eval, Role::Compile]).is_some());
        assert_eq!(
            Identity::of_user("shoal").misfit("x", &[Role::Scheduler]),
            None
        );
        let started = started(Phase::Eval, "gpu07:4242/evaluator[0]");
        assert!(id.may_send(&started).is_ok(), "a worker name with its pid");
    }

    #[test]
    fn a_hosts_identity_speaks_for_its_host_only() {
        let id = Identity::of_user("shoal_eval.gpu07");
        assert!(id
            .may_send(&started(Phase::Eval, "gpu07/evaluator[0]"))
            .is_ok());
        let err = id
            .may_send(&started(Phase::Eval, "gpu08/evaluator[0]"))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "shoal_eval.gpu07 speaks for host gpu07 only, and the message names gpu08"
        );
        let health = |host: &str| {
            Message::Event(Event::Health(DeviceHealth {
                host: host.into(),
                device: "0".into(),
                healthy: false,
                detail: String::new(),
            }))
        };
        assert!(id.may_send(&health("gpu07")).is_ok());
        assert!(id.may_send(&health("gpu08")).is_err());
    }
}
