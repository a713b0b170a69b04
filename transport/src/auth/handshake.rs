//! The link handshake: who is on the other end, and may they join?
//!
//! ```text
//! dialer → acceptor   Hello  (56 B): "MESHWORK", version, world, rank, flags,
//!                                   transport settings (8 B), nonce_d (24 B)
//! acceptor → dialer   Reply  (92 B): Hello of the acceptor (nonce_a) + status + proof_a
//! dialer → acceptor   proof_d (32 B)
//! acceptor → dialer   1 byte: 1 = admitted
//! ```
//!
//! `proof_a = HMAC-SHA256(key, "accept" ‖ hello_d ‖ hello_a)` and
//! `proof_d = HMAC-SHA256(key, "dial" ‖ hello_a ‖ hello_d)`, with
//! `key = SHA-256("meshwork cluster token" ‖ token)`: each side proves it
//! holds the token for this exchange's fresh nonces; the token itself never
//! crosses the wire, and a recorded exchange cannot be replayed. Without a
//! token (loopback only) the key is a fixed public one: the handshake still
//! checks protocol, world and ranks, but authenticates nobody.
//!
//! The acceptor checks magic (a stranger is dropped silently), protocol
//! version, world size, topology, transport settings (TCP or QUIC, and
//! QUIC's sidecar threshold) and whether it expects that rank, and
//! answers with a status code so both sides fail with the same typed error.

use crate::wire::Reader;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::TcpStream;

/// The wire protocol version; peers of another version are refused.
/// Version 2 added the transport settings word to the hello.
pub const PROTOCOL_VERSION: u32 = 2;

const MAGIC: &[u8; 8] = b"MESHWORK";
pub(crate) const HELLO_LEN: usize = 56;
const REPLY_LEN: usize = HELLO_LEN + 4 + 32;
const FLAG_STAR: u32 = 1;

/// Status codes of the acceptor's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Status {
    Ok = 0,
    Protocol = 1,
    World = 2,
    RankConflict = 3,
    Topology = 4,
    Transport = 5,
}

/// How a handshake failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandshakeError {
    #[error("the peer is not a meshwork node")]
    Stranger,
    #[error("protocol version {theirs}, ours {ours}")]
    Protocol { ours: u32, theirs: u32 },
    #[error("world size {theirs}, ours {ours}")]
    World { ours: u32, theirs: u32 },
    #[error("rank {rank} is already taken or not expected here")]
    RankConflict { rank: u32 },
    #[error("topology differs (one side star, the other mesh)")]
    Topology,
    #[error("transport settings differ: ours {}, theirs {}", describe_transport(*.ours), describe_transport(*.theirs))]
    Transport { ours: u64, theirs: u64 },
    #[error("the peer holds another cluster token")]
    Token,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// What both sides need to know about themselves.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub rank: u32,
    pub world: u32,
    pub star: bool,
    pub key: [u8; 32],
    /// Only for tests of version negotiation.
    pub version: u32,
    /// The transport settings word: 0 for plain TCP; for QUIC, bit 63 set
    /// and the sidecar threshold in bytes below it. Must be equal.
    pub transport: u64,
}

/// The settings word's bit that means QUIC (with a TCP bulk sidecar).
pub(crate) const TRANSPORT_QUIC: u64 = 1 << 63;
/// The settings word's bit that means the TCP links' payloads are sealed
/// (`ENCRYPT_BULK`).
pub(crate) const TRANSPORT_SEALED: u64 = 1 << 62;

/// A settings word in words.
pub(crate) fn describe_transport(word: u64) -> String {
    let sealed = if word & TRANSPORT_SEALED != 0 {
        ", payloads encrypted"
    } else {
        ""
    };
    if word & TRANSPORT_QUIC == 0 {
        format!("TCP{sealed}")
    } else {
        format!(
            "QUIC with the TCP sidecar from {} bytes{sealed}",
            word & !(TRANSPORT_QUIC | TRANSPORT_SEALED)
        )
    }
}

/// A link's session keys, one per direction: known only to the two ends
/// (derived from the token and both fresh hellos).
#[derive(Clone)]
pub(crate) struct Keys {
    pub send: [u8; 32],
    pub recv: [u8; 32],
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(..)")
    }
}

/// The admitted peer's rank and the link's session keys.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub rank: u32,
    pub keys: Keys,
}

fn session_keys(key: &[u8; 32], hello_d: &[u8], hello_a: &[u8], dialer: bool) -> Keys {
    let d2a = proof(key, b"sidecar dialer to acceptor", hello_d, hello_a);
    let a2d = proof(key, b"sidecar acceptor to dialer", hello_d, hello_a);
    if dialer {
        Keys {
            send: d2a,
            recv: a2d,
        }
    } else {
        Keys {
            send: a2d,
            recv: d2a,
        }
    }
}

/// The HMAC key for `token` (or the public key when there is none).
pub(crate) fn derive_key(token: Option<&str>) -> [u8; 32] {
    let mut h = Sha256::new();
    match token {
        Some(t) => {
            h.update(b"meshwork cluster token\0");
            h.update(t.as_bytes());
        }
        None => h.update(b"meshwork unauthenticated\0"),
    }
    h.finalize().into()
}

