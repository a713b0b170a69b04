//! Which peers share this host, and their rings: three short rounds on
//! every authenticated formation stream, right after the token handshake.
//!
//! 1. Offer: shared memory on or off here, user id, network namespace and
//!    kernel boot id. Two ranks share a host when both are on and all
//!    three match (two network-namespace hosts on one machine do not).
//!    With them, the process id and the address of a random probe value
//!    (`copy.rs`), and the value.
//! 2. Ring: each rank that shares the host creates the segment of the
//!    ring it will read from the peer (`ring.rs`: a sealed memfd whose
//!    name commits to a key derived from this link's session keys) and
//!    sends where the peer opens it (its process id and the descriptor)
//!    and its capacity (nothing, if it could not: no memory), and whether
//!    it could read the peer's probe out of the peer's memory (then the
//!    peer may hand it large messages by single copy).
//! 3. Mapped: each maps the peer's, if it is bound to this link's key
//!    (`region.rs`: a member cannot make this rank map another link's
//!    ring, or any other file), and says whether it could. Both must, or
//!    both keep the network link; each then closes its own descriptor.
//!
//! Every rank writes a round on every stream before it reads any, so the
//! rounds cannot wait on each other in a cycle. Each message carries a
//! keyed BLAKE3 tag under the link's session keys: what a third party
//! changes on the way is refused (the pair then keeps the network link).
//! The stream then stays open as the shared-memory link's doorbell and
//! liveness signal.

use super::copy::{self, Source};
use super::region::Locator;
use super::ring::{capacity_for, Segment};
use crate::auth::handshake::Keys;
use crate::form::{io_fail, FormationError};
use crate::spec::Spec;
use std::io::Read;
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::time::Instant;

const MAGIC: &[u8; 8] = b"mwshm003";
const TAG: usize = 32;
const HOST: usize = 8 + 1 + 4 + 8 + 8 + 36;
const OFFER: usize = HOST + 4 + 8 + 16;
/// Ring: present, process id, descriptor, capacity, reads the peer.
const RING: usize = 1 + 4 + 4 + 8 + 1;
const MAPPED: usize = 1;

/// A same-host peer whose rings are mapped.
#[derive(Debug)]
pub(crate) struct Paired {
    pub peer: u32,
    /// The formation stream: doorbell and liveness.
    pub sock: TcpStream,
    /// The ring this rank reads (its own segment).
    pub inn: Segment,
    /// The ring this rank writes (the peer's segment).
    pub out: Segment,
    /// The peer's process, if this rank can copy from its memory.
    pub source: Option<Source>,
    /// The peer can copy from this process's memory.
    pub peer_reads: bool,
}

/// What makes two ranks one host.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Host {
    uid: u32,
    netns: (u64, u64),
    boot: [u8; 36],
}

impl Host {
    fn here() -> std::io::Result<Host> {
        let ns = std::fs::metadata("/proc/self/ns/net")?;
        let boot = std::fs::read("/proc/sys/kernel/random/boot_id")?;
        let boot: [u8; 36] = boot
            .get(..36)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| std::io::Error::other("short boot id"))?;
        Ok(Host {
            // SAFETY: `geteuid` has no preconditions.
            uid: unsafe { libc::geteuid() },
            netns: (ns.dev(), ns.ino()),
            boot,
        })
    }

    fn encode(this: Option<&Host>) -> Vec<u8> {
        let mut m = Vec::with_capacity(OFFER);
        m.extend_from_slice(MAGIC);
        m.push(u8::from(this.is_some()));
        let h = this.cloned().unwrap_or(Host {
            uid: 0,
            netns: (0, 0),
            boot: [0; 36],
        });
        m.extend_from_slice(&h.uid.to_le_bytes());
        m.extend_from_slice(&h.netns.0.to_le_bytes());
        m.extend_from_slice(&h.netns.1.to_le_bytes());
        m.extend_from_slice(&h.boot);
        m
    }
}

