//! The link handshake: who is on the other end, and may they join?
//!
//! ```text
//! dialer → acceptor   Hello_d   (64 B): "MESHWORK", version, world, rank,
//!                                      flags, transport settings, heap
//!                                      size, nonce_d
//! acceptor → dialer   Challenge (36 B): "MESHWORK", version, nonce_a
//! dialer → acceptor   proof_d   (32 B)
//! acceptor → dialer   Reply    (100 B): Hello_a + status + proof_a
//! ```
//!
//! `proof_d = HMAC(key, "dial" ‖ hello_d ‖ challenge)` and
//! `proof_a = HMAC(key, "accept" ‖ hello_d ‖ challenge ‖ hello_a ‖ status)`,
//! with `key` from the token through the slow KDF (`kdf.rs`). The dialer
//! proves the token first, over the acceptor's fresh nonce, and the
//! acceptor says nothing about itself until that proof verifies: a
//! stranger who dials learns the protocol version and a nonce, no setting
//! of the job, and gets no proof to guess the token against. (One who
//! answers a dial — on the path, or squatting a peer's address — sees the
//! dialer's hello and its proof: the settings, and a guess check that
//! costs one Argon2id evaluation per guess. Removing that would take a
//! password-authenticated key exchange.) The acceptor then
//! compares world, topology, transport settings, heap size and rank, and
//! answers with
//! a status that its own proof covers, so the dialer trusts a refusal only
//! from a holder of the token. Without a token (loopback only) the key is
//! a fixed public one: the exchange checks settings and ranks but
//! authenticates nobody.
//!
//! What cannot be authenticated — a peer of another protocol version, a
//! proof that does not verify, a peer that is not meshwork at all — ends
//! only that connection: the caller keeps forming and reports it at its
//! deadline if that rank never came (`Outcome::Suspect`). Every read is
//! bounded by the handshake's one deadline, so a silent or dribbling
//! stranger costs its own connection and nothing else.

use crate::wire::Reader;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

/// The wire protocol version; peers of another version are refused.
/// Version 2 added the transport settings word to the hello; version 3
/// made the dialer prove the token first and authenticated the status;
/// version 4 added the credit request frame (credits go back in batches);
/// version 5 the same-host negotiation after the handshake (`shm/`);
/// version 6 its probe and single copy for large messages; version 7 the
/// revoke frame and a coordinator's notice of a silent worker; version 8
/// the symmetric heap's size in the hello (checked equal, 0 included);
/// version 9 the whole shape (k-regular and its degree, hypercube) in the
/// hello's topology word, and frames relayed by any rank of a sparse shape;
/// version 10 the receive bounds' fingerprint in the settings word
/// (`bounds_word`) and same-host rings as sealed memfds bound to the link
/// (negotiation `mwshm003`); version 11 GMAC in place of keyed BLAKE3 for
/// the tags of authenticated frames (`seal.rs`); version 12 AEGISMAC-128X4
/// in place of GMAC (`frame_mac.rs`); version 13 heartbeats that carry
/// the sender's liveness, and no peer-gone notices between mesh peers;
/// version 14 matched lanes (`LaneKind::Matched`: a message's word in the
/// header's tag field).
pub const PROTOCOL_VERSION: u32 = 14;

const MAGIC: &[u8; 8] = b"MESHWORK";
pub(crate) const HELLO_LEN: usize = 64;
/// Where a hello's nonce starts.
pub(crate) const NONCE_AT: usize = 40;
const CHALLENGE_LEN: usize = 8 + 4 + 24;
const REPLY_LEN: usize = HELLO_LEN + 4 + 32;

