//! A QUIC link: one connection to one peer, owned by one I/O thread.
//!
//! The thread's loop has the shape of quiche's `examples/server.rs`: poll
//! until the next quiche timer, a datagram, or a wake-up → read datagrams
//! → `on_timeout` → take queued frames → read streams → write streams →
//! send datagrams. Reads and sends are bounded per turn (`BURST`): a sender
//! that floods the socket without reading overflows its receive buffer
//! with the peer's ACKs.
//!
//! The connection's state (`Engine`) sits behind a lock that the thread
//! holds only for a turn, never while it polls. An application thread that
//! finds it free does the work itself — a sender writes its frame and sends
//! the datagrams, a receiver waiting on this peer reads them — so a small
//! message's path has no hand-off between threads (as on the TCP links);
//! when the lock is busy, frames go through a crossbeam channel and the
//! thread's mio `Waker`. Whoever moves a quiche timer earlier than the
//! thread's planned wake-up wakes it.
//!
//! Frames are the wire's frames (`wire/frame.rs`). Each side writes on
//! its own unidirectional streams: stream 0 carries credits, streams
//! 1..=`LANE_STREAMS` carry data, a lane always on the same stream (so a
//! lane stays in order) and different lanes mostly on different ones (so
//! a lost datagram holds up only its own stream). Streams are read to
//! their end as data arrives; `order.rs` keeps each lane in order with the
//! payloads its messages sent over the sidecar.

use super::Order;
use crate::auth::seal::AuthError;
use crate::link::{
    heartbeat_interval, Budget, Core, Fed, Latch, ProtocolError, ReadError, Reader, Reservation,
    Watch,
};
use crate::tcp::{readable_in, Serviced, TcpLink};
use crate::wire::{FrameType, Header, HEADER_LEN};
use crate::{Payload, TransportError};
use crossbeam_channel::{Receiver, Sender};
use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Data streams per direction (plus stream 0 for credits).
pub(crate) const LANE_STREAMS: u64 = 8;
/// Streams per direction.
pub(crate) const STREAMS: u64 = LANE_STREAMS + 1;
/// Datagrams read, and datagrams sent, per turn of the loop at most.
const BURST: usize = 32;
/// Largest datagram read.
const RECV_BUF: usize = 65_535;
/// How long a closing link waits for the peer to acknowledge what it
/// sent, at most.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// The longest the link's thread sleeps while the link is busy (packets
/// in flight, an acknowledgement owed): ACKs that application threads
/// defer are served within this (the peer expects ACKs within its
/// `max_ack_delay`, 25 ms) without waking the thread after every message.
/// An idle link's thread sleeps until its next timer (the keep-alive, the
/// idle timeout): no fixed tick. Whoever makes a timer fall before the
/// thread's wake-up, or owes an ACK while it sleeps long, wakes it.
const TICK: Duration = Duration::from_millis(20);
/// How long an acknowledgement may wait for a reply to carry it (well
/// under the 25 ms `max_ack_delay` peers allow for).
const ACK_DELAY: Duration = Duration::from_millis(5);
/// A closing link stops waiting for acknowledgements once the peer has
/// sent nothing for this long (it is frozen, cut off, or gone).
const CLOSE_IDLE: Duration = Duration::from_millis(500);

pub(crate) const WAKE: mio::Token = mio::Token(0);
const SOCKET: mio::Token = mio::Token(1);
const SIDECAR: mio::Token = mio::Token(2);

