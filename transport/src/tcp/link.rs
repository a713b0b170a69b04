//! A TCP link's sending side and what the rank's links share.
//!
//! Application threads write a frame themselves when nothing is queued on
//! the link (`LinkTx::send`); otherwise it goes through a crossbeam channel
//! to the link's writer thread, which sends queued frames with vectored
//! writes (header and payload without a copy) and a heartbeat when idle.
//! Per-destination budgets (`Budget`) bound what is queued here and what a
//! receiver holds for us. The receiving side is `rx.rs`.

use super::frame::{FrameType, Header, HEADER_LEN};
use super::seal::{Sealer, SEAL_OVERHEAD};
use crate::inbox::Inbox;
use crate::{BufferPool, LaneKey, Payload, TransportError};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::collections::HashMap;
use std::io::{ErrorKind, IoSlice, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// What the rank's link threads share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub rank: u32,
    pub world: u32,
    pub star: bool,
    pub inbox: Inbox,
    pub pool: Arc<BufferPool>,
    pub timeout_ns: AtomicU64,
    pub max_message_bytes: u64,
    /// Budgeted bytes this rank may still send to each rank (credits).
    pub flow: Vec<Budget>,
    /// (messages, bytes) this rank sent to each rank.
    pub sent: Vec<(AtomicU64, AtomicU64)>,
    /// Budgeted messages sent but not yet credited, per (destination, lane).
    pub lanes_in_flight: Mutex<HashMap<(u32, LaneKey), u32>>,
    pub lanes_freed: Condvar,
    /// Direct links by peer rank, set once formation is done.
    pub links: OnceLock<Vec<Option<LinkTx>>>,
    /// Messages this rank may have queued on one lane of one receiver.
    pub lane_depth: u32,
    /// Their receive halves, by peer rank.
    pub rxs: OnceLock<Vec<Option<Arc<super::rx::Rx>>>>,
    /// Whether a receiving thread spins (this host has a core per rank) or
    /// yields while it polls its link.
    pub spin: bool,
    pub closing: AtomicBool,
    /// QUIC links and the sidecar's bookkeeping, when the group runs on
    /// QUIC: these TCP links then carry only payloads over the threshold.
    pub quic: Option<crate::quic::QuicShared>,
}

