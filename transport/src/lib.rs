//! meshwork's wire: per-peer ordered lanes.
//!
//! A [`Transport`] moves messages between the ranks of one job. Every message
//! travels on a lane, keyed by [`LaneKey`] `(communicator, kind, tag)`; each
//! lane is FIFO per sender, and lanes never block each other, so a
//! collective's traffic, user point-to-point messages, RPC and control never
//! match one another's receives.
//!
//! Implementations: [`mem::MemHub`] (in-process worlds and tests) and
//! [`LinkTransport`], made by [`connect`] from a [`Spec`]: one socket-free
//! core (`link/`) over one link per peer — TCP (`tcp/`), or QUIC with mutual
//! TLS and a TCP sidecar for large payloads (`quic/`).
//!
//! | module | what |
//! |---|---|
//! | `wire/` | frame header, the one frame assembler, little-endian codecs: pure functions |
//! | `auth/` | token handshake, sealing, cluster CA and leaves |
//! | `form/` | who dials whom, dial/accept/back-off, refusing latecomers |
//! | `link/` | the core: dispatch (with the checks a member is held to), credits, lane depth, liveness, relay, `trait Link`, the `Transport` impl |
//! | `tcp/`, `quic/`, `shm/` | the links; only [`connect`], here, names them |
//! | `seed/` | seed bootstrap: wire, server, client |

mod auth;
mod form;
mod form_error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod inbox;
mod link;
pub mod mem;
mod pool;
mod quic;
mod route;
pub mod seed;
mod shm;
pub use shm::SharedRegion;
/// Shared memory: the size from which a message is copied once, straight
/// from the sender's memory (`Spec::shm_single_copy`).
pub use shm::DEFAULT_SINGLE_COPY as DEFAULT_SHM_SINGLE_COPY;
/// Bytes of the same-host negotiation each way after a formation
/// handshake (for tests that relay formation streams byte by byte).
#[doc(hidden)]
pub use shm::NEGOTIATION_LEN as SHM_NEGOTIATION_LEN;
mod spec;
mod tcp;
mod wire;

/// The tag of authenticated frames, for `benches/mac.rs` only.
#[doc(hidden)]
pub use auth::frame_mac::FrameMac;
/// The hello's settings-word bits for receive bounds (for tests that
/// speak the handshake by hand).
#[doc(hidden)]
pub use auth::handshake::bounds_word as hello_bounds_word;
pub use auth::handshake::PROTOCOL_VERSION;
pub use auth::kdf;
pub use auth::tls::{ClusterCa, RankIdentity};
pub use form::FormationError;
pub use inbox::{LANES_PER_SENDER, LANE_DEPTH, SEQ_WINDOW};
pub use link::{pipe_world, pipe_world_with_net, LinkTransport, PipeNet};
pub use pool::BufferPool;
pub use quic::{DEFAULT_SIDECAR_THRESHOLD, MIN_THRESHOLD as MIN_SIDECAR_THRESHOLD};
pub use route::ShapeError;
pub use spec::{Backend, BoundSockets, Shape, Spec};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Form this rank's links as `spec` says; returns once every link is up.
pub fn connect(spec: &Spec) -> Result<LinkTransport, FormationError> {
    // Peers on this host get a shared-memory link, whichever backend
    // links the others.
    let upgrade: crate::form::Upgrade = crate::shm::upgrade;
    match spec.backend {
        Backend::Tcp => crate::tcp::connect(spec, upgrade),
        Backend::Quic { sidecar_threshold } => {
            crate::quic::connect(spec, sidecar_threshold, upgrade)
        }
    }
}

/// What a lane carries; each kind has its own tag space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum LaneKind {
    /// One collective call: the tag is the call's sequence number.
    Collective = 0,
    /// User point-to-point messages: the tag is the user's.
    PointToPoint = 1,
    /// RPC requests and responses.
    Rpc = 2,
    /// Group control (shutdown, heartbeats).
    Control = 3,
    /// Messages the receiver matches itself (the MPI ABI's): one lane per
    /// communicator, tag 0. Each message starts with a word of
    /// [`MATCHED_WORD`] bytes (the MPI envelope) that travels in its frame
    /// header's tag field, not in the payload: a message of up to 8 bytes
    /// after its word is as small on the wire as one of up to 8 bytes on
    /// any other lane (one cache line in shared memory). The receiver gets
    /// the word back as the message's first bytes.
    Matched = 4,
}