/// Status codes of the acceptor's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Status {
    Ok = 0,
    World = 2,
    RankConflict = 3,
    Topology = 4,
    Transport = 5,
    Heap = 6,
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
    #[error("topology differs (mesh, star, k-regular of another degree, or hypercube)")]
    Topology,
    #[error("transport settings differ: ours {}, theirs {}", describe_transport(*.ours), describe_transport(*.theirs))]
    Transport { ours: u64, theirs: u64 },
    #[error("the symmetric heap differs: ours {ours} bytes, theirs {theirs}")]
    Heap { ours: u64, theirs: u64 },
    #[error("the peer holds another cluster token")]
    Token,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl HandshakeError {
    /// Whether a holder of the token said so: only these may end a
    /// formation at once. The others (a stranger, a proof that does not
    /// verify, another protocol version, a broken connection) end one
    /// connection and are reported at the deadline if nothing better came.
    pub(crate) fn is_proven(&self) -> bool {
        matches!(
            self,
            HandshakeError::World { .. }
                | HandshakeError::RankConflict { .. }
                | HandshakeError::Topology
                | HandshakeError::Transport { .. }
                | HandshakeError::Heap { .. }
        )
    }
}

/// What both sides need to know about themselves.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub rank: u32,
    pub world: u32,
    /// The shape's word (`Shape::word`). Must be equal.
    pub shape: u32,
    pub key: [u8; 32],
    /// Only for tests of version negotiation.
    pub version: u32,
    /// The transport settings word: 0 for plain TCP; for QUIC, bit 63 set
    /// and the sidecar threshold in bytes below it. Must be equal.
    pub transport: u64,
    /// The symmetric heap's size in bytes (0: none). Must be equal.
    pub heap: u64,
}

/// The settings word's bit that means QUIC (with a TCP bulk sidecar).
pub(crate) const TRANSPORT_QUIC: u64 = 1 << 63;
/// The settings word's bit that means the TCP links' payloads are sealed
/// (`ENCRYPT_BULK`).
pub(crate) const TRANSPORT_SEALED: u64 = 1 << 62;

/// The settings word's bit that means frames over TCP are not
/// authenticated although a token is set (`FRAME_AUTH=0`).
pub(crate) const TRANSPORT_UNAUTHENTICATED: u64 = 1 << 61;

/// The settings word's bits that carry a fingerprint of what a rank
/// holds its senders to (`PEER_BUDGET_BYTES`, `LANE_DEPTH`): every rank
/// checks its peers against its own, so they must be equal.
pub(crate) const TRANSPORT_BOUNDS: u64 = 0xffff << 44;

/// The settings word's bits for the receive bounds `peer_budget` and
/// `lane_depth`: 16 bits of an FNV-1a hash of both.
pub fn bounds_word(peer_budget: u64, lane_depth: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in peer_budget
        .to_le_bytes()
        .into_iter()
        .chain(lane_depth.to_le_bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    ((h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) & 0xffff) << 44
}

/// A settings word in words.
pub(crate) fn describe_transport(word: u64) -> String {
    let mut sealed = if word & TRANSPORT_SEALED != 0 {
        ", payloads encrypted".to_string()
    } else if word & TRANSPORT_UNAUTHENTICATED != 0 {
        ", frames unauthenticated".to_string()
    } else {
        String::new()
    };
    if word & TRANSPORT_BOUNDS != 0 {
        sealed += &format!(
            ", receive bounds {:04x} (PEER_BUDGET_BYTES, LANE_DEPTH)",
            (word & TRANSPORT_BOUNDS) >> 44
        );
    }
    let flags = TRANSPORT_QUIC | TRANSPORT_SEALED | TRANSPORT_UNAUTHENTICATED | TRANSPORT_BOUNDS;
    if word & TRANSPORT_QUIC == 0 {
        format!("TCP{sealed}")
    } else {
        format!(
            "QUIC with the TCP sidecar from {} bytes{sealed}",
            word & !flags
        )
    }
}

/// A link's session keys, one per direction, derived from the token and
/// both fresh hellos: no one without the token can make them, but a
/// token holder who recorded both hellos can (no forward secrecy against
/// a token holder: docs/security.md).
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
    let d2a = proof_of(key, b"sidecar dialer to acceptor", &[hello_d, hello_a]);
    let a2d = proof_of(key, b"sidecar acceptor to dialer", &[hello_d, hello_a]);
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

/// The handshake key for `token` (through the
/// slow KDF, `kdf.rs`), or the public key when there is none.
pub(crate) fn derive_key(token: Option<&str>) -> [u8; 32] {
    match token {
        Some(t) => super::kdf::subkey(t, "link handshake"),
        None => Sha256::digest(b"meshwork unauthenticated\0").into(),
    }
}

/// Our hello, with `nonce` (the acceptor's, from its challenge) or a fresh one.
fn hello(id: &Identity, nonce: Option<[u8; 24]>) -> Result<[u8; HELLO_LEN], HandshakeError> {
    let nonce = match nonce {
        Some(n) => n,
        None => {
            let mut n = [0u8; 24];
            getrandom::getrandom(&mut n).map_err(|e| std::io::Error::other(e.to_string()))?;
            n
        }
    };
    let fields = Parsed {
        version: id.version,
        world: id.world,
        rank: id.rank,
        shape: id.shape,
        transport: id.transport,
        heap: id.heap,
    };
    Ok(encode(&fields, &nonce))
}

/// A hello's fields (all but its nonce).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Parsed {
    version: u32,
    world: u32,
    rank: u32,
    shape: u32,
    transport: u64,
    heap: u64,
}

