//! Shoal's Prometheus metrics: one registry per process ([`metrics`]), the functions the actors
//! call where something happens (a result applied, a dispatch turn, a loop restarted, a device
//! probed, an evaluation timed), and the `/metrics` endpoint ([`serve`]) that `shoal worker
//! --metrics-addr` and `shoal tune --metrics-addr` start.
//!
//! Why a process-wide registry instead of a handle passed to every actor: recording must cost a
//! counter increment and no plumbing, and a process is exactly the unit Prometheus scrapes.
//! What only the store or the broker knows (jobs per state, queue depths) is not recorded as it
//! happens but read when scraped: [`serve`] calls the process's [`Collect`] hook first, which
//! refreshes those gauges ([`Metrics::set_jobs`], [`Metrics::set_queue_depths`]).
//!
//! The text is the OpenMetrics format written by `prometheus-client` (Prometheus reads it; the
//! content type says which it is). Names follow Prometheus's conventions: base units (seconds,
//! ratios), `_total` on counters.

pub mod exposition;
mod server;

use std::sync::atomic::AtomicU64;
use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub use exposition::Exposition;
pub use server::{serve, Collect, MetricsServer, ServeError};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SessionState {
    pub session: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Kind {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActorLabel {
    pub actor: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeviceLabel {
    pub device: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;
type FloatCounter = Counter<f64, AtomicU64>;

/// Every metric a Shoal process exports.
pub struct Metrics {
    registry: Registry,
    jobs: Family<SessionState, Gauge>,
    results: Family<Kind, Counter>,
    dispatch_seconds: Histogram,
    apply_seconds: Histogram,
    queue_messages: Family<QueueLabel, Gauge>,
    restarts: Family<ActorLabel, Counter>,
    busy_seconds: Family<DeviceLabel, FloatCounter>,
    /// Every device's time spent timing with the device held, in nanoseconds ([`Metrics::timed`]):
    /// what a progress estimate reads.
    busy_total_ns: std::sync::atomic::AtomicU64,
    temperature: Family<DeviceLabel, FloatGauge>,
    utilization: Family<DeviceLabel, FloatGauge>,
    clock: Family<DeviceLabel, FloatGauge>,
    healthy: Family<DeviceLabel, Gauge>,
    store_outages: Counter,
    store_outage_seconds: FloatCounter,
    store_unreachable: Gauge,
    broker_outages: Counter,
    broker_outage_seconds: FloatCounter,
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

/// Latency buckets from 0.5 ms to about 16 s, doubling.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("shoal");
        let m = Metrics {
            jobs: Family::default(),
            results: Family::default(),
            dispatch_seconds: latency(),
            apply_seconds: latency(),
            queue_messages: Family::default(),
            restarts: Family::default(),
            busy_seconds: Family::default(),
            busy_total_ns: std::sync::atomic::AtomicU64::new(0),
            temperature: Family::default(),
            utilization: Family::default(),
            clock: Family::default(),
            healthy: Family::default(),
            store_outages: Counter::default(),
            store_outage_seconds: FloatCounter::default(),
            store_unreachable: Gauge::default(),
            broker_outages: Counter::default(),
            broker_outage_seconds: FloatCounter::default(),
            registry: Registry::default(),
        };
        registry.register(
            "jobs",
            "Jobs per session and state, as the store holds them when scraped",
            m.jobs.clone(),
        );
        registry.register(
            "results",
            "Results applied by the Scheduler, by outcome kind (ok or the failure kind)",
            m.results.clone(),
        );
        registry.register(
            "dispatch_seconds",
            "Time of one Scheduler dispatch turn (claim, search, send)",
            m.dispatch_seconds.clone(),
        );
        registry.register(
            "apply_seconds",
            "Time to apply one batch of replies to the store",
            m.apply_seconds.clone(),
        );
        registry.register(
            "queue_messages",
            "Messages ready in each queue this process uses, when scraped",
            m.queue_messages.clone(),
        );
        registry.register(
            "loop_restarts",
            "Restarts of supervised actor loops after a failure or a panic",
            m.restarts.clone(),
        );
        registry.register(
            "evaluator_busy_seconds",
            "Seconds each device's Evaluator spent timing candidates",
            m.busy_seconds.clone(),
        );
        registry.register(
            "device_temperature_celsius",
            "Device temperature at the last probe",
            m.temperature.clone(),
        );
        registry.register(
            "device_utilization_ratio",
            "Device busy share (0 to 1) at the last probe",
            m.utilization.clone(),
        );
        registry.register(
            "device_clock_mhz",
            "Device graphics clock at the last probe",
            m.clock.clone(),
        );
        registry.register(
            "device_healthy",
            "1 when the last probe found the device healthy, else 0",
            m.healthy.clone(),
        );
        registry.register(
            "store_outages",
            "Times this process found its database not answering (each outage once)",
            m.store_outages.clone(),
        );
        registry.register(
            "store_outage_seconds",
            "Seconds this process's database did not answer, in all (the current outage included)",
            m.store_outage_seconds.clone(),
        );
        registry.register(
            "store_unreachable",
            "1 while this process's database does not answer (calls wait for it), else 0",
            m.store_unreachable.clone(),
        );
        registry.register(
            "broker_outages",
            "Times this process lost its connection to the broker (each outage once, failovers included)",
            m.broker_outages.clone(),
        );
        registry.register(
            "broker_outage_seconds",
            "Seconds this process had no connection to the broker, in all",
            m.broker_outage_seconds.clone(),
        );
        Metrics { registry, ..m }
    }

    /// A result applied to the store, by kind (`ok`, `crashed`, `build_failed`…).
    pub fn result(&self, kind: &str) {
        self.results
            .get_or_create(&Kind { kind: kind.into() })
            .inc();
    }

    pub fn dispatch_took(&self, d: Duration) {
        self.dispatch_seconds.observe(d.as_secs_f64());
    }

    pub fn apply_took(&self, d: Duration) {
        self.apply_seconds.observe(d.as_secs_f64());
    }

    /// A supervised loop restarted.
    pub fn loop_restarted(&self, actor: &str) {
        self.restarts
            .get_or_create(&ActorLabel {
                actor: actor.into(),
            })
            .inc();
    }

    /// Restarts of `actor` counted so far.
    pub fn loop_restarts(&self, actor: &str) -> u64 {
        self.restarts
            .get_or_create(&ActorLabel {
                actor: actor.into(),
            })
            .get()
    }

    /// Time a device's Evaluator spent timing.
    pub fn evaluator_busy(&self, device: &str, d: Duration) {
        self.busy_seconds
            .get_or_create(&DeviceLabel {
                device: device.into(),
            })
            .inc_by(d.as_secs_f64());
    }

    /// One candidate timed in `d`, its device held (the Evaluator's waits for the device are
    /// not in it): for [`Metrics::evaluator_busy_total`].
    pub fn timed(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.busy_total_ns
            .fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
    }

    /// The time this process's Evaluators spent timing candidates with their device held,
    /// every device together.
    pub fn evaluator_busy_total(&self) -> Duration {
        Duration::from_nanos(
            self.busy_total_ns
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// What a probe read from a device; a reading the device did not give is left out.
    pub fn device_probed(
        &self,
        device: &str,
        healthy: bool,
        temperature_c: Option<f64>,
        busy_percent: Option<f64>,
        clock_mhz: Option<f64>,
    ) {
        let label = DeviceLabel {
            device: device.into(),
        };
        self.healthy.get_or_create(&label).set(i64::from(healthy));
        if let Some(t) = temperature_c {
            self.temperature.get_or_create(&label).set(t);
        }
        if let Some(b) = busy_percent {
            self.utilization.get_or_create(&label).set(b / 100.0);
        }
        if let Some(c) = clock_mhz {
            self.clock.get_or_create(&label).set(c);
        }
    }

    /// What is known of the store's outages (kept by the store's own layer, read when scraped):
    /// how many began, their length in all so far, and whether one is under way.
    pub fn set_store_outages(&self, count: u64, seconds: f64, unreachable: bool) {
        let seen = self.store_outages.get();
        if count > seen {
            self.store_outages.inc_by(count - seen);
        }
        let counted = self.store_outage_seconds.get();
        if seconds > counted {
            self.store_outage_seconds.inc_by(seconds - counted);
        }
        self.store_unreachable.set(i64::from(unreachable));
    }

    /// What is known of the broker's outages, as [`Metrics::set_store_outages`] for the store.
    pub fn set_broker_outages(&self, count: u64, seconds: f64) {
        let seen = self.broker_outages.get();
        if count > seen {
            self.broker_outages.inc_by(count - seen);
        }
        let counted = self.broker_outage_seconds.get();
        if seconds > counted {
            self.broker_outage_seconds.inc_by(seconds - counted);
        }
    }

    /// Replaces the jobs-per-state gauges with a fresh reading: `(session, state, count)`.
    pub fn set_jobs(&self, counts: impl IntoIterator<Item = (String, String, u64)>) {
        self.jobs.clear();
        for (session, state, n) in counts {
            self.jobs
                .get_or_create(&SessionState { session, state })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Replaces the queue-depth gauges with a fresh reading.
    pub fn set_queue_depths(&self, depths: impl IntoIterator<Item = (String, u64)>) {
        self.queue_messages.clear();
        for (queue, n) in depths {
            self.queue_messages
                .get_or_create(&QueueLabel { queue })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Every metric in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// A scrape's answer: every metric in the format its `Accept` header asks for
    /// ([`Exposition::negotiate`]), with that format's content type.
    pub fn scrape(&self, accept: Option<&str>) -> (&'static str, String) {
        let format = Exposition::negotiate(accept);
        let body = match format {
            Exposition::OpenMetrics => self.render(),
            Exposition::Text => exposition::openmetrics_to_text(&self.render()),
        };
        (format.content_type(), body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_values_are_rendered_with_their_labels() {
        let m = metrics();
        m.result("crashed");
        m.result("crashed");
        m.loop_restarted("compiler");
        m.evaluator_busy("nvidia0", Duration::from_millis(1500));
        m.device_probed("nvidia0", true, Some(41.0), Some(97.0), Some(1980.0));
        m.set_jobs([("1".into(), "evaluated".into(), 12)]);
        m.set_jobs([("2".into(), "new".into(), 3)]);
        m.apply_took(Duration::from_millis(3));
        let text = m.render();
        for line in [
            "shoal_results_total{kind=\"crashed\"} 2",
            "shoal_loop_restarts_total{actor=\"compiler\"} 1",
            "shoal_evaluator_busy_seconds_total{device=\"nvidia0\"} 1.5",
            "shoal_device_temperature_celsius{device=\"nvidia0\"} 41.0",
            "shoal_device_utilization_ratio{device=\"nvidia0\"} 0.97",
            "shoal_device_clock_mhz{device=\"nvidia0\"} 1980.0",
            "shoal_device_healthy{device=\"nvidia0\"} 1",
            "shoal_jobs{session=\"2\",state=\"new\"} 3",
            "shoal_apply_seconds_count 1",
        ] {
            assert!(text.contains(line), "no `{line}` in\n{text}");
        }
        // A fresh reading replaces the last one.
        assert!(!text.contains("state=\"evaluated\""), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
