//! A rank's receive side: lanes of queued messages plus what is known about
//! each peer (gone, silent, last progress), behind one mutex and condvar.
//! Every transport delivers into one; every receive waits on one.
//!
//! A receive fails with `Timeout` when its peer has made no progress — no
//! byte of data from it — for the deadline, counted from the later of the
//! call's start and the peer's last progress, so a large message that keeps
//! arriving never times out; it fails with `PeerDisconnected` once the peer
//! is gone and nothing more from it is queued; it fails at once with
//! `Timeout` if the link has been silent (not even heartbeats) for a whole
//! deadline.

mod bounds;
mod credit;
mod glance;
mod stamp;
mod standing;
#[cfg(test)]
mod tests;

pub(crate) use bounds::{budgeted, Limits};
#[cfg(test)]
pub(crate) use bounds::{lane_bound, PENDING_REVOCATIONS};
pub use bounds::{LANES_PER_SENDER, LANE_DEPTH, SEQ_WINDOW};

use crate::{LaneKey, LaneKind, Payload, PeerStats, TransportError};
use glance::{Glance, Locked};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
struct Peer {
    gone: bool,
    /// It said goodbye before its link ended (it left; it did not fail).
    left: bool,
    silent: bool,
    /// A `stamp::stamp()`: at or a few ms after the moment.
    last_progress: Instant,
    received_messages: u64,
    received_bytes: u64,
    queued_bytes: u64,
    max_queued_bytes: u64,
    /// Bytes of budgeted lanes (point-to-point, RPC) queued from this peer.
    budgeted_bytes: u64,
    /// Budgeted bytes consumed but not yet credited back to the sender.
    credit_due: u64,
    /// The sender waits for room: what is owed goes back at once.
    credit_wanted: bool,
    /// The most messages owed on any one of its lanes.
    most_lane_due: u32,
    /// The lane its last message taken came on and the messages owed on
    /// it, kept out of `State::lane_due` (`credit.rs`).
    due_lane: Option<(LaneKey, u32)>,
    /// Lanes owed a credit (`due_lane`'s and its entries in
    /// `State::lane_due`): at most [`LANES_PER_SENDER`] from an honest
    /// sender, which has no more lanes in flight to one receiver.
    owed_lanes: usize,
    /// Listed in `State::owed_changed` (once, however often it changes).
    owed_listed: bool,
    /// Lanes holding budgeted messages from this peer.
    budgeted_lanes: usize,
    /// Lanes holding its other (collective, control) messages.
    other_lanes: usize,
    /// Its place in the order of failures (`standing.rs`); 0: not failed.
    failed_order: u64,
}

impl Peer {
    /// A peer as at formation, heard at `now`.
    fn new(now: Instant) -> Peer {
        Peer {
            gone: false,
            left: false,
            failed_order: 0,
            silent: false,
            last_progress: now,
            received_messages: 0,
            received_bytes: 0,
            queued_bytes: 0,
            max_queued_bytes: 0,
            budgeted_bytes: 0,
            credit_due: 0,
            credit_wanted: false,
            most_lane_due: 0,
            due_lane: None,
            owed_lanes: 0,
            owed_listed: false,
            budgeted_lanes: 0,
            other_lanes: 0,
        }
    }

    /// The count of lanes of `kind` holding its messages.
    fn lanes_of(&mut self, kind: LaneKind) -> &mut usize {
        if budgeted(kind) {
            &mut self.budgeted_lanes
        } else {
            &mut self.other_lanes
        }
    }
}

/// Whether a message of lane kind `kind` is progress of its sender, for
/// the deadline of a wait on it: data on collective and point-to-point
/// lanes is; RPC and control traffic is not (a member answering the
/// question of who is missing, at the moment a wait on it ends, would
/// otherwise start that wait's deadline again).
pub(crate) fn makes_progress(kind: LaneKind) -> bool {
    matches!(
        kind,
        LaneKind::Collective | LaneKind::PointToPoint | LaneKind::Matched
    )
}

/// What a parked thread waits for, so that a change wakes only the
/// threads it concerns: a thread asleep on one lane (an RPC server, say)
/// is not woken by every message of every other lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// A message from `src` on `key` (or news of `src`).
    From(u32, LaneKey),
    /// A message on `key` from anyone.
    Any(LaneKey),
    /// Room for `src`'s messages here (an in-process sender).
    Room(u32),
    /// News only: a peer's standing, a revocation.
    News,
}

