//! Searched sessions: a spec with a `[search]` other than exhaustive loads every candidate as a
//! `held` job, and here, on each dispatch turn, each shape's search ([`Search`]) chooses which
//! of them to evaluate. What it chooses moves `held → new` and takes the ordinary path (compile,
//! evaluate) in the same turn; when its budget is spent the rest move `held → skipped`, so the
//! session ends as every session does, with every job final. The Scheduler stays the only
//! writer of job state, and the strategy itself is a pure state machine (`shoal_model::search`).
//!
//! How many candidates are out at once: [`SchedulerConfig::search_in_flight`] per session,
//! about one per compile slot and device, so every slot stays busy while the search still
//! learns from one batch before it chooses the next; and per shape, no more than its search
//! may have out ([`Search::room`]: a forest keeps at most a twelfth of its budget out, or the
//! spec's `in_flight`). What one shape leaves, the others take.
//!
//! Outcomes come from the changes the Scheduler applies (every change into a final state goes
//! through `Inner::apply_counted`, which records it for the session's search), so driving a
//! search reads nothing from the store but at a (re)start. Nothing is kept only in memory: the
//! proposed candidates are the jobs that left `held`, their outcomes the store's final results.
//! A Scheduler that restarts rebuilds each search from them ([`Search::resume`]) and goes on
//! with the same budget, never choosing a candidate twice.
//!
//! [`SchedulerConfig::search_in_flight`]: super::SchedulerConfig::search_in_flight

use std::collections::HashMap;

use shoal_backend::spec::{OutOfMemory, TuningSpec};
use shoal_backend::SessionBackend;
use shoal_model::search::{Search, SearchSpec, Space};
use shoal_model::{
    record::candidate_key, ConfigId, FinalResult, JobId, JobState, Outcome, SessionId, Transition,
};
use shoal_store::{Batch, Change};

use super::prior::Earlier;
use super::Inner;
use crate::ActorError;

/// Jobs that became final and what they measured (`None`: failed), in the order applied.
pub(super) type Outcomes = Vec<(JobId, Option<f64>)>;

/// The searches of one session.
pub(super) struct SessionSearch {
    shapes: Vec<ShapeSearch>,
    /// The shape and candidate of each job.
    by_job: HashMap<JobId, (usize, usize)>,
}

/// One shape's search and its jobs.
struct ShapeSearch {
    search: Search,
    /// The job of each candidate, by its position in the space (a candidate without a job,
    /// none having been loaded for it, counts as failed the moment it is proposed).
    jobs: Vec<Option<JobId>>,
    /// Budget spent and the rest skipped.
    done: bool,
}

