//! One attempt at a pipelined, confirmed publish on the link's publisher channel: every message
//! of the batch is sent in order under the frames lock (so delivery tags match frames), then every
//! confirm is awaited up to the deadline, and the attempt says what became of the batch. The
//! retrying around it is [`Shared`](super::Shared)'s.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Confirmation, PublisherConfirm};
use tokio::time::{timeout_at, Instant};

use super::{lock, Attempt, Link, Target};

type Sending<'a> =
    Pin<Box<dyn Future<Output = lapin::Result<PublisherConfirm>> + std::marker::Send + 'a>>;

impl Link {
    pub(super) async fn publish(
        &self,
        target: &Target<'_>,
        payloads: &[Vec<u8>],
        todo: &[usize],
        properties: &BasicProperties,
        deadline: Instant,
    ) -> Attempt {
        let channel = match self.publisher().await {
            Ok(c) => c,
            Err(e) => return Attempt::Lost(todo.to_vec(), e),
        };
        let options = BasicPublishOptions {
            mandatory: target.mandatory,
            immediate: false,
        };
        let mut sends: Vec<(usize, Sending<'_>)> = todo
            .iter()
            .map(|&i| {
                let send = channel.basic_publish(
                    target.exchange.into(),
                    target.routing_key.into(),
                    options,
                    &payloads[i],
                    properties.clone(),
                );
                (i, Box::pin(send) as Sending<'_>)
            })
            .collect();
        // The first poll of a send assigns its delivery tag and queues its frames; doing all of
        // them in order under one lock keeps the batch in order and tags matching frames.
        let mut sent: Vec<(usize, Option<lapin::Result<PublisherConfirm>>)> =
            Vec::with_capacity(sends.len());
        std::future::poll_fn(|cx| {
            let _frames = lock(&self.frames);
            for (i, send) in &mut sends {
                sent.push((
                    *i,
                    match send.as_mut().poll(cx) {
                        Poll::Ready(r) => Some(r),
                        Poll::Pending => None,
                    },
                ));
            }
            Poll::Ready(())
        })
        .await;
        // Then wait for the frames to be written, and for the confirms, all already requested.
        let mut confirms = Vec::with_capacity(sent.len());
        for ((i, ready), (_, send)) in sent.into_iter().zip(sends) {
            let result = match ready {
                Some(r) => r,
                None => send.await,
            };
            confirms.push((i, result));
        }
        let (mut returned, mut unconfirmed) = (false, 0);
        let mut nacked = Vec::new();
        let mut lost = Vec::new();
        let mut error = None;
        for (i, confirm) in confirms {
            let confirm = match confirm {
                Ok(c) => c,
                Err(e) => {
                    lost.push(i);
                    error.get_or_insert(e);
                    continue;
                }
            };
            match timeout_at(deadline, confirm).await {
                Ok(Ok(Confirmation::Ack(None))) => {}
                Ok(Ok(Confirmation::Ack(Some(_)) | Confirmation::Nack(Some(_)))) => returned = true,
                Ok(Ok(Confirmation::Nack(None))) => nacked.push(i),
                Ok(Ok(Confirmation::NotRequested)) => {
                    lost.push(i);
                    error.get_or_insert_with(|| {
                        lapin::Error::from(lapin::ErrorKind::InvalidChannelState(
                            lapin::ChannelState::Initial,
                            "publisher confirms not enabled",
                        ))
                    });
                }
                Ok(Err(e)) => {
                    lost.push(i);
                    error.get_or_insert(e);
                }
                Err(_) => unconfirmed += 1,
            }
        }
        if returned {
            Attempt::Returned
        } else if !nacked.is_empty() {
            // Those lost beside them go again with them.
            nacked.extend(lost);
            Attempt::Nacked(nacked)
        } else if let Some(error) = error {
            Attempt::Lost(lost, error)
        } else if unconfirmed > 0 {
            Attempt::Unconfirmed(unconfirmed)
        } else {
            Attempt::Confirmed
        }
    }
}
