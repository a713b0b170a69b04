//! A TCP link's sending side.
//!
//! Application threads write a frame themselves when nothing is queued on
//! the link (`TcpTx::send`); otherwise it goes through a crossbeam channel
//! to the link's I/O thread, woken through its mio `Waker`, which writes
//! queued frames with non-blocking vectored writes (header and payload
//! without a copy) as the socket takes them (`TcpTx::flush`, a
//! [`Flusher`]'s state carried between turns). A per-link budget bounds
//! what is queued here. The receiving side is `rx.rs`.

use crate::auth::seal::{Envelope, SealError, Sealer, SEAL_OVERHEAD};
use crate::link::{Budget, Core, Reservation};
use crate::wire::{FrameType, Header, HEADER_LEN};
use crate::{BufferPool, Payload, TransportError};
use crossbeam_channel::{Receiver, Sender};
use std::io::{ErrorKind, IoSlice};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// An item for a writer.
#[derive(Debug)]
pub(crate) enum Out {
    /// A frame whose bytes were reserved in the link's budget (returned
    /// once written).
    Frame([u8; HEADER_LEN], Payload),
    /// A frame sent within room reserved for it without waiting (an
    /// answer): these bytes return to the budget once it is written.
    Reserved([u8; HEADER_LEN], Payload, usize),
    /// A frame sent without a reservation (a relay, a credit, a notice).
    Unbudgeted([u8; HEADER_LEN], Payload),
    /// The unwritten tail of a frame an application thread began writing.
    Tail(Vec<u8>),
    /// Flush, say bye (these bytes: the goodbye frame, sealed when the
    /// link seals), close the write half.
    Close(Vec<u8>),
}

impl Out {
    /// The bytes it puts on the wire, in order.
    fn pieces(&self) -> [&[u8]; 2] {
        match self {
            Out::Frame(h, p) | Out::Unbudgeted(h, p) | Out::Reserved(h, p, _) => {
                [&h[..], p.as_ref()]
            }
            Out::Tail(t) => [&t[..], &[]],
            Out::Close(_) => [&[], &[]],
        }
    }

    /// Bytes it holds waiting for the wire.
    fn len(&self) -> usize {
        match self {
            Out::Frame(_, p) | Out::Unbudgeted(_, p) | Out::Reserved(_, p, _) => {
                HEADER_LEN + p.len()
            }
            Out::Tail(t) | Out::Close(t) => t.len(),
        }
    }
}

/// What of `pieces` follows their first `written` bytes, copied into one
/// buffer (the tail of a frame the socket took only part of).
fn rest_after<'a>(pieces: impl Iterator<Item = &'a [u8]>, written: usize) -> Vec<u8> {
    let rest: Vec<&[u8]> = after(pieces, written).collect();
    let mut tail = Vec::with_capacity(rest.iter().map(|p| p.len()).sum());
    rest.iter().for_each(|p| tail.extend_from_slice(p));
    tail
}

/// What is left of `pieces` once their first `n` bytes are written.
fn after<'a>(
    pieces: impl Iterator<Item = &'a [u8]>,
    mut n: usize,
) -> impl Iterator<Item = &'a [u8]> {
    pieces.filter_map(move |p| {
        let from = n.min(p.len());
        n -= from;
        (from < p.len()).then(|| &p[from..])
    })
}

/// The write side of a link. Bytes reach the socket from two places: an
/// application thread writing a frame itself (never blocking), or the
/// I/O thread draining the queue. `pending` (items queued, not yet
/// fully written) decides which, under a lock that is only ever held for a
/// non-blocking write or a queue push: a thread may write directly only
/// when nothing is pending, and a partial write queues its tail before the
/// lock is released — so frames reach the wire whole and in order.
#[derive(Debug)]
pub(crate) struct Wire {
    pub(crate) stream: TcpStream,
    pending: Mutex<usize>,
    /// Wakes the I/O thread that drains the queue (set when it starts).
    waker: OnceLock<Arc<mio::Waker>>,
    /// With a token: puts every frame in its envelope (`auth/seal.rs`),
    /// under `pending` (so nonce order is wire order).
    sealer: Option<Mutex<Sealer>>,
    /// The link's I/O thread has stopped: nothing queued would be written.
    ended: AtomicBool,
    /// Bytes queued for the I/O thread and not yet written, of every kind.
    queued: AtomicUsize,
}

