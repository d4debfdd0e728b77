//! How far a session is and when it will be done: the rate over the recent past and the ETA it
//! implies, as `shoal status` and the dashboard show them. One definition, so the two agree.

use serde::Serialize;

/// The window the rate is measured over: long enough to smooth batches, short enough to follow
/// a fleet that grew or shrank.
pub const RATE_WINDOW_MS: i64 = 5 * 60 * 1000;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Progress {
    /// Jobs in a final state (evaluated, errored, skipped).
    pub done: u64,
    pub total: u64,
    /// Jobs finished per second over the window; `None` with fewer than two in it.
    pub per_s: Option<f64>,
    /// Seconds until every job is final at that rate.
    pub eta_s: Option<f64>,
    /// A finished session: seconds from its first job final to its last ([`Progress::finished`]).
    /// `per_s` is then the rate over that span, which no longer changes as time passes.
    pub finished_in_s: Option<f64>,
}

impl Progress {
    /// `finish_times` are the finish times (ms) of the jobs that ended within
    /// [`RATE_WINDOW_MS`] before `now_ms`, oldest first.
    pub fn new(done: u64, total: u64, finish_times: &[i64], now_ms: i64) -> Progress {
        let recent: Vec<i64> = finish_times
            .iter()
            .copied()
            .filter(|t| now_ms - t <= RATE_WINDOW_MS)
            .collect();
        let per_s = match recent.first() {
            Some(first) if recent.len() >= 2 => {
                let span_s = ((now_ms - first) as f64 / 1000.0).max(1.0);
                Some(recent.len() as f64 / span_s)
            }
            _ => None,
        };
        let remaining = total.saturating_sub(done);
        let eta_s = match per_s {
            _ if remaining == 0 => Some(0.0),
            Some(r) if r > 0.0 => Some(remaining as f64 / r),
            _ => None,
        };
        Progress {
            done,
            total,
            per_s,
            eta_s,
            finished_in_s: None,
        }
    }

    /// A session with every job final: its rate is its jobs over the span from the first to the
    /// last finish (`finish_times`: every job's, oldest first), however long ago that was. A
    /// rate over a window ending now fell as time passed (4.24 then 1.79 jobs/s for a run
    /// that went at 8.3).
    pub fn finished(total: u64, finish_times: &[i64]) -> Progress {
        let span_s = match (finish_times.first(), finish_times.last()) {
            (Some(first), Some(last)) => Some((last - first) as f64 / 1000.0),
            _ => None,
        };
        let per_s = span_s
            .filter(|s| *s > 0.0)
            .map(|s| (finish_times.len() - 1) as f64 / s);
        Progress {
            done: total,
            total,
            per_s,
            eta_s: Some(0.0),
            finished_in_s: span_s,
        }
    }

    /// Done as a percentage of the total (100 for an empty session).
    pub fn percent(&self) -> f64 {
        if self.total == 0 {
            100.0
        } else {
            100.0 * self.done as f64 / self.total as f64
        }
    }
}

/// What a running tuning has done since it started (or resumed), for [`estimate_eta`]: counted
/// in candidates (jobs), the unit of every count a person sees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pipeline {
    /// Seconds since the tuning started or resumed.
    pub elapsed_s: f64,
    /// Candidates in the session.
    pub total: u64,
    /// Candidates whose build is done (compiled, queued or timed, or final), now and at start.
    pub built: u64,
    pub built_at_start: u64,
    /// Candidates in a final state, now and at start.
    pub done: u64,
    pub done_at_start: u64,
    /// When builds and timings take turns on one machine (timings on the CPU never overlap a
    /// build): the seconds spent timing since the start, which splits the elapsed time into
    /// the two steps' costs. `None` when they run side by side (GPUs).
    pub timing_busy_s: Option<f64>,
}

