//! The shared-memory link: a peer on this host, reached through two
//! byte rings in memory both processes map (`ring.rs`), one each way.
//!
//! Formation authenticates over TCP as for every link, then the rounds in
//! `setup.rs` find the peers on this host and map their rings. Frames
//! travel exactly as on a TCP stream (header, then payload, decoded by the
//! one frame assembler and checked by the core's dispatch), but a send is
//! a copy into the ring and a receive a copy out of it: no system call
//! while both sides are busy.
//!
//! The formation stream stays open for two things only:
//!
//! * **Doorbell.** A reader whose I/O thread sleeps (and which no caller
//!   is reading itself) is woken by one byte on it; so is a writer that
//!   waits for room. Busy rings ring no bells.
//! * **Liveness.** A peer that dies closes it (the kernel does): its link
//!   ends at once, after what it wrote whole is delivered; a frame it had
//!   half written is not. A peer whose process is stopped (a signal, a
//!   debugger) is found by the link's thread, which looks at its state
//!   four times per liveness period: stopped for the liveness limit, its
//!   rank counts as silent until it runs again. A busy peer is never
//!   suspected: its state says it runs.
//!
//! One I/O thread per link, asleep in `poll` on that stream when there is
//! nothing to do but the liveness look (a read of `/proc/<pid>/stat`
//! four times a second by default, where the peer's process could be
//! opened). It reads the ring
//! when no caller does, writes what others queued without blocking
//! (relays, credits, the goodbye), and wakes senders waiting for room.

#[cfg(test)]
mod answer_tests;
mod copy;
#[cfg(test)]
mod hostile_tests;
mod io;
mod queue;
mod region;
mod ring;
mod rx;
mod setup;

pub use copy::DEFAULT_THRESHOLD as DEFAULT_SINGLE_COPY;
pub use region::SharedRegion;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use ring::fuzz_ring;
#[cfg(test)]
pub(crate) use setup::decline;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use setup::fuzz_negotiation;
pub use setup::NEGOTIATION_LEN;

use crate::auth::handshake::Keys;
use crate::form::{FormationError, LinkMaker};
use crate::inbox::Cores;
use crate::link::{
    Budget, Core, Fed, Gone, Latch, Link, Posted, ProtocolError, ReadError, Reader, Reservation,
};
use crate::spec::Spec;
use crate::wire::{FrameType, Header, HEADER_LEN};
use crate::{LaneKind, LinkKind, Payload, TransportError};
use queue::Queue;
use ring::{Corrupt, Segment};
use std::io::ErrorKind;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes a writer copies before it makes them readable: a large frame is
/// read while it is still being written.
const CHUNK: usize = 64 << 10;
/// How long a thread waits for ring room (or for the rest of a frame it
/// reads straight into a caller's buffers) by polling, before it sleeps.
const SPIN: Duration = Duration::from_micros(50);
/// A frame read straight into a caller's buffers that stops coming for
/// this long goes on in the assembler.
const DIRECT_STALL: Duration = Duration::from_micros(200);

/// Bytes a reader reads before it gives their room back (and at the end
/// of each read of the ring, whatever the count).
const FREE_BATCH: u64 = 8 << 10;

/// How long a receiving thread reads the ring itself before it parks.
const PATIENCE: Duration = Duration::from_millis(1);