impl Wire {
    pub(crate) fn new(stream: TcpStream, sealer: Option<Sealer>) -> Wire {
        Wire {
            stream,
            pending: Mutex::new(0),
            waker: OnceLock::new(),
            sealer: sealer.map(Mutex::new),
            ended: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
        }
    }

    /// The I/O thread has stopped: refuse to queue from now on.
    pub(crate) fn end(&self) {
        let _pending = self.pending();
        self.ended.store(true, Ordering::Release);
    }

    /// Frame `h`'s envelope, if this link seals (call under `pending`).
    fn seal(
        &self,
        h: &Header,
        parts: &[&[u8]],
        pool: &Arc<BufferPool>,
    ) -> Option<Result<Envelope, SealError>> {
        let sealer = self.sealer.as_ref()?;
        Some(
            sealer
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .seal(h, parts, pool),
        )
    }

    fn pending(&self) -> MutexGuard<'_, usize> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The I/O thread's waker; items queued before it is set are written
    /// on the thread's first turn.
    pub(crate) fn set_waker(&self, waker: Arc<mio::Waker>) {
        let _ = self.waker.set(waker);
    }

    fn wake(&self) {
        if let Some(w) = self.waker.get() {
            if let Err(e) = w.wake() {
                tracing::warn!("cannot wake a link's I/O thread: {e}");
            }
        }
    }
}

/// The sending side of a link, held by application threads.
#[derive(Clone, Debug)]
pub(crate) struct TcpTx {
    pub tx: Sender<Out>,
    pub budget: Arc<Budget>,
    pub wire: Arc<Wire>,
}

impl TcpTx {
    /// Queue an item for the I/O thread, after everything queued or
    /// written before.
    pub(crate) fn enqueue(&self, item: Out) -> bool {
        let mut pending = self.wire.pending();
        self.push(&mut pending, item)
    }

    /// Send a frame without blocking, in its envelope if the link seals:
    /// data (answers, relays) written now if nothing is queued and the
    /// socket takes it (no wake-up of the I/O thread, which may be this
    /// thread), else queued for the I/O thread; control frames (credits,
    /// notices, revocations) always queued, in the order and with the
    /// timing the recovery protocol was measured with.
    pub(crate) fn enqueue_frame(
        &self,
        h: Header,
        payload: Payload,
        pool: &Arc<BufferPool>,
    ) -> bool {
        self.queue_frame(h, payload, pool, 0)
    }

    /// Room in the link's budget for a frame of `len` payload bytes (in
    /// its envelope, if the link seals), reserved now or `None`.
    pub(crate) fn reserve(&self, len: usize) -> Option<Reservation> {
        let overhead = if self.wire.sealer.is_some() {
            SEAL_OVERHEAD
        } else {
            0
        };
        let bytes = len.saturating_add(HEADER_LEN + overhead);
        self.budget
            .try_acquire(bytes)
            .then_some(Reservation { len, bytes })
    }

    /// [`enqueue_frame`](Self::enqueue_frame) within `room`: its bytes
    /// return to the budget once written (at once if written now, or if
    /// the link has ended).
    pub(crate) fn enqueue_reserved(
        &self,
        h: Header,
        payload: Payload,
        pool: &Arc<BufferPool>,
        room: Reservation,
    ) -> bool {
        self.queue_frame(h, payload, pool, room.bytes)
    }

    /// `enqueue_frame`, the frame queued within `reserved` bytes of the
    /// budget (0: without a reservation).
    fn queue_frame(
        &self,
        h: Header,
        payload: Payload,
        pool: &Arc<BufferPool>,
        reserved: usize,
    ) -> bool {
        let queued = self.queue_frame_inner(h, payload, pool, reserved);
        if !matches!(queued, Queued::Reserved) {
            self.budget.release(reserved);
        }
        !matches!(queued, Queued::Failed)
    }

