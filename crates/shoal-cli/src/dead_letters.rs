//! `shoal dead-letters`: how full the cluster's dead-letter queue `<ns>.dead` is, against the
//! bound the broker keeps it under.
//!
//! The bound is a RabbitMQ policy, `<ns>-dead-bound`, that `scripts/services-up` sets from
//! `SHOAL_DEAD_MAX_LENGTH` (default 10,000 messages) and `SHOAL_DEAD_MAX_AGE_S` (default 7
//! days): past the length the broker drops the oldest dead letter for each new one
//! (`overflow = drop-head`), and it drops any older than the age. A client cannot read a policy
//! over AMQP, so the bound shown is the one these variables give here, the same defaults as
//! services-up's; the depth is the broker's (a passive `queue.declare`). What the broker dropped
//! is not counted anywhere: a queue at its length bound is reported as dropping, and a
//! Scheduler's `--metrics-addr` serves the depth as `shoal_queue_messages{queue="<ns>.dead"}`
//! for an alert on it.

use std::process::ExitCode;

use anyhow::{bail, Context};
use shoal_bus::Bus;
use shoal_model::progress::human_duration;

/// The variable naming the most dead letters kept (services-up's too).
pub const MAX_LENGTH_VAR: &str = "SHOAL_DEAD_MAX_LENGTH";
/// The variable naming the oldest dead letter kept, in seconds (services-up's too).
pub const MAX_AGE_VAR: &str = "SHOAL_DEAD_MAX_AGE_S";

/// The bound of the dead-letter queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    pub max_length: u64,
    pub max_age_s: u64,
}

impl Default for Bound {
    fn default() -> Self {
        Bound {
            max_length: 10_000,
            max_age_s: 7 * 24 * 3600,
        }
    }
}

impl Bound {
    /// From [`MAX_LENGTH_VAR`] and [`MAX_AGE_VAR`], each defaulting as services-up does.
    pub fn from_env() -> anyhow::Result<Bound> {
        let read = |var: &str, default: u64| -> anyhow::Result<u64> {
            match std::env::var(var) {
                Ok(v) if !v.is_empty() => match v.parse::<u64>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => bail!("{var}: `{v}` is not a positive whole number"),
                },
                _ => Ok(default),
            }
        };
        let default = Bound::default();
        Ok(Bound {
            max_length: read(MAX_LENGTH_VAR, default.max_length)?,
            max_age_s: read(MAX_AGE_VAR, default.max_age_s)?,
        })
    }
}

/// The dead-letter queue's depth against its bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub queue: String,
    /// Dead letters in the queue now.
    pub held: u64,
    pub bound: Bound,
}

impl Report {
    /// Reads the depth of `bus`'s dead-letter queue.
    pub async fn read(bus: &dyn Bus, bound: Bound) -> anyhow::Result<Report> {
        let queue = bus.namespace().dead_letter_queue();
        let held = bus
            .queue_depth(&queue)
            .await
            .with_context(|| format!("reading the depth of {queue}"))?;
        Ok(Report { queue, held, bound })
    }

    /// Whether the queue is at its length bound: each new dead letter pushes the oldest out.
    pub fn dropping(&self) -> bool {
        self.held >= self.bound.max_length
    }

    pub fn text(&self) -> String {
        let b = self.bound;
        let mut out = format!(
            "{}: {} dead letters; the broker keeps at most {} for {} ({MAX_LENGTH_VAR}, \
             {MAX_AGE_VAR}: the policy scripts/services-up sets)\n",
            self.queue,
            self.held,
            b.max_length,
            human_duration(b.max_age_s as f64)
        );
        if self.dropping() {
            out.push_str(
                "full: the broker drops the oldest dead letter for each new one, and how many \
                 it dropped is not counted; every process logs each message it dead-letters, \
                 with the reason (`dead-lettering a message`, `reply dead-lettered`)\n",
            );
        } else {
            out.push_str(&format!(
                "room for {} more before the oldest are dropped; those older than {} are \
                 dropped whatever the count\n",
                b.max_length - self.held,
                human_duration(b.max_age_s as f64)
            ));
        }
        out
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "queue": self.queue,
            "held": self.held,
            "max_length": self.bound.max_length,
            "max_age_s": self.bound.max_age_s,
            "dropping": self.dropping(),
        })
    }
}

/// `shoal dead-letters`.
pub async fn dead_letters(json: bool) -> anyhow::Result<ExitCode> {
    let bound = Bound::from_env()?;
    let bus = crate::connect::bus_from_env().await?;
    let report = Report::read(&*bus, bound).await;
    bus.close().await.ok();
    let report = report?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        print!("{}", report.text());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::{Bound, Report};

    #[test]
    fn a_full_queue_is_reported_as_dropping() {
        let bound = Bound {
            max_length: 5,
            max_age_s: 3600,
        };
        let at = |held| Report {
            queue: "ns.dead".into(),
            held,
            bound,
        };
        assert!(!at(4).dropping());
        let text = at(4).text();
        assert!(text.contains("ns.dead: 4 dead letters"), "{text}");
        assert!(
            text.contains("at most 5") && text.contains("room for 1 more"),
            "{text}"
        );
        assert!(at(5).dropping());
        assert!(at(5).text().contains("full: the broker drops the oldest"));
        assert_eq!(at(5).json()["dropping"], true);
        assert_eq!(at(5).json()["max_length"], 5);
    }
}
