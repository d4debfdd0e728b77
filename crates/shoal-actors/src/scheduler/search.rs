//! Searched sessions: a spec with a `[search]` other than exhaustive loads every candidate as a
//! `held` job, and here, on each dispatch turn, each shape's search ([`Search`]) chooses which
//! of them to evaluate. What it chooses moves `held → new` and takes the ordinary path (compile,
//! evaluate) in the same turn; when its budget is spent the rest move `held → skipped`, so the
//! session ends as every session does, with every job final. The Scheduler stays the only
//! writer of job state, and the strategy itself is a pure state machine (`shoal_model::search`).
//!
//! How many candidates are out at once: [`SchedulerConfig::search_in_flight`] per session,
//! about one per compile slot and device, so every slot stays busy while the search still
//! learns from one batch before it chooses the next.
//!
//! Nothing here is kept only in memory: the proposed candidates are the jobs that left `held`,
//! their outcomes are the store's final results. A Scheduler that restarts rebuilds each search
//! from them ([`Search::resume`]) and goes on with the same budget, never choosing a candidate
//! twice.
//!
//! [`SchedulerConfig::search_in_flight`]: super::SchedulerConfig::search_in_flight

use std::collections::HashMap;

use shoal_backend::spec::TuningSpec;
use shoal_backend::SessionBackend;
use shoal_model::search::{Search, SearchSpec, Space};
use shoal_model::{
    record::candidate_key, ConfigId, FinalResult, JobId, JobState, Outcome, SessionId, Transition,
};
use shoal_store::{Batch, Change};

use super::Inner;
use crate::ActorError;

/// Outcomes are read again at least this often while candidates are out (besides whenever the
/// Scheduler has finished jobs since the last read).
const REREAD_MS: i64 = 1_000;

/// The searches of one session.
pub(super) struct SessionSearch {
    shapes: Vec<ShapeSearch>,
    /// When outcomes were last read, and [`Inner::finished_changes`] then.
    read_at_ms: i64,
    finished_seen: u64,
}

/// One shape's search and its jobs.
struct ShapeSearch {
    config: ConfigId,
    search: Search,
    /// The job of each candidate, by its position in the space.
    jobs: Vec<Option<JobId>>,
    by_job: HashMap<JobId, usize>,
    /// Budget spent and the rest skipped.
    done: bool,
}

/// The space of `shape`'s candidates as the strategies see it, in the order
/// [`TuningSpec::candidates`] gives (the order jobs are loaded in), and each candidate's key.
fn space_of(spec: &TuningSpec, shape: &shoal_model::Params) -> (Space, Vec<String>) {
    let defs: Vec<_> = spec.compile_params.iter().chain(&spec.run_params).collect();
    let mut space = Space {
        sizes: defs.iter().map(|d| d.values.len()).collect(),
        candidates: Vec::new(),
    };
    let mut keys = Vec::new();
    for (compile, run) in spec.candidates(shape) {
        let chained = compile.chain(&run);
        space.candidates.push(
            defs.iter()
                .map(|d| {
                    let v = chained.get(&d.name).unwrap_or_default();
                    d.values.iter().position(|x| x == v).unwrap_or(0) as u16
                })
                .collect(),
        );
        keys.push(candidate_key(&compile, &run));
    }
    (space, keys)
}

/// What a finished job tells its search: its time, or `None` for a failure.
fn outcome_of(row: &FinalResult) -> Option<Option<f64>> {
    match (row.state, &row.outcome) {
        (JobState::Evaluated, Some(Outcome::Measured(m))) => Some(Some(m.time_us)),
        (JobState::Evaluated | JobState::Errored, _) => Some(None),
        _ => None,
    }
}

