//! Which peers share this host, and their rings: three short rounds on
//! every authenticated formation stream, right after the token handshake.
//!
//! 1. Offer: shared memory on or off here, user id, network namespace and
//!    kernel boot id. Two ranks share a host when both are on and all
//!    three match (two network-namespace hosts on one machine do not).
//!    With them, the process id and the address of a random probe value
//!    (`copy.rs`), and the value.
//! 2. Ring: each rank that shares the host creates the segment of the
//!    ring it will read from the peer (`ring.rs`) and sends its path and
//!    capacity (nothing, if it could not: no `/dev/shm`, a full tmpfs),
//!    and whether it could read the peer's probe out of the peer's memory
//!    (then the peer may hand it large messages by single copy).
//! 3. Mapped: each maps the peer's and says whether it could. Both must,
//!    or both keep the network link; each then unlinks its own file.
//!
//! Every rank writes a round on every stream before it reads any, so the
//! rounds cannot wait on each other in a cycle. Each message carries a
//! keyed BLAKE3 tag under the link's session keys: what a third party
//! changes on the way is refused (the pair then keeps the network link).
//! The stream then stays open as the shared-memory link's doorbell and
//! liveness signal.

use super::copy::{self, Source};
use super::ring::{capacity_for, Segment};
use crate::auth::handshake::Keys;
use crate::form::{io_fail, FormationError};
use crate::spec::Spec;
use std::io::Read;
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::time::Instant;

const MAGIC: &[u8; 8] = b"mwshm002";
const TAG: usize = 32;
const HOST: usize = 8 + 1 + 4 + 8 + 8 + 36;
const OFFER: usize = HOST + 4 + 8 + 16;
const PATH_MAX: usize = 96;
const RING: usize = 1 + PATH_MAX + 8 + 1;
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
    let result = rounds(spec, here.as_ref(), &mut talks, deadline);
    let mut paired = Vec::new();
    for mut t in talks {
        // The file goes once both sides have mapped it (or given up).
        if let Some(s) = t.inn.as_mut() {
            s.unlink();
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
    spec: &Spec,
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
    if talks.iter().any(|t| t.same) {
        sweep_stale();
    }
    let capacity = capacity_for(talks.iter().filter(|t| t.same).count());
    for t in talks.iter_mut() {
        let mut m = [0u8; RING];
        if t.same {
            let path = format!(
                "/dev/shm/meshwork-{}-r{}-p{}-{:016x}",
                std::process::id(),
                spec.rank,
                t.peer,
                random()
            );
            match Segment::create(&path, capacity) {
                Ok(s) => {
                    m[0] = path.len() as u8;
                    m[1..1 + path.len()].copy_from_slice(path.as_bytes());
                    m[1 + PATH_MAX..RING - 1].copy_from_slice(&(capacity as u64).to_le_bytes());
                    m[RING - 1] = u8::from(t.source.is_some());
                    t.inn = Some(s);
                }
                Err(e) => tracing::warn!(
                    peer = t.peer,
                    "no shared memory with rank {} (cannot create {path}: {e}); using the network link",
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
        let Some((path, cap)) = parse_ring(&m) else {
            continue;
        };
        t.peer_reads = m[RING - 1] == 1;
        match Segment::open(path, cap) {
            Ok(s) => t.out = Some(s),
            Err(e) => tracing::warn!(
                peer = t.peer,
                "no shared memory with rank {} (cannot map {path}: {e}); using the network link",
                t.peer
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

/// A ring message's path and capacity: `None` for "no ring", or for a
/// path outside meshwork's names in `/dev/shm`.
fn parse_ring(m: &[u8]) -> Option<(&str, usize)> {
    let n = usize::from(*m.first()?);
    if n == 0 || n > PATH_MAX || m.len() < RING {
        return None;
    }
    let cap = u64::from_le_bytes(m[1 + PATH_MAX..RING - 1].try_into().ok()?);
    let path = std::str::from_utf8(&m[1..1 + n]).ok()?;
    let ours =
        path.starts_with("/dev/shm/meshwork-") && !path.contains("..") && !path[9..].contains('/');
    ours.then_some((path, usize::try_from(cap).ok()?))
}

/// Fuzzing entry point: the offer and the ring message decode without a
/// panic, and what decodes is what would be acted on.
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
    if let Some((path, _cap)) = parse_ring(data) {
        assert!(path.starts_with("/dev/shm/meshwork-") && !path.contains(".."));
        assert!(path.len() <= PATH_MAX);
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

/// Remove ring files of this user's left by processes that died between
/// creating and unlinking them (a crash during formation): files named
/// for a process id that no longer exists.
fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    // SAFETY: `geteuid` has no preconditions.
    let me = unsafe { libc::geteuid() };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("meshwork-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        let mine = entry.metadata().is_ok_and(|m| m.uid() == me);
        // SAFETY: signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if mine && gone && pid > 0 {
            tracing::debug!(file = ?name, "removing a ring file its creator left");
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

pub(super) fn random() -> u64 {
    let mut b = [0u8; 8];
    // A name collision only makes `create` fail (O_EXCL): then the pair
    // keeps the network link.
    let _ = getrandom::getrandom(&mut b);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_files_of_dead_processes_are_swept_and_live_ones_kept() {
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let dead = child.id();
        child.wait().expect("reap");
        let stale = format!("/dev/shm/meshwork-{dead}-r0-p1-test");
        let live = format!("/dev/shm/meshwork-{}-r0-p1-test", std::process::id());
        for p in [&stale, &live] {
            std::fs::write(p, b"x").expect("write");
        }
        sweep_stale();
        assert!(
            !std::path::Path::new(&stale).exists(),
            "a dead process's file stays"
        );
        assert!(
            std::path::Path::new(&live).exists(),
            "a live process's file went"
        );
        std::fs::remove_file(&live).expect("remove");
    }

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
