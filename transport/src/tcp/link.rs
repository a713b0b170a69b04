//! One TCP link's I/O: a writer thread and a reader thread per peer, both
//! owning their half of the socket.
//!
//! Two blocking threads per link rather than one `mio` loop: on loopback
//! they measured as fast, and each side stays a straight-line loop — the
//! writer sends queued frames with vectored writes (header and payload
//! without a copy) and a heartbeat when idle; the reader reads each header,
//! checks it, then reads the payload straight into a pooled buffer of
//! exactly its length and hands it to the inbox. Application threads talk to
//! the writer through a crossbeam channel and wait on the inbox.

use super::frame::{FrameType, Header, HEADER_LEN};
use crate::inbox::Inbox;
use crate::{BufferPool, LaneKey, Payload, TransportError};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What the rank's link threads share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub rank: u32,
    pub world: u32,
    pub star: bool,
    pub inbox: Inbox,
    pub pool: Arc<BufferPool>,
    pub timeout: Duration,
    pub max_message_bytes: u64,
    /// Direct links by peer rank, set once formation is done.
    pub links: OnceLock<Vec<Option<LinkTx>>>,
    pub closing: AtomicBool,
}

impl Shared {
    /// Ranks whose traffic arrives over the link to `peer`: a star worker
    /// hears everyone through the coordinator.
    fn served_by(&self, peer: u32) -> Vec<u32> {
        if self.star && self.rank != 0 {
            (0..self.world).filter(|&r| r != self.rank).collect()
        } else {
            vec![peer]
        }
    }