fn hello(id: &Identity) -> Result<[u8; HELLO_LEN], HandshakeError> {
    let mut nonce = [0u8; 24];
    getrandom::getrandom(&mut nonce).map_err(|e| std::io::Error::other(e.to_string()))?;
    let fields = Parsed {
        version: id.version,
        world: id.world,
        rank: id.rank,
        star: id.star,
        transport: id.transport,
    };
    Ok(encode(&fields, &nonce))
}

/// A hello's fields (all but its nonce).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Parsed {
    version: u32,
    world: u32,
    rank: u32,
    star: bool,
    transport: u64,
}

/// A hello carrying `fields` and `nonce` (the inverse of [`parse`]).
pub(crate) fn encode(fields: &Parsed, nonce: &[u8; 24]) -> [u8; HELLO_LEN] {
    let mut h = [0u8; HELLO_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&fields.version.to_le_bytes());
    h[12..16].copy_from_slice(&fields.world.to_le_bytes());
    h[16..20].copy_from_slice(&fields.rank.to_le_bytes());
    h[20..24].copy_from_slice(&(if fields.star { FLAG_STAR } else { 0 }).to_le_bytes());
    h[24..32].copy_from_slice(&fields.transport.to_le_bytes());
    h[32..56].copy_from_slice(nonce);
    h
}

/// Decode a hello (a pure function: fuzzed). `None`: not a meshwork
/// hello (wrong magic or too short).
pub(crate) fn parse(h: &[u8]) -> Option<Parsed> {
    let mut r = Reader::new(h);
    if r.bytes(8)? != MAGIC || h.len() < HELLO_LEN {
        return None;
    }
    Some(Parsed {
        version: r.u32()?,
        world: r.u32()?,
        rank: r.u32()?,
        star: r.u32()? & FLAG_STAR != 0,
        transport: r.u64()?,
    })
}

pub(crate) fn proof(key: &[u8; 32], label: &[u8], first: &[u8], second: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(label);
    mac.update(first);
    mac.update(second);
    mac.finalize().into_bytes().into()
}

pub(crate) fn verify(
    key: &[u8; 32],
    label: &[u8],
    first: &[u8],
    second: &[u8],
    tag: &[u8],
) -> bool {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(label);
    mac.update(first);
    mac.update(second);
    mac.verify_slice(tag).is_ok()
}

/// Dial side: the acceptor's rank and the link's keys once admitted.
pub(crate) fn dial(stream: &mut TcpStream, id: &Identity) -> Result<Admitted, HandshakeError> {
    let mine = hello(id)?;
    stream.write_all(&mine)?;
    let mut reply = [0u8; REPLY_LEN];
    stream.read_exact(&mut reply)?;
    let theirs = parse(&reply).ok_or(HandshakeError::Stranger)?;
    let status = Reader::new(&reply[56..]).u32().unwrap_or(u32::MAX);
    match status {
        s if s == Status::Ok as u32 => {}
        s if s == Status::Protocol as u32 => {
            return Err(HandshakeError::Protocol {
                ours: id.version,
                theirs: theirs.version,
            })
        }
        s if s == Status::World as u32 => {
            return Err(HandshakeError::World {
                ours: id.world,
                theirs: theirs.world,
            })
        }
        s if s == Status::RankConflict as u32 => {
            return Err(HandshakeError::RankConflict { rank: id.rank })
        }
        s if s == Status::Topology as u32 => return Err(HandshakeError::Topology),
        s if s == Status::Transport as u32 => {
            return Err(HandshakeError::Transport {
                ours: id.transport,
                theirs: theirs.transport,
            })
        }
        _ => return Err(HandshakeError::Stranger),
    }
    if !verify(
        &id.key,
        b"accept",
        &mine,
        &reply[..HELLO_LEN],
        &reply[60..92],
    ) {
        // Let the acceptor fail at once too, rather than at its deadline.
        let _ = stream.write_all(&[0u8; 32]);
        return Err(HandshakeError::Token);
    }
    stream.write_all(&proof(&id.key, b"dial", &reply[..HELLO_LEN], &mine))?;
    let mut admitted = [0u8; 1];
    stream.read_exact(&mut admitted)?;
    if admitted[0] != 1 {
        return Err(HandshakeError::Token);
    }
    Ok(Admitted {
        rank: theirs.rank,
        keys: session_keys(&id.key, &mine, &reply[..HELLO_LEN], true),
    })
}

/// Accept side: `wanted(rank)` says whether a dialer claiming `rank` is
/// expected now. Returns the dialer's rank once admitted; on failure, the
/// rank it claimed (if it got that far) with the error.
pub(crate) fn accept(
    stream: &mut TcpStream,
    id: &Identity,
    wanted: impl Fn(u32) -> bool,
) -> Result<Admitted, (Option<u32>, HandshakeError)> {
    let mut theirs_raw = [0u8; HELLO_LEN];
    stream
        .read_exact(&mut theirs_raw)
        .map_err(|e| (None, e.into()))?;
    let theirs = parse(&theirs_raw).ok_or((None, HandshakeError::Stranger))?;
    let claimed = Some(theirs.rank);
    accept_rest(stream, id, wanted, &theirs_raw, &theirs).map_err(|e| (claimed, e))
}