/// A hello carrying `fields` and `nonce` (the inverse of [`parse`]).
pub(crate) fn encode(fields: &Parsed, nonce: &[u8; 24]) -> [u8; HELLO_LEN] {
    let mut h = [0u8; HELLO_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&fields.version.to_le_bytes());
    h[12..16].copy_from_slice(&fields.world.to_le_bytes());
    h[16..20].copy_from_slice(&fields.rank.to_le_bytes());
    h[20..24].copy_from_slice(&fields.shape.to_le_bytes());
    h[24..32].copy_from_slice(&fields.transport.to_le_bytes());
    h[32..NONCE_AT].copy_from_slice(&fields.heap.to_le_bytes());
    h[NONCE_AT..].copy_from_slice(nonce);
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
        shape: r.u32()?,
        transport: r.u64()?,
        heap: r.u64()?,
    })
}

fn mac_of(key: &[u8; 32], label: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(label);
    for p in parts {
        mac.update(p);
    }
    mac
}

/// `HMAC-SHA256(key, label ‖ parts…)`.
pub(crate) fn proof_of(key: &[u8; 32], label: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    mac_of(key, label, parts).finalize().into_bytes().into()
}

/// Whether `tag` is `proof_of(key, label, parts)` (in constant time).
pub(crate) fn verify_of(key: &[u8; 32], label: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
    mac_of(key, label, parts).verify_slice(tag).is_ok()
}

/// Fill `buf` from `stream` before `deadline`, however the peer paces its
/// bytes (a socket timeout alone bounds each read, not the message).
pub(crate) fn read_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[at..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Write all of `buf` before `deadline` (handshake messages are small: the
/// socket buffer takes them unless the peer stalls a full window).
pub(crate) fn write_by(
    stream: &mut TcpStream,
    buf: &[u8],
    deadline: Instant,
) -> std::io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(ErrorKind::TimedOut.into());
    }
    stream.set_write_timeout(Some(left))?;
    stream.write_all(buf)
}

fn challenge(version: u32) -> Result<[u8; CHALLENGE_LEN], HandshakeError> {
    let mut c = [0u8; CHALLENGE_LEN];
    c[..8].copy_from_slice(MAGIC);
    c[8..12].copy_from_slice(&version.to_le_bytes());
    getrandom::getrandom(&mut c[12..]).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(c)
}

