//! The wire format: one version byte, then the bincode 2 (`config::standard()`) encoding of a
//! [`Message`]. This module is the only place that knows the bincode configuration; every bus
//! implementation encodes and decodes through it.
//!
//! A consumer that meets an unknown version or an undecodable body gets a [`DecodeError`] that
//! says which, so it can dead-letter the message with that reason instead of crashing.

use crate::message::Message;

/// The version written by this build. Bump it when the encoding of [`Message`] changes in a way
/// an older reader would misread.
pub const WIRE_VERSION: u8 = 1;

/// Why bytes are not a message.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecodeError {
    #[error("empty message")]
    Empty,
    #[error("unknown wire version {found} (this build reads version {WIRE_VERSION})")]
    UnknownVersion { found: u8 },
    #[error("undecodable body: {0}")]
    Corrupt(String),
    #[error("{trailing} trailing bytes after the message")]
    Trailing { trailing: usize },
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes a message with the current version.
pub fn encode(msg: &Message) -> Vec<u8> {
    let mut out = vec![WIRE_VERSION];
    // Encoding plain serde data into a Vec cannot fail: no I/O and no unsupported types.
    let body =
        bincode::serde::encode_to_vec(msg, config()).expect("encoding a Message cannot fail");
    out.extend_from_slice(&body);
    out
}

/// Decodes bytes written by [`encode`].
pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    let (&version, body) = bytes.split_first().ok_or(DecodeError::Empty)?;
    if version != WIRE_VERSION {
        return Err(DecodeError::UnknownVersion { found: version });
    }
    let (msg, used): (Message, usize) = bincode::serde::decode_from_slice(body, config())
        .map_err(|e| DecodeError::Corrupt(e.to_string()))?;
    if used != body.len() {
        return Err(DecodeError::Trailing {
            trailing: body.len() - used,
        });
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::*;
    use crate::{JobId, Params, SessionId};

    fn sample() -> Message {
        let mut p = Params::new();
        p.push("BM", "64");
        Message::Compile(CompileRequest {
            session: SessionId(7),
            step: "command_build".into(),
            build_key: "abc".into(),
            config_params: Params::new(),
            compile_params: p,
            jobs: vec![JobRef {
                job: JobId(42),
                attempt: 3,
            }],
        })
    }

    #[test]
    fn round_trip() {
        let m = sample();
        assert_eq!(decode(&encode(&m)).unwrap(), m);
    }

    #[test]
    fn rejects_unknown_version_and_garbage() {
        let mut bytes = encode(&sample());
        bytes[0] = 99;
        assert_eq!(
            decode(&bytes),
            Err(DecodeError::UnknownVersion { found: 99 })
        );
        assert_eq!(decode(&[]), Err(DecodeError::Empty));
        assert!(matches!(
            decode(&[WIRE_VERSION, 200, 200, 200]),
            Err(DecodeError::Corrupt(_))
        ));
        let mut long = encode(&sample());
        long.push(0);
        assert_eq!(decode(&long), Err(DecodeError::Trailing { trailing: 1 }));
    }
}