fn accept_rest(
    stream: &mut TcpStream,
    id: &Identity,
    wanted: impl Fn(u32) -> bool,
    theirs_raw: &[u8; HELLO_LEN],
    theirs: &Parsed,
) -> Result<Admitted, HandshakeError> {
    let mine = hello(id)?;
    let (status, err) = if theirs.version != id.version {
        (
            Status::Protocol,
            Some(HandshakeError::Protocol {
                ours: id.version,
                theirs: theirs.version,
            }),
        )
    } else if theirs.world != id.world {
        (
            Status::World,
            Some(HandshakeError::World {
                ours: id.world,
                theirs: theirs.world,
            }),
        )
    } else if theirs.star != id.star {
        (Status::Topology, Some(HandshakeError::Topology))
    } else if theirs.transport != id.transport {
        (
            Status::Transport,
            Some(HandshakeError::Transport {
                ours: id.transport,
                theirs: theirs.transport,
            }),
        )
    } else if theirs.rank >= id.world || theirs.rank == id.rank || !wanted(theirs.rank) {
        (
            Status::RankConflict,
            Some(HandshakeError::RankConflict { rank: theirs.rank }),
        )
    } else {
        (Status::Ok, None)
    };
    let mut reply = [0u8; REPLY_LEN];
    reply[..HELLO_LEN].copy_from_slice(&mine);
    reply[56..60].copy_from_slice(&(status as u32).to_le_bytes());
    if status == Status::Ok {
        reply[60..92].copy_from_slice(&proof(&id.key, b"accept", theirs_raw, &mine));
    }
    stream.write_all(&reply)?;
    if let Some(e) = err {
        return Err(e);
    }
    let mut proof_d = [0u8; 32];
    stream.read_exact(&mut proof_d)?;
    if !verify(&id.key, b"dial", &mine, theirs_raw, &proof_d) {
        let _ = stream.write_all(&[0]);
        return Err(HandshakeError::Token);
    }
    stream.write_all(&[1])?;
    Ok(Admitted {
        rank: theirs.rank,
        keys: session_keys(&id.key, theirs_raw, &mine, false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn id(rank: u32, world: u32, token: Option<&str>) -> Identity {
        Identity {
            rank,
            world,
            star: false,
            key: derive_key(token),
            version: PROTOCOL_VERSION,
            transport: 0,
        }
    }

    fn pair(
        d: Identity,
        a: Identity,
    ) -> (Result<u32, HandshakeError>, Result<u32, HandshakeError>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            accept(&mut s, &a, |_| true).map_err(|(_, e)| e)
        });
        let mut s = TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5)).unwrap();
        let dialed = dial(&mut s, &d);
        drop(s);
        let accepted = t.join().unwrap();
        (dialed.map(|a| a.rank), accepted.map(|a| a.rank))
    }

    #[test]
    fn same_token_admits_both_ways() {
        let (d, a) = pair(id(0, 2, Some("s3cret")), id(1, 2, Some("s3cret")));
        assert_eq!((d.unwrap(), a.unwrap()), (1, 0));
    }

    #[test]
    fn each_mismatch_is_typed_on_both_sides() {
        let (d, a) = pair(id(0, 2, Some("a")), id(1, 2, Some("b")));
        assert!(matches!(d, Err(HandshakeError::Token)), "{d:?}");
        assert!(matches!(a, Err(HandshakeError::Token)), "{a:?}");
        let (d, a) = pair(id(0, 3, None), id(1, 2, None));
        assert!(
            matches!(d, Err(HandshakeError::World { ours: 3, theirs: 2 })),
            "{d:?}"
        );
        assert!(
            matches!(a, Err(HandshakeError::World { ours: 2, theirs: 3 })),
            "{a:?}"
        );
        let mut old = id(0, 2, None);
        old.version = 0;
        let (d, a) = pair(old, id(1, 2, None));
        assert!(
            matches!(
                d,
                Err(HandshakeError::Protocol {
                    ours: 0,
                    theirs: PROTOCOL_VERSION
                })
            ),
            "{d:?}"
        );
        assert!(
            matches!(
                a,
                Err(HandshakeError::Protocol {
                    ours: PROTOCOL_VERSION,
                    theirs: 0
                })
            ),
            "{a:?}"
        );
        let mut quic = id(0, 2, None);
        quic.transport = TRANSPORT_QUIC | 65536;
        let (d, a) = pair(quic, id(1, 2, None));
        assert!(
            matches!(d, Err(HandshakeError::Transport { theirs: 0, .. })),
            "{d:?}"
        );
        let a = a.unwrap_err().to_string();
        assert!(
            a.contains("ours TCP, theirs QUIC with the TCP sidecar from 65536 bytes"),
            "{a}"
        );
        let (d, _) = pair(id(1, 2, None), id(1, 2, None));
        assert!(
            matches!(d, Err(HandshakeError::RankConflict { rank: 1 })),
            "{d:?}"
        );
    }
}
