//! Conformance cases for applied commands: a reply reads back as recorded, and the first reply
//! of an id is the one kept; a shipped file reads back whole only once every part is stored.

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

pub async fn a_shipped_file_is_whole_only_with_every_part(store: &dyn Store) {
    use shoal_model::shipped::{sha256_hex, PART_BYTES};
    let content: Vec<u8> = (0..PART_BYTES + 10).map(|i| (i % 251) as u8).collect();
    let sha = sha256_hex(&content);
    let size = content.len() as u64;
    assert_eq!(store.file_parts_stored(&sha).await.unwrap(), 0);
    assert_eq!(store.shipped_file(&sha).await.unwrap(), None);
    // The last part first: parts arrive in any order.
    store
        .put_file_part(&sha, size, 1, &content[PART_BYTES..])
        .await
        .unwrap();
    assert_eq!(store.file_parts_stored(&sha).await.unwrap(), 1);
    assert_eq!(
        store.shipped_file(&sha).await.unwrap(),
        None,
        "a part missing"
    );
    store
        .put_file_part(&sha, size, 0, &content[..PART_BYTES])
        .await
        .unwrap();
    // Stored again (a redelivery): kept once, as it was.
    store
        .put_file_part(&sha, size, 1, &content[PART_BYTES..])
        .await
        .unwrap();
    assert_eq!(store.file_parts_stored(&sha).await.unwrap(), 2);
    assert_eq!(
        store.shipped_file(&sha).await.unwrap(),
        Some(content.clone())
    );
    // An empty file is one empty part; other files are apart.
    let empty = sha256_hex(b"");
    store.put_file_part(&empty, 0, 0, b"").await.unwrap();
    assert_eq!(store.shipped_file(&empty).await.unwrap(), Some(vec![]));
    store.forget_file(&sha).await.unwrap();
    assert_eq!(store.file_parts_stored(&sha).await.unwrap(), 0);
    assert_eq!(store.shipped_file(&sha).await.unwrap(), None);
    assert_eq!(store.shipped_file(&empty).await.unwrap(), Some(vec![]));
}