/// Dial side, on a connected `stream`: the acceptor's rank and the link's
/// keys once admitted, all before `deadline`.
pub(crate) fn dial(
    stream: &mut TcpStream,
    id: &Identity,
    deadline: Instant,
) -> Result<Admitted, HandshakeError> {
    let mine = hello(id, None)?;
    write_by(stream, &mine, deadline)?;
    let mut chal = [0u8; CHALLENGE_LEN];
    read_by(stream, &mut chal, deadline)?;
    if &chal[..8] != MAGIC {
        return Err(HandshakeError::Stranger);
    }
    let version = Reader::new(&chal[8..12]).u32().unwrap_or(0);
    if version != id.version {
        // Unauthenticated (a peer of another version cannot prove anything
        // we can check): the caller treats it as a suspicion, not a verdict.
        return Err(HandshakeError::Protocol {
            ours: id.version,
            theirs: version,
        });
    }
    write_by(
        stream,
        &proof_of(&id.key, b"dial", &[&mine, &chal]),
        deadline,
    )?;
    let mut reply = [0u8; REPLY_LEN];
    match read_by(stream, &mut reply, deadline) {
        Ok(()) => {}
        // The acceptor closes without a word when our proof fails: the
        // token differs, or the acceptor is not who we think.
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Err(HandshakeError::Token),
        Err(e) => return Err(e.into()),
    }
    let (hello_a, rest) = reply.split_at(HELLO_LEN);
    let (status_raw, proof_a) = rest.split_at(4);
    if !verify_of(
        &id.key,
        b"accept",
        &[&mine, &chal, hello_a, status_raw],
        proof_a,
    ) {
        return Err(HandshakeError::Token);
    }
    let theirs = parse(hello_a).ok_or(HandshakeError::Stranger)?;
    if hello_a[NONCE_AT..] != chal[12..] {
        return Err(HandshakeError::Stranger);
    }
    let status = Reader::new(status_raw).u32().unwrap_or(u32::MAX);
    match status {
        s if s == Status::Ok as u32 => {}
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
        s if s == Status::Heap as u32 => {
            return Err(HandshakeError::Heap {
                ours: id.heap,
                theirs: theirs.heap,
            })
        }
        _ => return Err(HandshakeError::Stranger),
    }
    Ok(Admitted {
        rank: theirs.rank,
        keys: session_keys(&id.key, &mine, hello_a, true),
    })
}

/// Accept side: `claim(rank)` reserves `rank` for this dialer if it is
/// expected and not taken (and says whether it did). Returns the dialer's
/// rank once admitted; on failure, the rank it claimed (if it got that
/// far) with the error. Everything happens before `deadline`.
pub(crate) fn accept(
    stream: &mut TcpStream,
    id: &Identity,
    claim: impl Fn(u32) -> bool,
    deadline: Instant,
) -> Result<Admitted, (Option<u32>, HandshakeError)> {
    // Magic, version, world and rank first: every version's hello starts
    // so, whatever its length.
    let mut theirs_raw = [0u8; HELLO_LEN];
    read_by(stream, &mut theirs_raw[..SHARED_HEAD], deadline).map_err(|e| (None, e.into()))?;
    if &theirs_raw[..8] != MAGIC {
        return Err((None, HandshakeError::Stranger));
    }
    let word = |at: usize| Reader::new(&theirs_raw[at..at + 4]).u32().unwrap_or(0);
    let (version, claimed) = (word(8), Some(word(16)));
    if version != id.version {
        // Its hello may be another length: our version, then the door
        // (what it sent is drained, so the close is orderly).
        let told = challenge(id.version).and_then(|c| Ok(write_by(stream, &c, deadline)?));
        drain(stream);
        told.map_err(|e| (claimed, e))?;
        return Err((
            claimed,
            HandshakeError::Protocol {
                ours: id.version,
                theirs: version,
            },
        ));
    }
    read_by(stream, &mut theirs_raw[SHARED_HEAD..], deadline).map_err(|e| (claimed, e.into()))?;
    let theirs = parse(&theirs_raw).ok_or((claimed, HandshakeError::Stranger))?;
    accept_rest(stream, id, claim, &theirs_raw, &theirs, deadline).map_err(|e| (claimed, e))
}

/// The bytes every version's hello starts with: magic, version, world,
/// rank.
const SHARED_HEAD: usize = 20;

/// Read and drop what has already arrived, without waiting.
fn drain(stream: &mut TcpStream) {
    if stream.set_nonblocking(true).is_ok() {
        let mut sink = [0u8; 256];
        while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
        let _ = stream.set_nonblocking(false);
    }
}