/// Seconds until every candidate is final, from the tuning's own two rates, or `None` while
/// there is not enough to go on (nothing built or finished since the start).
///
/// A tuning is two steps in a pipeline: builds (on the CPU, several at once) and timings (on
/// the device, one at a time), and a candidate is timed only once its build is done. So the
/// time left is that of the slower step: the candidates still to build at the build rate, and
/// the candidates still to time at the timing rate, whichever is longer. Each rate is measured
/// since the start, not over a short window: early in a run builds come in bursts and timings
/// wait for them, and a windowed rate swings with every burst (the bar said "ETA 8m" at 1 s and
/// "ETA 4m" at 18 s of a 58 s run). While timings wait for builds, the timing rate is the build
/// rate, so the estimate is then the build-bound one, as it should be.
///
/// When builds and timings take turns ([`Pipeline::timing_busy_s`]), the time left is the sum
/// of the two steps' costs instead: the cost of a candidate's timing is the time spent timing
/// over the candidates timed, the cost of a build (per candidate) the rest of the elapsed time
/// over the candidates built. Rates alone would mislead there: while builds run, timings wait
/// for the CPU, so the early timing rate is a fraction of what it becomes once builds are done.
pub fn estimate_eta(p: &Pipeline) -> Option<f64> {
    let remaining_done = p.total.saturating_sub(p.done);
    if remaining_done == 0 {
        return Some(0.0);
    }
    if p.elapsed_s <= 0.0 {
        return None;
    }
    let built = p.built.saturating_sub(p.built_at_start);
    let timed = p.done.saturating_sub(p.done_at_start);
    if let (Some(busy), true) = (p.timing_busy_s, timed > 0) {
        let per_timing = busy / timed as f64;
        // A resumed tuning may have nothing left to build, and then no build cost to know.
        let builds_left = p.total.saturating_sub(p.built);
        let build_part = match (builds_left, built) {
            (0, _) => Some(0.0),
            (_, 0) => None,
            (n, built) => Some(n as f64 * (p.elapsed_s - busy).max(0.0) / built as f64),
        };
        if let Some(build_part) = build_part {
            return Some(build_part + remaining_done as f64 * per_timing);
        }
    }
    let rate = |now: u64, start: u64| (now.saturating_sub(start)) as f64 / p.elapsed_s;
    let build_rate = rate(p.built, p.built_at_start);
    let done_rate = rate(p.done, p.done_at_start);
    let remaining_built = p.total.saturating_sub(p.built);
    let build_left = match remaining_built {
        0 => Some(0.0),
        n if build_rate > 0.0 => Some(n as f64 / build_rate),
        _ => None,
    };
    // Nothing timed yet: the first timings wait on the first builds. Until one ends, the best
    // guess is that timing keeps up with building.
    let done_rate = if done_rate > 0.0 {
        done_rate
    } else {
        build_rate
    };
    let time_left = (done_rate > 0.0).then(|| remaining_done as f64 / done_rate);
    match (build_left, time_left) {
        (Some(b), Some(t)) => Some(b.max(t)),
        (None, t) => t,
        // Candidates are left to time and nothing says how fast (a resumed tuning whose builds
        // were all done, before its first timing ends): unknown, not "done".
        (Some(_), None) => None,
    }
}