/// Bytes of the word every message on a [`LaneKind::Matched`] lane
/// starts with.
pub const MATCHED_WORD: usize = 8;

impl LaneKind {
    /// The inverse of `kind as u8`.
    pub fn from_u8(v: u8) -> Option<LaneKind> {
        match v {
            0 => Some(LaneKind::Collective),
            1 => Some(LaneKind::PointToPoint),
            2 => Some(LaneKind::Rpc),
            3 => Some(LaneKind::Control),
            4 => Some(LaneKind::Matched),
            _ => None,
        }
    }
}

/// A lane: messages with equal keys from one sender arrive in order.
///
/// | field | bits | meaning |
/// |---|---|---|
/// | `comm` | 64 | communicator id: 0 for the world group, derived for splits |
/// | `kind` | 8 | [`LaneKind`] |
/// | `tag` | 64 | collective sequence number, user tag, or control code (0 on a matched lane) |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaneKey {
    pub comm: u64,
    pub kind: LaneKind,
    pub tag: u64,
}

/// A message of `len` bytes may go on lane kind `kind`: on a matched lane
/// it holds at least its word (every transport checks this before it
/// sends anything).
pub(crate) fn holds_its_word(kind: LaneKind, len: usize) -> Result<(), TransportError> {
    if kind == LaneKind::Matched && len < MATCHED_WORD {
        return Err(TransportError::NoWord { len });
    }
    Ok(())
}

/// A matched lane's message split for the wire: its word (the first
/// [`MATCHED_WORD`] bytes of `parts`, little-endian) and the parts after
/// it. `None` if the parts hold less than a word. (A word sent as a part
/// of its own, as the MPI ABI sends it, is split where it is sent, with
/// nothing allocated.)
pub(crate) fn matched_word<'a>(parts: &[&'a [u8]]) -> Option<(u64, Vec<&'a [u8]>)> {
    let mut word = [0u8; MATCHED_WORD];
    let mut got = 0;
    let mut rest = Vec::with_capacity(parts.len());
    for p in parts {
        let take = (MATCHED_WORD - got).min(p.len());
        word[got..got + take].copy_from_slice(&p[..take]);
        got += take;
        if take < p.len() {
            rest.push(&p[take..]);
        }
    }
    (got == MATCHED_WORD).then(|| (u64::from_le_bytes(word), rest))
}

/// Copy `msg` (exactly `head.len() + body.len()` bytes) into `head`,
/// then `body`.
pub(crate) fn split_into(msg: &[u8], head: &mut [u8], body: &mut [u8]) {
    let (h, b) = msg.split_at(head.len());
    head.copy_from_slice(h);
    body.copy_from_slice(b);
}

/// A received message's bytes, with a movable start so a protocol header can
/// be stripped without copying the payload. A payload taken from a
/// [`BufferPool`] returns its buffer there when dropped.
#[derive(Default)]
pub struct Payload {
    bytes: Vec<u8>,
    start: usize,
    pool: Option<Arc<BufferPool>>,
}

impl Payload {
    /// Concatenate `parts` into one owned message.
    pub fn from_parts(parts: &[&[u8]]) -> Payload {
        Payload::from_parts_in(parts, None)
    }

    /// Concatenate `parts` into a buffer from `pool` (if given), which gets
    /// the buffer back when the payload is dropped.
    pub fn from_parts_in(parts: &[&[u8]], pool: Option<&Arc<BufferPool>>) -> Payload {
        Payload::concat_in(parts.iter().copied(), pool)
    }

