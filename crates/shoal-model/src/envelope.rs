//! The wire format, and the one place that decides whether bytes from the bus are trusted.
//!
//! ```text
//! [ version: 1 ][ HMAC-SHA256 tag: 32 ][ message id: origin 8, sequence 8 ][ body: bincode 2 ]
//! ```
//!
//! The tag is an HMAC-SHA256, under the deployment's key, of the version byte, the message id
//! and the body. The id ([`MessageId`]) is the publishing process's random origin and a count of
//! the messages it signed: unique, so that a consumer applies a message at most once whatever
//! copy of it arrives ([`Opened::id`]).
//!
//! The key says a message comes from the deployment; *who* sent it is the bus's to say (the
//! broker user that published it), and [`Codec::open`] is where both are checked together with
//! what that sender may send ([`crate::identity`]).
//! [`Codec::decode`] checks, in this order and before it allocates anything for the message:
//! the length (at most [`MAX_MESSAGE_BYTES`]), the version, the tag (in constant time), and only
//! then decodes the body under bincode's byte limit of [`MAX_MESSAGE_BYTES`], so a length prefix
//! of 2^62 is an error instead of an allocation. Anyone who can publish to the broker
//! but does not hold the key can make a consumer dead-letter a message, never act on one.
//!
//! This module is the only place that knows the bincode configuration; every bus user encodes
//! and decodes through a [`Codec`]. A consumer that meets bad bytes gets a [`DecodeError`] that
//! says why, so it can dead-letter the message with that reason instead of crashing.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::message::Message;

/// The version written by this build. Bump it when the encoding of [`Message`] changes in a way
/// an older reader would misread. Version 2 added the signature; version 3 the step and the
/// device time of eval replies; version 4 the message id; version 5 renamed the command backend
/// the exec backend (its steps `exec_build` and `exec_run`, its sessions' backend `exec`), which
/// an older reader would refuse as unknown names message by message rather than by version.
pub const WIRE_VERSION: u8 = 5;

/// The largest message a consumer accepts, envelope included. Requests and replies carry
/// parameters and job references, never artifacts (those go through the store), so real
/// messages are a few KB; the bound keeps what one message can make a process allocate to a few
/// MB whatever its length prefixes say.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// Bytes of the HMAC-SHA256 tag.
pub const TAG_BYTES: usize = 32;

/// Bytes of the message id.
pub const ID_BYTES: usize = 16;

/// A message's identity: the process that signed it (a random origin drawn at its start) and
/// the count of messages it had signed before. Two messages never share one; a replayed copy
/// does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId {
    pub origin: u64,
    pub seq: u64,
}

impl std::fmt::Display for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}-{}", self.origin, self.seq)
    }
}

/// A verified message, with its id.
#[derive(Clone, Debug, PartialEq)]
pub struct Opened {
    pub id: MessageId,
    pub message: Message,
}

/// A verified message whose sender may send it.
#[derive(Clone, Debug, PartialEq)]
pub struct Trusted {
    pub id: MessageId,
    pub message: Message,
    pub sender: crate::identity::Identity,
}

/// The shortest key accepted: as long as the hash's output.
pub const MIN_KEY_BYTES: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// Why bytes are not a message.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecodeError {
    #[error("empty message")]
    Empty,
    #[error("unknown wire version {found} (this build reads version {WIRE_VERSION})")]
    UnknownVersion { found: u8 },
    #[error("message of {bytes} bytes is over the limit of {MAX_MESSAGE_BYTES} bytes")]
    TooLarge { bytes: usize },
    #[error("unsigned message: {bytes} bytes, shorter than a signature")]
    Unsigned { bytes: usize },
    #[error("bad signature: not signed with this deployment's key")]
    BadSignature,
    #[error("undecodable body: {0}")]
    Corrupt(String),
    #[error("{trailing} trailing bytes after the message")]
    Trailing { trailing: usize },
    #[error("{0}")]
    Refused(#[from] crate::identity::Refusal),
}

/// Why a key cannot sign.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum KeyError {
    #[error("the signing key has {0} bytes; at least {MIN_KEY_BYTES} are needed")]
    TooShort(usize),
}

/// Signs and verifies messages with one deployment's key. Cheap to clone; the key never
/// appears in `Debug` output.
#[derive(Clone)]
pub struct Codec {
    /// The keyed state, cloned for each message instead of re-deriving the key pads.
    mac: HmacSha256,
    /// This process's origin, and the messages it has signed (shared by the codec's clones).
    origin: u64,
    signed: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Codec(<key>)")
    }
}

fn bincode_config() -> bincode::config::Configuration {
    bincode::config::standard()
}

