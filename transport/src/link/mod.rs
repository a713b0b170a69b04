//! The endpoint core: everything about moving messages between ranks that
//! does not depend on what carries the bytes.
//!
//! A rank's [`Core`] holds its inbox, the credits and lane depths it owes
//! and is owed, liveness (silence, peers gone), the routes (a star worker
//! reaches everyone through the coordinator, which relays; on a sparse
//! shape every rank relays along `route.rs`'s paths), and one
//! [`Link`] per linked peer. Backends (`tcp/`, `quic/`) implement `Link`;
//! they hand every frame they decode to the core's dispatch
//! (`dispatch.rs`), which checks what a token-holding member may send on
//! that link before acting on it. The [`Transport`](crate::Transport)
//! impl is written once, over the core (`transport.rs`). Nothing here
//! names a socket.

mod answer;
mod budget;
mod dispatch;
mod lanes;
mod latch;
mod pipe;
mod protocol;
mod reader;
#[cfg(test)]
mod sim;
mod transport;
mod watch;

#[cfg(test)]
pub(crate) use answer::testing;
pub(crate) use answer::AnswerSpin;
use answer::Answerers;
pub(crate) use budget::{heartbeat_interval, Budget};
pub(crate) use dispatch::Next;
pub(crate) use latch::Latch;
pub use pipe::{world as pipe_world, world_with_net as pipe_world_with_net, PipeNet};
pub(crate) use protocol::{Carried, ProtocolError};
pub(crate) use reader::{Fed, ReadError, Reader};
pub(crate) use transport::Background;
pub use transport::LinkTransport;
pub(crate) use watch::Watch;

use crate::inbox::{Cores, Inbox};
use crate::route::Shape;
use crate::wire::{FrameType, Header};
use crate::{BufferPool, LaneKey, LinkKind, Payload, TransportError};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

/// What a peer-gone notice says of its rank (its header's `aux`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Gone {
    /// Gone without a goodbye.
    Failed = 0,
    /// Silent for a whole deadline (or, on its host, stopped).
    Silent = 1,
    /// It said goodbye: it left.
    Left = 2,
    /// Heard again after a silence (a sparse shape's notice).
    Heard = 3,
}

impl Gone {
    /// What a notice's `aux` says (an unknown value: failed).
    pub(crate) fn from_aux(aux: u32) -> Gone {
        match aux {
            1 => Gone::Silent,
            2 => Gone::Left,
            3 => Gone::Heard,
            _ => Gone::Failed,
        }
    }
}

/// One peer's link, as the core sees it. A backend's link owns its
/// connection(s) and threads; the core only asks it to move frames.
pub(crate) trait Link: Send + Sync + fmt::Debug {
    /// What carries this link's traffic.
    fn kind(&self) -> LinkKind;
    /// Send a frame this rank originates (`header`, then `parts`) towards
    /// `dst`, waiting within the deadline for room.
    fn send(
        &self,
        core: &Core,
        header: Header,
        parts: &[&[u8]],
        dst: u32,
    ) -> Result<(), TransportError>;
    /// Forward a frame another rank sent (a star coordinator's relay, a
    /// credit, a notice) without blocking.
    fn forward(&self, core: &Core, header: Header, payload: Payload);
    /// Reserve room for a frame of `len` payload bytes in what this link
    /// may have queued for writing (`Spec::send_budget_bytes`), without
    /// waiting: `None` when there is none now. Only the link's own writes
    /// give it back, so its peer cannot move it: a frame queued within it
    /// (an answer, `answer.rs`) is bounded whatever the peer does. A link
    /// that queues nothing for writing always has room.
    fn reserve(&self, len: usize) -> Option<Reservation> {
        Some(Reservation { len, bytes: 0 })
    }
    /// [`forward`](Self::forward) a frame within `room` (from
    /// [`reserve`](Self::reserve)), given back once the frame is written
    /// or the link has ended.
    fn forward_reserved(&self, core: &Core, header: Header, payload: Payload, room: Reservation) {
        self.unreserve(room);
        self.forward(core, header, payload);
    }
    /// Give back `room` unused.
    fn unreserve(&self, room: Reservation) {
        let _ = room;
    }
    /// Bytes queued on the link for writing and not yet written: what a
    /// peer that reads nothing makes this rank hold (a test's view).
    #[cfg(test)]
    fn queued_bytes(&self) -> usize {
        0
    }
    /// Tell rank `dst` (this link's peer, or a rank beyond it on a
    /// sparse shape's route) that rank `gone` has gone (or, `Silent`, has
    /// been silent for a whole deadline; `Heard`, is heard again), behind
    /// everything relayed from `gone` over this link before.
    fn tell_gone(&self, core: &Core, gone: u32, how: Gone, dst: u32);
    /// Caller-driven progress: read and dispatch what has arrived, if no
    /// other thread is. `want_len` is the length of the message the caller
    /// waits for, if known. Returns whether the link has ended.
    fn poll(&self, core: &Core, want_len: Option<usize>) -> bool;
    /// [`poll`](Self::poll) for a caller that posted its buffers: a link
    /// that can read the awaited message straight into them does (and
    /// sets `posted.filled`); others poll as usual.
    fn poll_into(&self, core: &Core, posted: &mut Posted<'_>) -> bool {
        self.poll(core, Some(posted.len()))
    }
    /// A caller is about to `poll` the link in a loop (`true`), or has
    /// stopped (`false`), waiting for a message of `want_len` bytes if
    /// known: meanwhile, and for a moment after, the link's I/O thread
    /// need not be woken by what arrives for it (see `watch.rs`). Calls
    /// pair up, with equal `want_len`.
    fn caller_polls(&self, core: &Core, on: bool, want_len: Option<usize>);
    /// A thread parks (`on`) waiting for a message of lane kind `kind` that
    /// comes over this link, or is done waiting. Parking, returns whether
    /// the link holds unread bytes the thread must read first (a link
    /// that leaves what nobody waits for unread until someone comes).
    fn want(&self, _kind: crate::LaneKind, _on: bool) -> bool {
        false
    }
    /// [`want`](Self::want) for a standing wait — the RPC server's for
    /// requests, which lasts the group's life: a link whose thread reads
    /// for every parked thread (see `watch.rs`) need not for this one.
    fn want_standing(&self, kind: crate::LaneKind, on: bool) -> bool {
        self.want(kind, on)
    }
    /// How long a receiving thread reads this link itself before it parks
    /// (and leaves the link to the link's own thread, whose wake-up and
    /// hand-off cost two context switches).
    fn patience(&self) -> std::time::Duration {
        transport::CALLER_POLL
    }
    /// The peer's process is known stopped (a same-host process frozen by
    /// a signal or a debugger): it reads and writes nothing.
    fn frozen(&self) -> bool {
        false
    }
    /// Messages sent over this link as a single copy out of this
    /// process's memory.
    fn single_copies(&self) -> u64 {
        0
    }
    /// Start the link's I/O thread (once every link is in the core's
    /// table).
    fn start(self: Arc<Self>, core: &Arc<Core>);
    /// Closing, in the core's order: stop taking new frames and flush
    /// (`close_begin`, every link); let what is in flight land
    /// (`close_drain`); say goodbye and wait for the writes
    /// (`close_flush`, after the core marks itself closing); stop reading
    /// (`close_end`, after the inbox is closed).
    fn close_begin(&self);
    fn close_drain(&self) {}
    fn close_flush(&self);
    fn close_end(&self);
}