/// Why a QUIC link's connection ended other than in order (its peer's
/// ranks are then gone, unless this side was closing anyway).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkFailure {
    /// The peer broke the protocol.
    #[error("{0}")]
    Protocol(#[from] ProtocolError),
    /// A frame that does not open (streams on QUIC carry no envelopes:
    /// TLS protects them, so this is never the peer's).
    #[error("{0}")]
    Auth(#[from] AuthError),
    /// quiche could not make a datagram to send.
    #[error("QUIC send: {0}")]
    Send(quiche::Error),
    /// quiche refused bytes for one of this side's streams.
    #[error("QUIC stream {id}: {source}")]
    StreamSend { id: u64, source: quiche::Error },
    /// quiche could not read one of the peer's streams (reset by the
    /// peer, or past the flow control it was given).
    #[error("QUIC stream {id} unreadable: {source}")]
    StreamRecv { id: u64, source: quiche::Error },
    /// Polling the link's sockets failed.
    #[error("poll: {0}")]
    Poll(std::io::Error),
    /// The peer's sidecar ended while its QUIC connection was open.
    #[error("the sidecar ended")]
    SidecarEnded,
    /// The peer closed the connection with an error.
    #[error("closed by the peer: code {code:#x} {reason}")]
    ClosedByPeer { code: u64, reason: String },
    /// quiche closed the connection on this side (a transport error it
    /// found in what the peer sent).
    #[error("closed on this side: {} error {code:#x} {reason}", if *.is_app { "application" } else { "transport" })]
    ClosedHere {
        is_app: bool,
        code: u64,
        reason: String,
    },
    /// Nothing came from the peer for quiche's idle timeout.
    #[error("idle timeout")]
    IdleTimeout,
}

impl From<ReadError> for LinkFailure {
    fn from(e: ReadError) -> LinkFailure {
        match e {
            ReadError::Protocol(p) => LinkFailure::Protocol(p),
            ReadError::Auth(a) => LinkFailure::Auth(a),
        }
    }
}

/// An item for a link's thread.
#[derive(Debug)]
pub(crate) enum Cmd {
    /// A frame, header and payload in one buffer; `budgeted` bytes return
    /// to the link's budget once quiche has taken them.
    Frame {
        bytes: Payload,
        stream: u64,
        budgeted: usize,
    },
    /// Flush, let the peer acknowledge, close.
    Close,
}

/// The application threads' handle on a link.
#[derive(Debug)]
pub(crate) struct QLink {
    pub peer: u32,
    tx: Sender<Cmd>,
    pub(crate) waker: Arc<mio::Waker>,
    budget: Budget,
    /// Frames of at least this many bytes belong on the sidecar.
    threshold: usize,
    engine: Mutex<Engine>,
    /// The link's thread runs (cleared when it ends).
    alive: AtomicBool,
    /// Set when the QUIC connection is done with (the thread may go on
    /// serving the sidecar).
    done: Latch,
    /// Whether the thread is woken when datagrams arrive (not while
    /// callers read the socket themselves).
    pub(crate) watch: Watch,
}

/// The stream (index) of a frame: credits on 0, a lane always on the
/// same one of the rest.
pub(crate) fn stream_of(h: &Header) -> u64 {
    if matches!(h.ftype, FrameType::Credit | FrameType::CreditWanted) {
        return 0;
    }
    let mut x = h
        .comm
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(h.lane().tag)
        .wrapping_add(h.kind as u64);
    x ^= x >> 29;
    1 + x % LANE_STREAMS
}

impl QLink {
    pub(crate) fn new(io: Io, waker: Arc<mio::Waker>, budget: usize, threshold: usize) -> QLink {
        let (tx, rx) = crossbeam_channel::unbounded();
        let streams = STREAMS as usize;
        QLink {
            peer: io.peer,
            tx,
            waker,
            budget: Budget::new(budget),
            threshold,
            engine: Mutex::new(Engine {
                io,
                rx,
                out: (0..streams).map(|_| VecDeque::new()).collect(),
                opened: vec![false; streams],
                streams: HashMap::new(),
                rbuf: vec![0; RECV_BUF],
                sbuf: vec![0; 16_384 + 1_024],
                last_sent: Instant::now(),
                last_recv: Instant::now(),
                closing: None,
                fin_sent: false,
                sidecar_ended: false,
                ended: false,
                again: false,
                ack_owed: None,
                fatal: None,
                planned: Instant::now(),
            }),
            alive: AtomicBool::new(true),
            done: Latch::default(),
            watch: Watch::default(),
        }
    }

    /// Reserve room for a frame of `parts`, waiting (within the deadline)
    /// while the link has more than its budget queued; the bytes reserved.
    pub(crate) fn reserve(
        &self,
        core: &Core,
        parts: &[&[u8]],
        dst: u32,
    ) -> Result<usize, TransportError> {
        let len = parts.iter().map(|p| p.len()).sum::<usize>() + HEADER_LEN;
        self.budget.acquire(len, core.timeout(), dst)?;
        Ok(len)
    }

    /// Room for a frame of `len` payload bytes if the link has it now
    /// (never waits).
    pub(crate) fn try_reserve(&self, len: usize) -> Option<Reservation> {
        let bytes = len.saturating_add(HEADER_LEN);
        self.budget
            .try_acquire(bytes)
            .then_some(Reservation { len, bytes })
    }

    /// Bytes reserved in the link's budget now.
    #[cfg(test)]
    pub(crate) fn reserved(&self) -> usize {
        self.budget.reserved()
    }

    /// Give back a reservation that was not used.
    pub(crate) fn unreserve(&self, n: usize) {
        self.budget.release(n);
    }

    /// Hand a stamped frame (header and payload, in one buffer) to the
    /// link (`budgeted` bytes return to the budget once quiche takes it):
    /// written here and now if the engine is free, else queued for the
    /// thread. `false`: the link has ended.
    pub(crate) fn submit(&self, core: &Core, bytes: Payload, stream: u64, budgeted: usize) -> bool {
        let cmd = Cmd::Frame {
            bytes,
            stream,
            budgeted,
        };
        if !self.alive.load(Ordering::Acquire) {
            return false;
        }
        match self.engine.try_lock() {
            Ok(mut e) => {
                // Earlier frames (of this thread too) go first.
                e.take_cmds(core);
                e.take(cmd, core);
                let res = e.write_streams(self).and_then(|()| e.flush());
                self.after_work(&mut e, res);
            }
            Err(_) => {
                if self.tx.send(cmd).is_err() {
                    return false;
                }
                self.wake();
            }
        }
        true
    }

    /// After an application thread worked the engine: hand a failure to
    /// the thread, and wake it if a timer now falls before its wake-up.
    fn after_work(&self, e: &mut Engine, res: Result<(), LinkFailure>) {
        if let Err(x) = res {
            e.fatal.get_or_insert(x);
        }
        let now = Instant::now();
        let early = e.io.conn.timeout().is_some_and(|t| now + t < e.planned)
            || (e.ack_owed.is_some() && e.planned > now + TICK);
        if early || e.again || e.fatal.is_some() {
            self.wake();
        }
    }

    /// Read and deliver what has arrived, if nobody else is doing so;
    /// `false` if somebody was (or the link has ended).
    pub(crate) fn try_pump(&self, core: &Core, order: &Order) -> bool {
        if !self.alive.load(Ordering::Acquire) {
            return false;
        }
        let Ok(mut e) = self.engine.try_lock() else {
            return false;
        };
        if e.fatal.is_some() || e.closing.is_some() {
            return false;
        }
        let got = e.recv();
        if got == 0 && e.idle() {
            // Nothing came and nothing waits to go (the common case for a
            // caller polling in a loop): nothing changed for quiche but
            // the clock, and its timers are the thread's.
            return true;
        }
        let res = e.pumped(core, self, order, got);
        self.after_work(&mut e, res);
        true
    }

    /// Queue a stamped frame for stream `stream`, unbudgeted, without
    /// blocking (relays and notices).
    pub(crate) fn push_on(&self, stream: u64, h: Header, payload: &[u8]) {
        let cmd = Cmd::Frame {
            bytes: Payload::from_parts(&[&h.encode(), payload]),
            stream,
            budgeted: 0,
        };
        if self.tx.send(cmd).is_ok() {
            self.wake();
        }
    }

    /// The peer's sidecar ended: once what it brought is delivered, the
    /// peer is gone. `false` if the link's thread has ended (it then ended
    /// the peer itself, or this rank is closing).
    pub(crate) fn sidecar_ended(&self) -> bool {
        // Under the engine's lock, against the thread's ending (`run`).
        let mut e = lock(self);
        if e.ended {
            return false;
        }
        e.sidecar_ended = true;
        drop(e);
        self.wake();
        true
    }

    /// Wait, at most `timeout`, until the QUIC connection is done with.
    pub(crate) fn wait_done(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        self.done.wait(|| deadline);
    }

    pub(crate) fn close(&self) {
        if self.tx.send(Cmd::Close).is_ok() {
            self.wake();
        }
    }

    pub(crate) fn wake(&self) {
        if let Err(e) = self.waker.wake() {
            tracing::warn!(peer = self.peer, "cannot wake the QUIC link thread: {e}");
        }
    }
}

/// Bytes queued for one stream that quiche has not taken yet.
#[derive(Debug)]
struct Chunk {
    bytes: Payload,
    /// Budget to return once the chunk is taken whole.
    release: usize,
}

/// A peer stream's frame assembler, and whether the stream has ended.
#[derive(Debug)]
struct StreamRx {
    reader: Reader,
    ended: bool,
}

/// A link's connection and socket.
pub(crate) struct Io {
    pub peer: u32,
    pub conn: quiche::Connection,
    pub socket: mio::net::UdpSocket,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Whether this side dialled (client-initiated stream ids).
    pub dialer: bool,
}

impl std::fmt::Debug for Io {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Io(peer {}, {} -> {})",
            self.peer, self.local, self.remote
        )
    }
}