/// What changed, for [`State::wake`].
#[derive(Clone, Copy, Debug)]
enum Change {
    Delivered(u32, LaneKey),
    /// A budgeted message from `src` was taken.
    Taken(u32),
    /// A peer's standing or the inbox's: every waiter looks again.
    All,
}

impl Wait {
    fn concerns(self, change: Change) -> bool {
        match (self, change) {
            (_, Change::All) => true,
            (Wait::From(s, k), Change::Delivered(src, key)) => s == src && k == key,
            (Wait::Any(k), Change::Delivered(_, key)) => k == key,
            (Wait::Room(s), Change::Taken(src)) => s == src,
            _ => false,
        }
    }
}

#[derive(Debug)]
struct Parked {
    id: u64,
    wait: Wait,
    thread: std::thread::Thread,
}

#[derive(Debug)]
struct State {
    lanes: LaneMap<VecDeque<Payload>>,
    peers: Vec<Peer>,
    /// Failures so far (`standing.rs`).
    failures: u64,
    closed: bool,
    /// Communicators revoked: every wait on their lanes fails.
    revoked: HashSet<u64>,
    /// Revocations a peer sent for a communicator this rank does not have
    /// (yet: a split a peer finished first): `(peer, comm)`, at most
    /// [`PENDING_REVOCATIONS`] per peer, applied once the communicator is
    /// made here.
    pending_revocations: VecDeque<(u32, u64)>,
    /// Communicators this rank is done with (`forget`): waits on their
    /// lanes end with `Closed`, and what comes for them is dropped.
    forgotten: HashSet<u64>,
    /// The members of each communicator whose collectives are doomed by
    /// any member's failure (`set_members`).
    members: HashMap<u64, Vec<u32>>,
    /// Budgeted messages consumed but not yet credited, per (sender, lane).
    lane_due: LaneMap<u32>,
    /// Senders whose credit changed under this lock (the glance takes it
    /// up as the lock goes).
    owed_changed: Vec<u32>,
    /// Highest collective sequence number issued, per communicator.
    issued: HashMap<u64, u64>,
    /// Threads parked on the inbox, and what each waits for.
    parked: Vec<Parked>,
    next_park: u64,
    /// Queues of lanes that emptied, kept for new lanes (a lane that
    /// empties is removed: collective lanes live for one call).
    spare: Vec<VecDeque<Payload>>,
    /// By rank, the ranks that relay between it and this rank (either
    /// way); empty where every rank is reached directly.
    relays: Vec<Vec<u32>>,
    /// What peers are held to off a link (`None`: in-process senders,
    /// trusted).
    limits: Option<Limits>,
}

impl State {
    /// A message of `n` bytes from `src` on `key` came: `src` made
    /// progress, and the message counts as received and queued (until
    /// [`consumed`]).
    fn received(&mut self, src: u32, key: LaneKey, n: u64) {
        if let Some(p) = self.peers.get_mut(src as usize) {
            if makes_progress(key.kind) {
                p.last_progress = stamp::stamp();
            }
            p.silent = false;
            p.received_messages += 1;
            p.received_bytes += n;
            p.queued_bytes += n;
            if budgeted(key.kind) {
                p.budgeted_bytes += n;
            }
        }
    }

    /// Why `src` is out of reach, if it is: a rank that relays between it
    /// and this one is gone, or silent (named: the relay failed, not
    /// `src`).
    fn cut(&self, src: u32) -> Option<TransportError> {
        self.relays.get(src as usize)?.iter().find_map(|&r| {
            let p = self.peers.get(r as usize)?;
            if p.gone {
                Some(TransportError::PeerDisconnected { rank: r })
            } else if p.silent {
                Some(TransportError::Timeout { waiting_on: r })
            } else {
                None
            }
        })
    }

