//! A TCP link's sending side.
//!
//! Application threads write a frame themselves when nothing is queued on
//! the link (`TcpTx::send`); otherwise it goes through a crossbeam channel
//! to the link's writer thread, which sends queued frames with vectored
//! writes (header and payload without a copy) and a heartbeat when idle.
//! A per-link budget bounds what is queued here. The receiving side is
//! `rx.rs`.

use crate::auth::seal::{Sealer, SEAL_OVERHEAD};
use crate::link::{heartbeat_interval, Budget, Core, Sink};
use crate::wire::{FrameType, Header, HEADER_LEN};
use crate::{BufferPool, Payload, TransportError};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::io::{ErrorKind, IoSlice, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

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
pub(crate) struct TcpTx {
    pub tx: Sender<Out>,
    pub budget: Arc<Budget>,
    pub wire: Arc<Wire>,
}

impl TcpTx {
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
        core: &Core,
        dst: u32,
    ) -> Result<(), TransportError> {
        let gone = || TransportError::PeerDisconnected { rank: dst };
        if self.wire.sealer.is_some() && header.ftype == FrameType::Data {
            return self.send_sealed(header, parts, core, dst);
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
    /// queue) under the wire's lock.
    fn send_sealed(
        &self,
        mut h: Header,
        parts: &[&[u8]],
        core: &Core,
        dst: u32,
    ) -> Result<(), TransportError> {
        let gone = TransportError::PeerDisconnected { rank: dst };
        let n = parts.iter().map(|p| p.len()).sum::<usize>() + SEAL_OVERHEAD + HEADER_LEN;
        self.budget.acquire(n, core.timeout(), dst)?;
        let mut pending = self.wire.pending();
        let body = match self.wire.seal(&mut h, parts, &core.pool) {
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
            Out::Frame(head, Payload::from_vec_in(body, Some(&core.pool))),
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

/// Write every slice, retrying short writes, timeouts (a slow reader) and
/// interrupts; gives up only on a real error or when the rank is closing
/// and the peer no longer reads.
fn write_all(
    stream: &mut &TcpStream,
    mut bufs: &mut [IoSlice<'_>],
    core: &Core,
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
                if core.closing.load(Ordering::Acquire) && since.elapsed() >= core.timeout() {
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

pub(crate) fn writer(
    core: Arc<Core>,
    peer: u32,
    link: TcpTx,
    rx: Receiver<Out>,
    sink: Arc<dyn Sink>,
) {
    let hb = heartbeat_interval(core.timeout());
    let heartbeat = Header::control(FrameType::Heartbeat, core.rank, peer).encode();
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
                    sink.ended(&core, peer);
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
        let ok = write_all(&mut stream, &mut slices, &core).is_ok();
        if ok && close {
            let bye = Header::control(FrameType::Bye, core.rank, peer).encode();
            let _ = write_all(&mut stream, &mut [IoSlice::new(&bye)], &core);
            let _ = stream.flush();
            let _ = stream.shutdown(Shutdown::Write);
        }
        *link.wire.pending() -= items;
        drop(slices);
        batch.clear();
        link.budget.release(budgeted);
        if !ok {
            sink.ended(&core, peer);
            return;
        }
        if close {
            return;
        }
    }
}