/// Everything a turn works on; see the module docs.
struct Engine {
    io: Io,
    rx: Receiver<Cmd>,
    out: Vec<VecDeque<Chunk>>,
    opened: Vec<bool>,
    streams: HashMap<u64, StreamRx>,
    rbuf: Vec<u8>,
    sbuf: Vec<u8>,
    last_sent: Instant,
    last_recv: Instant,
    closing: Option<Instant>,
    fin_sent: bool,
    /// The peer's sidecar ended (what it brought is delivered): the peer
    /// is gone.
    sidecar_ended: bool,
    /// The link's thread has ended.
    ended: bool,
    /// The thread must turn again at once (a burst was cut short).
    again: bool,
    /// Since when an acknowledgement is owed and held back.
    ack_owed: Option<Instant>,
    /// A failure an application thread met, for the thread to act on.
    fatal: Option<LinkFailure>,
    /// When the thread will wake up on its own.
    planned: Instant,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Engine({:?})", self.io)
    }
}

impl Io {
    fn stream_id(&self, index: u64) -> u64 {
        // Client-initiated unidirectional: 2 mod 4; server-initiated: 3.
        index * 4 + if self.dialer { 2 } else { 3 }
    }
}

impl Engine {
    /// Read up to a burst of datagrams into quiche; how many.
    fn recv(&mut self) -> usize {
        for got in 0..BURST {
            match self.io.socket.recv(&mut self.rbuf) {
                Ok(n) => {
                    self.last_recv = Instant::now();
                    let info = quiche::RecvInfo {
                        from: self.io.remote,
                        to: self.io.local,
                    };
                    match self.io.conn.recv(&mut self.rbuf[..n], info) {
                        Ok(_) | Err(quiche::Error::Done) => {}
                        Err(e) => tracing::debug!(peer = self.io.peer, "QUIC recv: {e}"),
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return got,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // An ICMP error for an earlier datagram (the peer's port
                // closed, a route gone): transient or not, quiche's timers
                // and the deadline decide, not one datagram.
                Err(e) => {
                    tracing::trace!(peer = self.io.peer, "UDP receive: {e}");
                    return got;
                }
            }
        }
        self.again = true;
        BURST
    }

    /// Send up to a burst of datagrams.
    fn flush(&mut self) -> Result<(), LinkFailure> {
        self.ack_owed = None;
        for _ in 0..BURST {
            let n = match self.io.conn.send(&mut self.sbuf) {
                Ok((n, _)) => n,
                Err(quiche::Error::Done) => return Ok(()),
                Err(e) => return Err(LinkFailure::Send(e)),
            };
            match self.io.socket.send(&self.sbuf[..n]) {
                Ok(_) => self.last_sent = Instant::now(),
                // The datagram is lost; quiche's loss recovery resends.
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.again = true;
                    return Ok(());
                }
                // Lost too: refused by a firewall (EPERM), no buffer, no
                // route (a cut cable). quiche resends; a path that stays
                // dead is the deadline's and the idle timeout's to report.
                Err(e) => tracing::trace!(peer = self.io.peer, "UDP send: {e}"),
            }
        }
        self.again = true;
        Ok(())
    }

    /// Queue one command's frame (or note its request).
    fn take(&mut self, cmd: Cmd, core: &Core) {
        match cmd {
            Cmd::Frame {
                bytes,
                stream,
                budgeted,
            } => self.out[stream as usize].push_back(Chunk {
                bytes,
                release: budgeted,
            }),
            Cmd::Close => {
                self.closing
                    .get_or_insert_with(|| Instant::now() + core.timeout().min(CLOSE_WAIT));
            }
        }
    }

    /// Nothing to do but wait: no datagram left to read, no frame queued
    /// for the engine or for quiche's streams.
    fn idle(&self) -> bool {
        !self.again && self.rx.is_empty() && self.out.iter().all(VecDeque::is_empty)
    }

    /// Queue every command waiting in the channel.
    fn take_cmds(&mut self, core: &Core) {
        while let Ok(cmd) = self.rx.try_recv() {
            self.take(cmd, core);
        }
    }

    /// Hand queued bytes to quiche, stream by stream, as far as its flow
    /// control allows.
    fn write_streams(&mut self, link: &QLink) -> Result<(), LinkFailure> {
        for index in 0..self.out.len() {
            let id = self.io.stream_id(index as u64);
            while let Some(chunk) = self.out[index].front_mut() {
                let n = match self.io.conn.stream_send(id, chunk.bytes.as_ref(), false) {
                    Ok(n) => n,
                    Err(quiche::Error::Done) => 0,
                    Err(source) => return Err(LinkFailure::StreamSend { id, source }),
                };
                self.opened[index] = true;
                chunk.bytes.advance(n);
                if !chunk.bytes.is_empty() {
                    break;
                }
                if let Some(chunk) = self.out[index].pop_front() {
                    link.budget.release(chunk.release);
                }
            }
        }
        Ok(())
    }

    /// Read, take commands, deliver, write, send: the body of a turn.
    ///
    /// Delayed acknowledgement (as TCP does it): a datagram or two that
    /// leave nothing to send but an ACK do not send it at once — the reply
    /// about to follow carries it, or it goes out `ACK_DELAY` later, or
    /// with the next datagrams. One datagram per message fewer, and one
    /// wake-up of the peer's thread fewer.
    fn pump(&mut self, core: &Core, link: &QLink, order: &Order) -> Result<(), LinkFailure> {
        let got = self.recv();
        self.pumped(core, link, order, got)
    }

    /// [`pump`](Self::pump) after its reading of `got` datagrams.
    fn pumped(
        &mut self,
        core: &Core,
        link: &QLink,
        order: &Order,
        got: usize,
    ) -> Result<(), LinkFailure> {
        if self.io.conn.timeout() == Some(Duration::ZERO) {
            self.io.conn.on_timeout();
        }
        self.take_cmds(core);
        self.read_streams(core, link, order)?;
        // Anything to write (queued frames) means datagrams to send now.
        let idle = self.out.iter().all(VecDeque::is_empty);
        self.write_streams(link)?;
        let owed = match self.ack_owed {
            Some(since) => since.elapsed() < ACK_DELAY,
            None => (1..=2).contains(&got),
        };
        if owed && got <= 2 && idle && !self.again {
            self.ack_owed.get_or_insert_with(Instant::now);
            return Ok(());
        }
        self.flush()
    }

    /// Read every stream that has data (and retry those waiting for the
    /// sidecar). `Err`: a protocol error; the link must close.
    fn read_streams(
        &mut self,
        core: &Core,
        link: &QLink,
        order: &Order,
    ) -> Result<(), LinkFailure> {
        let ids: Vec<u64> = self.io.conn.readable().collect();
        for id in ids {
            // Only the peer's unidirectional streams carry frames.
            let theirs = if self.io.dialer { 3 } else { 2 };
            if id % 4 != theirs || id / 4 >= STREAMS {
                return Err(ProtocolError::UnexpectedStream { id }.into());
            }
            let s = self.streams.entry(id).or_insert_with(|| StreamRx {
                // A frame of the threshold or more belongs on the sidecar.
                reader: Reader::new(
                    self.io.peer,
                    core.world,
                    (link.threshold as u64).saturating_sub(1),
                    None,
                ),
                ended: false,
            });
            read_stream(&mut self.io, id, s, core, order)?;
        }
        Ok(())
    }

    /// Whether everything this side sent has been acknowledged (quiche
    /// forgets a stream once its data and end are acknowledged).
    fn all_acked(&mut self) -> bool {
        (0..self.opened.len()).all(|i| {
            !self.opened[i]
                || self
                    .io
                    .conn
                    .stream_capacity(self.io.stream_id(i as u64))
                    .is_err()
        })
    }

    /// One turn of the link's thread. `Some`: the link has ended (with a
    /// failure, or `None` inside when it closed in order).
    fn turn(
        &mut self,
        core: &Core,
        link: &QLink,
        order: &Order,
        keep_alive: Duration,
    ) -> Option<Option<LinkFailure>> {
        if let Some(e) = self.fatal.take() {
            return Some(Some(self.fail(e)));
        }
        if let Err(e) = self.pump(core, link, order) {
            return Some(Some(self.fail(e)));
        }
        if self.sidecar_ended && self.closing.is_none() {
            // Every payload the sidecar brought has been matched above;
            // descriptors still waiting will never be.
            return Some(Some(self.fail(LinkFailure::SidecarEnded)));
        }
        if let Some(until) = self.closing {
            let drained = self.out.iter().all(VecDeque::is_empty);
            if drained && !self.fin_sent {
                for i in 0..self.opened.len() {
                    if self.opened[i] {
                        let id = self.io.stream_id(i as u64);
                        let _ = self.io.conn.stream_send(id, &[], true);
                    }
                }
                self.fin_sent = true;
                if let Err(e) = self.flush() {
                    return Some(Some(e));
                }
            }
            let unresponsive =
                self.last_recv.elapsed() >= CLOSE_IDLE || core.inbox.is_gone(self.io.peer);
            if (self.fin_sent && self.all_acked()) || unresponsive || Instant::now() >= until {
                let _ = self.io.conn.close(true, 0, b"bye");
                let _ = self.flush();
                return Some(None);
            }
        }
        if self.last_sent.elapsed() >= keep_alive && self.io.conn.is_established() {
            // Keep-alive: holds NAT bindings and the idle timer.
            let _ = self.io.conn.send_ack_eliciting();
            if let Err(e) = self.flush() {
                return Some(Some(e));
            }
        }
        if !(self.io.conn.is_closed() || self.io.conn.is_draining()) {
            return None;
        }
        if self.closing.is_some() {
            return Some(None);
        }
        Some(match self.io.conn.peer_error() {
            // The peer closed its end in order; its sidecar's end ends it.
            Some(e) if e.is_app && e.error_code == 0 => None,
            Some(e) => Some(LinkFailure::ClosedByPeer {
                code: e.error_code,
                reason: String::from_utf8_lossy(&e.reason).into_owned(),
            }),
            None => Some(
                self.io
                    .conn
                    .local_error()
                    .map_or(LinkFailure::IdleTimeout, |e| LinkFailure::ClosedHere {
                        is_app: e.is_app,
                        code: e.error_code,
                        reason: String::from_utf8_lossy(&e.reason).into_owned(),
                    }),
            ),
        })
    }

    /// Close the connection over a failure; returns it.
    fn fail(&mut self, e: LinkFailure) -> LinkFailure {
        tracing::debug!(peer = self.io.peer, "closing the QUIC link: {e}");
        let _ = self.io.conn.close(true, 0x1, e.to_string().as_bytes());
        let _ = self.flush();
        e
    }
}

/// Read what stream `id` holds, frame by frame, and hand each frame to the
/// link's order keeper (`order.rs`), which delivers it in its turn.
fn read_stream(
    io: &mut Io,
    id: u64,
    s: &mut StreamRx,
    core: &Core,
    order: &Order,
) -> Result<(), LinkFailure> {
    let (peer, index) = (io.peer, (id / 4) as usize);
    loop {
        if s.reader.frame_ready() {
            if let Some((h, payload)) = s.reader.frame(core)? {
                order.frame_arrived(core, peer, index, h, Some(payload))?;
            }
            continue;
        }
        if s.ended {
            return Ok(());
        }
        let (n, fin) = match io.conn.stream_recv(id, s.reader.space()) {
            Ok(x) => x,
            Err(quiche::Error::Done) => return Ok(()),
            Err(source) => return Err(LinkFailure::StreamRecv { id, source }),
        };
        let fed = s.reader.fed(core, n)?;
        if fin {
            s.ended = true;
            if s.reader.mid_frame() {
                s.reader.discard(&core.pool);
                return Err(ProtocolError::EndedInsideFrame { id }.into());
            }
        }
        let h = match fed {
            Fed::More => continue,
            Fed::Header(h) => h,
            // Frames on QUIC come without envelopes (TLS protects them).
            Fed::Envelope(_) => return Err(ProtocolError::Unsealed.into()),
        };
        if h.ftype != FrameType::Data {
            // Control frames act in their turn too: a peer-gone notice
            // must not overtake the messages before it.
            order.frame_arrived(core, peer, index, h, None)?;
            continue;
        }
        match s.reader.dispatch(core, h)? {
            Some(h) if s.ended && h.len > 0 => {
                return Err(ProtocolError::EndedInsideFrame { id }.into())
            }
            Some(h) => s.reader.body(h, &core.pool),
            None => {}
        }
    }
}

fn lock(link: &QLink) -> MutexGuard<'_, Engine> {
    link.engine.lock().unwrap_or_else(|e| e.into_inner())
}