    /// Wake the parked threads that `change` concerns (they look again
    /// under the lock; a wake-up that finds nothing is harmless).
    fn wake(&self, change: Change) {
        for p in &self.parked {
            if p.wait.concerns(change) {
                p.thread.unpark();
            }
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Inbox {
    state: Mutex<State>,
    /// What the state tells without the lock (`glance.rs`).
    glance: Glance,
    /// Ranks (the state's peers).
    world: usize,
    /// Bumped on every delivery, so a waiter can spin without the lock.
    deliveries: AtomicU64,
    /// How many threads share this host's cores: whether a receiver
    /// spins, yields or parks at once.
    cores: Cores,
}

/// How a waiting thread spends the moment before it parks, by how many
/// ranks share this host's cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cores {
    /// A core each: spin (the sender is on another core, about to deliver).
    Own,
    /// A few ranks a core: poll, yielding the core between looks (the
    /// peer waited for may need it).
    Shared,
    /// Many ranks a core (a fleet on one host): park at once. Hundreds of
    /// processes yielding in turn keep one another off the cores, and a
    /// message's every hop then waits behind all of them.
    Crowded,
}

impl Cores {
    /// For `ranks` ranks on a host of `cores` cores.
    pub(crate) fn of(ranks: usize, cores: usize) -> Cores {
        match ranks.max(1) {
            r if r <= cores => Cores::Own,
            r if r <= 8 * cores => Cores::Shared,
            _ => Cores::Crowded,
        }
    }
}

/// A map keyed by sender and lane, looked up on every message: hashed
/// with a per-process seed (keys come from peers) at a fraction of the
/// default SipHash's cost.
pub(crate) type LaneMap<V> = HashMap<(u32, LaneKey), V, foldhash::fast::RandomState>;

/// Emptied lane queues kept for reuse.
const SPARE_QUEUES: usize = 64;

/// How long a receiver polls for its message before parking on the
/// condvar: a small message usually arrives within it, and parking then
/// waking costs a futex round trip and a context switch each way.
const SPIN: Duration = Duration::from_micros(30);
/// Pure spins before the first yield, where spinning pays (a few µs).
const SPIN_TURNS: u32 = 512;

impl Inbox {
    /// The inbox of a rank in a world of `world`, its host's cores shared
    /// as `cores` says.
    pub(crate) fn new(world: u32, cores: Cores) -> Inbox {
        let now = Instant::now();
        Inbox {
            state: Mutex::new(State {
                lanes: LaneMap::default(),
                peers: vec![Peer::new(now); world as usize],
                failures: 0,
                closed: false,
                revoked: HashSet::new(),
                pending_revocations: VecDeque::new(),
                forgotten: HashSet::new(),
                members: HashMap::new(),
                lane_due: LaneMap::default(),
                owed_changed: Vec::new(),
                issued: HashMap::new(),
                parked: Vec::new(),
                next_park: 0,
                spare: Vec::new(),
                relays: Vec::new(),
                limits: None,
            }),
            glance: Glance::new(world as usize),
            world: world as usize,
            deliveries: AtomicU64::new(0),
            cores,
        }
    }

    fn lock(&self) -> Locked<'_> {
        // A panic elsewhere must not take the rank down with a poisoned lock.
        Locked::new(
            self.state.lock().unwrap_or_else(|e| e.into_inner()),
            &self.glance,
        )
    }

    /// A whole message from a trusted sender (this process).
    pub(crate) fn deliver(&self, src: u32, key: LaneKey, msg: Payload) {
        let _unbounded = self.deliver_inner(src, key, msg, false);
    }

    /// A whole message from `src` on `key`, off a link, checked against
    /// what any sender may have queued here: `Err` (the message dropped,
    /// the sender at fault) says which bound it broke — messages on one
    /// lane ([`lane_bound`]; on a budgeted lane, the lane depth), budgeted
    /// bytes past the budget (one message is always admitted when none is
    /// queued, as the sender admits it), or lanes ([`LANES_PER_SENDER`]).
    pub(crate) fn deliver_checked(
        &self,
        src: u32,
        key: LaneKey,
        msg: Payload,
    ) -> Result<(), &'static str> {
        self.deliver_inner(src, key, msg, true)
    }