/// The offer: the host, and this process's probe (`copy.rs`).
fn offer(here: Option<&Host>) -> Vec<u8> {
    let mut m = Host::encode(here);
    let (pid, addr, value) = match here {
        Some(_) => copy::probe(),
        None => (0, 0, [0; 16]),
    };
    m.extend_from_slice(&pid.to_le_bytes());
    m.extend_from_slice(&addr.to_le_bytes());
    m.extend_from_slice(&value);
    m
}

/// The probe of an offer: process id, address and value.
fn probe_of(m: &[u8]) -> Option<(u32, u64, [u8; 16])> {
    let m = m.get(HOST..OFFER)?;
    Some((
        u32::from_le_bytes(m[..4].try_into().ok()?),
        u64::from_le_bytes(m[4..12].try_into().ok()?),
        m[12..28].try_into().ok()?,
    ))
}

impl Host {
    fn decode(m: &[u8]) -> Option<Host> {
        if m.len() < HOST || &m[..8] != MAGIC || m[8] != 1 {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(m[i..i + 8].try_into().unwrap_or_default());
        Some(Host {
            uid: u32::from_le_bytes(m[9..13].try_into().ok()?),
            netns: (u64_at(13), u64_at(21)),
            boot: m[29..65].try_into().ok()?,
        })
    }
}

/// One peer's stream while the rounds go on.
struct Talk {
    peer: u32,
    sock: TcpStream,
    keys: Keys,
    same: bool,
    inn: Option<Segment>,
    out: Option<Segment>,
    source: Option<Source>,
    peer_reads: bool,
}

impl Talk {
    fn say(&mut self, round: u8, body: &[u8]) -> std::io::Result<()> {
        let tag = blake3::keyed_hash(&self.keys.send, &[&[round][..], body].concat());
        let msg = [body, tag.as_bytes()].concat();
        // No SIGPIPE if the peer has gone (a C program need not ignore it).
        let sock = socket2::SockRef::from(&self.sock);
        let mut at = 0;
        while at < msg.len() {
            match sock.send_with_flags(&msg[at..], libc::MSG_NOSIGNAL) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => at += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The peer's message of `round`; `None` if its tag does not hold.
    fn hear(
        &mut self,
        round: u8,
        len: usize,
        deadline: Instant,
    ) -> std::io::Result<Option<Vec<u8>>> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.sock.set_read_timeout(Some(left))?;
        let mut m = vec![0u8; len + TAG];
        self.sock.read_exact(&mut m)?;
        let (body, tag) = m.split_at(len);
        let want = blake3::keyed_hash(&self.keys.recv, &[&[round][..], body].concat());
        if want != blake3::Hash::from_bytes(tag.try_into().unwrap_or([0; TAG])) {
            tracing::warn!(
                peer = self.peer,
                "shared-memory negotiation: a message altered in transit; keeping the network link"
            );
            return Ok(None);
        }
        Ok(Some(body.to_vec()))
    }
}

/// Run the rounds on every stream; the same-host peers' streams leave
/// `streams` and come back paired with their mapped rings.
pub(crate) fn pair_up(
    spec: &Spec,
    streams: &mut Vec<(u32, TcpStream, Keys)>,
) -> Result<Vec<Paired>, FormationError> {
    let deadline = Instant::now() + spec.timeout;
    let here = if spec.shared_memory {
        Host::here()
            .map_err(|e| tracing::warn!("shared memory off: cannot tell this host apart ({e})"))
            .ok()
    } else {
        None
    };
    let mut talks: Vec<Talk> = Vec::with_capacity(streams.len());
    for (peer, sock, keys) in streams.drain(..) {
        // Formation may leave it non-blocking; the rounds read with a
        // deadline instead.
        let _ = sock.set_nonblocking(false);
        talks.push(Talk {
            peer,
            sock,
            keys,
            same: false,
            inn: None,
            out: None,
            source: None,
            peer_reads: false,
        });
    }
    let result = rounds(here.as_ref(), &mut talks, deadline);
    let mut paired = Vec::new();
    for mut t in talks {
        // The descriptor goes once both sides have mapped it (or given up).
        if let Some(s) = t.inn.as_mut() {
            s.withdraw();
        }
        match (t.same, t.inn, t.out) {
            (true, Some(inn), Some(out)) if result.is_ok() => paired.push(Paired {
                peer: t.peer,
                sock: t.sock,
                inn,
                out,
                source: t.source,
                peer_reads: t.peer_reads,
            }),
            _ => streams.push((t.peer, t.sock, t.keys)),
        }
    }
    result.map(|()| paired)
}

fn rounds(
    here: Option<&Host>,
    talks: &mut [Talk],
    deadline: Instant,
) -> Result<(), FormationError> {
    let fail = |peer: u32| {
        move |e: std::io::Error| {
            io_fail(
                peer,
                std::io::Error::new(e.kind(), format!("shared-memory negotiation: {e}")),
            )
        }
    };
    // 1: offers. A peer whose probe this rank reads is one it can tell
    // alive, stopped or dead, and may take single copies from.
    let mine = offer(here);
    for t in talks.iter_mut() {
        t.say(1, &mine).map_err(fail(t.peer))?;
    }
    for t in talks.iter_mut() {
        let theirs = t.hear(1, OFFER, deadline).map_err(fail(t.peer))?;
        t.same = here.is_some() && theirs.as_deref().and_then(Host::decode).as_ref() == here;
        let probe = theirs.as_deref().and_then(probe_of);
        if let (true, Some((pid, addr, value))) = (t.same, probe) {
            t.source = Source::open(pid, addr, value)
                .map_err(|why| {
                    tracing::info!(
                        peer = t.peer,
                        "cannot read rank {}'s memory ({why}): no single copy from it, and a stopped process there is found by the deadline only",
                        t.peer
                    )
                })
                .ok();
        }
    }
    // 2: rings.
    let capacity = capacity_for(talks.iter().filter(|t| t.same).count());
    for t in talks.iter_mut() {
        let mut m = [0u8; RING];
        if t.same {
            match Segment::create(capacity, &ring_key(&t.keys.send, capacity)) {
                Ok(s) => {
                    if let Some(at) = s.locator() {
                        m = Ring {
                            at,
                            capacity,
                            reads: t.source.is_some(),
                        }
                        .encode();
                        t.inn = Some(s);
                    }
                }
                Err(e) => tracing::warn!(
                    peer = t.peer,
                    "no shared memory with rank {} (cannot make a ring: {e}); using the network link",
                    t.peer
                ),
            }
        }
        t.say(2, &m).map_err(fail(t.peer))?;
    }
    for t in talks.iter_mut() {
        let theirs = t.hear(2, RING, deadline).map_err(fail(t.peer))?;
        let (Some(m), true, true) = (theirs, t.same, t.inn.is_some()) else {
            continue;
        };
        let Some(ring) = Ring::decode(&m) else {
            continue;
        };
        t.peer_reads = ring.reads;
        // The peer's segment is bound to the key of its sending direction,
        // which is this side's receiving one.
        match Segment::open(ring.at, ring.capacity, &ring_key(&t.keys.recv, ring.capacity)) {
            Ok(s) => t.out = Some(s),
            Err(e) => tracing::warn!(
                peer = t.peer,
                "no shared memory with rank {} (refused the ring it named, /proc/{}/fd/{}: {e}); using the network link",
                t.peer,
                ring.at.0,
                ring.at.1
            ),
        }
    }
    // 3: mapped or not.
    for t in talks.iter_mut() {
        t.say(3, &[u8::from(t.out.is_some())])
            .map_err(fail(t.peer))?;
    }
    for t in talks.iter_mut() {
        let theirs = t.hear(3, MAPPED, deadline).map_err(fail(t.peer))?;
        let mapped = theirs.is_some_and(|m| m[0] == 1);
        if t.same && t.out.is_some() && !mapped {
            tracing::warn!(
                peer = t.peer,
                "rank {} could not map this rank's ring; using the network link",
                t.peer
            );
        }
        t.same = t.same && t.out.is_some() && mapped;
        if !t.same {
            t.out = None;
        }
    }
    for t in talks.iter_mut() {
        t.sock.set_read_timeout(None).map_err(fail(t.peer))?;
    }
    Ok(())
}

/// The key a ring segment is bound to (`region.rs`), from one direction's
/// session key: only the link's two ends know it, and no other link's
/// segment, nor any file another process made, carries it.
fn ring_key(session: &[u8; 32], capacity: usize) -> [u8; 32] {
    let mut m = b"meshwork ring segment v1".to_vec();
    m.extend_from_slice(&(capacity as u64).to_le_bytes());
    *blake3::keyed_hash(session, &m).as_bytes()
}

/// A ring message: where the peer opens the segment, its capacity, and
/// whether the sender can read the peer's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ring {
    at: Locator,
    capacity: usize,
    reads: bool,
}

impl Ring {
    fn encode(&self) -> [u8; RING] {
        let mut m = [0u8; RING];
        m[0] = 1;
        m[1..5].copy_from_slice(&self.at.0.to_le_bytes());
        m[5..9].copy_from_slice(&self.at.1.to_le_bytes());
        m[9..17].copy_from_slice(&(self.capacity as u64).to_le_bytes());
        m[17] = u8::from(self.reads);
        m
    }