    fn queue_frame_inner(
        &self,
        h: Header,
        payload: Payload,
        pool: &Arc<BufferPool>,
        reserved: usize,
    ) -> Queued {
        let mut pending = self.wire.pending();
        let parts = [payload.as_ref()];
        let env = match self.wire.seal(&h, &parts, pool) {
            None => None,
            Some(Ok(env)) => Some(env),
            Some(Err(e)) => {
                tracing::error!("{e}");
                return Queued::Failed;
            }
        };
        if *pending == 0 && h.ftype == crate::wire::FrameType::Data {
            let written = match &env {
                None => {
                    let head = h.encode();
                    let pieces = [&head[..], payload.as_ref()];
                    self.write_or_queue_tail(
                        &mut pending,
                        pieces.into_iter().filter(|p| !p.is_empty()),
                    )
                }
                Some(env) => self.write_or_queue_tail(&mut pending, env.pieces(&parts)),
            };
            match written {
                Ok(true) => return Queued::Done,
                Ok(false) => {}
                Err(_) => return Queued::Failed,
            }
        }
        let (head, rest) = match env {
            None => (h.encode(), payload),
            Some(env) => (env.outer(), env.rest_in(&parts, pool)),
        };
        let item = if reserved > 0 {
            Out::Reserved(head, rest, reserved)
        } else {
            Out::Unbudgeted(head, rest)
        };
        match self.push(&mut pending, item) {
            true if reserved > 0 => Queued::Reserved,
            true => Queued::Done,
            false => Queued::Failed,
        }
    }

    /// Bytes queued for the I/O thread and not yet written.
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        self.wire.queued.load(Ordering::Relaxed)
    }

    /// Queue the goodbye after everything queued: once written, the I/O
    /// thread closes the write half.
    pub(crate) fn close(&self, rank: u32, peer: u32, pool: &Arc<BufferPool>) -> bool {
        let mut pending = self.wire.pending();
        let bye = Header::control(FrameType::Bye, rank, peer);
        let bytes = match self.wire.seal(&bye, &[], pool) {
            None => bye.encode().to_vec(),
            Some(Ok(env)) => env.pieces(&[]).collect::<Vec<_>>().concat(),
            Some(Err(e)) => {
                tracing::error!("{e}");
                return false;
            }
        };
        self.push(&mut pending, Out::Close(bytes))
    }

    fn push(&self, pending: &mut usize, item: Out) -> bool {
        // Under `pending`, like `Wire::end`: nothing slips in after it.
        if self.wire.ended.load(Ordering::Acquire) {
            return false;
        }
        let len = item.len();
        let sent = self.tx.send(item).is_ok();
        if sent {
            self.wire.queued.fetch_add(len, Ordering::Relaxed);
            *pending += 1;
            self.wire.wake();
        }
        sent
    }

    /// With `pending` locked and zero: write `pieces` now, without
    /// blocking, and queue whatever the socket did not take. `Ok(true)`:
    /// handled; `Ok(false)`: the link is busy, queue normally.
    fn write_or_queue_tail<'a>(
        &self,
        pending: &mut usize,
        pieces: impl Iterator<Item = &'a [u8]> + Clone,
    ) -> std::io::Result<bool> {
        if *pending != 0 {
            return Ok(false);
        }
        // On the stack for the usual few pieces: no allocation per message.
        let count = pieces.clone().count();
        let mut stack = [IoSlice::new(&[]); STACK_PIECES];
        let mut heap = Vec::new();
        let slices: &mut [IoSlice<'_>] = if count <= STACK_PIECES {
            for (slot, p) in stack.iter_mut().zip(pieces.clone()) {
                *slot = IoSlice::new(p);
            }
            &mut stack[..count]
        } else {
            heap.extend(pieces.clone().map(IoSlice::new));
            &mut heap
        };
        let total: usize = pieces.clone().map(<[u8]>::len).sum();
        let written = if total >= DIRECT_SEND_MIN {
            write_while_taken(&self.wire.stream, slices)?
        } else {
            write_now(&self.wire.stream, slices)?
        };
        if written < total {
            self.queue_tail(pending, rest_after(pieces, written))?;
        }
        Ok(true)
    }

    /// Queue the rest of a frame whose start is on the wire.
    fn queue_tail(&self, pending: &mut usize, tail: Vec<u8>) -> std::io::Result<()> {
        if !self.push(pending, Out::Tail(tail)) {
            // Half a frame is on the wire and the rest cannot follow:
            // cut the connection, so nothing is ever appended to it.
            let _ = self.wire.stream.shutdown(Shutdown::Both);
            return Err(ErrorKind::BrokenPipe.into());
        }
        Ok(())
    }

    /// Send one frame. Fast path: nothing is queued, so this thread writes
    /// the frame itself without blocking — no copy, no hand-over to the
    /// I/O thread (one wake-up less per message, most of a small
    /// message's latency). Otherwise the frame is copied and queued, within
    /// the link's byte budget.
    pub(crate) fn send(
        &self,
        header: Header,
        parts: &[&[u8]],
        core: &Core,
        dst: u32,
    ) -> Result<(), TransportError> {
        let gone = || TransportError::PeerDisconnected { rank: dst };
        if self.wire.sealer.is_some() {
            return self.send_sealed(header, parts, core, dst);
        }
        let header = header.encode();
        let pieces = std::iter::once(&header[..])
            .chain(parts.iter().copied())
            .filter(|p| !p.is_empty());
        {
            let mut pending = self.wire.pending();
            if self
                .write_or_queue_tail(&mut pending, pieces)
                .map_err(|_| gone())?
            {
                return Ok(());
            }
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.budget.acquire(len + HEADER_LEN, core.timeout(), dst)?;
        let frame = Out::Frame(header, Payload::from_parts_in(parts, Some(&core.pool)));
        if self.enqueue(frame) {
            Ok(())
        } else {
            Err(gone())
        }
    }
}