const WAKE: mio::Token = mio::Token(0);
const SOCKET: mio::Token = mio::Token(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The same-host upgrade the factory gives the backends: the peers on
/// this host leave `streams` as shared-memory links (made once the core
/// exists).
pub(crate) fn upgrade(
    spec: &Spec,
    streams: &mut Vec<(u32, TcpStream, Keys)>,
) -> Result<Vec<(u32, LinkMaker)>, FormationError> {
    let paired = setup::pair_up(spec, streams)?;
    let close_wait = spec.timeout;
    let single_copy = spec.shm_single_copy;
    let budget = spec.send_budget_bytes;
    Ok(paired
        .into_iter()
        .map(|p| {
            let peer = p.peer;
            let make: LinkMaker = Box::new(move |core: &Arc<Core>| {
                let link: Arc<dyn Link> =
                    Arc::new(ShmLink::new(core, p, close_wait, single_copy, budget));
                link
            });
            tracing::debug!(peer, "shared-memory link");
            (peer, make)
        })
        .collect())
}

/// The reading side's state (one reader at a time).
#[derive(Debug)]
struct Rx {
    reader: Reader,
    /// Where in the ring it reads (the ring's own words are the peer's
    /// to corrupt; this is not).
    cursor: ring::Cursor,
    /// A single-copy message's descriptor, part read.
    pending: Option<copy::Pending>,
    ended: bool,
}

#[derive(Debug)]
struct Partial {
    /// Whom its bytes must wake ([`ShmLink::bell_for`]).
    bell: Option<usize>,
    header: [u8; HEADER_LEN],
    payload: Payload,
    /// Bytes of header and payload written.
    at: usize,
    /// Budget to give back once it is written.
    reserved: usize,
}

/// The writing side's state (one writer at a time).
#[derive(Debug)]
struct Tx {
    head: u64,
    /// A queued frame the ring had no room for all of: it goes on before
    /// anything else.
    partial: Option<Partial>,
    /// Single-copy messages offered so far.
    ticket: u64,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct ShmLink {
    peer: u32,
    rank: u32,
    /// The ring this rank reads, and the one it writes.
    inn: Segment,
    out: Segment,
    sock: TcpStream,
    /// The peer's process, when this side may copy from its memory (and
    /// tell whether it is stopped).
    source: Option<copy::Source>,
    /// The I/O thread found the peer's process stopped for the liveness
    /// limit (see `io.rs`); cleared when it runs again.
    frozen: AtomicBool,
    /// Messages of at least this many bytes go by single copy (0: none;
    /// the peer cannot read this process's memory).
    single_copy_from: usize,
    /// Messages that went by single copy.
    single_copies: AtomicU64,
    rx: Mutex<Rx>,
    /// The reader left nothing half done (no complete frame untaken, no
    /// single copy pending): a ring with nothing new to read needs no
    /// look under `rx`'s lock.
    rx_clean: AtomicBool,
    tx: Mutex<Tx>,
    /// Frames for the writer from threads that must not block.
    queue: Queue,
    /// What frames queued within a reservation (answers) may hold.
    budget: Budget,
    /// Senders waiting for room sleep here; the I/O thread wakes them.
    room: (Mutex<()>, Condvar),
    room_waiters: AtomicUsize,
    /// The link has ended (the peer closed, died, or broke the protocol).
    ended: AtomicBool,
    /// A writer waited a whole deadline for room: the peer has stopped
    /// reading. Later writers fail at once until it reads again (as a
    /// silent network link's senders and receivers do).
    stalled: AtomicBool,
    /// When the ring last refused a write it could not take (nanoseconds
    /// after `born`; 0: it takes what it is given).
    full_since: AtomicU64,
    born: Instant,
    stop: AtomicBool,
    waker: Mutex<Option<Arc<mio::Waker>>>,
    /// Closing: the goodbye is queued.
    flushing: AtomicBool,
    /// Set once the goodbye is written or the link has ended.
    flushed: Latch,
    close_wait: Duration,
    spin: bool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ShmLink {
    fn new(
        core: &Core,
        p: setup::Paired,
        close_wait: Duration,
        single_copy: usize,
        budget: usize,
    ) -> ShmLink {
        if let Err(e) = p.sock.set_nonblocking(true) {
            tracing::warn!(peer = p.peer, "doorbell stream: {e}");
        }
        let _ = p.sock.set_nodelay(true);
        ShmLink {
            peer: p.peer,
            rank: core.rank,
            inn: p.inn,
            out: p.out,
            sock: p.sock,
            source: p.source,
            frozen: AtomicBool::new(false),
            single_copy_from: if p.peer_reads { single_copy } else { 0 },
            single_copies: AtomicU64::new(0),
            rx: Mutex::new(Rx {
                reader: Reader::new(p.peer, core.world, core.max_message_bytes, None),
                cursor: ring::Cursor::default(),
                pending: None,
                ended: false,
            }),
            rx_clean: AtomicBool::new(true),
            tx: Mutex::new(Tx {
                head: 0,
                partial: None,
                ticket: 0,
            }),
            queue: Queue::default(),
            budget: Budget::new(budget),
            room: (Mutex::new(()), Condvar::new()),
            room_waiters: AtomicUsize::new(0),
            ended: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            full_since: AtomicU64::new(0),
            born: Instant::now(),
            stop: AtomicBool::new(false),
            waker: Mutex::new(None),
            flushing: AtomicBool::new(false),
            flushed: Latch::default(),
            close_wait,
            spin: core.cores == Cores::Own,
            thread: Mutex::new(None),
        }
    }

    /// One byte to the peer: its I/O thread wakes and looks at both rings.
    fn ring_bell(&self) {
        // No SIGPIPE for a peer that has gone: a C program using meshwork
        // need not ignore it.
        let sock = socket2::SockRef::from(&self.sock);
        match sock.send_with_flags(&[1], libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) {
            // A full socket holds bells enough already.
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => tracing::debug!(peer = self.peer, "doorbell: {e}"),
        }
    }

    fn pause(&self) {
        if self.spin {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }

    // ---- writing ----

    /// Make `head` readable, waking the reader if it sleeps and needs
    /// these bytes now (`bell`: see [`bell_for`](Self::bell_for)).
    fn publish(&self, head: u64, bell: Option<usize>) {
        if self.out.publish(head, bell) {
            self.ring_bell();
        }
    }

    /// Which frames wake a sleeping reader: a data frame for the peer
    /// itself only if one of its threads waits for that lane kind
    /// (`Some(kind)`); anything else (control frames, frames the peer
    /// relays) always (`None`).
    fn bell_for(&self, h: &Header) -> Option<usize> {
        (h.ftype == FrameType::Data && h.dst == self.peer).then_some(h.kind as usize)
    }

    /// Write `first` and then `rest` whole, waiting (within the deadline,
    /// counted from the last byte the ring took) for room. What is written
    /// is made readable once at the end, or every [`CHUNK`] bytes, or
    /// before a wait for room: a small frame's header and payload reach
    /// the reader together, in one record (one store of its mark).
    fn write_all(
        &self,
        tx: &mut Tx,
        first: &[u8],
        rest: &[&[u8]],
        bell: Option<usize>,
        core: &Core,
        dst: u32,
    ) -> Result<(), TransportError> {
        // Read the clock only when the ring is full: a small message's
        // write never is, and a clock read costs as much as the copy.
        let mut since: Option<Instant> = None;
        let mut unpublished = 0;
        for piece in std::iter::once(first).chain(rest.iter().copied()) {
            let mut left: &[u8] = piece;
            while !left.is_empty() {
                let step = left.len().min(CHUNK);
                let n = self
                    .out
                    .write(&mut tx.head, &left[..step])
                    .map_err(|Corrupt| self.corrupt(core, dst))?;
                left = &left[n..];
                self.took(n);
                unpublished += n;
                if n > 0 {
                    since = None;
                    if unpublished >= CHUNK {
                        self.publish(tx.head, bell);
                        unpublished = 0;
                    }
                } else {
                    if unpublished > 0 {
                        self.publish(tx.head, bell);
                        unpublished = 0;
                    }
                    let from = *since.get_or_insert_with(Instant::now);
                    self.wait_room(core, tx.head, from + core.timeout(), dst)?;
                }
            }
        }
        self.publish(tx.head, bell);
        Ok(())
    }

    /// The ring took `n` bytes of a write (0: it is full).
    fn took(&self, n: usize) {
        if n > 0 {
            if self.full_since.load(Ordering::Relaxed) != 0 {
                self.full_since.store(0, Ordering::Relaxed);
            }
        } else if self.full_since.load(Ordering::Relaxed) == 0 {
            let at = u64::try_from(self.born.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.full_since.store(at.max(1), Ordering::Relaxed);
        }
    }

    fn corrupt(&self, core: &Core, dst: u32) -> TransportError {
        tracing::error!(
            peer = self.peer,
            "the peer corrupted the ring's control words; closing the link"
        );
        self.fail(core);
        TransportError::PeerDisconnected { rank: dst }
    }

    /// Wait for room in the ring: poll a moment (reading the inbound ring
    /// meanwhile), then ask the reader to ring and sleep until the I/O
    /// thread hears it.
    fn wait_room(
        &self,
        core: &Core,
        head: u64,
        deadline: Instant,
        dst: u32,
    ) -> Result<(), TransportError> {
        let started = Instant::now();
        loop {
            if self.ended.load(Ordering::Acquire) {
                return Err(TransportError::PeerDisconnected { rank: dst });
            }
            if self.out.room(head).map_or(true, |n| n > 0) {
                if self.stalled.swap(false, Ordering::AcqRel) {
                    core.heard(self.peer);
                }
                return Ok(());
            }
            let now = Instant::now();
            if self.stalled.load(Ordering::Acquire) {
                return Err(TransportError::Timeout { waiting_on: dst });
            }
            if now >= deadline {
                self.stalled.store(true, Ordering::Release);
                core.silent(self.peer);
                return Err(TransportError::Timeout { waiting_on: dst });
            }
            if now >= started + SPIN && core.inbox.is_failed(self.peer) {
                // Known failed meanwhile (another member said it is silent,
                // or it went): it will not make room before the deadline;
                // give up now, as at the deadline.
                self.stalled.store(true, Ordering::Release);
                return Err(TransportError::Timeout { waiting_on: dst });
            }
            if now < started + SPIN {
                // The peer may be waiting for room too, in a send to this
                // rank (an exchange of buffers larger than the rings):
                // what it wrote is read now, into the inbox, so that its
                // send ends and it comes to read this one.
                self.read_now(core, None);
                self.pause();
                continue;
            }
            if self.out.want_room(head).map_or(true, |n| n > 0) {
                return Ok(());
            }
            // Whatever the bytes are, the reader must read them now.
            self.publish(head, None);
            self.sleep_for_bell(deadline, || self.out.room(head).is_ok_and(|n| n == 0));
        }
    }

    /// Sleep until the I/O thread hears a bell (at most 1 ms, and not past
    /// `deadline`) if `still_waiting`, which is asked after this thread
    /// counts as waiting: the wake-up cannot pass between that last look
    /// and the sleep.
    fn sleep_for_bell(&self, deadline: Instant, still_waiting: impl FnOnce() -> bool) {
        let (m, cv) = &self.room;
        let g = lock(m);
        self.room_waiters.fetch_add(1, Ordering::SeqCst);
        if still_waiting() {
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(1));
            drop(cv.wait_timeout(g, wait));
        }
        self.room_waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Write queued frames as far as the ring takes them, never waiting;
    /// whether everything queued is written (or dropped: the link ended).
    fn flush_queued(&self, tx: &mut Tx, core: &Core) -> bool {
        if self.ended.load(Ordering::Acquire) {
            self.discard(tx);
            return true;
        }
        loop {
            if tx.partial.is_none() {
                let Some((h, payload, reserved)) = self.queue.pop() else {
                    return true;
                };
                tx.partial = Some(Partial {
                    bell: self.bell_for(&h),
                    header: h.encode(),
                    payload,
                    at: 0,
                    reserved,
                });
            }
            let Some(p) = tx.partial.as_mut() else {
                continue;
            };
            let total = HEADER_LEN + p.payload.len();
            while p.at < total {
                let src = if p.at < HEADER_LEN {
                    &p.header[p.at..]
                } else {
                    &p.payload.as_ref()[p.at - HEADER_LEN..]
                };
                let step = src.len().min(CHUNK);
                let wrote = self.out.write(&mut tx.head, &src[..step]);
                if let Ok(n) = wrote {
                    self.took(n);
                }
                match wrote {
                    Ok(0) => {
                        // Woken by the reader's bell once it frees room;
                        // the reader must read now, whatever the bytes.
                        let room = self.out.want_room(tx.head);
                        self.publish(tx.head, None);
                        if room.map_or(true, |n| n == 0) {
                            return false;
                        }
                    }
                    Ok(n) => p.at += n,
                    Err(Corrupt) => {
                        self.corrupt(core, self.peer);
                        self.discard(tx);
                        return true;
                    }
                }
            }
            let bell = p.bell;
            self.budget.release(p.reserved);
            tx.partial = None;
            self.publish(tx.head, bell);
        }
    }

    /// The link has ended: nothing queued will be written (a frame part
    /// written, or behind a corrupt word, never could be), and what the
    /// frames reserved of the budget goes back.
    fn discard(&self, tx: &mut Tx) {
        if let Some(p) = tx.partial.take() {
            self.budget.release(p.reserved);
        }
        while let Some((_, _, reserved)) = self.queue.pop() {
            self.budget.release(reserved);
        }
    }

    /// Queue a frame for the I/O thread (never blocks), and write it now
    /// if no one else writes; `reserved`: bytes of the link's budget it
    /// holds until written.
    fn enqueue(&self, core: &Core, header: Header, payload: Payload, reserved: usize) {
        if self.ended.load(Ordering::Acquire) {
            self.budget.release(reserved);
            return;
        }
        self.queue.push((header, payload, reserved));
        // Seen by the writer's `leave_tx`, or this thread takes the writer.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.flush_now(core);
    }

    /// Frames are queued and the ring has taken nothing for a whole
    /// deadline: the peer has stopped reading. It is failed, and what it
    /// would make this rank hold for it (answers, relays, credits) goes
    /// with the link instead of piling up.
    fn check_stall(&self, core: &Core) {
        let full = self.full_since.load(Ordering::Relaxed);
        if full == 0 || self.ended.load(Ordering::Acquire) {
            return;
        }
        let since = self.born + Duration::from_nanos(full);
        if since.elapsed() >= core.timeout() && !self.queue.is_empty() {
            tracing::error!(
                peer = self.peer,
                "rank {} has read nothing of what is queued for it for {:?}; closing the link",
                self.peer,
                core.timeout()
            );
            self.fail(core);
        }
    }

    /// Write what is queued if the writer is free; otherwise whoever holds
    /// it writes it on leaving ([`leave_tx`](Self::leave_tx)). Whether
    /// everything queued is written.
    fn flush_now(&self, core: &Core) -> bool {
        loop {
            let Ok(mut tx) = self.tx.try_lock() else {
                return false;
            };
            let all = self.flush_queued(&mut tx, core);
            let head = tx.head;
            drop(tx);
            if all {
                // The writer is let go: frames queued meanwhile (as
                // `leave_tx` looks) are this thread's to write.
                std::sync::atomic::fence(Ordering::SeqCst);
                if self.queue.is_empty() {
                    return true;
                }
                continue;
            }
            // Out of room, it asked the reader to ring once room frees. If
            // room freed while this thread still held the writer, the bell
            // may have woken a thread that could not take it: look again.
            if !self.out.room(head).is_ok_and(|n| n > 0) {
                self.check_stall(core);
                return false;
            }
        }
    }

    /// After the writer is let go: frames queued meanwhile are written.
    fn leave_tx(&self, core: &Core) -> bool {
        // Pairs with the fence after a push: either that thread finds the
        // writer free or this one sees the frame.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.queue.is_empty() || self.flush_now(core)
    }

    /// Whether nothing queued is left to write (a writer busy now counts
    /// as something left: this never waits for it).
    fn queue_empty(&self) -> bool {
        self.queue.is_empty() && self.tx.try_lock().is_ok_and(|tx| tx.partial.is_none())
    }

    // ---- reading ----

    fn wake_room(&self) {
        if self.room_waiters.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.room.0);
            self.room.1.notify_all();
        }
    }
}

/// The first `n` bytes of `pieces`, as slices.
fn prefix<'a>(n: usize, pieces: &[&'a [u8]]) -> Vec<&'a [u8]> {
    let mut left = n;
    let mut out = Vec::with_capacity(pieces.len());
    for p in pieces {
        let take = p.len().min(left);
        out.push(&p[..take]);
        left -= take;
    }
    out
}