impl Shared {
    /// Wait (up to the deadline) for a slot on `dst`'s lane `key`.
    pub(crate) fn acquire_lane(&self, dst: u32, key: LaneKey) -> Result<(), TransportError> {
        let deadline = Instant::now() + self.timeout();
        let mut lanes = self
            .lanes_in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        loop {
            let n = lanes.entry((dst, key)).or_insert(0);
            if *n < self.lane_depth {
                *n += 1;
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline || self.inbox.is_gone(dst) {
                return Err(TransportError::Timeout { waiting_on: dst });
            }
            lanes = self
                .lanes_freed
                .wait_timeout(lanes, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// `dst` took `count` messages of lane `key`.
    pub(crate) fn release_lane(&self, dst: u32, key: LaneKey, count: u32) {
        let mut lanes = self
            .lanes_in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = lanes.get_mut(&(dst, key)) {
            *n = n.saturating_sub(count);
            if *n == 0 {
                lanes.remove(&(dst, key));
            }
        }
        drop(lanes);
        self.lanes_freed.notify_all();
    }

    /// The link that carries traffic for `dst`: a star worker reaches
    /// everyone through the coordinator.
    pub(crate) fn hop(&self, dst: u32) -> u32 {
        if self.star && self.rank != 0 {
            0
        } else {
            dst
        }
    }

    fn tcp_link(&self, hop: u32) -> Option<&LinkTx> {
        self.links
            .get()
            .and_then(|l| l.get(hop as usize))
            .and_then(Option::as_ref)
    }

    /// Send one frame (`header`, then `parts`) towards `dst` over the link
    /// to `hop`, waiting within the deadline for room. On QUIC, a payload
    /// under the threshold goes over the QUIC link; a larger one over this
    /// TCP link (the sidecar), announced on the QUIC lane by a descriptor
    /// so that the lane stays in order.
    pub(crate) fn transmit(
        &self,
        hop: u32,
        header: Header,
        parts: &[&[u8]],
        dst: u32,
    ) -> Result<(), TransportError> {
        let link = self
            .tcp_link(hop)
            .ok_or(TransportError::PeerDisconnected { rank: dst })?;
        let Some(q) = &self.quic else {
            return link.send(header, parts, self, dst);
        };
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len < q.threshold {
            q.send(self, hop, header, parts, dst)
        } else {
            q.send_bulk(self, hop, header, parts, dst, link)
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_nanos(self.timeout_ns.load(Ordering::Relaxed))
    }

    /// Ranks whose traffic arrives over the link to `peer`: a star worker
    /// hears everyone through the coordinator.
    pub(crate) fn served_by(&self, peer: u32) -> Vec<u32> {
        if self.star && self.rank != 0 {
            (0..self.world).filter(|&r| r != self.rank).collect()
        } else {
            vec![peer]
        }
    }

    /// The TCP link to `peer` ended. On QUIC, the peer's QUIC link first
    /// delivers what it still holds (descriptors whose payloads the
    /// sidecar brought just before it ended), then calls `lost_now`.
    pub(crate) fn link_lost(&self, peer: u32) {
        if let Some(q) = &self.quic {
            if q.sidecar_ended(peer) {
                return;
            }
        }
        self.lost_now(peer);
    }

    /// The link to `peer` is gone: its ranks are gone once what they sent
    /// is taken; a coordinator tells every other worker (on QUIC, after
    /// what it relayed from them on every stream).
    pub(crate) fn lost_now(&self, peer: u32) {
        if self.closing.load(Ordering::Acquire) {
            return;
        }
        for r in self.served_by(peer) {
            self.inbox.set_gone(r);
        }
        let first = self.quic.as_ref().is_none_or(|q| q.first_gone(peer));
        if self.star && self.rank == 0 && first {
            if let Some(links) = self.links.get() {
                for (r, link) in links.iter().enumerate() {
                    if let Some(link) = link.as_ref().filter(|_| r as u32 != peer) {
                        let h = Header::control(FrameType::PeerGone, peer, r as u32);
                        match &self.quic {
                            Some(q) => q.tell_gone(h),
                            None => {
                                link.enqueue(Out::Frame(h.encode(), Payload::default()));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// An item for a writer.
#[derive(Debug)]
pub(crate) enum Out {
    Frame([u8; HEADER_LEN], Payload),
    /// The unwritten tail of a frame an application thread began writing.
    Tail(Vec<u8>),
    /// Flush, say bye, close the write half.
    Close,
}

/// The write side of a link. Bytes reach the socket from two places: an
/// application thread writing a frame itself (never blocking), or the
/// writer thread draining the queue. `pending` (items queued, not yet
/// fully written) decides which, under a lock that is only ever held for a
/// non-blocking write or a queue push: a thread may write directly only
/// when nothing is pending, and a partial write queues its tail before the
/// lock is released — so frames reach the wire whole and in order.
#[derive(Debug)]
pub(crate) struct Wire {
    stream: TcpStream,
    pending: Mutex<usize>,
    /// `ENCRYPT_BULK`: seals data payloads, under `pending` (so nonce
    /// order is wire order).
    sealer: Option<Mutex<Sealer>>,
}

impl Wire {
    pub(crate) fn new(stream: TcpStream, sealer: Option<Sealer>) -> Wire {
        Wire {
            stream,
            pending: Mutex::new(0),
            sealer: sealer.map(Mutex::new),
        }
    }

    /// Seal a data frame's payload if this link seals.
    fn seal(
        &self,
        h: &mut Header,
        parts: &[&[u8]],
        pool: &Arc<BufferPool>,
    ) -> Option<Result<Vec<u8>, String>> {
        let sealer = self
            .sealer
            .as_ref()
            .filter(|_| h.ftype == FrameType::Data)?;
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
}

/// The sending side of a link, held by application threads.
#[derive(Clone, Debug)]
pub(crate) struct LinkTx {
    pub tx: Sender<Out>,
    pub budget: Arc<Budget>,
    pub wire: Arc<Wire>,
}

impl LinkTx {
    /// Queue an item for the writer thread, after everything queued or
    /// written before.
    pub(crate) fn enqueue(&self, item: Out) -> bool {
        let mut pending = self.wire.pending();
        self.push(&mut pending, item)
    }

    /// Queue a frame for the writer thread, sealing its payload if the
    /// link seals (relays: never blocks).
    pub(crate) fn enqueue_frame(
        &self,
        mut h: Header,
        payload: Payload,
        pool: &Arc<BufferPool>,
    ) -> bool {
        let mut pending = self.wire.pending();
        let item = match self.wire.seal(&mut h, &[payload.as_ref()], pool) {
            None => Out::Frame(h.encode(), payload),
            Some(Ok(body)) => Out::Frame(h.encode(), Payload::from_vec_in(body, Some(pool))),
            Some(Err(e)) => {
                tracing::error!("{e}");
                return false;
            }
        };
        self.push(&mut pending, item)
    }

    fn push(&self, pending: &mut usize, item: Out) -> bool {
        let sent = self.tx.send(item).is_ok();
        if sent {
            *pending += 1;
        }
        sent
    }

    /// With `pending` locked and zero: write `pieces` now, without
    /// blocking, and queue whatever the socket did not take. `Ok(true)`:
    /// handled; `Ok(false)`: the link is busy, queue normally.
    fn write_or_queue_tail(&self, pending: &mut usize, pieces: &[&[u8]]) -> std::io::Result<bool> {
        if *pending != 0 {
            return Ok(false);
        }
        let mut slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        let written = write_now(&self.wire.stream, &mut slices)?;
        if written < total {
            // The rest, from the original pieces (the slices were advanced
            // in place).
            let mut tail = Vec::with_capacity(total - written);
            let mut skip = written;
            for p in pieces {
                let from = skip.min(p.len());
                skip -= from;
                tail.extend_from_slice(&p[from..]);
            }
            if !self.push(pending, Out::Tail(tail)) {
                return Err(ErrorKind::BrokenPipe.into());
            }
        }
        Ok(true)
    }

    /// Send one frame. Fast path: nothing is queued, so this thread writes
    /// the frame itself without blocking — no copy, no hand-over to the
    /// writer thread (one wake-up less per message, most of a small
    /// message's latency). Otherwise the frame is copied and queued, within
    /// the link's byte budget.
    pub(crate) fn send(
        &self,
        header: Header,
        parts: &[&[u8]],
        shared: &Shared,
        dst: u32,
    ) -> Result<(), TransportError> {
        let gone = || TransportError::PeerDisconnected { rank: dst };
        if self.wire.sealer.is_some() && header.ftype == FrameType::Data {
            return self.send_sealed(header, parts, shared, dst);
        }
        let header = header.encode();
        let pieces: Vec<&[u8]> = std::iter::once(&header[..])
            .chain(parts.iter().copied())
            .filter(|p| !p.is_empty())
            .collect();
        {
            let mut pending = self.wire.pending();
            if self
                .write_or_queue_tail(&mut pending, &pieces)
                .map_err(|_| gone())?
            {
                return Ok(());
            }
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.budget
            .acquire(len + HEADER_LEN, shared.timeout(), dst)?;
        let frame = Out::Frame(header, Payload::from_parts_in(parts, Some(&shared.pool)));
        if self.enqueue(frame) {
            Ok(())
        } else {
            Err(gone())
        }
    }
}

impl LinkTx {
    /// `send` on a sealing link: room first, then seal and write (or
    /// queue) under the wire's lock.
    fn send_sealed(
        &self,
        mut h: Header,
        parts: &[&[u8]],
        shared: &Shared,
        dst: u32,
    ) -> Result<(), TransportError> {
        let gone = TransportError::PeerDisconnected { rank: dst };
        let n = parts.iter().map(|p| p.len()).sum::<usize>() + SEAL_OVERHEAD + HEADER_LEN;
        self.budget.acquire(n, shared.timeout(), dst)?;
        let mut pending = self.wire.pending();
        let body = match self.wire.seal(&mut h, parts, &shared.pool) {
            Some(Ok(body)) => body,
            _ => {
                drop(pending);
                self.budget.release(n);
                return Err(gone);
            }
        };
        let head = h.encode();
        if *pending == 0 {
            let written = self.write_or_queue_tail(&mut pending, &[&head, &body]);
            drop(pending);
            self.budget.release(n);
            return written.map(drop).map_err(|_| gone);
        }
        // The writer returns `n` to the budget once written.
        if self.push(
            &mut pending,
            Out::Frame(head, Payload::from_vec_in(body, Some(&shared.pool))),
        ) {
            Ok(())
        } else {
            drop(pending);
            self.budget.release(n);
            Err(gone)
        }
    }
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

/// Bytes queued on a link but not yet written, bounded: a sender past the
/// bound waits (with the deadline) for the writer to drain.
#[derive(Debug)]
pub(crate) struct Budget {
    queued: Mutex<usize>,
    drained: Condvar,
    max: usize,
}

impl Budget {
    pub(crate) fn new(max: usize) -> Budget {
        Budget {
            queued: Mutex::new(0),
            drained: Condvar::new(),
            max,
        }
    }

    /// Reserve `n` bytes; waits while the link is over budget (one message
    /// is always admitted to an empty link, whatever its size).
    pub(crate) fn acquire(
        &self,
        n: usize,
        timeout: Duration,
        dst: u32,
    ) -> Result<(), TransportError> {
        let deadline = Instant::now() + timeout;
        let mut q = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        while *q > 0 && *q + n > self.max {
            let now = Instant::now();
            if now >= deadline {
                return Err(TransportError::Timeout { waiting_on: dst });
            }
            q = self
                .drained
                .wait_timeout(q, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *q += n;
        Ok(())
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    pub(crate) fn release(&self, n: usize) {
        let mut q = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        *q = q.saturating_sub(n);
        drop(q);
        self.drained.notify_all();
    }
}

/// Heartbeat period: often enough that a silent link is noticed well within
/// one deadline.
pub(crate) fn heartbeat_interval(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1))
}

/// Write every slice, retrying short writes, timeouts (a slow reader) and
/// interrupts; gives up only on a real error or when the rank is closing
/// and the peer no longer reads.
fn write_all(
    stream: &mut &TcpStream,
    mut bufs: &mut [IoSlice<'_>],
    shared: &Shared,
) -> std::io::Result<()> {
    let mut stalled_since: Option<Instant> = None;
    while !bufs.is_empty() {
        match stream.write_vectored(bufs) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => {
                stalled_since = None;
                IoSlice::advance_slices(&mut bufs, n);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                let since = *stalled_since.get_or_insert_with(Instant::now);
                if shared.closing.load(Ordering::Acquire) && since.elapsed() >= shared.timeout() {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Frames written in one vectored call, at most.
const BATCH_FRAMES: usize = 64;
/// Payload bytes batched into one vectored call, at most (beyond it, one
/// large frame per call).
const BATCH_BYTES: usize = 1 << 20;

pub(crate) fn writer(shared: Arc<Shared>, peer: u32, link: LinkTx, rx: Receiver<Out>) {
    let hb = heartbeat_interval(shared.timeout());
    let heartbeat = Header::control(FrameType::Heartbeat, shared.rank, peer).encode();
    let _ = link.wire.stream.set_write_timeout(Some(hb));
    let mut stream = &link.wire.stream;
    let mut batch: Vec<Out> = Vec::with_capacity(BATCH_FRAMES);
    loop {
        let first = match rx.recv_timeout(hb) {
            Ok(o) => o,
            Err(RecvTimeoutError::Timeout) => {
                // Idle: a heartbeat, written like any frame (directly if
                // nothing is queued; a busy link needs none).
                let mut pending = link.wire.pending();
                if link
                    .write_or_queue_tail(&mut pending, &[&heartbeat])
                    .is_err()
                {
                    drop(pending);
                    shared.link_lost(peer);
                    return;
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut close = false;
        let mut items = 0;
        let mut bytes = 0;
        let mut next = Some(first);
        while let Some(item) = next.take() {
            items += 1;
            match item {
                Out::Close => close = true,
                Out::Frame(_, ref p) => {
                    bytes += p.len();
                    batch.push(item);
                }
                Out::Tail(ref t) => {
                    bytes += t.len();
                    batch.push(item);
                }
            }
            if !close && batch.len() < BATCH_FRAMES && bytes < BATCH_BYTES {
                next = rx.try_recv().ok();
            }
        }
        let budgeted: usize = batch
            .iter()
            .map(|o| match o {
                Out::Frame(_, p) => p.len() + HEADER_LEN,
                _ => 0,
            })
            .sum();
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(batch.len() * 2);
        for item in &batch {
            match item {
                Out::Frame(h, p) => {
                    slices.push(IoSlice::new(h));
                    if !p.is_empty() {
                        slices.push(IoSlice::new(p.as_ref()));
                    }
                }
                Out::Tail(t) => slices.push(IoSlice::new(t)),
                Out::Close => {}
            }
        }
        // Nothing else writes while these items are pending.
        let ok = write_all(&mut stream, &mut slices, &shared).is_ok();
        if ok && close {
            let bye = Header::control(FrameType::Bye, shared.rank, peer).encode();
            let _ = write_all(&mut stream, &mut [IoSlice::new(&bye)], &shared);
            let _ = stream.flush();
            let _ = stream.shutdown(Shutdown::Write);
        }
        *link.wire.pending() -= items;
        drop(slices);
        batch.clear();
        link.budget.release(budgeted);
        if !ok {
            shared.link_lost(peer);
            return;
        }
        if close {
            return;
        }
    }
}

/// A star coordinator forwards a worker's frame to its destination.
/// Relayed bytes are not budgeted: blocking here would stall the link that
/// carried them; the links' own flow control bounds them.
pub(crate) fn relay(shared: &Shared, h: Header, payload: Payload) {
    let Some(link) = shared.tcp_link(h.dst) else {
        tracing::warn!(dst = h.dst, "no link to relay to; frame dropped");
        return;
    };
    match &shared.quic {
        Some(q) => q.relay(h, payload, link, &shared.pool),
        None => {
            link.enqueue_frame(h, payload, &shared.pool);
        }
    }
}