/// Room reserved on a link for one frame ([`Link::reserve`]): used by
/// [`Link::forward_reserved`] or given back by [`Link::unreserve`].
#[derive(Debug)]
#[must_use = "reserved room must be used or given back"]
pub(crate) struct Reservation {
    /// The payload length it was reserved for.
    pub len: usize,
    /// Bytes reserved in the link's budget (0: a link without one).
    pub bytes: usize,
}

/// A receive posted by a caller waiting on its link: the message from
/// `src` on lane `key` of exactly `head.len() + body.len()` payload bytes,
/// to be read into `head`, then `body`, if it is the next on its lane
/// (on a matched lane, with its word, from the header, into `word`).
#[derive(Debug)]
pub(crate) struct Posted<'a> {
    pub src: u32,
    pub key: LaneKey,
    /// A matched lane's: where the message's word goes.
    pub word: Option<&'a mut [u8]>,
    pub head: &'a mut [u8],
    pub body: &'a mut [u8],
    /// The message was read into the buffers and accounted as taken.
    pub filled: bool,
}

impl Posted<'_> {
    /// The payload bytes the frame carries (a matched lane's word is in
    /// its header).
    pub(crate) fn len(&self) -> usize {
        self.head.len() + self.body.len()
    }

    /// Frame `h`'s payload was read into the buffers: its word goes in
    /// too, and the message (word and all) counts as taken.
    pub(crate) fn took(&mut self, core: &Core, h: &Header) {
        let mut len = self.len();
        if let (Some(at), Some(word)) = (self.word.as_deref_mut(), h.word()) {
            at.copy_from_slice(&word);
            len += word.len();
        }
        core.inbox.took_direct(self.src, self.key, len);
    }

    /// Whether `h` (a data frame that passed dispatch's checks) is the
    /// posted message, and nothing is queued before it on its lane.
    pub(crate) fn wants(&self, core: &Core, h: &Header) -> bool {
        self.is_for(h)
            && h.dst == core.rank
            && h.len == self.len() as u64
            && core.inbox.lane_is_empty(self.src, self.key)
    }

    /// Whether `h` is a data frame of the posted receive's sender and
    /// lane, whatever its length.
    pub(crate) fn is_for(&self, h: &Header) -> bool {
        h.ftype == FrameType::Data && h.src == self.src && h.lane() == self.key
    }
}

/// Where a byte stream's decoded frames go: the core, or (for QUIC's
/// sidecar) the QUIC link's order keeper first.
pub(crate) trait Sink: Send + Sync + fmt::Debug {
    /// A complete data frame from `peer`'s link; `false`: a protocol
    /// error (the link must close).
    fn data(&self, core: &Core, peer: u32, h: Header, payload: Payload) -> bool;
    /// The stream from `peer` ended.
    fn ended(&self, core: &Core, peer: u32);
    /// Whether a posted receive may take a data frame off the stream
    /// itself (when [`direct_now`](Self::direct_now) says its turn has
    /// come): frames go straight to the core, or the sink keeps their
    /// order itself.
    fn reads_direct(&self) -> bool {
        false
    }
    /// Whether data frame `h` from `peer` (its header dispatched) may be
    /// read straight into a posted receive's buffers now: nothing sent
    /// before it on its lane is still to be delivered.
    fn direct_now(&self, _core: &Core, _peer: u32, _h: &Header) -> bool {
        true
    }
    /// Frame `h`, which [`direct_now`](Self::direct_now) let through, was
    /// read into a posted receive's buffers: it counts as delivered, and
    /// what waited behind it goes on.
    fn took_direct(&self, _core: &Core, _peer: u32, _h: &Header) -> Result<(), ProtocolError> {
        Ok(())
    }
}