    fn deliver_inner(
        &self,
        src: u32,
        key: LaneKey,
        msg: Payload,
        bounded: bool,
    ) -> Result<(), &'static str> {
        let mut st = self.lock();
        let n = msg.len() as u64;
        let forgotten = st.forgotten.contains(&key.comm);
        if bounded && !forgotten {
            st.check(src, key, n)?;
        }
        st.received(src, key, n);
        if forgotten {
            // Nobody here will take it: counted as received and taken, so
            // its sender gets its credit back (when it asks: no receive
            // here returns it). Unchecked against the lanes' bounds, so
            // the lanes it is owed on are bounded instead.
            drop(msg);
            let within = consumed(&mut st, src, key, n as usize);
            st.wake(Change::Taken(src));
            return if within {
                Ok(())
            } else {
                Err("owed credit on more lanes than any sender may have in flight")
            };
        }
        if let Some(p) = st.peers.get_mut(src as usize) {
            p.max_queued_bytes = p.max_queued_bytes.max(p.queued_bytes);
        }
        let state = &mut *st;
        let lane = state.lanes.entry((src, key)).or_insert_with(|| {
            if let Some(p) = state.peers.get_mut(src as usize) {
                *p.lanes_of(key.kind) += 1;
            }
            state.spare.pop().unwrap_or_default()
        });
        lane.push_back(msg);
        st.wake(Change::Delivered(src, key));
        drop(st);
        self.deliveries.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Messages queued here so far (a count that only grows): a waiter
    /// that saw it unchanged need not look at the queues again.
    pub(crate) fn deliveries(&self) -> u64 {
        self.deliveries.load(Ordering::Acquire)
    }

    /// Whether nothing from `src` is queued on `key`.
    pub(crate) fn lane_is_empty(&self, src: u32, key: LaneKey) -> bool {
        self.glance.nothing_held() || !self.lock().lanes.contains_key(&(src, key))
    }

    /// A message of `len` bytes from `src` on `key` was read straight into
    /// the buffers of the receive waiting for it: counted as delivered and
    /// taken at once.
    pub(crate) fn took_direct(&self, src: u32, key: LaneKey, len: usize) {
        let mut st = self.lock();
        st.received(src, key, len as u64);
        consumed(&mut st, src, key, len);
    }

    /// Part of a message from `src` arrived: it is making progress.
    pub(crate) fn progress(&self, src: u32) {
        if let Some(p) = self.lock().peers.get_mut(src as usize) {
            p.last_progress = stamp::stamp();
            p.silent = false;
        }
    }

    /// When `src` last made progress (a message or part of one came from
    /// it, over any of its links).
    pub(crate) fn last_progress(&self, src: u32) -> Option<Instant> {
        self.lock().peers.get(src as usize).map(|p| p.last_progress)
    }