    /// `None` for "no ring", or a message that is not one.
    fn decode(m: &[u8]) -> Option<Ring> {
        let m = m.get(..RING)?;
        if m[0] != 1 || m[17] > 1 {
            return None;
        }
        let u32_at = |i: usize| Some(u32::from_le_bytes(m.get(i..i + 4)?.try_into().ok()?));
        let cap = u64::from_le_bytes(m[9..17].try_into().ok()?);
        Some(Ring {
            at: (u32_at(1)?, u32_at(5)?),
            capacity: usize::try_from(cap).ok()?,
            reads: m[17] == 1,
        })
    }
}

/// Fuzzing entry point: the offer and the ring message decode without a
/// panic, and what decodes is what would be acted on.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn fuzz_negotiation(data: &[u8]) {
    if let Some(h) = Host::decode(data) {
        assert_eq!(Host::encode(Some(&h)), data[..HOST]);
    }
    if let Some((pid, addr, value)) = probe_of(data) {
        assert_eq!(
            data[HOST..OFFER],
            [&pid.to_le_bytes()[..], &addr.to_le_bytes(), &value].concat()
        );
    }
    if let Some(d) = copy::Descriptor::decode(data, data.len() as u64) {
        assert!(d.parts.len() <= copy::MAX_PARTS);
        assert_eq!(d.parts.iter().map(|p| p.1).sum::<u64>(), data.len() as u64);
    }
    if let Some(ring) = Ring::decode(data) {
        assert_eq!(ring.encode()[..], data[..RING]);
    }
}