/// The sink of a link that is the peer's whole link: straight to the core.
#[derive(Debug)]
pub(crate) struct Direct;

impl Sink for Direct {
    fn data(&self, core: &Core, peer: u32, h: Header, payload: Payload) -> bool {
        core.on_data(peer, h, payload)
    }

    fn ended(&self, core: &Core, peer: u32) {
        core.lost(peer);
    }

    fn reads_direct(&self) -> bool {
        true
    }
}

/// A sparse shape's routes at `rank`, around the failed ranks `dead`
/// says: by source, the neighbour its frames arrive from (`via`); and
/// the relays on the way to and from each rank, for the inbox (a rank is
/// out of reach when a relay there or back is).
fn set_routes(
    via: &[AtomicU32],
    inbox: &Inbox,
    shape: Shape,
    rank: u32,
    dead: &dyn Fn(u32) -> bool,
) {
    let world = via.len() as u32;
    for (src, v) in via.iter().enumerate() {
        v.store(
            shape.last_hop_around(world, src as u32, rank, dead),
            Ordering::Release,
        );
    }
    inbox.set_relays(
        (0..world)
            .map(|r| {
                let mut relays = shape.relays_around(world, rank, r, dead);
                relays.extend(shape.relays_around(world, r, rank, dead));
                relays.sort_unstable();
                relays.dedup();
                relays
            })
            .collect(),
    );
}

/// Frames kept for links being re-attached, by peer.
#[derive(Debug, Default)]
struct Awaiting {
    by_peer: std::collections::HashMap<u32, (Vec<(Header, Payload)>, usize)>,
}

impl Awaiting {
    /// Bytes kept for one link at most: past them a frame is dropped (as
    /// it would have been without the wait).
    const MAX_BYTES: usize = 64 << 20;

    fn expect(&mut self, peer: u32) {
        self.by_peer.entry(peer).or_default();
    }

    fn keep(&mut self, peer: u32, h: Header, payload: Payload) -> Result<(), (Header, Payload)> {
        let Some((frames, bytes)) = self.by_peer.get_mut(&peer) else {
            return Err((h, payload));
        };
        if *bytes + payload.len() > Self::MAX_BYTES {
            tracing::warn!(peer, "too much waits for a re-attached link; frame dropped");
            return Ok(());
        }
        *bytes += payload.len();
        frames.push((h, payload));
        Ok(())
    }

    fn take(&mut self, peer: u32) -> Vec<(Header, Payload)> {
        self.by_peer
            .remove(&peer)
            .map(|(f, _)| f)
            .unwrap_or_default()
    }
}

/// How a tree's ranks re-attach around a failed rank: the backend's side
/// of [`Core::contract`].
pub(crate) trait Reattach: Send + Sync + fmt::Debug {
    /// Dial `parent`, this rank's nearest live ancestor now, authenticate
    /// as at formation, and add and start the link (on a thread of its
    /// own, until the deadline).
    fn dial(&self, parent: u32);
    /// Admit `ranks` (whose nearest live ancestor this rank now is) at
    /// the listener, and add and start each link as it comes.
    fn admit(&self, ranks: &[u32]);
}

/// How a fleet's links come and go: the backend's side of a star whose
/// workers are away rather than failed when their links end
/// (`Spec::fleet`).
pub(crate) trait Churn: Send + Sync + fmt::Debug {
    /// `peer` has been silent for the liveness limit: its link is cut
    /// (a worker is then away; a worker's coordinator is dialled again).
    fn silent(&self, peer: u32);
}

/// What the rank's links share; see the module docs.
#[derive(Debug)]
pub struct Core {
    pub(crate) rank: u32,
    pub(crate) world: u32,
    pub(crate) shape: Shape,
    /// The shape is a star.
    pub(crate) star: bool,
    /// The shape is sparse: every rank relays.
    pub(crate) sparse: bool,
    /// A fleet's links (`Spec::fleet`, set by the TCP backend before any
    /// link starts): a link's end leaves its peer away, not failed;
    /// nobody is told of it, and it may come back (`revive`).
    churn: OnceLock<Arc<dyn Churn>>,
    /// By peer, how often it came back on a new link.
    incarnations: Vec<AtomicU64>,
    /// Sparse: by source rank, the neighbour its frames to this rank
    /// arrive from (on a tree, around the failed ranks).
    via: Vec<AtomicU32>,
    /// A tree's ranks known failed, routed around (`Core::contract`): each
    /// one's children re-attach to its nearest live ancestor.
    dead: Vec<AtomicBool>,
    /// A tree over TCP: dials this rank's new parent and admits its new
    /// children when a rank above or below fails (`Reattach`).
    reattach: OnceLock<Arc<dyn Reattach>>,
    /// Frames for a link being re-attached (by its peer), kept in order
    /// until it is up (`Core::add_link`).
    awaiting: Mutex<Awaiting>,
    pub(crate) inbox: Inbox,
    pub(crate) pool: Arc<BufferPool>,
    timeout_ns: AtomicU64,
    /// How long a linked peer may be silent (`Spec::liveness`).
    liveness_ns: u64,
    /// Per peer: the liveness its heartbeats say it keeps, in
    /// milliseconds (0 until its first heartbeat).
    peer_liveness_ms: Vec<AtomicU32>,
    pub(crate) max_message_bytes: u64,
    /// Budgeted bytes this rank may still send to each rank (credits).
    pub(crate) flow: Vec<Budget>,
    /// (messages, bytes) this rank sent to each rank.
    pub(crate) sent: Vec<(AtomicU64, AtomicU64)>,
    /// Budgeted messages sent but not yet credited, per (destination, lane).
    lanes_in_flight: Mutex<lanes::InFlight>,
    lanes_freed: Condvar,
    /// Threads waiting on `lanes_freed` (counted under its lock).
    lane_waiters: AtomicUsize,
    /// Messages this rank may have queued on one lane of one receiver.
    pub(crate) lane_depth: u32,
    /// Links by peer rank, set once formation is done; a tree's rank
    /// gains one when it re-attaches (`Core::add_link`).
    links: OnceLock<Vec<OnceLock<Arc<dyn Link>>>>,
    /// Whether a receiving thread spins (this host has a core per rank),
    /// yields while it polls its link, or parks at once.
    pub(crate) cores: Cores,
    pub(crate) closing: AtomicBool,
    /// Ranks whose loss has been handled (a link may report it from more
    /// than one thread).
    lost: Vec<AtomicBool>,
    /// Request lanes answered where they are read (`answer.rs`).
    answerers: Answerers,
}