    /// This rank closed: every wait ends with `Closed`.
    pub(crate) fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        st.wake(Change::All);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.glance.closed()
    }

    /// Per-peer counters (this rank's receive side), by rank.
    pub(crate) fn stats(&self) -> Vec<PeerStats> {
        self.lock()
            .peers
            .iter()
            .map(|p| PeerStats {
                received_messages: p.received_messages,
                received_bytes: p.received_bytes,
                queued_bytes: p.queued_bytes,
                max_queued_bytes: p.max_queued_bytes,
                ..PeerStats::default()
            })
            .collect()
    }

    /// In-process senders: wait until `src`'s budgeted bytes queued here
    /// leave room for `n` more within `budget` (one message is always
    /// admitted when none is queued).
    pub(crate) fn wait_room(
        &self,
        src: u32,
        key: LaneKey,
        n: u64,
        budget: u64,
        timeout: Duration,
    ) -> Result<(), TransportError> {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            let Some(p) = st.peers.get(src as usize) else {
                return Ok(());
            };
            let depth = st.lanes.get(&(src, key)).map_or(0, VecDeque::len);
            let bytes_ok = p.budgeted_bytes == 0 || p.budgeted_bytes + n <= budget;
            if (bytes_ok && depth < LANE_DEPTH as usize) || st.closed {
                return Ok(());
            }
            if st.revoked.contains(&key.comm) {
                // A revocation ends every call of the communicator, a send
                // waiting for room included.
                return Err(TransportError::Revoked);
            }
            if Instant::now() >= deadline {
                return Err(TransportError::Timeout {
                    waiting_on: u32::MAX,
                });
            }
            st = self.wait_until(st, deadline, Wait::Room(src));
        }
    }

    /// The next message from `src` on `key` if one is queued now (`None`
    /// otherwise); with `want_len`, one of another length stays queued and
    /// is reported as `LengthMismatch`.
    pub(crate) fn try_take(
        &self,
        src: u32,
        key: LaneKey,
        want_len: Option<usize>,
    ) -> Option<Result<Payload, TransportError>> {
        if self.glance.nothing_held() {
            return None;
        }
        take_front(&mut self.lock(), src, key, want_len)
    }

    /// Park until a change that concerns `wait`, or `deadline` (or a
    /// spurious wake-up: callers look again either way).
    fn wait_until<'a>(&'a self, mut st: Locked<'a>, deadline: Instant, wait: Wait) -> Locked<'a> {
        let left = deadline.saturating_duration_since(Instant::now());
        // Listed while the state is locked: whoever changes the state
        // after this (under the lock) finds this thread and unparks it;
        // an unpark before the park makes the park return at once.
        let id = st.next_park;
        st.next_park += 1;
        st.parked.push(Parked {
            id,
            wait,
            thread: std::thread::current(),
        });
        drop(st);
        std::thread::park_timeout(left);
        let mut st = self.lock();
        if let Some(i) = st.parked.iter().position(|p| p.id == id) {
            st.parked.swap_remove(i);
        }
        st
    }

    /// The next message on `key` from any rank, with its sender; waits at
    /// most `timeout` (wall time: the sender is not known in advance).
    pub(crate) fn recv_any(
        &self,
        key: LaneKey,
        timeout: Duration,
    ) -> Result<(u32, Payload), TransportError> {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            if st.revoked.contains(&key.comm) {
                return Err(TransportError::Revoked);
            }
            if st.forgotten.contains(&key.comm) {
                return Err(TransportError::Closed);
            }
            for src in 0..st.peers.len() as u32 {
                if let Some(taken) = take_front(&mut st, src, key, None) {
                    return taken.map(|msg| (src, msg));
                }
            }
            if st.closed {
                return Err(TransportError::Closed);
            }
            if Instant::now() >= deadline {
                return Err(TransportError::Timeout {
                    waiting_on: u32::MAX,
                });
            }
            st = self.wait_until(st, deadline, Wait::Any(key));
        }
    }

    /// The next message from `src` on `key`. With `want_len`, a message of
    /// another length is left queued and reported as `LengthMismatch`.
    pub(crate) fn recv(
        &self,
        src: u32,
        key: LaneKey,
        timeout: Duration,
        want_len: Option<usize>,
    ) -> Result<Payload, TransportError> {
        let start = Instant::now();
        let mut spun = false;
        let mut st = self.lock();
        loop {
            let until = match st.verdict(src, key, want_len, start, Instant::now(), timeout) {
                Verdict::Done(outcome) => return outcome,
                Verdict::Wait(until) => until,
            };
            if !spun && self.cores != Cores::Crowded {
                // Poll briefly (yielding the core) before parking.
                spun = true;
                let seen = self.deliveries.load(Ordering::Acquire);
                drop(st);
                let spin_until = Instant::now() + SPIN;
                let mut turns = 0u32;
                while self.deliveries.load(Ordering::Acquire) == seen {
                    turns = turns.wrapping_add(1);
                    // With a core per thread, a few hundred pure spins
                    // first (the sender is on another core, about to
                    // deliver: waking from a yield costs more than the
                    // message); then, or else at once, yield the core.
                    if self.cores == Cores::Own && turns < SPIN_TURNS {
                        std::hint::spin_loop();
                        continue;
                    }
                    if Instant::now() >= spin_until {
                        break;
                    }
                    std::thread::yield_now();
                }
                st = self.lock();
                continue;
            }
            st = self.wait_until(st, until, Wait::From(src, key));
        }
    }
}

/// What a wait for a message from `src` on `key` does now.
#[derive(Debug)]
enum Verdict {
    /// It ends: the message, or why there is none.
    Done(Result<Payload, TransportError>),
    /// It waits, at most until then (or until a change wakes it).
    Wait(Instant),
}