/// Bytes the rounds put on a stream each way (a hand-made peer in a test
/// passes them through or speaks them).
pub const NEGOTIATION_LEN: usize = OFFER + RING + MAPPED + 3 * TAG;

/// Speak the rounds as a rank with shared memory off: a test's hand-made
/// peer.
#[cfg(test)]
pub(crate) fn decline(sock: &TcpStream, keys: &Keys) -> std::io::Result<()> {
    let mut t = Talk {
        peer: 0,
        sock: sock.try_clone()?,
        keys: Keys {
            send: keys.send,
            recv: keys.recv,
        },
        same: false,
        inn: None,
        out: None,
        source: None,
        peer_reads: false,
    };
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    t.say(1, &offer(None))?;
    t.hear(1, OFFER, deadline)?;
    t.say(2, &[0; RING])?;
    t.hear(2, RING, deadline)?;
    t.say(3, &[0])?;
    t.hear(3, MAPPED, deadline)?;
    t.sock.set_read_timeout(None)
}

/// What a test's hand-made same-host peer names as its ring in round 2.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Claim {
    /// A ring of its own, bound to the link: an honest peer.
    Own,
    /// The ring the peer named for itself (its own inbound ring).
    Peers,
    /// A ring of its own, bound to another link's key.
    OtherLinks,
}