fn accept_rest(
    stream: &mut TcpStream,
    id: &Identity,
    claim: impl Fn(u32) -> bool,
    theirs_raw: &[u8; HELLO_LEN],
    theirs: &Parsed,
    deadline: Instant,
) -> Result<Admitted, HandshakeError> {
    let chal = challenge(id.version)?;
    write_by(stream, &chal, deadline)?;
    if theirs.version != id.version {
        return Err(HandshakeError::Protocol {
            ours: id.version,
            theirs: theirs.version,
        });
    }
    let mut proof_d = [0u8; 32];
    read_by(stream, &mut proof_d, deadline)?;
    if !verify_of(&id.key, b"dial", &[theirs_raw, &chal], &proof_d) {
        // Close without a word: a stranger learns nothing.
        return Err(HandshakeError::Token);
    }
    let nonce_a: [u8; 24] = chal[12..]
        .try_into()
        .expect("the challenge ends in 24 bytes");
    let mine = hello(id, Some(nonce_a))?;
    let (status, err) = if theirs.world != id.world {
        (
            Status::World,
            Some(HandshakeError::World {
                ours: id.world,
                theirs: theirs.world,
            }),
        )
    } else if theirs.shape != id.shape {
        (Status::Topology, Some(HandshakeError::Topology))
    } else if theirs.transport != id.transport {
        (
            Status::Transport,
            Some(HandshakeError::Transport {
                ours: id.transport,
                theirs: theirs.transport,
            }),
        )
    } else if theirs.heap != id.heap {
        (
            Status::Heap,
            Some(HandshakeError::Heap {
                ours: id.heap,
                theirs: theirs.heap,
            }),
        )
    } else if theirs.rank >= id.world || theirs.rank == id.rank || !claim(theirs.rank) {
        (
            Status::RankConflict,
            Some(HandshakeError::RankConflict { rank: theirs.rank }),
        )
    } else {
        (Status::Ok, None)
    };
    let status_raw = (status as u32).to_le_bytes();
    let mut reply = [0u8; REPLY_LEN];
    reply[..HELLO_LEN].copy_from_slice(&mine);
    reply[HELLO_LEN..HELLO_LEN + 4].copy_from_slice(&status_raw);
    reply[HELLO_LEN + 4..].copy_from_slice(&proof_of(
        &id.key,
        b"accept",
        &[theirs_raw, &chal, &mine, &status_raw],
    ));
    write_by(stream, &reply, deadline)?;
    if let Some(e) = err {
        return Err(e);
    }
    Ok(Admitted {
        rank: theirs.rank,
        keys: session_keys(&id.key, theirs_raw, &mine, false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    const TOKEN: &str = "handshake test token";
    const OTHER: &str = "another test token";

    /// A connection with deadlines on its reads and writes.
    fn connect(addr: std::net::SocketAddr) -> TcpStream {
        let t = std::time::Duration::from_secs(5);
        let s = TcpStream::connect_timeout(&addr, t).unwrap();
        s.set_read_timeout(Some(t)).unwrap();
        s.set_write_timeout(Some(t)).unwrap();
        s
    }

    fn soon() -> Instant {
        Instant::now() + std::time::Duration::from_secs(5)
    }

    fn id(rank: u32, world: u32, token: Option<&str>) -> Identity {
        Identity {
            rank,
            world,
            shape: 0,
            key: derive_key(token),
            version: PROTOCOL_VERSION,
            transport: 0,
            heap: 0,
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
            accept(&mut s, &a, |_| true, soon()).map_err(|(_, e)| e)
        });
        let mut s = TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5)).unwrap();
        let dialed = dial(&mut s, &d, soon());
        drop(s);
        let accepted = t.join().unwrap();
        (dialed.map(|a| a.rank), accepted.map(|a| a.rank))
    }

    #[test]
    fn same_token_admits_both_ways() {
        let (d, a) = pair(id(0, 2, Some(TOKEN)), id(1, 2, Some(TOKEN)));
        assert_eq!((d.unwrap(), a.unwrap()), (1, 0));
    }

    #[test]
    fn each_mismatch_is_typed_on_both_sides() {
        let (d, a) = pair(id(0, 2, Some(TOKEN)), id(1, 2, Some(OTHER)));
        assert!(matches!(d, Err(HandshakeError::Token)), "{d:?}");
        assert!(matches!(a, Err(HandshakeError::Token)), "{a:?}");
        assert!(
            !d.unwrap_err().is_proven(),
            "a token mismatch proves nothing"
        );
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
        let mut heap = id(0, 2, None);
        heap.heap = 1 << 20;
        let (d, a) = pair(heap, id(1, 2, None));
        assert!(
            matches!(
                d,
                Err(HandshakeError::Heap {
                    ours: 1048576,
                    theirs: 0
                })
            ),
            "{d:?}"
        );
        let a = a.unwrap_err();
        assert!(a.is_proven(), "said by a holder of the token");
        assert!(
            a.to_string().contains("ours 0 bytes, theirs 1048576"),
            "{a}"
        );
        let (d, _) = pair(id(1, 2, None), id(1, 2, None));
        assert!(
            matches!(d, Err(HandshakeError::RankConflict { rank: 1 })),
            "{d:?}"
        );
    }

    /// What a stranger without the token gets: the protocol version and a
    /// nonce, then silence; the acceptor's settings never leave it.
    #[test]
    fn a_stranger_learns_nothing_and_proves_nothing() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let acceptor = id(1, 4, Some(TOKEN));
        let t = std::thread::spawn(move || {
            let mut out = Vec::new();
            for _ in 0..3 {
                let (mut s, _) = l.accept().unwrap();
                out.push(accept(&mut s, &acceptor, |_| true, soon()).map_err(|(_, e)| e));
            }
            out
        });
        let stranger = id(0, 4, Some(OTHER));
        let mut hellos = Vec::new();
        // Another version; the right one with a wrong proof; the right one
        // then silence until the acceptor's deadline is near (cut short).
        for version in [999, PROTOCOL_VERSION] {
            let mut s = connect(addr);
            let mut h = stranger.clone();
            h.version = version;
            s.write_all(&hello(&h, None).unwrap()).unwrap();
            let mut got = Vec::new();
            if version == PROTOCOL_VERSION {
                let mut c = [0u8; CHALLENGE_LEN];
                s.read_exact(&mut c).unwrap();
                got.extend_from_slice(&c);
                s.write_all(&[0u8; 32]).unwrap();
            }
            s.read_to_end(&mut got).unwrap();
            hellos.push(got);
        }
        let mut s = connect(addr);
        s.write_all(b"M").unwrap();
        drop(s);
        let results = t.join().unwrap();
        assert_eq!(hellos[0].len(), CHALLENGE_LEN, "a challenge only");
        assert_eq!(hellos[1].len(), CHALLENGE_LEN, "nothing after a bad proof");
        for h in &hellos {
            assert_eq!(&h[..8], MAGIC);
            assert_eq!(h[8..12], PROTOCOL_VERSION.to_le_bytes());
        }
        assert!(matches!(
            results[0],
            Err(HandshakeError::Protocol { theirs: 999, .. })
        ));
        assert!(matches!(results[1], Err(HandshakeError::Token)));
        assert!(matches!(results[2], Err(HandshakeError::Io(_))));
        assert!(results.iter().all(|r| !r.as_ref().unwrap_err().is_proven()));
    }

    /// A peer that sends one byte at a time is cut off at the handshake's
    /// deadline, not after each byte's timeout.
    #[test]
    fn a_dribbling_peer_is_cut_off_at_the_deadline() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let by = Instant::now() + std::time::Duration::from_millis(300);
            let r = accept(&mut s, &id(1, 2, Some(TOKEN)), |_| true, by);
            (r.map_err(|(_, e)| e), Instant::now() >= by)
        });
        let mut s = connect(addr);
        let h = hello(&id(0, 2, Some(TOKEN)), None).unwrap();
        let mut sent = 0;
        // Dribble until the acceptor hangs up (a byte per 50 ms would take
        // 2.8 s for the hello).
        while sent < h.len() && s.write_all(&h[sent..sent + 1]).is_ok() {
            sent += 1;
            #[allow(clippy::disallowed_methods, reason = "the attacker's pacing")]
            std::thread::sleep(std::time::Duration::from_millis(50));
            if t.is_finished() {
                break;
            }
        }
        let (r, at_deadline) = t.join().unwrap();
        assert!(matches!(r, Err(HandshakeError::Io(_))), "{r:?}");
        assert!(at_deadline);
        assert!(sent < h.len(), "cut off after {sent} bytes");
    }
}
