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
//!
//! With `--messages` it also reads the dead letters themselves and counts them by who published
//! the original (`Delivery::original_publisher`: a consumer's copy names it in
//! `x-shoal-dead-publisher`), who dead-lettered it when that was a consumer (the copy's own,
//! authenticated publisher) and why: the chaos suite tells the cluster's own replies and commands
//! lost to an outage from refused forgeries by it. AMQP has no reading without taking: each
//! letter is held unsettled until all are read, then given back, which the broker counts as one
//! more delivery of each (the dead-letter queue sets no delivery limit, so on RabbitMQ 3.x that
//! costs nothing; 4.x puts a default of 20 on quorum queues).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use shoal_bus::{Bus, Delivery};
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

/// What a group of dead letters has in common.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Kind {
    /// The broker user that published the original; `None` if it carried none.
    pub publisher: Option<String>,
    /// The consumer that dead-lettered it, when not the publisher itself (the copy's own
    /// publisher); `None` for one the broker dead-lettered (past a delivery limit).
    pub dead_lettered_by: Option<String>,
    /// Why; `None` for a message published to the dead-letter queue directly.
    pub reason: Option<String>,
}

impl Kind {
    fn of(d: &Delivery) -> Kind {
        Kind {
            publisher: d.original_publisher.clone(),
            dead_lettered_by: d
                .publisher
                .clone()
                .filter(|p| d.original_publisher.as_ref() != Some(p)),
            reason: d.dead_reason.clone(),
        }
    }
}

/// The dead letters read, counted by [`Kind`], most frequent first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Letters {
    pub read: u64,
    pub kinds: Vec<(Kind, u64)>,
}

/// The most letters read at once: every one is held unsettled until all are read (one given
/// back early would be delivered again at once), and a prefetch is at most this.
const MAX_READ: u64 = u16::MAX as u64;
/// Nothing more within this: the queue held fewer than its depth said (some expired).
const READ_IDLE: Duration = Duration::from_secs(3);

impl Letters {
    fn count<'a>(letters: impl IntoIterator<Item = &'a Delivery>) -> Letters {
        let mut by: BTreeMap<Kind, u64> = BTreeMap::new();
        let mut read = 0;
        for d in letters {
            read += 1;
            *by.entry(Kind::of(d)).or_default() += 1;
        }
        let mut kinds: Vec<(Kind, u64)> = by.into_iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Letters { read, kinds }
    }

    /// Reads up to `held` (at most [`MAX_READ`]) letters of `bus`'s dead-letter queue, and gives
    /// them all back.
    pub async fn read(bus: &dyn Bus, held: u64) -> anyhow::Result<Letters> {
        let want = held.min(MAX_READ);
        if want == 0 {
            return Ok(Letters::default());
        }
        let queue = bus.namespace().dead_letter_queue();
        let prefetch = u16::try_from(want).unwrap_or(u16::MAX);
        let mut consumer = bus
            .consume(&queue, prefetch)
            .await
            .with_context(|| format!("reading {queue}"))?;
        let mut taken: Vec<Delivery> = Vec::new();
        while (taken.len() as u64) < want {
            match tokio::time::timeout(READ_IDLE, consumer.next()).await {
                Ok(Some(Ok(d))) => taken.push(d),
                Ok(Some(Err(e))) => return Err(e).with_context(|| format!("reading {queue}")),
                Ok(None) | Err(_) => break,
            }
        }
        let letters = Letters::count(&taken);
        // The subscription first, so that what is given back is not delivered to it again.
        drop(consumer);
        for d in taken {
            d.requeue()
                .await
                .with_context(|| format!("giving a letter back to {queue}"))?;
        }
        Ok(letters)
    }

    /// One line per kind: `<count> from <publisher>[ (dead-lettered by <user>)]: <reason>`.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (kind, n) in &self.kinds {
            let by = match &kind.dead_lettered_by {
                Some(user) => format!(" (dead-lettered by {})", one_line(user)),
                None => String::new(),
            };
            out.push_str(&format!(
                "{n:>8} from {}{by}: {}\n",
                kind.publisher.as_deref().map_or("(none)".into(), one_line),
                kind.reason.as_deref().map_or(
                    "(no reason: published to the dead-letter queue directly)".into(),
                    one_line
                ),
            ));
        }
        out
    }

    pub fn json(&self) -> serde_json::Value {
        let kinds: Vec<serde_json::Value> = self
            .kinds
            .iter()
            .map(|(k, n)| {
                serde_json::json!({
                    "count": n,
                    "publisher": k.publisher,
                    "dead_lettered_by": k.dead_lettered_by,
                    "reason": k.reason,
                })
            })
            .collect();
        serde_json::json!({ "read": self.read, "kinds": kinds })
    }
}

