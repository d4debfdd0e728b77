//! Conformance cases for applied commands: a reply reads back as recorded, and the first reply
//! of an id is the one kept.

use super::*;
use shoal_model::command::{CommandOutcome, CommandReply};

pub async fn the_first_reply_of_a_command_is_kept(store: &dyn Store) {
    assert_eq!(store.command_reply("c0ffee").await.unwrap(), None);
    let loaded = CommandReply {
        id: "c0ffee".into(),
        result: Ok(CommandOutcome::SpecLoaded {
            session: SessionId(3),
            resumed: false,
            jobs_total: 270,
            jobs_created: 270,
            builds: 135,
        }),
    };
    store.put_command_reply(&loaded, 1_000).await.unwrap();
    assert_eq!(
        store.command_reply("c0ffee").await.unwrap(),
        Some(loaded.clone())
    );
    // A second application of the same id (a redelivery racing the first) changes nothing.
    let again = CommandReply {
        id: "c0ffee".into(),
        result: Err("a second answer".into()),
    };
    store.put_command_reply(&again, 2_000).await.unwrap();
    assert_eq!(store.command_reply("c0ffee").await.unwrap(), Some(loaded));
    // Ids are exact: another id, even a prefix, has no reply.
    assert_eq!(store.command_reply("c0ffe").await.unwrap(), None);
    let failed = CommandReply {
        id: "bad-1".into(),
        result: Err("spec.toml: unknown key `shapez`".into()),
    };
    store.put_command_reply(&failed, 3_000).await.unwrap();
    assert_eq!(store.command_reply("bad-1").await.unwrap(), Some(failed));
}

pub async fn a_cancelled_session_stays_cancelled(store: &dyn Store) {
    let w = world(store).await;
    assert!(store.cancelled_sessions().await.unwrap().is_empty());
    assert!(store.cancel_session(w.session, 1_000).await.unwrap());
    assert!(
        !store.cancel_session(w.session, 2_000).await.unwrap(),
        "a second cancel is told it was cancelled before"
    );
    assert_eq!(store.cancelled_sessions().await.unwrap(), vec![w.session]);
}