impl Codec {
    /// A codec for `key` (at least [`MIN_KEY_BYTES`] bytes).
    pub fn new(key: &[u8]) -> Result<Codec, KeyError> {
        if key.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort(key.len()));
        }
        let mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
        Ok(Codec {
            mac,
            origin: 0,
            signed: Default::default(),
        })
    }

    /// The same key, signing as the process `origin` (drawn at random when the process starts,
    /// so that no two processes' message ids meet), counting from zero.
    pub fn with_origin(self, origin: u64) -> Codec {
        Codec {
            origin,
            signed: Default::default(),
            ..self
        }
    }

    fn tag(&self, version: u8, signed: &[u8]) -> HmacSha256 {
        let mut mac = self.mac.clone();
        mac.update(&[version]);
        mac.update(signed);
        mac
    }

    /// Encodes and signs a message with the current version and the next id.
    pub fn encode(&self, msg: &Message) -> Vec<u8> {
        let seq = self
            .signed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.encode_with_id(
            msg,
            MessageId {
                origin: self.origin,
                seq,
            },
        )
    }

    /// [`Codec::encode`] with a given id: for tests, and for whoever must show a replay.
    pub fn encode_with_id(&self, msg: &Message, id: MessageId) -> Vec<u8> {
        // Encoding plain serde data into a Vec cannot fail: no I/O and no unsupported types.
        let body = bincode::serde::encode_to_vec(msg, bincode_config())
            .expect("encoding a Message cannot fail");
        self.seal_with_id(&body, id)
    }

    /// Signs `body` as it stands, with the next id: bytes that need not decode as a
    /// [`Message`]. Shoal's own traffic never needs it ([`Codec::encode`] signs messages); it is
    /// for showing what a consumer does with a signed but hostile body (a holder of the key gone
    /// wrong: this module's tests, the developers' `shoal-bench hostile --signed`), so that the
    /// envelope is still written in this one place.
    pub fn seal(&self, body: &[u8]) -> Vec<u8> {
        let seq = self
            .signed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.seal_with_id(
            body,
            MessageId {
                origin: self.origin,
                seq,
            },
        )
    }

    /// The envelope around `body`: the version, the tag, the id.
    fn seal_with_id(&self, body: &[u8], id: MessageId) -> Vec<u8> {
        let mut signed = Vec::with_capacity(ID_BYTES + body.len());
        signed.extend_from_slice(&id.origin.to_be_bytes());
        signed.extend_from_slice(&id.seq.to_be_bytes());
        signed.extend_from_slice(body);
        let tag = self.tag(WIRE_VERSION, &signed).finalize().into_bytes();
        let mut out = Vec::with_capacity(1 + TAG_BYTES + signed.len());
        out.push(WIRE_VERSION);
        out.extend_from_slice(&tag);
        out.extend_from_slice(&signed);
        out
    }

    /// Verifies and decodes bytes written by [`Codec::encode`] under the same key.
    pub fn decode(&self, bytes: &[u8]) -> Result<Message, DecodeError> {
        self.verify(bytes).map(|o| o.message)
    }

    /// Verifies and decodes a delivery, and checks that its sender (the broker user that
    /// published it, as the bus authenticated it) may send it ([`crate::identity`]). What every
    /// consumer of the bus calls: a message it returns is signed, well-formed and in its
    /// sender's role.
    pub fn open(&self, bytes: &[u8], publisher: Option<&str>) -> Result<Trusted, DecodeError> {
        let sender = crate::identity::Identity::of_publisher(publisher)?;
        let Opened { id, message } = self.verify(bytes)?;
        sender.may_send(&message)?;
        Ok(Trusted {
            id,
            message,
            sender,
        })
    }

    /// Verifies and decodes bytes, with their id, whoever sent them.
    pub fn verify(&self, bytes: &[u8]) -> Result<Opened, DecodeError> {
        let (&version, rest) = bytes.split_first().ok_or(DecodeError::Empty)?;
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(DecodeError::TooLarge { bytes: bytes.len() });
        }
        if version != WIRE_VERSION {
            return Err(DecodeError::UnknownVersion { found: version });
        }
        if rest.len() < TAG_BYTES + ID_BYTES {
            return Err(DecodeError::Unsigned { bytes: bytes.len() });
        }
        let (tag, signed) = rest.split_at(TAG_BYTES);
        self.tag(version, signed)
            .verify_slice(tag)
            .map_err(|_| DecodeError::BadSignature)?;
        let (id, body) = signed.split_at(ID_BYTES);
        let word = |b: &[u8]| u64::from_be_bytes(b.try_into().expect("8 bytes"));
        Ok(Opened {
            id: MessageId {
                origin: word(&id[..8]),
                seq: word(&id[8..]),
            },
            message: decode_body(body)?,
        })
    }
}

