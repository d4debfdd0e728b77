//! Queue and exchange names: the one place they are spelled.
//!
//! Every name starts with the deployment's namespace, so several deployments and test runs share
//! one broker without seeing each other's messages.

use std::fmt;

use crate::message::Actor;
use crate::steps::Step;

/// A namespace prefix such as `shoal` or `test-3f9a`. Only `[a-z0-9_-]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Namespace(String);

/// A namespace name that is empty or has a character outside `[a-z0-9_-]`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("namespace `{name}` must be non-empty and use only a-z, 0-9, `_` and `-`")]
pub struct InvalidNamespace {
    pub name: String,
}

impl Namespace {
    pub fn new(name: &str) -> Result<Self, InvalidNamespace> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        {
            return Err(InvalidNamespace {
                name: name.to_string(),
            });
        }
        Ok(Namespace(name.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `<ns>.compile.<step>.<arch>`
    pub fn compile_queue(&self, step: Step, arch: &str) -> String {
        format!("{}.compile.{}.{}", self.0, step, sanitize(arch))
    }

    /// `<ns>.eval.<step>.<arch>_<num_cu>`
    pub fn eval_queue(&self, step: Step, arch: &str, num_cu: u32) -> String {
        format!("{}.eval.{}.{}_{}", self.0, step, sanitize(arch), num_cu)
    }

    /// Every work queue of a device kind (`arch`, `num_cu`): the compile queue of every compile
    /// step and the eval queue of every eval step, then the results queue. What retiring a
    /// namespace removes, since a broker cannot list a namespace's queues over AMQP.
    pub fn work_queues(&self, arch: &str, num_cu: u32) -> Vec<String> {
        let mut queues: Vec<String> = Step::ALL
            .iter()
            .map(|&step| {
                if step.is_compile() {
                    self.compile_queue(step, arch)
                } else {
                    self.eval_queue(step, arch, num_cu)
                }
            })
            .collect();
        queues.push(self.results_queue());
        queues
    }

    /// The one queue every worker replies on.
    pub fn results_queue(&self) -> String {
        format!("{}.results", self.0)
    }

    /// The durable queue of commands from operators' CLIs to the Scheduler
    /// ([`crate::command`]). A command published while no Scheduler runs waits here.
    pub fn commands_queue(&self) -> String {
        format!("{}.commands", self.0)
    }

    /// `<ns>.reply.<client>`: where one CLI process waits for the answers to its commands.
    /// `client` is the CLI's random id; it is sanitised like every name component.
    pub fn reply_queue(&self, client: &str) -> String {
        format!("{}.reply.{}", self.0, sanitize(client))
    }

    /// Whether `queue` is one of this namespace's reply queues: the only queues a command may
    /// ask the Scheduler to answer on.
    pub fn is_reply_queue(&self, queue: &str) -> bool {
        queue
            .strip_prefix(&self.0)
            .and_then(|rest| rest.strip_prefix(".reply."))
            .is_some_and(|client| {
                !client.is_empty()
                    && client
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            })
    }

    /// Where undeliverable and undecodable messages go, with their reason.
    pub fn dead_letter_queue(&self) -> String {
        format!("{}.dead", self.0)
    }

    /// The direct exchange that routes dead letters to [`Self::dead_letter_queue`].
    pub fn dead_letter_exchange(&self) -> String {
        format!("{}.dlx", self.0)
    }

    /// Topic exchange for health and progress events.
    pub fn events_topic(&self) -> String {
        format!("{}.events", self.0)
    }

    /// Topic exchange for control messages, routed by `<host>.<actor>`.
    pub fn control_topic(&self) -> String {
        format!("{}.control", self.0)
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The routing-key word of a host on the control topic: the host name without a `:<pid>` suffix,
/// with dots (word separators in topic keys) replaced. Control messages are routed by
/// `<host-key>.<actor>` (or `any.<actor>` for every host).
pub fn host_key(host: &str) -> String {
    let name = host.split(':').next().unwrap_or(host);
    sanitize(name)
}

/// Whom a control message is for: an actor of one host, or of every host. Its routing key on
/// the control topic is `<host-key>.<actor>` or `any.<actor>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlTarget {
    /// `None`: every host.
    pub host: Option<String>,
    pub actor: Actor,
}

impl ControlTarget {
    /// Every host's `actor`.
    pub fn any(actor: Actor) -> Self {
        ControlTarget { host: None, actor }
    }

    /// `actor` of `host` (a host name, with or without its `:<pid>`), or of every host when
    /// `host` is `any`.
    pub fn of(host: &str, actor: Actor) -> Self {
        ControlTarget {
            host: (host != "any").then(|| host.to_string()),
            actor,
        }
    }

    /// The routing key on the control topic.
    pub fn routing_key(&self) -> String {
        match &self.host {
            Some(host) => format!("{}.{}", host_key(host), self.actor),
            None => format!("any.{}", self.actor),
        }
    }
}

/// Keeps a name component to characters every broker accepts; dots separate components.
fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_wire_contract() {
        let ns = Namespace::new("shoal").unwrap();
        assert_eq!(
            ns.compile_queue(Step::MiopenPerfCompile, "gfx90a"),
            "shoal.compile.miopen_perf_compile.gfx90a"
        );
        assert_eq!(
            ns.eval_queue(Step::MiopenPerfEval, "gfx90a", 110),
            "shoal.eval.miopen_perf_eval.gfx90a_110"
        );
        assert_eq!(
            ns.eval_queue(Step::ExecRun, "a.b", 1),
            "shoal.eval.exec_run.a_b_1"
        );
        assert_eq!(ns.dead_letter_exchange(), "shoal.dlx");
        assert_eq!(ns.commands_queue(), "shoal.commands");
        assert_eq!(ns.reply_queue("ab.c"), "shoal.reply.ab_c");
        assert!(ns.is_reply_queue(&ns.reply_queue("3f9a")));
        assert!(!ns.is_reply_queue("shoal.results"));
        assert_eq!(
            ControlTarget::of("gpu-node.lab:4242", Actor::Exporter).routing_key(),
            "gpu-node_lab.exporter"
        );
        assert_eq!(
            ControlTarget::of("any", Actor::Worker).routing_key(),
            "any.worker"
        );
        assert!(Namespace::new("Bad Name").is_err());
        assert_eq!(host_key("gpu-node.lab:4242"), "gpu-node_lab");
        assert!(Namespace::new("").is_err());
    }
}