/// What the core is built from (the parts of a `Spec` it needs).
#[derive(Clone, Debug)]
pub(crate) struct CoreConfig {
    pub rank: u32,
    pub world: u32,
    pub shape: Shape,
    pub timeout: Duration,
    pub liveness: Duration,
    pub max_message_bytes: u64,
    pub peer_budget_bytes: u64,
    pub lane_depth: u32,
    /// Ranks sharing this host's cores (spinning pays only with a core
    /// each).
    pub ranks_here: usize,
}

impl Core {
    pub(crate) fn new(cfg: &CoreConfig) -> Core {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let sharing = Cores::of(cfg.ranks_here, cores);
        let (shape, world, rank) = (cfg.shape, cfg.world, cfg.rank);
        let sparse = shape.is_sparse();
        let inbox = Inbox::new(world, sharing);
        inbox.set_limits(crate::inbox::Limits {
            budget: cfg.peer_budget_bytes,
            lane_depth: cfg.lane_depth,
        });
        let mut via = Vec::new();
        if sparse {
            via = (0..world).map(|_| AtomicU32::new(0)).collect();
            set_routes(&via, &inbox, shape, rank, &|_| false);
        }
        Core {
            rank,
            world,
            shape,
            star: shape == Shape::Star,
            sparse,
            churn: OnceLock::new(),
            incarnations: (0..world).map(|_| AtomicU64::new(0)).collect(),
            via,
            dead: (0..world).map(|_| AtomicBool::new(false)).collect(),
            reattach: OnceLock::new(),
            awaiting: Mutex::default(),
            inbox,
            pool: Arc::new(BufferPool::new()),
            timeout_ns: AtomicU64::new(nanos(cfg.timeout)),
            liveness_ns: nanos(cfg.liveness),
            peer_liveness_ms: (0..cfg.world).map(|_| AtomicU32::new(0)).collect(),
            max_message_bytes: cfg.max_message_bytes,
            flow: (0..cfg.world)
                .map(|_| Budget::new(usize::try_from(cfg.peer_budget_bytes).unwrap_or(usize::MAX)))
                .collect(),
            sent: (0..cfg.world)
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
            lanes_in_flight: Mutex::new(lanes::InFlight::new(cfg.world)),
            lanes_freed: Condvar::new(),
            lane_waiters: AtomicUsize::new(0),
            lane_depth: cfg.lane_depth.max(1),
            links: OnceLock::new(),
            cores: sharing,
            closing: AtomicBool::new(false),
            lost: (0..cfg.world).map(|_| AtomicBool::new(false)).collect(),
            answerers: Answerers::default(),
        }
    }

    /// Publish the links (by peer rank). Every link is in the table before
    /// any of them starts: a frame to relay may arrive at once and must
    /// find the link it goes out on.
    pub(crate) fn set_links(&self, links: Vec<Option<Arc<dyn Link>>>) {
        let _ = self.links.set(
            links
                .into_iter()
                .map(|l| {
                    let cell = OnceLock::new();
                    if let Some(l) = l {
                        let _ = cell.set(l);
                    }
                    cell
                })
                .collect(),
        );
    }

    /// A link to `peer` made after formation (a tree's re-attachment);
    /// `false` if there is one already (or no such rank, or the table is
    /// not set yet). The caller starts it.
    pub(crate) fn add_link(&self, peer: u32, link: Arc<dyn Link>) -> bool {
        let Some(cell) = self.links.get().and_then(|l| l.get(peer as usize)) else {
            return false;
        };
        // What waited for this link goes first, in order; a sender that
        // finds no link meanwhile waits for this lock, then finds it.
        let mut awaiting = self.awaiting.lock().unwrap_or_else(|e| e.into_inner());
        if cell.get().is_some() {
            return false;
        }
        for (h, payload) in awaiting.take(peer) {
            link.forward(self, h, payload);
        }
        cell.set(link).is_ok()
    }

