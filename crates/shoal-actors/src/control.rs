//! The control messages one actor of one host receives: a subscription to the control topic
//! under `<host>.<actor>` and `any.<actor>`, verified and decoded. A message that is not signed
//! with the deployment's key, or does not decode, is logged and skipped: neither a stranger
//! with access to the broker nor an operator's typo can stop or steer an actor.

use shoal_bus::{Bus, Consumer};
use shoal_model::message::{Actor, Control};
use shoal_model::queue::ControlTarget;
use shoal_model::Message;

use actix::Addr;

use crate::serving::{served, Served, Service};
use crate::shutdown::Signal;
use crate::ActorError;

pub(crate) struct ControlInbox {
    codec: shoal_model::envelope::Codec,
    mine: Box<dyn Consumer>,
    any: Box<dyn Consumer>,
}

impl ControlInbox {
    pub(crate) async fn open(bus: &dyn Bus, host: &str, actor: Actor) -> Result<Self, ActorError> {
        let topic = bus.namespace().control_topic();
        let mine = ControlTarget::of(host, actor).routing_key();
        let any = ControlTarget::any(actor).routing_key();
        Ok(ControlInbox {
            codec: bus.codec().clone(),
            mine: bus.subscribe(&topic, &mine).await?,
            any: bus.subscribe(&topic, &any).await?,
        })
    }

    /// The next control message; `None` once `stop` is triggered or the bus closes.
    pub(crate) async fn next(&mut self, stop: &mut Signal) -> Result<Option<Control>, ActorError> {
        loop {
            let next = tokio::select! {
                d = self.mine.next() => d,
                d = self.any.next() => d,
                _ = stop.triggered() => return Ok(None),
            };
            let Some(delivery) = next else {
                return Ok(None);
            };
            let delivery = delivery?;
            let decoded = self
                .codec
                .open(&delivery.payload, delivery.publisher.as_deref())
                .map(|t| t.message);
            // Topic deliveries need no settling; ack says so explicitly.
            delivery.ack().await?;
            match decoded {
                Ok(Message::Control(c)) => return Ok(Some(c)),
                Ok(_) => tracing::warn!("a non-control message on the control topic ignored"),
                Err(e) => tracing::warn!(error = %e, "control message refused"),
            }
        }
    }
}

/// The adapter of an actor whose work is control orders: opens the inbox of `actor` on `host`
/// and sends each order on, waiting until it is served, until the stop signal.
pub(crate) async fn feed<S: Service<Request = Control>>(
    to: Addr<Served<S>>,
    bus: std::sync::Arc<dyn Bus>,
    host: String,
    actor: Actor,
    mut stop: Signal,
) -> Result<(), ActorError> {
    let mut inbox = ControlInbox::open(&*bus, &host, actor).await?;
    while let Some(c) = inbox.next(&mut stop).await? {
        if !served(&to, c).await {
            break;
        }
    }
    Ok(())
}