impl TcpTx {
    /// `send` on a sealing link: room first, then seal and write (or
    /// queue) under the wire's lock. Written at once, an authenticated
    /// payload goes from the caller's buffers to the socket uncopied.
    fn send_sealed(
        &self,
        h: Header,
        parts: &[&[u8]],
        core: &Core,
        dst: u32,
    ) -> Result<(), TransportError> {
        let gone = TransportError::PeerDisconnected { rank: dst };
        let n = parts.iter().map(|p| p.len()).sum::<usize>() + SEAL_OVERHEAD + HEADER_LEN;
        self.budget.acquire(n, core.timeout(), dst)?;
        let mut pending = self.wire.pending();
        let len = n - SEAL_OVERHEAD - HEADER_LEN;
        if *pending == 0 && len >= TAG_PIECES_MIN {
            if let Some(sent) = self.send_tagging(&mut pending, &h, parts, len) {
                drop(pending);
                self.budget.release(n);
                return sent.map_err(|_| gone);
            }
        }
        let env = match self.wire.seal(&h, parts, &core.pool) {
            Some(Ok(env)) => env,
            _ => {
                drop(pending);
                self.budget.release(n);
                return Err(gone);
            }
        };
        if *pending == 0 {
            let written = self.write_or_queue_tail(&mut pending, env.pieces(parts));
            drop(pending);
            self.budget.release(n);
            return written.map(drop).map_err(|_| gone);
        }
        // The writer returns `n` to the budget once written.
        if self.push(
            &mut pending,
            Out::Frame(env.outer(), env.rest_in(parts, &core.pool)),
        ) {
            Ok(())
        } else {
            drop(pending);
            self.budget.release(n);
            Err(gone)
        }
    }
}

