//! Restartable groups of actors, and the control loop that restarts them or drains the host.
//!
//! "Ops restarting failed actors": `shoal control restart <actor> --host H` reaches every worker
//! process of the host that runs the actor, which stops that group as at shutdown (work in hand
//! is handed back) and starts it again from nothing. [`crate::topology::start`] runs every group
//! through [`restartable`], and listens with a [`ControlListener`] when its topology says so.

use std::rc::Rc;
use std::sync::Arc;

use shoal_bus::Bus;
use shoal_model::message::Actor;
use tokio::sync::broadcast;

use actix::Addr;
use shoal_model::message::Control;

use crate::serving::{Local, Served, Service};
use crate::shutdown::{self, Drain, DrainGuard, Signal, Trigger};
use crate::ActorError;

/// The actors `shoal control restart` can name.
pub const RESTARTABLE: [Actor; 4] = [
    Actor::Scheduler,
    Actor::Compiler,
    Actor::Evaluator,
    Actor::Exporter,
];

/// Runs a group of actors that an operator can restart: `start` starts them under a stop signal
/// and a drain guard of their own. On `shoal control restart <name>` the group is stopped as at
/// shutdown (work in hand is handed back, the Scheduler applies what it holds), waited for, and
/// started again from nothing: fresh actors, fresh state, the same configuration. When `parent`
/// stops, the group stops for good; `parent_guard` holds the process's drain until it has.
pub(crate) fn restartable(
    name: Actor,
    mut parent: shutdown::Signal,
    parent_guard: DrainGuard,
    (restarts, running): (&broadcast::Sender<Actor>, &mut Vec<Actor>),
    start: impl Fn(shutdown::Signal, DrainGuard) + 'static,
) {
    running.push(name);
    let mut requests = restarts.subscribe();
    actix::spawn(async move {
        let give_up = parent_guard.give_up();
        let _parent_guard = parent_guard;
        let mut generation = 0u32;
        loop {
            let (trigger, signal) = shutdown::channel();
            let drain = Drain::with_give_up(give_up.clone());
            start(signal, drain.guard());
            let restart = loop {
                tokio::select! {
                    _ = parent.triggered() => break false,
                    r = requests.recv() => match r {
                        Ok(actor) if actor == name => break true,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => {
                            parent.triggered().await;
                            break false;
                        }
                    },
                }
            };
            trigger.trigger();
            drain.wait().await;
            if !restart {
                return;
            }
            generation += 1;
            tracing::warn!(
                actor = %name,
                generation,
                "restarted by an operator: stopped and started again with clean state"
            );
        }
    });
}

/// This host's control inbox for its workers, as an actor ([`Served`]): an operator's drain
/// order starts the process's drain; a restart order restarts the group it names, if this
/// process runs it.
pub(crate) struct ControlListener {
    pub(crate) bus: Arc<dyn Bus>,
    pub(crate) host: String,
    pub(crate) drain: Trigger,
    pub(crate) restarts: broadcast::Sender<Actor>,
    pub(crate) running: Vec<Actor>,
}

impl Service for ControlListener {
    type Request = Control;
    type State = ();

    fn name(&self) -> String {
        "worker.control".into()
    }

    fn fresh_state(&self) -> Result<(), ActorError> {
        Ok(())
    }

    fn feed(
        self: Rc<Self>,
        to: Addr<Served<Self>>,
        stop: Signal,
    ) -> Local<'static, Result<(), ActorError>> {
        let (bus, host) = (self.bus.clone(), self.host.clone());
        Box::pin(crate::control::feed(to, bus, host, Actor::Worker, stop))
    }

    fn serve<'a>(
        &'a self,
        _: &'a mut (),
        c: Control,
        _: &'a Signal,
    ) -> Local<'a, Result<(), ActorError>> {
        match c {
            Control::Drain => {
                tracing::warn!("drain requested by an operator");
                self.drain.trigger();
            }
            Control::Restart { actor } => {
                if self.running.contains(&actor) {
                    tracing::warn!(actor = %actor, "restart requested by an operator");
                    let _ = self.restarts.send(actor);
                } else {
                    tracing::warn!(actor = %actor, running = ?self.running, "restart requested for an actor this process does not run; ignored");
                }
            }
            other => tracing::debug!(order = ?other, "control order for another actor ignored"),
        }
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;
    use std::time::Duration;

    /// A restart request for the group stops its actors (they see their stop signal and release
    /// their drain guard) and starts fresh ones; a request for another actor changes nothing;
    /// the parent's stop ends the group for good, and only then is the parent drained.
    #[actix::test]
    async fn a_restart_stops_the_group_and_starts_it_again() {
        let (parent_trigger, parent) = shutdown::channel();
        let parent_drain = Drain::new();
        let (restarts, _) = broadcast::channel::<Actor>(4);
        let mut running = Vec::new();
        let starts = Rc::new(Cell::new(0));
        let stops = Rc::new(Cell::new(0));
        let (s, t) = (starts.clone(), stops.clone());
        restartable(
            Actor::Compiler,
            parent,
            parent_drain.guard(),
            (&restarts, &mut running),
            move |mut stop, guard| {
                s.set(s.get() + 1);
                let t = t.clone();
                actix::spawn(async move {
                    let _guard = guard;
                    stop.triggered().await;
                    t.set(t.get() + 1);
                });
            },
        );
        assert_eq!(running, vec![Actor::Compiler]);
        let settle = || tokio::time::sleep(Duration::from_millis(50));
        settle().await;
        assert_eq!((starts.get(), stops.get()), (1, 0));
        restarts.send(Actor::Scheduler).unwrap();
        settle().await;
        assert_eq!((starts.get(), stops.get()), (1, 0), "not this group");
        restarts.send(Actor::Compiler).unwrap();
        settle().await;
        assert_eq!(
            (starts.get(), stops.get()),
            (2, 1),
            "stopped, then started again"
        );
        parent_trigger.trigger();
        tokio::time::timeout(Duration::from_secs(5), parent_drain.wait())
            .await
            .expect("the group ends with its parent");
        assert_eq!((starts.get(), stops.get()), (2, 2));
    }
}