impl Link for ShmLink {
    fn kind(&self) -> LinkKind {
        LinkKind::SharedMemory
    }

    fn send(
        &self,
        core: &Core,
        header: Header,
        parts: &[&[u8]],
        dst: u32,
    ) -> Result<(), TransportError> {
        if self.ended.load(Ordering::Acquire) {
            return Err(TransportError::PeerDisconnected { rank: dst });
        }
        let h = header.encode();
        let mut tx = lock(&self.tx);
        // A queued frame part-written goes on first (the stream must not
        // interleave); the rest of the queue may follow this frame.
        let mut since: Option<Instant> = None;
        while tx.partial.is_some() {
            if self.flush_queued(&mut tx, core) {
                break;
            }
            let from = *since.get_or_insert_with(Instant::now);
            self.wait_room(core, tx.head, from + core.timeout(), dst)?;
        }
        let sent = if self.single_copy(parts) {
            self.send_single(&mut tx, core, header, parts, dst)
        } else {
            self.write_all(&mut tx, &h, parts, self.bell_for(&header), core, dst)
        };
        self.flush_queued(&mut tx, core);
        drop(tx);
        self.leave_tx(core);
        sent
    }

    fn forward(&self, core: &Core, header: Header, payload: Payload) {
        self.enqueue(core, header, payload, 0);
    }