    /// [`from_parts_in`](Self::from_parts_in) for pieces that are not in
    /// a slice (a header before a message's parts), with nothing allocated
    /// but the buffer.
    pub(crate) fn concat_in<'a>(
        parts: impl Iterator<Item = &'a [u8]> + Clone,
        pool: Option<&Arc<BufferPool>>,
    ) -> Payload {
        let len = parts.clone().map(<[u8]>::len).sum();
        let mut bytes = match pool {
            Some(pool) => pool.take(len),
            None => Vec::with_capacity(len),
        };
        for part in parts {
            bytes.extend_from_slice(part);
        }
        Payload {
            bytes,
            start: 0,
            pool: pool.cloned(),
        }
    }

    /// Wrap a filled buffer (from [`BufferPool::take_filled`]) that returns
    /// to `pool` when dropped.
    pub fn from_vec_in(bytes: Vec<u8>, pool: Option<&Arc<BufferPool>>) -> Payload {
        Payload {
            bytes,
            start: 0,
            pool: pool.cloned(),
        }
    }

    /// Put `front` before the bytes: in the room a stripped header left
    /// (no copy), else in a new buffer from `pool`.
    pub(crate) fn put_front(&mut self, front: &[u8], pool: &Arc<BufferPool>) {
        if self.start >= front.len() {
            self.start -= front.len();
            self.bytes[self.start..self.start + front.len()].copy_from_slice(front);
            return;
        }
        let joined = Payload::from_parts_in(&[front, self.as_ref()], Some(pool));
        *self = joined;
    }

    /// Drop the first `n` bytes (clamped to the length).
    pub fn advance(&mut self, n: usize) {
        self.start = (self.start + n).min(self.bytes.len());
    }

    /// Bytes left.
    pub fn len(&self) -> usize {
        self.bytes.len() - self.start
    }

    /// Whether no bytes are left.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[self.start..]
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give(std::mem::take(&mut self.bytes));
        }
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self.as_ref() == other.as_ref()
    }
}

impl Eq for Payload {}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Payload({} bytes)", self.len())
    }
}

/// What carries a rank's traffic to one peer ([`Transport::links`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LinkKind {
    /// This rank itself.
    Local,
    /// Another rank of the same in-process world (`meshwork::local`).
    Memory,
    /// Shared memory on this host.
    SharedMemory,
    /// A TCP connection.
    Tcp,
    /// A QUIC connection (with its TCP sidecar for large payloads).
    Quic,
    /// No link of its own: the traffic is relayed through another rank
    /// (a star's coordinator).
    Relayed,
}

/// Traffic with one peer, as this rank sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// Messages this rank sent to the peer.
    pub sent_messages: u64,
    /// Payload bytes this rank sent to the peer.
    pub sent_bytes: u64,
    /// Messages received from the peer.
    pub received_messages: u64,
    /// Payload bytes received from the peer.
    pub received_bytes: u64,
    /// Bytes from the peer received but not yet taken by a receive.
    pub queued_bytes: u64,
    /// The most `queued_bytes` has been.
    pub max_queued_bytes: u64,
    /// Messages the peer copied straight out of this process's memory
    /// (same-host shared memory, `SHM_SINGLE_COPY`), of `sent_messages`.
    pub single_copy_messages: u64,
}

/// Default deadline of every blocking call: 60 s without progress.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Default liveness: a linked peer that sends nothing, not even a
/// heartbeat (four a second), for a second counts as failed. The I/O
/// threads send the heartbeats, so a rank busy in its own code for
/// minutes keeps beating; what stops them is a frozen process, a cut
/// link or a dead host.
pub const DEFAULT_LIVENESS: Duration = Duration::from_secs(1);

/// Default largest message sent or accepted: 16 GiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: u64 = 16 << 30;

/// Default bytes of point-to-point and RPC messages one sender may have
/// queued at one receiver before it waits for the receiver to take them.
pub const DEFAULT_PEER_BUDGET: u64 = 64 << 20;