/// `42s`, `3m 05s`, `2h 10m`: a duration for people.
pub fn human_duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..=99 => format!("{s}s"),
        100..=5999 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_is_measured_over_the_recent_window_and_eta_follows() {
        let now = 1_000_000;
        // 10 jobs in the last 20 s: 0.5 per second; 90 left take 180 s.
        let times: Vec<i64> = (0..10).map(|i| now - 20_000 + i * 2_000).collect();
        let p = Progress::new(10, 100, &times, now);
        assert!((p.per_s.unwrap() - 0.5).abs() < 1e-9, "{p:?}");
        assert!((p.eta_s.unwrap() - 180.0).abs() < 1e-6, "{p:?}");
        assert!((p.percent() - 10.0).abs() < 1e-9);
        // Finished long ago: no rate, no ETA (stalled or idle).
        let old: Vec<i64> = times.iter().map(|t| t - RATE_WINDOW_MS - 60_000).collect();
        let p = Progress::new(10, 100, &old, now);
        assert_eq!((p.per_s, p.eta_s), (None, None));
        // All done: nothing left to wait for.
        assert_eq!(Progress::new(5, 5, &[], now).eta_s, Some(0.0));
    }

    /// A tuning simulated on a manual clock: `builds` builds of `per_build` candidates, `slots`
    /// builds at once taking `build_s` each (in turn: 1×, 2×, 1×, 0.5× of it, so the bursts are
    /// uneven), and one device timing candidates in build order, `time_s` each, as soon as
    /// their build is done. Returns each candidate's build end and time end.
    fn simulate(
        builds: usize,
        per_build: usize,
        slots: usize,
        build_s: f64,
        time_s: f64,
    ) -> Vec<(f64, f64)> {
        let mut slot_free = vec![0.0_f64; slots];
        let mut build_end = Vec::with_capacity(builds);
        for b in 0..builds {
            let (i, start) = slot_free
                .iter()
                .copied()
                .enumerate()
                .min_by(|x, y| x.1.total_cmp(&y.1))
                .unwrap();
            let end = start + build_s * [1.0, 2.0, 1.0, 0.5][b % 4];
            slot_free[i] = end;
            build_end.push(end);
        }
        let mut order: Vec<usize> = (0..builds).collect();
        order.sort_by(|a, b| build_end[*a].total_cmp(&build_end[*b]));
        let mut device_free = 0.0_f64;
        let mut out = Vec::new();
        for b in order {
            for _ in 0..per_build {
                let start = device_free.max(build_end[b]);
                device_free = start + time_s;
                out.push((build_end[b], device_free));
            }
        }
        out
    }

    /// The estimate at the moments 10, 25 and 50 % of the candidates are final, against the
    /// real time left.
    fn estimates_at_progress(jobs: &[(f64, f64)]) -> Vec<(f64, f64, f64)> {
        let total = jobs.len() as u64;
        let end = jobs.iter().map(|j| j.1).fold(0.0, f64::max);
        let mut ends: Vec<f64> = jobs.iter().map(|j| j.1).collect();
        ends.sort_by(f64::total_cmp);
        [0.10, 0.25, 0.50]
            .iter()
            .map(|&f| {
                let t = ends[((total as f64 * f).ceil() as usize).max(1) - 1];
                let p = Pipeline {
                    elapsed_s: t,
                    total,
                    built: jobs.iter().filter(|j| j.0 <= t).count() as u64,
                    built_at_start: 0,
                    done: jobs.iter().filter(|j| j.1 <= t).count() as u64,
                    done_at_start: 0,
                    timing_busy_s: None,
                };
                (f, estimate_eta(&p).unwrap(), end - t)
            })
            .collect()
    }

    #[test]
    fn the_eta_is_within_twice_the_truth_by_a_tenth_of_the_way() {
        // (builds, candidates per build, build slots, build s, timing s): the README's example
        // (121 builds, 484 candidates, 2 slots; builds dominate), a device-bound tuning, an even
        // one, and one build per candidate.
        let cases = [
            (121, 4, 2, 0.9, 0.02),
            (20, 50, 4, 2.0, 0.5),
            (100, 8, 2, 1.0, 0.25),
            (400, 1, 8, 3.0, 0.3),
        ];
        for (builds, per, slots, b, t) in cases {
            let jobs = simulate(builds, per, slots, b, t);
            for (f, eta, truth) in estimates_at_progress(&jobs) {
                let ratio = eta / truth;
                assert!(
                    (0.5..=2.0).contains(&ratio),
                    "case {:?} at {:.0} %: ETA {eta:.1} s against {truth:.1} s left",
                    (builds, per, slots, b, t),
                    f * 100.0
                );
            }
        }
    }

    /// Builds and timings taking turns on one machine, as on the CPU: rounds of `slots`
    /// builds (`build_s` each, run together), then the candidates they made ready timed one by
    /// one (`time_s` each), until every build is done; then the rest timed. Returns samples of
    /// (elapsed, built, done, timing busy) after every build round and every timing.
    fn simulate_turns(
        builds: usize,
        per_build: usize,
        slots: usize,
        build_s: f64,
        time_s: f64,
    ) -> (Vec<(f64, u64, u64, f64)>, f64) {
        let (mut now, mut busy) = (0.0_f64, 0.0_f64);
        let (mut built, mut done) = (0u64, 0u64);
        let mut samples = Vec::new();
        let mut left = builds;
        while left > 0 || done < built {
            if left > 0 {
                let n = slots.min(left);
                left -= n;
                // Uneven builds: the round lasts as long as its slowest.
                now += build_s * if left.is_multiple_of(3) { 1.5 } else { 1.0 };
                built += (n * per_build) as u64;
                samples.push((now, built, done, busy));
            }
            // A few timings between build rounds while builds remain, all once they are done.
            let burst = if left > 0 {
                per_build.max(1)
            } else {
                usize::MAX
            };
            let mut k = 0;
            while done < built && k < burst {
                now += time_s;
                busy += time_s;
                done += 1;
                k += 1;
                samples.push((now, built, done, busy));
            }
        }
        (samples, now)
    }

    #[test]
    fn taking_turns_the_eta_is_within_twice_the_truth_by_a_tenth_of_the_way() {
        // The README's example measured: 121 builds of 4 candidates on 2 cores, builds and
        // timings taking turns; the timing rate was 4.5/s while builds ran and 22/s after, and
        // a rate-only estimate said 99 s left at 10 % of a run that had 24 s left.
        let cases = [
            (121, 4, 2, 0.17, 0.049),
            (20, 50, 4, 2.0, 0.1),
            (400, 1, 8, 3.0, 0.3),
        ];
        for (builds, per, slots, b, t) in cases {
            let (samples, end) = simulate_turns(builds, per, slots, b, t);
            let total = (builds * per) as u64;
            for f in [0.10, 0.25, 0.50] {
                let &(now, built, done, busy) = samples
                    .iter()
                    .find(|s| s.2 as f64 >= total as f64 * f)
                    .unwrap();
                let eta = estimate_eta(&Pipeline {
                    elapsed_s: now,
                    total,
                    built,
                    built_at_start: 0,
                    done,
                    done_at_start: 0,
                    timing_busy_s: Some(busy),
                })
                .unwrap();
                let ratio = eta / (end - now);
                assert!(
                    (0.5..=2.0).contains(&ratio),
                    "case {:?} at {:.0} %: ETA {eta:.1} s against {:.1} s left",
                    (builds, per, slots, b, t),
                    f * 100.0,
                    end - now
                );
            }
        }
    }

    #[test]
    fn the_eta_counts_only_what_this_run_did() {
        // Resumed with half done: the rate is that of this run, not of the whole session.
        let p = Pipeline {
            elapsed_s: 10.0,
            total: 100,
            built: 70,
            built_at_start: 50,
            done: 60,
            done_at_start: 50,
            timing_busy_s: None,
        };
        // Builds: 30 left at 2/s = 15 s; timings: 40 left at 1/s = 40 s.
        assert_eq!(estimate_eta(&p), Some(40.0));
        // Nothing timed yet: timing is assumed to keep up with building (30 left at 2/s, and
        // 50 to time at 2/s).
        let p = Pipeline { done: 50, ..p };
        assert_eq!(estimate_eta(&p), Some(25.0));
        let idle = Pipeline { built: 50, ..p };
        assert_eq!(estimate_eta(&idle), None, "nothing to go on");
        let finished = Pipeline { done: 100, ..p };
        assert_eq!(estimate_eta(&finished), Some(0.0));
    }

    #[test]
    fn a_resumed_tuning_with_every_build_done_waits_for_its_first_timing() {
        let resumed = Pipeline {
            elapsed_s: 0.3,
            total: 484,
            built: 484,
            built_at_start: 484,
            done: 93,
            done_at_start: 93,
            timing_busy_s: Some(0.0),
        };
        assert_eq!(estimate_eta(&resumed), None, "not 0: 391 are left");
        assert_eq!(
            estimate_eta(&Pipeline {
                timing_busy_s: None,
                ..resumed
            }),
            None
        );
        // 100 timed in 5 s of timing: 291 left at 50 ms each.
        let later = Pipeline {
            elapsed_s: 5.2,
            done: 193,
            timing_busy_s: Some(5.0),
            ..resumed
        };
        assert!((estimate_eta(&later).unwrap() - 14.55).abs() < 1e-9);
    }

    #[test]
    fn a_finished_sessions_rate_does_not_change_with_time() {
        // 11 jobs over 5 s, long ago: 10 intervals in 5 s.
        let times: Vec<i64> = (0..11).map(|i| 1_000 + i * 500).collect();
        let p = Progress::finished(11, &times);
        assert_eq!(
            (p.per_s, p.finished_in_s, p.eta_s),
            (Some(2.0), Some(5.0), Some(0.0))
        );
        assert_eq!(Progress::finished(0, &[]).per_s, None);
    }

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(human_duration(42.4), "42s");
        assert_eq!(human_duration(185.0), "3m 05s");
        assert_eq!(human_duration(7_800.0), "2h 10m");
    }
}