    fn reserve(&self, len: usize) -> Option<Reservation> {
        let bytes = len.saturating_add(HEADER_LEN);
        self.budget
            .try_acquire(bytes)
            .then_some(Reservation { len, bytes })
    }

    fn forward_reserved(&self, core: &Core, header: Header, payload: Payload, room: Reservation) {
        self.enqueue(core, header, payload, room.bytes);
    }

    fn unreserve(&self, room: Reservation) {
        self.budget.release(room.bytes);
    }

    #[cfg(test)]
    fn queued_bytes(&self) -> usize {
        let queued = self.queue.bytes();
        let partial = lock(&self.tx)
            .partial
            .as_ref()
            .map_or(0, |p| HEADER_LEN + p.payload.len() - p.at);
        queued + partial
    }

    fn tell_gone(&self, core: &Core, gone: u32, how: Gone, dst: u32) {
        let h = Header {
            aux: how as u32,
            ..Header::control(FrameType::PeerGone, gone, dst)
        };
        self.enqueue(core, h, Payload::default(), 0);
    }

    fn poll(&self, core: &Core, _want_len: Option<usize>) -> bool {
        self.read_now(core, None)
    }

    fn poll_into(&self, core: &Core, posted: &mut Posted<'_>) -> bool {
        self.read_now(core, Some(posted))
    }