/// Why a transport operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// Nothing arrived from `waiting_on` within the deadline.
    #[error("no message from rank {waiting_on} within the deadline")]
    Timeout { waiting_on: u32 },
    /// `rank` is gone (its endpoint closed, reset or exited) and nothing more
    /// from it is queued.
    #[error("rank {rank} disconnected")]
    PeerDisconnected { rank: u32 },
    /// This endpoint was closed.
    #[error("transport closed")]
    Closed,
    /// `rank` is not in `0..world`.
    #[error("rank {rank} is not in this world of {world}")]
    NoSuchRank { rank: u32, world: u32 },
    /// The next message from `from` has `got` bytes, not `want`; it stays
    /// queued.
    #[error("the next message from rank {from} has {got} bytes, not {want}")]
    LengthMismatch { from: u32, got: usize, want: usize },
    /// A message of `len` bytes is over the cap of `max`; refused before
    /// anything was allocated or sent.
    #[error("message of {len} bytes exceeds the cap of {max} bytes")]
    MessageTooLarge { len: u64, max: u64 },
    /// The communicator was revoked (here or by a peer).
    #[error("the communicator was revoked")]
    Revoked,
    /// A message of `len` bytes on a matched lane, whose messages start
    /// with a word of [`MATCHED_WORD`] bytes; refused before anything was
    /// sent.
    #[error("a message of {len} bytes on a matched lane, whose messages start with an {MATCHED_WORD}-byte word")]
    NoWord { len: usize },
}

/// Answers some requests on the thread that reads them off a link (an
/// I/O thread, or a caller reading its link itself), so a request needs
/// no hand-off to another thread: the one-sided operations' requests.
/// It must not block: it runs where the link's frames are read.
pub trait Answerer: Send + Sync {
    /// Answer `request` from `src` here if it is one answered at once:
    /// before acting on it, ask `room` for room for the answer (its lane
    /// and length; a `false` leaves the request to the inbox, as any
    /// message, untouched). The answer's lane and bytes, or `None`: the
    /// request goes to the inbox.
    fn answer(
        &self,
        src: u32,
        request: &[u8],
        room: &mut dyn FnMut(LaneKey, usize) -> bool,
    ) -> Option<(LaneKey, Vec<u8>)>;
}