/// The space of `shape`'s candidates as the strategies see it, in the order
/// [`TuningSpec::candidates`] gives (the order jobs are loaded in), and each candidate's key.
/// A list memory cannot hold is an error, not an abort.
fn space_of(
    spec: &TuningSpec,
    shape: &shoal_model::Params,
) -> Result<(Space, Vec<String>), OutOfMemory> {
    let defs: Vec<_> = spec.compile_params.iter().chain(&spec.run_params).collect();
    let mut space = Space {
        sizes: defs.iter().map(|d| d.values.len()).collect(),
        candidates: Vec::new(),
    };
    let candidates = spec.candidates(shape)?;
    let n = candidates.len();
    let full = |what: &'static str| OutOfMemory { what, held: 0 };
    space
        .candidates
        .try_reserve_exact(n)
        .map_err(|_| full("search candidates"))?;
    let mut keys = Vec::new();
    keys.try_reserve_exact(n)
        .map_err(|_| full("candidate keys"))?;
    for (compile, run) in candidates {
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
    Ok((space, keys))
}

/// What a finished job tells its search: its time, or `None` for a failure.
pub(super) fn outcome_of(row: &FinalResult) -> Option<Option<f64>> {
    match (row.state, &row.outcome) {
        (JobState::Evaluated, Some(Outcome::Measured(m))) => Some(Some(m.time_us)),
        (JobState::Evaluated | JobState::Errored, _) => Some(None),
        _ => None,
    }
}

impl SessionSearch {
    /// The session's searches as the store has them; `None` when the session has none to
    /// drive (no `[search]`, or every shape's search has ended).
    fn rebuild(
        spec: &TuningSpec,
        search: &SearchSpec,
        rows: &[FinalResult],
        earlier: Option<&Earlier>,
    ) -> Option<Self> {
        let mut by_config: HashMap<ConfigId, Vec<&FinalResult>> = HashMap::new();
        for r in rows {
            by_config.entry(r.config).or_default().push(r);
        }
        let mut shapes = Vec::new();
        let mut configs: Vec<_> = by_config.into_iter().collect();
        configs.sort_by_key(|(c, _)| *c);
        for (_, rows) in configs {
            if !rows.iter().any(|r| r.state == JobState::Held) {
                continue;
            }
            let (space, keys) = match space_of(spec, &rows[0].config_params) {
                Ok(space) => space,
                Err(e) => {
                    // Its jobs stay held: a host with more memory can drive its search.
                    tracing::error!(shape = %rows[0].config_params, error = %e,
                        "a shape's search cannot be driven");
                    continue;
                }
            };
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
            let prior = earlier.map(|e| e.prior_for(spec, &space, &rows[0].config_params));
            if let Some(p) = &prior {
                tracing::info!(shape = %rows[0].config_params, candidates = space.candidates.len(),
                    known = p.len(), "a search starts from earlier results");
            }
            shapes.push(ShapeSearch {
                search: Search::resume(search, &space, prior.as_ref(), &proposed, &outcomes),
                jobs,
                done: false,
            });
        }
        let by_job = shapes
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                s.jobs
                    .iter()
                    .enumerate()
                    .filter_map(move |(c, j)| j.map(|j| (j, (i, c))))
            })
            .collect();
        (!shapes.is_empty()).then_some(SessionSearch { shapes, by_job })
    }

    /// Feeds the outcomes of finished jobs to their searches (each counted once).
    fn observe(&mut self, outcomes: &[(JobId, Option<f64>)]) {
        for (job, time) in outcomes {
            if let Some(&(i, c)) = self.by_job.get(job) {
                self.shapes[i].search.observe(c, *time);
            }
        }
    }

    fn outstanding(&self) -> usize {
        self.shapes.iter().map(|s| s.search.outstanding()).sum()
    }

    /// Up to `room` candidates over the shapes whose searches go on, each shape an even share
    /// (so that no shape waits for another); the changes that release their jobs, and those
    /// that skip what is left of each search that has spent its budget.
    ///
    /// The shapes with the fewest candidates out are served first. Slots free one at a time,
    /// and a room of one used to go to the first shape every time: its search ran with every
    /// slot while the others, their candidates back, waited for it to spend its budget.
    ///
    /// A shape takes no more than its search has room for ([`Search::room`]: its budget, and
    /// how many it may have out at once); what it leaves goes to the other shapes, and only
    /// when every shape is full does a slot stay free.
    fn plan(&mut self, room: usize) -> Vec<Change> {
        let mut changes = Vec::new();
        let mut room = room;
        // An order to serve them in, not a reordering: `by_job` points into `shapes`.
        let mut order: Vec<usize> = (0..self.shapes.len()).collect();
        order.sort_by_key(|i| self.shapes[*i].search.outstanding());
        // A second pass hands out what a shape with little room left of its share.
        while room > 0 {
            let wanting: Vec<usize> = order
                .iter()
                .copied()
                .filter(|i| !self.shapes[*i].done && self.shapes[*i].search.room() > 0)
                .collect();
            let mut took = false;
            for (k, &i) in wanting.iter().enumerate() {
                let share = room.div_ceil(wanting.len() - k);
                let shape = &mut self.shapes[i];
                let chosen = shape.search.propose(share.min(room));
                room -= chosen.len();
                took |= !chosen.is_empty();
                for c in chosen {
                    match shape.jobs[c] {
                        Some(job) => changes.push(release(job, JobState::New)),
                        None => shape.search.observe(c, None),
                    }
                }
            }
            if !took {
                break;
            }
        }
        for shape in self.shapes.iter_mut().filter(|s| !s.done) {
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
    pub(super) async fn drive_search(&mut self, session: SessionId) -> Result<bool, ActorError> {
        // Taken out of the map while it is driven (no borrow across an await); an error drops
        // it, and the next turn rebuilds it from the store.
        let taken = self.searches.remove(&session);
        let mut search = match taken {
            Some(Some(s)) => s,
            Some(None) => return Ok(self.no_search(session)),
            None => match self.rebuild_search(session).await? {
                Some(s) => s,
                None => return Ok(self.no_search(session)),
            },
        };
        let outcomes = self.outcomes.remove(&session);
        search.observe(&outcomes.unwrap_or_default());
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
        if search.finished() {
            self.no_search(session);
        } else {
            self.searches.insert(session, Some(search));
        }
        Ok(moved)
    }

    /// Remembers that `session` has no search to drive (none, or every one ended), so that its
    /// outcomes are no longer recorded; nothing moved.
    fn no_search(&mut self, session: SessionId) -> bool {
        self.searches.insert(session, None);
        self.outcomes.remove(&session);
        false
    }

    /// Records what a change into a final state tells `session`'s search, unless the session is
    /// known to have none: the time of a measured job, `None` for a failure.
    pub(super) fn record_outcome(&mut self, session: SessionId, change: &Change) {
        if matches!(self.searches.get(&session), Some(None)) {
            return;
        }
        let time = match (&change.transition.to, &change.result) {
            (JobState::Evaluated, Some(r)) => match &r.outcome {
                Outcome::Measured(m) => Some(m.time_us),
                Outcome::Failed { .. } => None,
            },
            _ => None,
        };
        self.outcomes
            .entry(session)
            .or_default()
            .push((change.transition.job, time));
    }

    async fn rebuild_search(
        &mut self,
        session: SessionId,
    ) -> Result<Option<SessionSearch>, ActorError> {
        let SessionBackend::Exec(spec) = self.backends.get(&*self.store, session).await? else {
            return Ok(None);
        };
        let Some(search) = spec.search.clone() else {
            return Ok(None);
        };
        let earlier = match &search.prior {
            Some(source) => self.earlier(&spec, source).await?,
            None => None,
        };
        let rows = self.store.final_results(session).await?;
        Ok(SessionSearch::rebuild(
            &spec,
            &search,
            &rows,
            earlier.as_ref(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_model::search::Budget;

    /// `shapes` shapes of `size` candidates each, every candidate with a job, searched at random
    /// with a budget of 40.
    fn session(shapes: usize, size: usize) -> SessionSearch {
        let spec = SearchSpec::new("random", Budget::Count(40), 1).unwrap();
        session_of(&spec, shapes, size)
    }

    fn session_of(spec: &SearchSpec, shapes: usize, size: usize) -> SessionSearch {
        let space = Space {
            sizes: vec![size],
            candidates: (0..size as u16).map(|c| vec![c]).collect(),
        };
        let mut by_job = HashMap::new();
        let shapes = (0..shapes)
            .map(|i| {
                let jobs = (0..size)
                    .map(|c| {
                        let job = JobId((i * size + c) as i64);
                        by_job.insert(job, (i, c));
                        Some(job)
                    })
                    .collect();
                ShapeSearch {
                    search: Search::new(spec, &space),
                    jobs,
                    done: false,
                }
            })
            .collect();
        SessionSearch { shapes, by_job }
    }

    fn out(s: &SessionSearch) -> Vec<usize> {
        s.shapes.iter().map(|s| s.search.outstanding()).collect()
    }

    /// One job of `shape` that is out (proposed, not in `back`), measured.
    fn one_back(s: &mut SessionSearch, shape: usize, back: &mut Vec<JobId>) {
        let search = &s.shapes[shape].search;
        let job = s.shapes[shape]
            .jobs
            .iter()
            .enumerate()
            .filter(|(c, _)| search.was_proposed(*c))
            .filter_map(|(_, j)| *j)
            .find(|j| !back.contains(j))
            .expect("a job out");
        back.push(job);
        s.observe(&[(job, Some(1.0))]);
    }

    #[test]
    fn a_freed_slot_goes_to_the_shape_with_the_fewest_candidates_out() {
        let (mut s, mut back) = (session(3, 100), Vec::new());
        assert_eq!(s.plan(6).len(), 6);
        assert_eq!(out(&s), [2, 2, 2], "an even share");
        for shape in [2, 1, 2, 0] {
            one_back(&mut s, shape, &mut back);
            assert_eq!(s.plan(1).len(), 1);
            assert_eq!(
                out(&s),
                [2, 2, 2],
                "the slot freed by shape {shape} went back to it"
            );
        }
        // Two back from the last shape, one room: it goes there, not to the first shape.
        one_back(&mut s, 2, &mut back);
        one_back(&mut s, 2, &mut back);
        s.plan(1);
        assert_eq!(out(&s), [2, 2, 1]);
    }

    #[test]
    fn a_shape_takes_no_more_than_its_search_may_have_out_and_the_rest_go_to_the_others() {
        let spec = SearchSpec::new("random", Budget::Count(40), 1)
            .unwrap()
            .with_in_flight(4);
        let mut s = session_of(&spec, 2, 100);
        assert_eq!(s.plan(16).len(), 8, "two shapes of four out each");
        assert_eq!(out(&s), [4, 4]);
        assert!(s.plan(16).is_empty(), "both are full: the slots stay free");
        // All four back from the first shape, one from the second, and six slots: an even
        // share is three each, the second shape has room for one, and the first takes the rest.
        let mut back = Vec::new();
        for shape in [0, 0, 0, 0, 1] {
            one_back(&mut s, shape, &mut back);
        }
        assert_eq!(s.plan(6).len(), 5);
        assert_eq!(
            out(&s),
            [4, 4],
            "what one shape could not take went to the other"
        );
    }
}