/// `s` on one line: a reason may carry an error's newlines.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `shoal dead-letters`.
pub async fn dead_letters(json: bool, messages: bool) -> anyhow::Result<ExitCode> {
    let bound = Bound::from_env()?;
    let bus = crate::connect::bus_from_env().await?;
    let read = async {
        let report = Report::read(&*bus, bound).await?;
        let letters = match messages {
            true => Some(Letters::read(&*bus, report.held).await?),
            false => None,
        };
        anyhow::Ok((report, letters))
    }
    .await;
    bus.close().await.ok();
    let (report, letters) = read?;
    if json {
        let mut out = report.json();
        if let Some(letters) = &letters {
            out["messages"] = letters.json();
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", report.text());
        if let Some(letters) = &letters {
            println!(
                "read {} of them (each given back), by publisher and reason:",
                letters.read
            );
            print!("{}", letters.text());
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::{Bound, Kind, Letters, Report};
    use shoal_bus::memory::MemoryBus;
    use shoal_bus::{Bus, QueueOptions};
    use shoal_model::queue::Namespace;

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

    /// Read letters are counted by publisher and reason, and all given back.
    #[tokio::test]
    async fn letters_are_counted_by_publisher_and_reason_and_given_back() {
        let bus = MemoryBus::new(Namespace::new("ns").unwrap());
        let q = "ns.work";
        bus.declare_queue(q, &QueueOptions::limited(5))
            .await
            .unwrap();
        bus.publish(q, (0..4).map(|i| vec![i]).collect())
            .await
            .unwrap();
        let mut c = bus.consume(q, 4).await.unwrap();
        for reason in ["stale result: no job", "bad\nbytes", "stale result: no job"] {
            let d = c.next().await.unwrap().unwrap();
            d.dead_letter(reason).await.unwrap();
        }
        drop(c);
        let report = Report::read(&*bus, Bound::default()).await.unwrap();
        assert_eq!(report.held, 3);
        let letters = Letters::read(&*bus, report.held).await.unwrap();
        assert_eq!(letters.read, 3);
        let kind = |reason: &str| Kind {
            publisher: Some(shoal_model::identity::IN_PROCESS_USER.into()),
            dead_lettered_by: None,
            reason: Some(reason.into()),
        };
        assert_eq!(
            letters.kinds,
            vec![(kind("stale result: no job"), 2), (kind("bad\nbytes"), 1)]
        );
        let text = letters.text();
        assert!(
            text.contains("       2 from in-process: stale result: no job\n"),
            "{text}"
        );
        assert!(text.contains("1 from in-process: bad bytes\n"), "{text}");
        assert_eq!(letters.json()["kinds"][0]["count"], 2);
        let dead = bus.namespace().dead_letter_queue();
        assert_eq!(bus.queue_depth(&dead).await.unwrap(), 3, "all given back");
        assert_eq!(Letters::read(&*bus, 0).await.unwrap(), Letters::default());
    }

    /// A consumer's copy names who dead-lettered it beside who sent it.
    #[test]
    fn a_copy_dead_lettered_by_a_consumer_names_both() {
        let letters = Letters {
            read: 1,
            kinds: vec![(
                Kind {
                    publisher: Some("shoal_eval.e1".into()),
                    dead_lettered_by: Some("shoal_scheduler".into()),
                    reason: Some("stale result".into()),
                },
                1,
            )],
        };
        assert_eq!(
            letters.text(),
            "       1 from shoal_eval.e1 (dead-lettered by shoal_scheduler): stale result\n"
        );
        let none = Letters {
            read: 1,
            kinds: vec![(
                Kind {
                    publisher: None,
                    dead_lettered_by: None,
                    reason: None,
                },
                1,
            )],
        };
        assert!(none.text().starts_with("       1 from (none): (no reason"));
    }
}