/// Per-peer ordered lanes between the ranks of one job.
pub trait Transport: Send + Sync + fmt::Debug {
    /// This endpoint's rank.
    fn rank(&self) -> u32;
    /// Number of ranks.
    fn world(&self) -> u32;
    /// Queue the concatenation of `parts` for `dst` on `key`; returns once
    /// the bytes are buffered (the caller may reuse its buffers).
    fn send(&self, dst: u32, key: LaneKey, parts: &[&[u8]]) -> Result<(), TransportError>;
    /// The next message from `src` on `key`; fails when `src` makes no
    /// progress for `timeout`. With `want_len`, a message of another length
    /// stays queued and the call fails with `LengthMismatch`. A failed
    /// receive consumes nothing.
    fn recv(
        &self,
        src: u32,
        key: LaneKey,
        timeout: Duration,
        want_len: Option<usize>,
    ) -> Result<Payload, TransportError>;
    /// [`recv`](Self::recv) of a message of exactly `head.len() +
    /// body.len()` bytes into `head`, then `body`. A transport whose link
    /// reads the message while this call waits for it reads it there
    /// directly (the one copy on this side is the kernel's); otherwise
    /// the message is received and copied. A message of another length
    /// stays queued (`LengthMismatch`); on any error the buffers' contents
    /// are unspecified.
    fn recv_into(
        &self,
        src: u32,
        key: LaneKey,
        timeout: Duration,
        head: &mut [u8],
        body: &mut [u8],
    ) -> Result<(), TransportError> {
        let msg = self.recv(src, key, timeout, Some(head.len() + body.len()))?;
        split_into(msg.as_ref(), head, body);
        Ok(())
    }
    /// This rank issued collective `seq` on communicator `comm`: messages
    /// for sequence numbers far beyond it (`SEQ_WINDOW`) are refused.
    fn note_collective(&self, comm: u64, seq: u64);
    /// Per-peer traffic counters, by rank.
    fn stats(&self) -> Vec<PeerStats>;
    /// What carries the traffic to each rank, by rank.
    fn links(&self) -> Vec<LinkKind>;
    /// The deadline of waits inside the transport (a sender waiting for
    /// room at its receiver); it also caps the liveness limit.
    fn set_timeout(&self, timeout: Duration);
    /// The next message on `key` from any rank (RPC requests), waiting at
    /// most `timeout`; returns the sender with it.
    fn recv_any(&self, key: LaneKey, timeout: Duration) -> Result<(u32, Payload), TransportError>;
    /// Close this endpoint: peers waiting on it see `PeerDisconnected` once
    /// they have drained what it sent; its own calls return `Closed`.
    fn close(&self);
    /// This rank is done with communicator `comm` while the endpoint
    /// stays open for others (its group was shut down or dropped): waits
    /// on its lanes end with `Closed`, what is queued for it is dropped,
    /// and what arrives for it later is dropped too, its credit returned
    /// to the sender, so a peer still sending on it costs nothing here.
    fn forget(&self, comm: u64) {
        let _ = comm;
    }
    /// How often `peer` came back on a new link: a fleet's worker that
    /// returned, or its coordinator (`Spec::fleet`); 0 elsewhere.
    fn incarnation(&self, peer: u32) -> u64 {
        let _ = peer;
        0
    }
    /// Ranks this endpoint knows have failed, ascending: gone without a
    /// goodbye (reset, EOF, exited), silent for the liveness limit, or a
    /// same-host process stopped that long.
    fn failed(&self) -> Vec<u32> {
        Vec::new()
    }
    /// [`failed`](Self::failed) in the order they failed, the first first:
    /// a failure is the first one's (a rank that exits on the error the
    /// first caused fails after it).
    fn failed_in_order(&self) -> Vec<u32> {
        self.failed()
    }
    /// Whether a message from `src` on `key` is queued here (nothing is
    /// taken).
    fn queued(&self, src: u32, key: LaneKey) -> bool {
        let _ = (src, key);
        false
    }
    /// Ranks that said goodbye (shut their group down, or dropped it) and
    /// whose links have ended: they left, they did not fail.
    fn left(&self) -> Vec<u32> {
        Vec::new()
    }
    /// How long a linked peer may be silent before it counts as failed
    /// ([`Spec::liveness`], at most the deadline).
    fn liveness(&self) -> Duration {
        DEFAULT_LIVENESS
    }
    /// Revoke communicator `comm` here and at every rank this endpoint
    /// reaches (each passes it on once, so it arrives even if this rank
    /// dies while sending it): every wait on its lanes, now and later,
    /// fails with `Revoked`.
    fn revoke(&self, comm: u64);
    /// Whether `comm` was revoked (here or by a peer).
    fn is_revoked(&self, comm: u64) -> bool;
    /// A view of another transport (a sub-group's): that transport and the
    /// ranks of it this one's ranks are. Views of views are made of the
    /// transport underneath, so closing a view never cuts off another.
    fn view_of(&self) -> Option<(Arc<dyn Transport>, Vec<u32>)> {
        None
    }
    /// A collective of communicator `comm` needs every one of `members`:
    /// its waits fail as soon as one of them is known failed, naming it,
    /// instead of waiting out the deadline behind a neighbour.
    fn collective_members(&self, comm: u64, members: &[u32]) {
        let _ = (comm, members);
    }
    /// [`failed`](Self::failed), waiting up to `timeout` for a failure to
    /// become known if none is yet (or until `comm` is revoked).
    fn await_failure(&self, comm: u64, timeout: Duration) -> Vec<u32> {
        let _ = (comm, timeout);
        self.failed()
    }
    /// Whether `rank` is known failed here, waiting up to `timeout` for
    /// this rank's own failure detector to learn it (a member's word
    /// that `rank` failed is checked against it, never taken as is).
    fn await_failure_of(&self, rank: u32, timeout: Duration) -> bool {
        let _ = timeout;
        self.failed().contains(&rank)
    }
    /// The largest message this endpoint sends or takes (`MAX_MESSAGE_BYTES`).
    fn max_message_bytes(&self) -> u64 {
        u64::MAX
    }
    /// Whether `rank` is known gone (a cheap [`failed`](Self::failed)
    /// for one rank, without looking for stopped processes).
    fn is_gone(&self, rank: u32) -> bool {
        self.failed().contains(&rank)
    }
    /// Answer requests on lane `key` with `answerer` where they are read
    /// (see [`Answerer`]); `false`: this transport cannot, and they go to
    /// the inbox as any message.
    fn set_answerer(&self, key: LaneKey, answerer: Arc<dyn Answerer>) -> bool {
        let _ = (key, answerer);
        false
    }
}