    fn caller_polls(&self, _core: &Core, on: bool, _want_len: Option<usize>) {
        if self.inn.caller_reads(on) {
            // A writer that saw a caller reading rang no bell: what came
            // meanwhile is read now, or by the I/O thread.
            self.wake_io();
        }
    }

    /// A same-host peer whose process is stopped has, in effect, gone
    /// silent (no heartbeat runs over shared memory: the link's thread
    /// looks at the process's state instead, see `io.rs`).
    fn frozen(&self) -> bool {
        self.frozen.load(Ordering::Acquire)
    }

    fn single_copies(&self) -> u64 {
        self.single_copies.load(Ordering::Relaxed)
    }

    fn want(&self, kind: LaneKind, on: bool) -> bool {
        self.inn.want(kind as usize, on)
    }

    /// Reading the ring costs a load, not a system call, and parking costs
    /// a doorbell and two context switches: wait longer before it.
    fn patience(&self) -> Duration {
        PATIENCE
    }

    fn start(self: Arc<Self>, core: &Arc<Core>) {
        let peer = self.peer;
        let spawned = mio::Poll::new()
            .and_then(|poll| {
                let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE)?);
                *lock(&self.waker) = Some(waker);
                Ok(poll)
            })
            .and_then(|poll| {
                let (c, l) = (Arc::clone(core), Arc::clone(&self));
                std::thread::Builder::new()
                    .name(format!("meshwork-s{}-{peer}", core.rank))
                    .spawn(move || l.run(&c, poll))
            });
        match spawned {
            Ok(t) => *lock(&self.thread) = Some(t),
            Err(e) => {
                tracing::error!(peer, "cannot start the link's thread: {e}");
                self.fail(core);
            }
        }
    }

    fn close_begin(&self) {
        let bye = Header::control(FrameType::Bye, self.rank, self.peer);
        if !self.ended.load(Ordering::Acquire) {
            self.queue.push((bye, Payload::default(), 0));
        }
        self.flushing.store(true, Ordering::Release);
        self.wake_io();
    }

    fn close_flush(&self) {
        // A stopped process reads nothing until it is continued, if ever:
        // not waited for (a group replacing a frozen member closes these
        // links while the member is still stopped).
        if self.frozen() {
            tracing::debug!(
                peer = self.peer,
                "the peer is stopped; closing without a flush"
            );
            return;
        }
        // At most the deadline, counted from when the ring last took
        // anything: a peer that stopped reading long ago is not waited
        // for again.
        let started = Instant::now();
        let flushed = self.flushed.wait(|| {
            let full = self.full_since.load(Ordering::Relaxed);
            let since = match full {
                0 => started,
                n => started.min(self.born + Duration::from_nanos(n)),
            };
            since + self.close_wait
        });
        if !flushed && !self.queue_empty() {
            tracing::debug!(peer = self.peer, "the peer does not read; closing anyway");
        }
    }

    fn close_end(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake_io();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
        let _ = self.sock.shutdown(Shutdown::Both);
    }
}

impl ShmLink {
    fn wake_io(&self) {
        if let Some(w) = lock(&self.waker).as_ref() {
            let _ = w.wake();
        }
    }
}