    /// The link to `peer` failed: its ranks are gone; a coordinator tells
    /// every other worker.
    fn link_lost(&self, peer: u32) {
        if self.closing.load(Ordering::Acquire) {
            return;
        }
        for r in self.served_by(peer) {
            self.inbox.set_gone(r);
        }
        if self.star && self.rank == 0 {
            if let Some(links) = self.links.get() {
                for (r, link) in links.iter().enumerate() {
                    if let Some(link) = link.as_ref().filter(|_| r as u32 != peer) {
                        let h = Header::control(FrameType::PeerGone, peer, r as u32).encode();
                        let _ = link.tx.send(Out::Frame(h, Payload::default()));
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
    /// Flush, say bye, close the write half.
    Close,
}

/// The sending side of a link, held by application threads.
#[derive(Clone, Debug)]
pub(crate) struct LinkTx {
    pub tx: Sender<Out>,
    pub budget: Arc<Budget>,
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

    fn release(&self, n: usize) {
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
    stream: &mut TcpStream,
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
                if shared.closing.load(Ordering::Acquire) && since.elapsed() >= shared.timeout {
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
    shared: Arc<Shared>,
    peer: u32,
    mut stream: TcpStream,
    rx: Receiver<Out>,
    budget: Arc<Budget>,
) {
    let hb = heartbeat_interval(shared.timeout);
    let heartbeat = Header::control(FrameType::Heartbeat, shared.rank, peer).encode();
    let _ = stream.set_write_timeout(Some(hb));
    let mut batch: Vec<([u8; HEADER_LEN], Payload)> = Vec::with_capacity(BATCH_FRAMES);
    loop {
        let first = match rx.recv_timeout(hb) {
            Ok(o) => o,
            Err(RecvTimeoutError::Timeout) => {
                if write_all(&mut stream, &mut [IoSlice::new(&heartbeat)], &shared).is_err() {
                    shared.link_lost(peer);
                    return;
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut close = false;
        let mut bytes = 0;
        let mut next = Some(first);
        while let Some(item) = next.take() {
            match item {
                Out::Frame(h, p) => {
                    bytes += p.len();
                    batch.push((h, p));
                }
                Out::Close => close = true,
            }
            if !close && batch.len() < BATCH_FRAMES && bytes < BATCH_BYTES {
                next = rx.try_recv().ok();
            }
        }
        let written: usize = batch.iter().map(|(_, p)| p.len() + HEADER_LEN).sum();
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(batch.len() * 2);
        for (h, p) in &batch {
            slices.push(IoSlice::new(h));
            if !p.is_empty() {
                slices.push(IoSlice::new(p.as_ref()));
            }
        }
        let ok = write_all(&mut stream, &mut slices, &shared).is_ok();
        drop(slices);
        batch.clear();
        budget.release(written);
        if !ok {
            shared.link_lost(peer);
            return;
        }
        if close {
            let bye = Header::control(FrameType::Bye, shared.rank, peer).encode();
            let _ = write_all(&mut stream, &mut [IoSlice::new(&bye)], &shared);
            let _ = stream.flush();
            let _ = stream.shutdown(Shutdown::Write);
            return;
        }
    }
}

enum ReadEnd {
    /// The peer closed or reset, or the rank is closing.
    Closed,
}

/// Fill `buf`, tolerating read timeouts (used to notice silence) and
/// reporting progress for data from `progress_of`.
fn read_full(
    stream: &mut TcpStream,
    buf: &mut [u8],
    shared: &Shared,
    peer: u32,
    last_byte: &mut Instant,
    silent: &mut bool,
    progress_of: Option<u32>,
) -> Result<(), ReadEnd> {
    let mut off = 0;
    while off < buf.len() {
        match stream.read(&mut buf[off..]) {
            Ok(0) => return Err(ReadEnd::Closed),
            Ok(n) => {
                off += n;
                *last_byte = Instant::now();
                if *silent {
                    *silent = false;
                    for r in shared.served_by(peer) {
                        shared.inbox.set_silent(r, false);
                    }
                }
                if let Some(src) = progress_of.filter(|_| off < buf.len()) {
                    shared.inbox.progress(src);
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if shared.closing.load(Ordering::Acquire) {
                    return Err(ReadEnd::Closed);
                }
                if !*silent && last_byte.elapsed() >= shared.timeout {
                    *silent = true;
                    tracing::warn!(peer, "link silent for {:?}", shared.timeout);
                    for r in shared.served_by(peer) {
                        shared.inbox.set_silent(r, true);
                    }
                }
            }
            Err(_) => return Err(ReadEnd::Closed),
        }
    }
    Ok(())
}

pub(crate) fn reader(shared: Arc<Shared>, peer: u32, mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(heartbeat_interval(shared.timeout)));
    let mut last_byte = Instant::now();
    let mut silent = false;
    loop {
        let mut raw = [0u8; HEADER_LEN];
        if read_full(
            &mut stream,
            &mut raw,
            &shared,
            peer,
            &mut last_byte,
            &mut silent,
            None,
        )
        .is_err()
        {
            shared.link_lost(peer);
            return;
        }
        let h = match Header::decode(&raw, shared.world, shared.max_message_bytes) {
            Ok(h) => h,
            Err(e) => {
                tracing::error!(peer, "protocol error on the link: {e}; closing it");
                let _ = stream.shutdown(Shutdown::Both);
                shared.link_lost(peer);
                return;
            }
        };
        match h.ftype {
            FrameType::Heartbeat => {}
            FrameType::Bye => {
                shared.link_lost(peer);
                return;
            }
            FrameType::PeerGone => shared.inbox.set_gone(h.src),
            FrameType::Data => {
                // The length was checked against the cap before this
                // allocation.
                let mut buf = shared.pool.take_filled(h.len as usize);
                if read_full(
                    &mut stream,
                    &mut buf,
                    &shared,
                    peer,
                    &mut last_byte,
                    &mut silent,
                    Some(h.src),
                )
                .is_err()
                {
                    shared.link_lost(peer);
                    return;
                }
                let payload = Payload::from_vec_in(buf, Some(&shared.pool));
                if h.dst == shared.rank {
                    let key = LaneKey {
                        comm: h.comm,
                        kind: h.kind,
                        tag: h.tag,
                    };
                    shared.inbox.deliver(h.src, key, payload);
                } else if shared.star && shared.rank == 0 {
                    relay(&shared, h, payload);
                } else {
                    tracing::error!(
                        peer,
                        dst = h.dst,
                        "a frame for another rank on a direct link; closing it"
                    );
                    let _ = stream.shutdown(Shutdown::Both);
                    shared.link_lost(peer);
                    return;
                }
            }
        }
    }
}

/// A star coordinator forwards a worker's frame to its destination.
fn relay(shared: &Shared, h: Header, payload: Payload) {
    let link = shared
        .links
        .get()
        .and_then(|l| l.get(h.dst as usize))
        .and_then(Option::as_ref);
    match link {
        Some(link) => {
            // Relayed bytes are not budgeted: blocking here would stall
            // this link's reader; TCP's own flow control bounds them.
            let _ = link.tx.send(Out::Frame(h.encode(), payload));
        }
        None => tracing::warn!(dst = h.dst, "no link to relay to; frame dropped"),
    }
}