/// The body under a byte limit: bincode refuses any length prefix that claims more than
/// [`MAX_MESSAGE_BYTES`] in all, before allocating for it.
fn decode_body(body: &[u8]) -> Result<Message, DecodeError> {
    let config = bincode_config().with_limit::<MAX_MESSAGE_BYTES>();
    let (msg, used): (Message, usize) = bincode::serde::decode_from_slice(body, config)
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

    fn codec() -> Codec {
        Codec::new(&[7u8; 32]).unwrap()
    }

    fn sample() -> Message {
        let mut p = Params::new();
        p.push("BM", "64");
        Message::Compile(CompileRequest {
            session: SessionId(7),
            step: crate::Step::ExecBuild,
            build_key: "abc".into(),
            config_params: Params::new(),
            compile_params: p,
            jobs: vec![JobRef {
                job: JobId(42),
                attempt: 3,
            }],
        })
    }

    /// Signs arbitrary body bytes as a holder of the key would: for testing what the decoder
    /// does with a signed but hostile body.
    fn signed(codec: &Codec, body: &[u8]) -> Vec<u8> {
        codec.seal(body)
    }

    /// A step is its name on the wire, as when it was a string: a signed request naming a step
    /// this build does not know does not decode (and is dead-lettered with the reason), while
    /// the same bytes with a known name do.
    #[test]
    fn a_step_is_its_name_on_the_wire_and_an_unknown_one_is_refused() {
        let c = codec();
        let bytes = c.encode(&sample());
        let body = &bytes[1 + TAG_BYTES + ID_BYTES..];
        let known = b"exec_build";
        let at = body
            .windows(known.len())
            .position(|w| w == known)
            .expect("the step travels as its name");
        let mut bogus = body.to_vec();
        bogus[at..at + known.len()].copy_from_slice(b"exec_bulid");
        let err = c.decode(&signed(&c, &bogus)).unwrap_err().to_string();
        assert!(err.contains("unknown step `exec_bulid`"), "{err}");
        assert_eq!(c.decode(&signed(&c, body)).unwrap(), sample());
    }

    #[test]
    fn round_trip() {
        let m = sample();
        assert_eq!(codec().decode(&codec().encode(&m)).unwrap(), m);
    }

    #[test]
    fn short_keys_are_refused_and_debug_hides_the_key() {
        assert_eq!(Codec::new(&[1; 31]).unwrap_err(), KeyError::TooShort(31));
        assert_eq!(format!("{:?}", codec()), "Codec(<key>)");
    }

    #[test]
    fn another_key_or_a_changed_byte_is_a_bad_signature() {
        let bytes = codec().encode(&sample());
        let other = Codec::new(&[8u8; 32]).unwrap();
        assert_eq!(other.decode(&bytes), Err(DecodeError::BadSignature));
        for i in 1..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0x01;
            assert_eq!(
                codec().decode(&flipped),
                Err(DecodeError::BadSignature),
                "flipping byte {i}"
            );
        }
    }

    #[test]
    fn rejects_unknown_version_unsigned_and_garbage() {
        let c = codec();
        let mut bytes = c.encode(&sample());
        bytes[0] = 99;
        assert_eq!(
            c.decode(&bytes),
            Err(DecodeError::UnknownVersion { found: 99 })
        );
        assert_eq!(c.decode(&[]), Err(DecodeError::Empty));
        assert_eq!(
            c.decode(&[WIRE_VERSION, 200, 200, 200]),
            Err(DecodeError::Unsigned { bytes: 4 })
        );
        assert!(matches!(
            c.decode(&signed(&c, &[200, 200, 200])),
            Err(DecodeError::Corrupt(_))
        ));
        let body = bincode::serde::encode_to_vec(sample(), bincode_config()).unwrap();
        let mut long = body.clone();
        long.push(0);
        assert_eq!(
            c.decode(&signed(&c, &long)),
            Err(DecodeError::Trailing { trailing: 1 })
        );
        let huge = vec![WIRE_VERSION; MAX_MESSAGE_BYTES + 1];
        assert_eq!(
            c.decode(&huge),
            Err(DecodeError::TooLarge {
                bytes: MAX_MESSAGE_BYTES + 1
            })
        );
    }

    /// The 15-byte message that used to abort every consumer: an eval request whose first
    /// string claims 2^62 bytes. Unsigned it is refused before decoding; signed (a holder of the
    /// key gone wrong) it is an error, not an allocation.
    #[test]
    fn a_length_bomb_is_an_error_not_an_allocation() {
        // Message::Eval (variant 1), session 7, then a string length of 2^62 as a varint
        // (0xFD = u64 follows).
        let mut body = vec![1u8, 7, 0xFD];
        body.extend_from_slice(&(1u64 << 62).to_le_bytes());
        let mut unsigned = vec![1u8];
        unsigned.extend_from_slice(&body);
        unsigned.extend_from_slice(&[0; 3]);
        assert_eq!(unsigned.len(), 15);
        let c = codec();
        assert!(c.decode(&unsigned).is_err());
        assert!(matches!(
            c.decode(&signed(&c, &body)),
            Err(DecodeError::Corrupt(_))
        ));
        // A vector of 2^40 job references: the same.
        let mut body = vec![0u8, 7, 0, 0, 0, 0, 0xFD];
        body.extend_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(matches!(
            c.decode(&signed(&c, &body)),
            Err(DecodeError::Corrupt(_))
        ));
    }
}