/// What a test's hand-made same-host peer ends the rounds with.
#[cfg(test)]
#[derive(Debug)]
pub(super) struct Handmade {
    /// The ring it made, which the peer writes (its descriptor still open).
    pub inn: Option<Segment>,
    /// The peer's ring, mapped here, which it writes.
    pub out: Option<Segment>,
    /// Whether the peer said it mapped the ring named.
    pub mapped: bool,
}

/// Speak the rounds as a rank of this host (with this process's probe,
/// and saying it can read the peer's memory), naming in round 2 what
/// `claim` says, after hearing the peer's: a test's hand-made member.
#[cfg(test)]
pub(super) fn pair_by_hand(
    sock: &TcpStream,
    keys: &Keys,
    claim: Claim,
) -> std::io::Result<Handmade> {
    let mut t = Talk {
        peer: 0,
        sock: sock.try_clone()?,
        keys: keys.clone(),
        same: true,
        inn: None,
        out: None,
        source: None,
        peer_reads: false,
    };
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    let here = Host::here()?;
    t.say(1, &offer(Some(&here)))?;
    t.hear(1, OFFER, deadline)?;
    let theirs = t.hear(2, RING, deadline)?.as_deref().and_then(Ring::decode);
    let cap = theirs.map_or(capacity_for(1), |r| r.capacity);
    let own = |key: &[u8; 32]| Segment::create(cap, &ring_key(key, cap));
    let inn = match claim {
        Claim::Own => Some(own(&keys.send)?),
        Claim::OtherLinks => Some(own(&[7; 32])?),
        Claim::Peers => None,
    };
    let named = match claim {
        Claim::Peers => theirs.map(|r| r.at),
        _ => inn.as_ref().and_then(Segment::locator),
    };
    let m = named.map_or([0; RING], |at| {
        Ring {
            at,
            capacity: cap,
            reads: true,
        }
        .encode()
    });
    t.say(2, &m)?;
    let out = theirs
        .and_then(|r| Segment::open(r.at, r.capacity, &ring_key(&keys.recv, r.capacity)).ok());
    t.say(3, &[u8::from(out.is_some())])?;
    let mapped = t.hear(3, MAPPED, deadline)?.is_some_and(|m| m[0] == 1);
    t.sock.set_read_timeout(None)?;
    Ok(Handmade { inn, out, mapped })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_match_only_on_the_same_host() {
        let here = Host::here().expect("host");
        let m = Host::encode(Some(&here));
        assert_eq!(m.len(), HOST);
        assert_eq!(offer(Some(&here)).len(), OFFER);
        assert_eq!(Host::decode(&m), Some(here.clone()));
        assert_eq!(Host::decode(&Host::encode(None)), None, "off");
        let mut other = here.clone();
        other.netns.1 ^= 1;
        assert_ne!(
            Host::decode(&Host::encode(Some(&other))),
            Some(here.clone())
        );
        assert_eq!(Host::decode(&[0u8; OFFER]), None, "garbage");
        let (pid, _, value) = probe_of(&offer(Some(&here))).expect("probe");
        assert_eq!(pid, std::process::id());
        assert_ne!(value, [0; 16]);
        assert_eq!(probe_of(&offer(None)), Some((0, 0, [0; 16])), "off");
    }
}