impl TcpTx {
    /// A large frame on an authenticating link (`pending` locked and
    /// zero), tagged as it goes out: each piece of up to [`TAG_PIECE`]
    /// bytes is hashed just before the socket takes it from the caller's
    /// memory, so the peer reads and checks one piece while this side
    /// hashes the next, and the socket copies bytes the hash has just
    /// brought into cache; the tag follows the payload, as in any
    /// envelope. What the socket does not take within [`SEND_STALL`] is
    /// hashed and queued, tag included. `None`: the link encrypts.
    fn send_tagging(
        &self,
        pending: &mut usize,
        h: &Header,
        parts: &[&[u8]],
        len: usize,
    ) -> Option<std::io::Result<()>> {
        let mut sealer = self
            .wire
            .sealer
            .as_ref()?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let (head, mut tagging) = match sealer.begin(h, len)? {
            Ok(begun) => begun,
            Err(e) => return Some(Err(std::io::Error::other(e))),
        };
        let mut pieces = parts
            .iter()
            .flat_map(|p| p.chunks(TAG_PIECE))
            .filter(|p| !p.is_empty())
            .peekable();
        let cut = |e: SealError| {
            // Part of the frame may be on the wire and the rest cannot
            // follow: nothing may ever be appended to it.
            let _ = self.wire.stream.shutdown(Shutdown::Both);
            std::io::Error::other(e)
        };
        // The headers go with the first piece, the tag with the last.
        let mut head: &[u8] = &head;
        let mut last: &[u8] = &[];
        while let Some(piece) = pieces.next() {
            if let Err(e) = tagging.update(piece) {
                return Some(Err(cut(e)));
            }
            if pieces.peek().is_none() {
                last = piece;
                break;
            }
            let mut bufs = [IoSlice::new(head), IoSlice::new(piece)];
            let written = match write_while_taken(&self.wire.stream, &mut bufs) {
                Ok(w) => w,
                Err(e) => return Some(Err(e)),
            };
            if written < head.len() + piece.len() {
                // Stalled: the rest goes to the queue, hashed first.
                let mut tail = rest_after([head, piece].into_iter(), written);
                for rest in pieces {
                    if let Err(e) = tagging.update(rest) {
                        return Some(Err(cut(e)));
                    }
                    tail.extend_from_slice(rest);
                }
                match tagging.finish() {
                    Ok(tag) => tail.extend_from_slice(&tag),
                    Err(e) => return Some(Err(cut(e))),
                }
                return Some(self.queue_tail(pending, tail));
            }
            head = &[];
        }
        let tag = match tagging.finish() {
            Ok(tag) => tag,
            Err(e) => return Some(Err(cut(e))),
        };
        let mut bufs = [IoSlice::new(head), IoSlice::new(last), IoSlice::new(&tag)];
        let total = head.len() + last.len() + tag.len();
        Some(match write_while_taken(&self.wire.stream, &mut bufs) {
            Ok(w) if w < total => {
                self.queue_tail(pending, rest_after([head, last, &tag[..]].into_iter(), w))
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        })
    }
}

/// What became of a frame queued without waiting.
enum Queued {
    /// Written now, or queued without a reservation.
    Done,
    /// Queued within its reservation, which its writer gives back.
    Reserved,
    /// The link has ended (or the frame could not be sealed).
    Failed,
}

/// Write as much of `bufs` as the socket takes without blocking; returns
/// the bytes written and leaves `bufs` advanced past them.
fn write_now(stream: &TcpStream, bufs: &mut [IoSlice<'_>]) -> std::io::Result<usize> {
    let sock = socket2::SockRef::from(stream);
    let mut bufs = bufs;
    let mut written = 0;
    while !bufs.is_empty() {
        match sock.send_vectored_with_flags(bufs, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => {
                written += n;
                IoSlice::advance_slices(&mut bufs, n);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

/// Write `bufs` straight from the caller's memory for as long as the
/// socket keeps taking them: a pause of [`SEND_STALL`] (a receiver that
/// does not read, or two ranks each writing to the other) ends it, and
/// the caller copies what is left into the queue (which keeps such
/// exchanges from waiting on each other). How many bytes were written.
fn write_while_taken(stream: &TcpStream, bufs: &mut [IoSlice<'_>]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut rest = bufs;
    let mut written = 0;
    let mut quiet = Instant::now();
    let sock = socket2::SockRef::from(stream);
    while written < total {
        match sock.send_vectored_with_flags(rest, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => {
                written += n;
                IoSlice::advance_slices(&mut rest, n);
                quiet = Instant::now();
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let waited = quiet.elapsed();
                if waited >= SEND_STALL {
                    break;
                }
                let mut p = libc::pollfd {
                    fd: stream.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                let ms = (SEND_STALL - waited).as_millis().clamp(1, 1000) as libc::c_int;
                // SAFETY: one valid pollfd for a socket we hold open.
                unsafe { libc::poll(&mut p, 1, ms) };
            }
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

/// Frames from this size are written straight from the caller's memory
/// while the socket takes them (`write_while_taken`), not copied into the
/// queue once the socket's buffer is full: that copy, of up to the whole
/// message into fresh memory, was most of a 64 MiB ping-pong's time.
const DIRECT_SEND_MIN: usize = 256 << 10;

/// Authenticated frames from this size are tagged piece by piece as they
/// are written (`TcpTx::send_tagging`); smaller ones are tagged whole
/// first. A large frame's peer then checks one piece while the next is
/// hashed instead of waiting for the whole frame before hashing it: 16 MiB
/// ping-pong went from 1.4-1.7x the unauthenticated time to 0.9-1.0x.
/// Below it are the frames of collectives' pipelines (at most 512 KiB),
/// which already overlap one frame's hashing with another's transfer, and
/// for which writing in pieces only multiplies the wake-ups of the peer's
/// link thread: all_reduce of 1 MiB on 4 ranks took 1.7x as long.
const TAG_PIECES_MIN: usize = 1 << 20;

/// The piece a large authenticated frame is hashed and written in
/// (`TcpTx::send_tagging`): small enough to stay in cache between the hash
/// and the socket's copy, large enough that a write per piece costs
/// nothing. A receiver on the same host sleeps for batches of the same
/// size (`PACED` in `rx.rs`); with it, 16 MiB ping-pong over loopback took
/// 5.1-6.7 ms one way against 9.6-11.0 in 64 KiB pieces (and 13.9-16.2 in
/// 64 KiB pieces to a receiver asking the socket in a loop), interleaved
/// runs. QUIC's sidecar, whose link's thread reads every payload, is
/// tagged in these pieces too (in 64 KiB pieces it woke that thread per
/// piece, and tagged whole it hashed 16 MiB before the first byte left).
const TAG_PIECE: usize = 256 << 10;

/// How long a direct write waits for the socket to take more before the
/// rest of its frame is queued.
const SEND_STALL: std::time::Duration = std::time::Duration::from_millis(2);

/// Pieces of a frame gathered on the stack (more go to the heap).
const STACK_PIECES: usize = 8;

/// Frames written in one vectored call, at most.
const BATCH_FRAMES: usize = 64;
/// Payload bytes batched into one vectored call, at most (beyond it, one
/// large frame per call).
const BATCH_BYTES: usize = 1 << 20;

// The I/O thread's writing: queued frames batched into vectored writes,
// carried from turn to turn while the socket takes them, and heartbeats.

/// The I/O thread's side of the queue: the batch being written and how
/// far it got, carried from turn to turn.
#[derive(Debug)]
pub(crate) struct Flusher {
    queue: Receiver<Out>,
    batch: Vec<Out>,
    /// Bytes of `batch` already written.
    done: usize,
    /// Queue items in `batch` (each counted in `pending`).
    items: usize,
    /// Budget to return once `batch` is written.
    budgeted: usize,
    /// Bytes of `batch`'s items, as counted in `Wire::queued`.
    bytes: usize,
    /// A `Close` was taken: the goodbye is the batch's last frame.
    closing: bool,
    /// The goodbye is written and the write half shut.
    pub(crate) finished: bool,
    /// Since when the socket has taken nothing of what is queued.
    pub(crate) stalled_since: Option<Instant>,
    /// When the I/O thread last sent a heartbeat.
    pub(crate) last_beat: Instant,
}

/// Where a flush stopped.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flushed {
    /// Nothing is queued.
    Idle,
    /// The socket takes no more now: wait until it is writable.
    Blocked,
    /// Goodbye said: nothing more will be written.
    Finished,
}

impl Flusher {
    pub(crate) fn new(queue: Receiver<Out>) -> Flusher {
        Flusher {
            queue,
            batch: Vec::with_capacity(BATCH_FRAMES),
            done: 0,
            items: 0,
            budgeted: 0,
            bytes: 0,
            closing: false,
            finished: false,
            stalled_since: None,
            last_beat: Instant::now(),
        }
    }

    /// Take queued items into an empty batch.
    fn fill(&mut self) {
        let mut bytes = 0;
        while !self.closing && self.batch.len() < BATCH_FRAMES && bytes < BATCH_BYTES {
            let Ok(item) = self.queue.try_recv() else {
                break;
            };
            self.items += 1;
            self.bytes += item.len();
            match item {
                Out::Close(bye) => {
                    self.closing = true;
                    self.batch.push(Out::Tail(bye));
                }
                Out::Frame(h, p) => {
                    bytes += p.len();
                    self.budgeted += p.len() + HEADER_LEN;
                    self.batch.push(Out::Frame(h, p));
                }
                Out::Unbudgeted(h, p) => {
                    bytes += p.len();
                    self.batch.push(Out::Unbudgeted(h, p));
                }
                Out::Reserved(h, p, reserved) => {
                    bytes += p.len();
                    self.budgeted += reserved;
                    self.batch.push(Out::Unbudgeted(h, p));
                }
                Out::Tail(t) => {
                    bytes += t.len();
                    self.batch.push(Out::Tail(t));
                }
            }
        }
    }
}

impl TcpTx {
    /// Write what is queued, as far as the socket takes it without
    /// blocking. `Err`: the connection failed.
    pub(crate) fn flush(&self, f: &mut Flusher) -> std::io::Result<Flushed> {
        loop {
            if f.finished {
                return Ok(Flushed::Finished);
            }
            if f.batch.is_empty() {
                f.fill();
                if f.batch.is_empty() {
                    return Ok(Flushed::Idle);
                }
            }
            let pieces = f.batch.iter().flat_map(Out::pieces);
            let total: usize = pieces.clone().map(<[u8]>::len).sum();
            let mut slices: Vec<IoSlice<'_>> = after(pieces, f.done).map(IoSlice::new).collect();
            let written = write_now(&self.wire.stream, &mut slices)?;
            drop(slices);
            f.done += written;
            if written > 0 {
                f.stalled_since = None;
            }
            if f.done < total {
                f.stalled_since.get_or_insert_with(Instant::now);
                return Ok(Flushed::Blocked);
            }
            // The batch is on the wire: its items are no longer pending.
            *self.wire.pending() -= f.items;
            self.wire.queued.fetch_sub(f.bytes, Ordering::Relaxed);
            self.budget.release(f.budgeted);
            f.batch.clear();
            (f.done, f.items, f.budgeted, f.bytes) = (0, 0, 0, 0);
            if f.closing {
                let _ = self.wire.stream.shutdown(Shutdown::Write);
                f.finished = true;
            }
        }
    }

    /// A heartbeat, written like any frame: at once if nothing is queued,
    /// else behind what is. `false`: the connection failed.
    pub(crate) fn heartbeat(&self, core: &Core, peer: u32) -> bool {
        // It carries this rank's liveness: the peer waits that long for
        // the next beat if it would wait less.
        let hb = Header {
            aux: core.liveness_ms(),
            ..Header::control(FrameType::Heartbeat, core.rank, peer)
        };
        let mut pending = self.wire.pending();
        if *pending != 0 {
            // The link is busy, and needs no heartbeat.
            return true;
        }
        match self.wire.seal(&hb, &[], &core.pool) {
            None => self
                .write_or_queue_tail(&mut pending, std::iter::once(&hb.encode()[..]))
                .is_ok(),
            Some(Ok(env)) => self
                .write_or_queue_tail(&mut pending, env.pieces(&[]))
                .is_ok(),
            Some(Err(e)) => {
                tracing::error!("{e}");
                false
            }
        }
    }
}