impl State {
    /// The decision a wait for a message from `src` on `key`, begun at
    /// `start` with deadline `timeout`, takes at `now` — a pure function of
    /// the state and the clock (tested on made-up instants): the message
    /// if one is queued (taken); else the failure that dooms the wait, in
    /// order — revoked, forgotten, closed, no such rank, the peer gone, a
    /// relay on its way gone or silent, a member of the collective failed,
    /// the peer silent or without progress for `timeout` (counted from the
    /// later of `start` and its last progress); else wait.
    fn verdict(
        &mut self,
        src: u32,
        key: LaneKey,
        want_len: Option<usize>,
        start: Instant,
        now: Instant,
        timeout: Duration,
    ) -> Verdict {
        let fail = |e| Verdict::Done(Err(e));
        if self.revoked.contains(&key.comm) {
            return fail(TransportError::Revoked);
        }
        if self.forgotten.contains(&key.comm) {
            return fail(TransportError::Closed);
        }
        if let Some(taken) = take_front(self, src, key, want_len) {
            return Verdict::Done(taken);
        }
        if self.closed {
            return fail(TransportError::Closed);
        }
        let Some(peer) = self.peers.get(src as usize).copied() else {
            return fail(TransportError::NoSuchRank {
                rank: src,
                world: self.peers.len() as u32,
            });
        };
        if peer.gone {
            return fail(TransportError::PeerDisconnected { rank: src });
        }
        if let Some(e) = self.cut(src) {
            return fail(e);
        }
        if let Some(e) = doomed(self, key) {
            return fail(e);
        }
        let since = start.max(peer.last_progress);
        if peer.silent || now.saturating_duration_since(since) >= timeout {
            return fail(TransportError::Timeout { waiting_on: src });
        }
        Verdict::Wait(since + timeout)
    }
}

/// A collective lane's call cannot complete: one of its communicator's
/// members failed (gone without a goodbye, or silent).
fn doomed(st: &State, key: LaneKey) -> Option<TransportError> {
    if key.kind != LaneKind::Collective {
        return None;
    }
    st.members.get(&key.comm)?.iter().find_map(|&m| {
        let p = st.peers.get(m as usize)?;
        if p.gone && !p.left {
            Some(TransportError::PeerDisconnected { rank: m })
        } else if p.silent {
            Some(TransportError::Timeout { waiting_on: m })
        } else {
            st.cut(m)
        }
    })
}

/// Take the front message of lane (`src`, `key`), if any: `Err` (and the
/// message stays) when `want_len` is given and differs. Empty lanes are
/// removed — collective lanes live for one call — and the message is
/// accounted as consumed (waking senders in this process that may be
/// waiting for room).
fn take_front(
    st: &mut State,
    src: u32,
    key: LaneKey,
    want_len: Option<usize>,
) -> Option<Result<Payload, TransportError>> {
    let queue = st.lanes.get_mut(&(src, key))?;
    let got = queue.front()?.len();
    if let Some(want) = want_len.filter(|&w| w != got) {
        return Some(Err(TransportError::LengthMismatch {
            from: src,
            got,
            want,
        }));
    }
    let msg = queue.pop_front()?;
    if queue.is_empty() {
        if let Some(q) = st.lanes.remove(&(src, key)) {
            lane_closed(st, src, key);
            if st.spare.len() < SPARE_QUEUES {
                st.spare.push(q);
            }
        }
    }
    consumed(st, src, key, msg.len());
    if budgeted(key.kind) {
        st.wake(Change::Taken(src));
    }
    Some(Ok(msg))
}

/// `src`'s lane `key` holds nothing any more (it was removed).
fn lane_closed(st: &mut State, src: u32, key: LaneKey) {
    if let Some(p) = st.peers.get_mut(src as usize) {
        let open = p.lanes_of(key.kind);
        *open = open.saturating_sub(1);
    }
}

/// Account for a message from `src` leaving the queues; whether the
/// lanes `src` is owed on are within what an honest sender may have in
/// flight (see [`State::owe_message`]).
fn consumed(st: &mut State, src: u32, key: LaneKey, len: usize) -> bool {
    let Some(p) = st.peers.get_mut(src as usize) else {
        return true;
    };
    let n = len as u64;
    p.queued_bytes = p.queued_bytes.saturating_sub(n);
    if !budgeted(key.kind) {
        return true;
    }
    p.budgeted_bytes = p.budgeted_bytes.saturating_sub(n);
    p.credit_due += n;
    st.owe_message(src, key)
}
