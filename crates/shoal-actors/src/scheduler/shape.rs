//! How eval requests are shaped to the devices that serve them: how many items one request
//! carries, and how many items of a session may be in flight. Plain data and arithmetic; the
//! Scheduler feeds it what it learns (each eval reply's device time, each eval queue's consumer
//! count) and asks it before it dispatches.
//!
//! **Why adaptive.** A broker round trip and a store commit cost the same whether a request
//! carries one item or fifty, so a request of one 1 ms item leaves a fast GPU waiting on the
//! cluster, while a request of fifty 10 s items holds work that idle devices elsewhere could
//! have taken, and makes the queue lease long. So a request carries about
//! [`ShapeConfig::target`] of device time: the items of a step are measured as they come back
//! (the device time of each reply over its items, averaged), and the batch follows.
//!
//! **Why by consumers.** Every device's Evaluator is one consumer of its eval queue and holds
//! [`crate::evaluator::PREFETCH`] requests. Keeping [`ShapeConfig::requests_per_device`]
//! requests per consumer in flight keeps each device's next request in its hands, and one more
//! in the queue for whichever device frees first, without a backlog that would wait longer than
//! its lease. A fleet that grows from one GPU to hundreds needs no flag.

use std::collections::HashMap;
use std::time::Duration;

use shoal_model::{SessionId, Step};

/// The knobs of the shaping; the defaults are what `shoal tune` and `shoal worker` use.
#[derive(Clone, Debug, PartialEq)]
pub struct ShapeConfig {
    /// Items per eval request, fixed; `None` to adapt to the items' measured device time.
    pub fixed_batch: Option<usize>,
    /// Items of one session in eval phases, fixed; `None` to size it by the devices that
    /// consume the session's eval queues.
    pub fixed_in_flight: Option<u64>,
    /// The device time one request should carry.
    pub target: Duration,
    /// Items per request at most, however short they are.
    pub max_batch: usize,
    /// Requests in flight per consuming device.
    pub requests_per_device: u64,
}

impl Default for ShapeConfig {
    fn default() -> Self {
        ShapeConfig {
            fixed_batch: None,
            fixed_in_flight: None,
            target: Duration::from_millis(400),
            max_batch: 256,
            requests_per_device: 3,
        }
    }
}

/// How much weight a new reply has in an item's mean device time.
const WEIGHT_OF_NEW: f64 = 0.3;

/// What the Scheduler knows of each step's items, and the shaping it derives.
#[derive(Debug, Default)]
pub struct EvalShape {
    config: ShapeConfig,
    /// Mean device time of one item, in microseconds, per (session, step) measured so far.
    item_us: HashMap<(SessionId, Step), f64>,
}

impl EvalShape {
    pub fn new(config: ShapeConfig) -> Self {
        EvalShape {
            config,
            item_us: HashMap::new(),
        }
    }

    /// A reply of `items` outcomes that held its device for `busy_us`.
    pub fn observe(&mut self, session: SessionId, step: Step, items: usize, busy_us: u64) {
        if items == 0 {
            return;
        }
        let per_item = busy_us as f64 / items as f64;
        self.item_us
            .entry((session, step))
            .and_modify(|mean| *mean += WEIGHT_OF_NEW * (per_item - *mean))
            .or_insert(per_item);
    }

    /// The mean device time of one item of the step, once measured.
    pub fn item_time(&self, session: SessionId, step: Step) -> Option<Duration> {
        self.item_us
            .get(&(session, step))
            .map(|us| Duration::from_secs_f64(us.max(0.0) / 1e6))
    }

    /// Items per request for the step: about [`ShapeConfig::target`] of device time, at least
    /// one and at most [`ShapeConfig::max_batch`]. Before any item of the step came back, one:
    /// nothing says yet that items are short, and the first replies come back soon.
    pub fn batch(&self, session: SessionId, step: Step) -> usize {
        if let Some(n) = self.config.fixed_batch {
            return n.max(1);
        }
        let max = self.config.max_batch.max(1);
        match self.item_us.get(&(session, step)) {
            None => 1,
            Some(&us) => {
                let fits = self.config.target.as_secs_f64() * 1e6 / us.max(1.0);
                (fits.floor() as usize).clamp(1, max)
            }
        }
    }

    /// Items of the step's session that may be in eval phases while `consumers` devices serve
    /// its queue: [`ShapeConfig::requests_per_device`] requests for each (one device's worth
    /// when none is there yet, so that the first to come finds work waiting).
    pub fn in_flight(&self, session: SessionId, step: Step, consumers: u32) -> u64 {
        if let Some(n) = self.config.fixed_in_flight {
            return n;
        }
        let devices = u64::from(consumers.max(1));
        devices * self.config.requests_per_device.max(1) * self.batch(session, step) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: SessionId = SessionId(1);
    const STEP: Step = Step::ExecRun;

    fn shape() -> EvalShape {
        EvalShape::new(ShapeConfig::default())
    }

    #[test]
    fn one_item_until_measured_then_about_the_target() {
        let mut s = shape();
        assert_eq!(s.batch(S, STEP), 1);
        // 2 ms items: 400 ms / 2 ms.
        s.observe(S, STEP, 1, 2_000);
        assert_eq!(s.batch(S, STEP), 200);
        // Another step and another session are measured apart.
        assert_eq!(s.batch(S, Step::MiopenPerfEval), 1);
        assert_eq!(s.batch(SessionId(2), STEP), 1);
    }

    #[test]
    fn never_past_the_bounds() {
        let mut s = shape();
        s.observe(S, STEP, 10, 10); // 1 us items
        assert_eq!(s.batch(S, STEP), 256, "capped");
        let mut s = shape();
        s.observe(S, STEP, 1, 60_000_000); // a minute each
        assert_eq!(s.batch(S, STEP), 1, "never zero");
        let mut s = shape();
        s.observe(S, STEP, 4, 0); // a backend too fast to measure
        assert_eq!(s.batch(S, STEP), 256);
    }

    #[test]
    fn follows_a_change_in_item_time() {
        let mut s = shape();
        s.observe(S, STEP, 4, 200_000); // 50 ms items: 8 per request
        assert_eq!(s.batch(S, STEP), 8);
        for _ in 0..20 {
            s.observe(S, STEP, 2, 400_000); // now 200 ms each
        }
        assert_eq!(s.batch(S, STEP), 2);
        assert!((s.item_time(S, STEP).unwrap().as_secs_f64() - 0.2).abs() < 0.005);
    }

    #[test]
    fn in_flight_grows_with_the_devices() {
        let mut s = shape();
        s.observe(S, STEP, 8, 400_000); // 50 ms items: 8 per request
        assert_eq!(
            s.in_flight(S, STEP, 0),
            3 * 8,
            "one device's worth before any"
        );
        assert_eq!(s.in_flight(S, STEP, 1), 3 * 8);
        assert_eq!(s.in_flight(S, STEP, 256), 256 * 3 * 8);
    }

    #[test]
    fn fixed_settings_win() {
        let mut s = EvalShape::new(ShapeConfig {
            fixed_batch: Some(16),
            fixed_in_flight: Some(100),
            ..ShapeConfig::default()
        });
        s.observe(S, STEP, 1, 1_000);
        assert_eq!(s.batch(S, STEP), 16);
        assert_eq!(s.in_flight(S, STEP, 64), 100);
    }
}