impl SessionSearch {
    /// The session's searches as the store has them; `None` when the session has none to
    /// drive (no `[search]`, or every shape's search has ended).
    fn rebuild(spec: &TuningSpec, search: &SearchSpec, rows: &[FinalResult]) -> Option<Self> {
        let mut by_config: HashMap<ConfigId, Vec<&FinalResult>> = HashMap::new();
        for r in rows {
            by_config.entry(r.config).or_default().push(r);
        }
        let mut shapes = Vec::new();
        let mut configs: Vec<_> = by_config.into_iter().collect();
        configs.sort_by_key(|(c, _)| *c);
        for (config, rows) in configs {
            if !rows.iter().any(|r| r.state == JobState::Held) {
                continue;
            }
            let (space, keys) = space_of(spec, &rows[0].config_params);
            let position: HashMap<&str, usize> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| (k.as_str(), i))
                .collect();
            let mut jobs = vec![None; keys.len()];
            let (mut proposed, mut outcomes) = (Vec::new(), Vec::new());
            for r in &rows {
                let key = candidate_key(&r.compile_params, &r.run_params);
                let Some(&c) = position.get(key.as_str()) else {
                    continue;
                };
                jobs[c] = Some(r.job);
                if !matches!(r.state, JobState::Held | JobState::Skipped) {
                    proposed.push(c);
                }
                if let Some(o) = outcome_of(r) {
                    outcomes.push((c, o));
                }
            }
            // A candidate without a job (none was loaded for it) counts as tried and failed
            // the moment it is proposed.
            let by_job = jobs
                .iter()
                .enumerate()
                .filter_map(|(c, j)| j.map(|j| (j, c)))
                .collect();
            shapes.push(ShapeSearch {
                config,
                search: Search::resume(search, &space, &proposed, &outcomes),
                jobs,
                by_job,
                done: false,
            });
        }
        (!shapes.is_empty()).then_some(SessionSearch {
            shapes,
            read_at_ms: i64::MIN,
            finished_seen: 0,
        })
    }

    /// Feeds the outcomes of finished jobs to their searches (each counted once).
    fn observe(&mut self, rows: &[FinalResult]) {
        let by_config: HashMap<ConfigId, usize> = self
            .shapes
            .iter()
            .enumerate()
            .map(|(i, s)| (s.config, i))
            .collect();
        for r in rows {
            let Some(&i) = by_config.get(&r.config) else {
                continue;
            };
            let shape = &mut self.shapes[i];
            if let (Some(&c), Some(o)) = (shape.by_job.get(&r.job), outcome_of(r)) {
                shape.search.observe(c, o);
            }
        }
    }

    fn outstanding(&self) -> usize {
        self.shapes.iter().map(|s| s.search.outstanding()).sum()
    }

    /// Up to `room` candidates over the shapes whose searches go on, each shape an even share
    /// (so that no shape waits for another); the changes that release their jobs, and those
    /// that skip what is left of each search that has spent its budget.
    fn plan(&mut self, room: usize) -> Vec<Change> {
        let mut changes = Vec::new();
        let active = self
            .shapes
            .iter()
            .filter(|s| !s.done && s.search.left() > 0)
            .count();
        let mut room = room;
        let share = room.div_ceil(active.max(1));
        for shape in self.shapes.iter_mut().filter(|s| !s.done) {
            if room > 0 && shape.search.left() > 0 {
                let chosen = shape.search.propose(share.min(room));
                room -= chosen.len();
                for c in chosen {
                    match shape.jobs[c] {
                        Some(job) => changes.push(release(job, JobState::New)),
                        None => shape.search.observe(c, None),
                    }
                }
            }
            if shape.search.left() == 0 {
                // The budget is spent: what was not chosen will not be.
                for (c, job) in shape.jobs.iter().enumerate() {
                    if let Some(job) = job.filter(|_| !shape.search.was_proposed(c)) {
                        changes.push(release(job, JobState::Skipped));
                    }
                }
                shape.done = true;
            }
        }
        changes
    }

    fn finished(&self) -> bool {
        self.shapes.iter().all(|s| s.done)
    }
}

/// `held → to` for a job never dispatched (attempt 0).
fn release(job: JobId, to: JobState) -> Change {
    Transition::new(job, JobState::Held, 0, to)
        .expect("held → new and held → skipped are edges")
        .into()
}

impl Inner {
    /// One turn of `session`'s searches: outcomes read, candidates chosen up to the room left,
    /// their jobs released; whether anything moved.
    pub(super) async fn drive_search(&self, session: SessionId) -> Result<bool, ActorError> {
        // Taken out of the map while it is driven (no borrow across an await); an error drops
        // it, and the next turn rebuilds it from the store.
        let taken = self.searches.borrow_mut().remove(&session);
        let mut search = match taken {
            Some(Some(s)) => s,
            Some(None) => {
                self.searches.borrow_mut().insert(session, None);
                return Ok(false);
            }
            None => match self.rebuild_search(session).await? {
                Some(s) => s,
                None => {
                    self.searches.borrow_mut().insert(session, None);
                    return Ok(false);
                }
            },
        };
        let now = self.now();
        let finished = self.finished_changes.get();
        if search.outstanding() > 0
            && (finished != search.finished_seen
                || now.saturating_sub(search.read_at_ms) >= REREAD_MS)
        {
            search.observe(&self.store.final_results(session).await?);
            (search.read_at_ms, search.finished_seen) = (now, finished);
        }
        let room = self
            .config
            .search_in_flight
            .max(1)
            .saturating_sub(search.outstanding());
        let changes = search.plan(room);
        let moved = !changes.is_empty();
        for chunk in changes.chunks(1_000) {
            self.store
                .apply(&Batch::from_changes(chunk.to_vec()))
                .await?;
        }
        let keep = (!search.finished()).then_some(search);
        self.searches.borrow_mut().insert(session, keep);
        Ok(moved)
    }

    async fn rebuild_search(
        &self,
        session: SessionId,
    ) -> Result<Option<SessionSearch>, ActorError> {
        let SessionBackend::Command(spec) = self.backends.get(&*self.store, session).await? else {
            return Ok(None);
        };
        let Some(search) = spec.search.clone() else {
            return Ok(None);
        };
        let rows = self.store.final_results(session).await?;
        Ok(SessionSearch::rebuild(&spec, &search, &rows))
    }
}