    /// A link to `peer` is being re-attached: frames for it wait (up to
    /// [`Awaiting::MAX_BYTES`]) instead of being dropped.
    pub(crate) fn await_link(&self, peer: u32) {
        self.awaiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .expect(peer);
    }

    /// The re-attachment to `peer` failed: what waited for it is dropped.
    pub(crate) fn give_up_link(&self, peer: u32) {
        let dropped = self
            .awaiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(peer);
        if !dropped.is_empty() {
            tracing::warn!(peer, frames = dropped.len(), "no link came; frames dropped");
        }
    }

    /// Keep a frame for `hop`'s link if one is being re-attached and is
    /// not up yet; `Err` gives the frame back (there is a link now, or
    /// none is coming).
    fn keep_for(&self, hop: u32, h: Header, payload: Payload) -> Result<(), (Header, Payload)> {
        let mut awaiting = self.awaiting.lock().unwrap_or_else(|e| e.into_inner());
        if self.link(hop).is_some() {
            return Err((h, payload));
        }
        awaiting.keep(hop, h, payload)
    }

    /// Every link, with its peer.
    pub(crate) fn links(&self) -> impl Iterator<Item = (u32, &Arc<dyn Link>)> {
        self.links
            .get()
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(r, l)| Some((r as u32, l.get()?)))
    }

    /// The link to `hop`.
    pub(crate) fn link(&self, hop: u32) -> Option<&Arc<dyn Link>> {
        self.links.get()?.get(hop as usize)?.get()
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_nanos(self.timeout_ns.load(Ordering::Relaxed))
    }

    pub(crate) fn set_timeout(&self, timeout: Duration) {
        self.timeout_ns.store(nanos(timeout), Ordering::Relaxed);
    }

    /// How long a linked peer may send nothing before it counts as
    /// failed here: the liveness setting, at most the deadline.
    pub(crate) fn liveness(&self) -> Duration {
        Duration::from_nanos(self.liveness_ns).min(self.timeout())
    }

    /// The liveness in whole milliseconds, as heartbeats carry it.
    pub(crate) fn liveness_ms(&self) -> u32 {
        u32::try_from(self.liveness().as_millis()).unwrap_or(u32::MAX)
    }

    /// A heartbeat from `peer` said it keeps a liveness of `ms`.
    pub(crate) fn peer_beats(&self, peer: u32, ms: u32) {
        if let Some(p) = self.peer_liveness_ms.get(peer as usize) {
            p.store(ms, Ordering::Relaxed);
        }
    }

    /// How long the link to `peer` may carry nothing before its ranks
    /// count as silent: this rank's liveness, or the peer's if longer (it
    /// beats less often), never past this rank's deadline.
    pub(crate) fn silence_limit(&self, peer: u32) -> Duration {
        let theirs = self
            .peer_liveness_ms
            .get(peer as usize)
            .map_or(0, |p| p.load(Ordering::Relaxed));
        self.liveness()
            .max(Duration::from_millis(u64::from(theirs)))
            .min(self.timeout())
    }

    /// The link that carries traffic for `dst`: a star worker reaches
    /// everyone through the coordinator; on a sparse shape, the next rank
    /// on the route.
    pub(crate) fn hop(&self, dst: u32) -> u32 {
        if self.star && self.rank != 0 {
            0
        } else if self.sparse && dst < self.world {
            self.shape
                .next_hop_around(self.world, self.rank, dst, &|r| self.is_dead(r))
        } else {
            dst
        }
    }

    /// Whether frames from rank `src` to this rank may arrive over the
    /// link to `peer`: a star worker hears everyone through the
    /// coordinator; on a sparse shape, over the last link of the route;
    /// otherwise a link carries only its own peer's traffic.
    pub(crate) fn serves(&self, peer: u32, src: u32) -> bool {
        if self.star && self.rank != 0 {
            peer == 0 && src != self.rank && src < self.world
        } else if self.sparse {
            src != self.rank
                && self
                    .via
                    .get(src as usize)
                    .is_some_and(|v| v.load(Ordering::Acquire) == peer)
        } else {
            src == peer
        }
    }

    /// Whether a frame from `src` to `dst`, another rank, may arrive over
    /// the link to `peer` for this rank to pass on: at a star's
    /// coordinator, from the worker itself; on a sparse shape, when the
    /// route from `src` to `dst` takes the link from `peer` to this rank.
    pub(crate) fn relays(&self, peer: u32, src: u32, dst: u32) -> bool {
        if src >= self.world || dst >= self.world || dst == self.rank || src == dst {
            return false;
        }
        if self.star {
            self.rank == 0 && src == peer
        } else if self.sparse {
            self.shape
                .passes_around(self.world, src, dst, peer, self.rank, &|r| self.is_dead(r))
        } else {
            false
        }
    }

    /// The link that frames from `src` arrive over (where a receive
    /// waiting for `src` reads): the last link of the route from `src`.
    pub(crate) fn inbound(&self, src: u32) -> u32 {
        if self.sparse {
            self.via
                .get(src as usize)
                .map_or(src, |v| v.load(Ordering::Acquire))
        } else {
            self.hop(src)
        }
    }

    /// Ranks whose standing the link to `peer` tells directly (its end,
    /// its silence): a star worker's link to the coordinator stands for
    /// everyone; elsewhere a link stands for its peer (on a sparse shape
    /// the ranks behind a relay are out of reach while it is, see
    /// `Inbox::set_relays`, but not gone).
    fn behind(&self, peer: u32) -> impl Iterator<Item = u32> + '_ {
        let (from, to) = if self.star && self.rank != 0 {
            (0, self.world)
        } else {
            (peer, peer.saturating_add(1).min(self.world))
        };
        (from..to).filter(move |&r| self.serves(peer, r))
    }

    /// Send one frame towards `dst` over the link to `hop`.
    pub(crate) fn transmit(
        &self,
        hop: u32,
        header: Header,
        parts: &[&[u8]],
        dst: u32,
    ) -> Result<(), TransportError> {
        if let Some(link) = self.link(hop) {
            return link.send(self, header, parts, dst);
        }
        // A tree's link being re-attached: the frame waits for it.
        let payload = Payload::from_vec_in(parts.concat(), None);
        match self.keep_for(hop, header, payload) {
            Ok(()) => Ok(()),
            Err((h, _)) => match self.link(hop) {
                Some(link) => link.send(self, h, parts, dst),
                None => Err(TransportError::PeerDisconnected { rank: dst }),
            },
        }
    }

    /// A relay (a star's coordinator, any rank of a sparse shape)
    /// forwards another rank's frame along its route. Relayed bytes are
    /// not budgeted here: blocking would stall the link that carried
    /// them; the links' own flow control bounds them.
    pub(crate) fn relay(&self, h: Header, payload: Payload) {
        let hop = self.hop(h.dst);
        match self.link(hop) {
            Some(link) => link.forward(self, h, payload),
            None => match self.keep_for(hop, h, payload) {
                Ok(()) => {}
                Err((h, payload)) => match self.link(hop) {
                    Some(link) => link.forward(self, h, payload),
                    None => tracing::warn!(dst = h.dst, "no link to relay to; frame dropped"),
                },
            },
        }
    }

    /// Wait (up to the deadline) for room for `len` bytes on lane `key`
    /// to `dst` — lane depth and bytes, for point-to-point and RPC —
    /// asking `dst` for its credit while waiting. Collectives are bounded
    /// by their algorithms' own pipelines, not here.
    pub(crate) fn acquire_room(
        &self,
        dst: u32,
        key: LaneKey,
        len: usize,
    ) -> Result<(), TransportError> {
        if !crate::inbox::budgeted(key.kind) {
            return Ok(());
        }
        self.acquire_lane(dst, key)?;
        let flow = &self.flow[dst as usize];
        if flow.try_acquire(len) {
            return Ok(());
        }
        // Credit comes over the link to `dst`'s hop: its thread must read
        // it as it comes.
        let _wanted = self
            .link(self.hop(dst))
            .map(|l| transport::Want::new(self, &**l, key.kind));
        let ask = || self.ask_credit(dst, key);
        let revoked = || {
            self.inbox
                .is_revoked(key.comm)
                .then_some(TransportError::Revoked)
        };
        let got = flow.acquire_asking(len, self.timeout(), dst, ask, revoked);
        if got.is_err() {
            self.release_lane(dst, key, 1);
        }
        got
    }

    /// A message of lane `key` from `src` was taken: return consumed
    /// budget to `src` once enough has been, or at once when `src` has
    /// asked for it (it waits for room). Only budgeted lanes owe credit.
    pub(crate) fn credit(&self, src: u32, key: LaneKey) {
        self.return_credit(src, key, false);
    }

    /// `src` waits for room on lane `key` (a `CreditWanted` frame): what
    /// is owed goes back now, or with the next receive from `src`. Never
    /// blocks (it runs on whichever thread reads the link).
    pub(crate) fn credit_wanted(&self, src: u32, key: LaneKey) {
        self.inbox.want_credit(src);
        self.return_credit(src, key, true);
    }

    fn return_credit(&self, src: u32, key: LaneKey, queue: bool) {
        if src == self.rank || !crate::inbox::budgeted(key.kind) {
            return;
        }
        let batch = self.flow.first().map_or(1, |b| b.max() / 16).max(1) as u64;
        let Some(credit) = self.inbox.take_credit(src, key, batch, self.lane_depth) else {
            return;
        };
        let hop = self.hop(src);
        let mut bytes = credit.bytes;
        for (lane, count) in credit.lanes {
            let mut h = Header::control(FrameType::Credit, self.rank, src);
            (h.comm, h.kind, h.tag, h.aux, h.len) = (lane.comm, lane.kind, lane.tag, count, bytes);
            bytes = 0;
            let sent = if queue {
                match self.link(hop) {
                    Some(link) => {
                        link.forward(self, h, Payload::default());
                        Ok(())
                    }
                    None => Err(TransportError::PeerDisconnected { rank: src }),
                }
            } else {
                self.transmit(hop, h, &[], src)
            };
            if sent.is_err() {
                tracing::debug!(src, "cannot return credit; the link is gone");
                return;
            }
        }
    }

    /// The link to `peer` is gone: its ranks are gone once what they sent
    /// is taken; a coordinator tells every other worker (once per rank).
    pub(crate) fn lost(&self, peer: u32) {
        if self.closing.load(Ordering::Acquire) {
            return;
        }
        // A tree routes around it before anyone waiting hears it is gone:
        // the ranks behind it are then out of reach only until their new
        // links are up, never counted failed with it.
        if !self.inbox.has_left(peer) {
            self.contract(peer);
        }
        for r in self.behind(peer) {
            self.inbox.set_gone(r);
        }
        // A star's workers hear of a link's end from the coordinator (a
        // goodbye as leaving), a sparse shape's ranks of a failure from
        // their neighbours; mesh peers each see the end themselves. A
        // sparse shape's goodbyes are not passed on: its ranks leave
        // together, once every relay's work is done (see the group's
        // shutdown), and a notice written to a neighbour closing at that
        // moment could cut off what it said last.
        let how = if self.inbox.has_left(peer) {
            Gone::Left
        } else {
            Gone::Failed
        };
        let tell = self.star || (self.sparse && how == Gone::Failed);
        if tell && self.first_news(peer) {
            self.spread(peer, how);
        }
    }

    /// Whether `rank` is a tree's failed rank, routed around.
    pub(crate) fn is_dead(&self, rank: u32) -> bool {
        self.dead
            .get(rank as usize)
            .is_some_and(|d| d.load(Ordering::Acquire))
    }

    /// On a tree, `failed` failed (its link ended, or a notice said so):
    /// routes go around it from now on, its children hanging off its
    /// nearest live ancestor. If that is this rank's new parent, this rank
    /// dials it; if this rank is the new parent of some, it admits them
    /// (`Reattach`). Frames sent meanwhile to a rank whose new link is not
    /// up yet are lost as they would have been through the failed rank;
    /// the calls waiting on them end by their deadlines or the group's
    /// recovery. A silent rank (it may come back) is not routed around.
    pub(crate) fn contract(&self, failed: u32) {
        if !matches!(self.shape, Shape::Tree { .. }) || failed == self.rank {
            return;
        }
        let Some(flag) = self.dead.get(failed as usize) else {
            return;
        };
        let parent_before = self.shape.live_parent(self.rank, &|r| self.is_dead(r));
        if flag.swap(true, Ordering::AcqRel) {
            return;
        }
        let dead = |r: u32| self.is_dead(r);
        let (shape, world, rank) = (self.shape, self.world, self.rank);
        set_routes(&self.via, &self.inbox, shape, rank, &dead);
        let Some(reattach) = self.reattach.get() else {
            tracing::warn!(
                failed,
                "rank {failed} of the tree failed; its children cannot re-attach on this transport"
            );
            return;
        };
        let parent_now = shape.live_parent(rank, &dead);
        if parent_now != parent_before {
            if let Some(p) = parent_now {
                tracing::info!(
                    failed,
                    parent = p,
                    "re-attaching to the nearest live ancestor"
                );
                self.await_link(p);
                reattach.dial(p);
            }
        }
        // The failed rank's live descendants nearest it, now this rank's
        // children.
        let mut orphans = Vec::new();
        let mut below = vec![failed];
        while let Some(r) = below.pop() {
            for c in shape.children(world, r) {
                if dead(c) {
                    below.push(c);
                } else if shape.live_parent(c, &dead) == Some(rank) {
                    orphans.push(c);
                }
            }
        }
        if !orphans.is_empty() {
            tracing::info!(failed, ?orphans, "admitting the failed rank's children");
            for &o in &orphans {
                self.await_link(o);
            }
            reattach.admit(&orphans);
        }
    }

    /// Set how a tree's ranks re-attach around a failure (the TCP
    /// backend's listener and dialer).
    pub(crate) fn set_reattach(&self, r: Arc<dyn Reattach>) {
        let _ = self.reattach.set(r);
    }

    /// Set how a fleet's links come and go (the TCP backend).
    pub(crate) fn set_churn(&self, c: Arc<dyn Churn>) {
        let _ = self.churn.set(c);
    }

    /// `peer` is back on a new link (a fleet's): it stands as at
    /// formation, neither side owing the other anything (see
    /// `Inbox::revive`).
    pub(crate) fn revive(&self, peer: u32) {
        let Some(lost) = self.lost.get(peer as usize) else {
            return;
        };
        self.inbox.revive(peer);
        if let Some(b) = self.flow.get(peer as usize) {
            b.reset();
        }
        self.lanes_in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget(peer);
        self.lanes_freed.notify_all();
        lost.store(false, Ordering::Release);
    }

    /// `peer`'s new link is up (after [`revive`](Self::revive)): one more
    /// incarnation.
    pub(crate) fn came_back(&self, peer: u32) {
        if let Some(n) = self.incarnations.get(peer as usize) {
            n.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// How often `peer` came back on a new link (a fleet's; 0 elsewhere).
    pub(crate) fn incarnation(&self, peer: u32) -> u64 {
        self.incarnations
            .get(peer as usize)
            .map_or(0, |n| n.load(Ordering::Acquire))
    }

    /// Whether this is the first news of `rank`'s end here (a link may
    /// report it from more than one thread; on a sparse shape it comes
    /// from every neighbour too).
    pub(crate) fn first_news(&self, rank: u32) -> bool {
        self.lost
            .get(rank as usize)
            .is_some_and(|l| !l.swap(true, Ordering::AcqRel))
    }

    /// Tell every other rank this one links to that `failed` failed (gone,
    /// or `silent`): a mesh rank tells every peer, a star's coordinator
    /// its workers, so that calls waiting elsewhere behind `failed` end
    /// now, naming it. A worker, whose only link is the coordinator's,
    /// tells no one. On a sparse shape this rank, a neighbour of `failed`,
    /// tells every rank whose route from `failed` starts with it, along
    /// that route: the notice follows `failed`'s last frames there and
    /// cannot overtake them.
    pub(crate) fn spread(&self, failed: u32, how: Gone) {
        // A fleet's workers come and go; none of them needs to hear of
        // another's.
        if self.churn.get().is_some() || !self.star && !self.sparse {
            // A mesh rank sees every member's end and silence on its own
            // link to it: a peer's word would only let a member make a
            // live rank look failed.
            return;
        }
        if self.star && self.rank != 0 {
            return;
        }
        if self.sparse {
            for dst in 0..self.world {
                let first = self
                    .shape
                    .next_hop_around(self.world, failed, dst, &|r| self.is_dead(r));
                if dst != failed && dst != self.rank && first == self.rank {
                    if let Some(link) = self.link(self.hop(dst)) {
                        link.tell_gone(self, failed, how, dst);
                    }
                }
            }
            return;
        }
        for (r, link) in self.links() {
            if r != failed {
                link.tell_gone(self, failed, how, r);
            }
        }
    }

    /// A sparse shape's notice about `gone` for another rank, relayed
    /// along its route.
    pub(crate) fn relay_notice(&self, gone: u32, aux: u32, dst: u32) {
        if let Some(link) = self.link(self.hop(dst)) {
            link.tell_gone(self, gone, Gone::from_aux(aux), dst);
        }
    }

    /// Revoke communicator `comm` here and pass it on, the first time, to
    /// every link but `from`'s.
    pub(crate) fn revoke(&self, comm: u64, from: Option<u32>) {
        let first = match from {
            None => self.inbox.revoke(comm),
            // Only of a communicator this rank has; others are held
            // (bounded) until it does (`Inbox::revoke_from`).
            Some(peer) => self.inbox.revoke_from(peer, comm) == Some(true),
        };
        if !first {
            return;
        }
        tracing::debug!(comm, ?from, "communicator revoked");
        // Senders waiting for room or a lane look again: a revoked
        // communicator's send ends now.
        for b in &self.flow {
            b.wake();
        }
        {
            let _lanes = self
                .lanes_in_flight
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.lanes_freed.notify_all();
        }
        for (r, link) in self.links() {
            if Some(r) != from {
                let h = Header {
                    comm,
                    ..Header::control(FrameType::Revoke, self.rank, r)
                };
                link.forward(self, h, Payload::default());
            }
        }
    }

    /// Ranks known failed: gone without a goodbye, silent (a network
    /// link that carried nothing for the liveness limit, a same-host
    /// process stopped that long: `shm/io.rs`), as this rank's own
    /// links tell it (and, in a star, the coordinator; on a sparse
    /// shape, the neighbours on the route).
    pub(crate) fn failed(&self) -> Vec<u32> {
        self.inbox.failed()
    }

    /// Bytes of a frame of lane kind `kind` that says it comes from `src`
    /// arrived over the link to `peer`: if the kind is progress at all
    /// (`makes_progress`), the link's peer makes progress, and `src` too if
    /// the link serves it. A claim about any other rank (a frame passing
    /// through, or an envelope's outer header before its tag is checked)
    /// keeps nobody else looking alive.
    pub(crate) fn progress(&self, peer: u32, src: u32, kind: crate::LaneKind) {
        if !crate::inbox::makes_progress(kind) {
            return;
        }
        self.inbox.progress(peer);
        if src != peer && self.serves(peer, src) {
            self.inbox.progress(src);
        }
    }

    /// Whether the link to `peer` may carry peer-gone notice `h`
    /// (dispatch's rule: `dispatch.rs`), for whom it is and whom it is
    /// about: lets a keeper of notices (QUIC's order keeper counts their
    /// copies) hold only ones that can count.
    pub(crate) fn may_tell_gone(&self, peer: u32, h: &Header) -> bool {
        if h.src >= self.world || h.dst >= self.world || h.src == self.rank {
            return false;
        }
        if self.star {
            self.rank != 0 && peer == 0 && h.src != 0 && h.dst == self.rank
        } else if self.sparse && h.dst != self.rank {
            h.src != peer && self.relays(peer, h.src, h.dst)
        } else if self.sparse {
            h.src != peer && self.serves(peer, h.src)
        } else {
            // A mesh peer tells nothing: each rank sees every member's
            // end and silence for itself, on its own link.
            false
        }
    }

    /// A stream that carries `peer`'s link read bytes: its ranks are not
    /// silent.
    pub(crate) fn heard(&self, peer: u32) {
        for r in self.behind(peer) {
            // On a sparse shape, those told it was silent are told it is
            // back, the same way.
            if self.inbox.set_silent(r, false) && self.sparse {
                self.spread(r, Gone::Heard);
            }
        }
    }

    /// The link to `peer` carried nothing for the liveness limit (or its
    /// same-host process is stopped, or it took nothing for a deadline);
    /// a coordinator tells every other worker, whose calls waiting behind
    /// `peer` can then name it.
    pub(crate) fn silent(&self, peer: u32) {
        tracing::warn!(
            peer,
            "rank {peer} is silent (nothing heard for {:?})",
            self.silence_limit(peer)
        );
        if let Some(churn) = self.churn.get() {
            // A fleet's silent link is cut: its peer is away (or dialled
            // again) as if the link had ended, and may come back.
            return churn.silent(peer);
        }
        for r in self.behind(peer) {
            self.inbox.set_silent(r, true);
        }
        if !self.closing.load(Ordering::Acquire) {
            self.spread(peer, Gone::Silent);
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