// The I/O thread: the loop of quiche's `examples/server.rs`
// (see the module docs), with the sidecar served first on each turn
// and, once the QUIC connection has ended, alone until it ends too.

/// The link's thread: it drives the QUIC connection and the sidecar.
/// The QUIC part ends when the connection closes (by this side's `Close`,
/// by the peer, or by a failure: the peer's ranks are then gone); the
/// thread then serves the sidecar alone until it ends too (its last
/// payloads, its goodbye).
pub(crate) fn run(
    core: Arc<Core>,
    link: Arc<QLink>,
    order: Arc<Order>,
    sidecar: Arc<TcpLink>,
    mut poll: mio::Poll,
) {
    let peer = link.peer;
    let fd = lock(&link).io.socket.as_raw_fd();
    let registered = link
        .watch
        .attach(poll.registry(), SOCKET, fd, Arc::clone(&link.waker))
        .and_then(|()| sidecar.attach(poll.registry(), SIDECAR, Arc::clone(&link.waker)));
    if let Err(e) = registered {
        tracing::error!(peer, "cannot poll the link's sockets: {e}");
        link.alive.store(false, Ordering::Release);
        link.done.set();
        core.lost(peer);
        sidecar.shutdown();
        return;
    }
    let mut events = mio::Events::with_capacity(8);
    // The first turn writes whatever was queued before the thread started.
    let mut side_readable = true;
    // Answering requests: look again without sleeping for a while.
    let mut spin = crate::link::AnswerSpin::new(&core);
    let ended = loop {
        // The sidecar first, outside the engine's lock (its end takes it).
        let side_wait = match sidecar.service(&core, side_readable) {
            Serviced::Within(d) => d,
            Serviced::Ended => heartbeat_interval(core.timeout()),
        };
        let keep_alive = crate::quic::keep_alive_interval(core.timeout());
        let wait = {
            let mut e = lock(&link);
            let wait = if std::mem::take(&mut e.again) {
                Duration::ZERO
            } else {
                let timer =
                    e.io.conn
                        .timeout()
                        .map_or(keep_alive, |t| t.min(keep_alive));
                // Busy: packets in flight (a loss timer under the
                // keep-alive period), an ACK owed, or closing.
                let busy = timer < keep_alive || e.ack_owed.is_some() || e.closing.is_some();
                let ack = e.ack_owed.map_or(keep_alive, |since| {
                    ACK_DELAY.saturating_sub(since.elapsed())
                });
                if busy {
                    timer.min(TICK).min(ack)
                } else {
                    timer
                }
            }
            .min(side_wait)
            // Reading back on when the callers' quiet period is over.
            .min(link.watch.settle(core.answered()).unwrap_or(Duration::MAX));
            let wait = spin.wait(&core, wait);
            e.planned = Instant::now() + wait;
            wait
        };
        if let Err(e) = poll.poll(&mut events, Some(wait)) {
            if e.kind() != ErrorKind::Interrupted {
                break Some(LinkFailure::Poll(e));
            }
        }
        side_readable = readable_in(&events, SIDECAR);
        let mut e = lock(&link);
        e.planned = Instant::now();
        match e.turn(&core, &link, &order, keep_alive) {
            None => {}
            Some(Some(failure)) => break Some(failure),
            Some(None) => break None,
        }
    };
    let mut e = lock(&link);
    e.ended = true;
    link.alive.store(false, Ordering::Release);
    // Give back the budget of what will never be sent.
    e.take_cmds(&core);
    for q in &mut e.out {
        for c in q.drain(..) {
            link.budget.release(c.release);
        }
    }
    let lost = match (&ended, e.closing.is_some()) {
        (_, true) => false,
        (Some(x), false) => {
            tracing::debug!(peer, "QUIC link ended: {x}");
            true
        }
        // The peer closed its QUIC end in order; its sidecar's end (after
        // the payloads still on their way) ends the peer here.
        (None, false) if !e.sidecar_ended => {
            tracing::debug!(peer, "QUIC link closed by the peer");
            false
        }
        (None, false) => true,
    };
    drop(e);
    link.done.set();
    if lost {
        core.lost(peer);
    }
    // The sidecar alone, until it ends.
    sidecar.serve(&core, &mut poll, SIDECAR, side_readable);
}
