//! A QUIC link: one connection to one peer, owned by one I/O thread.
//!
//! Application threads hand frames to the thread through a crossbeam
//! channel and wake it with a mio `Waker`; the thread's loop has the shape
//! of quiche's `examples/server.rs`: poll until the next quiche timer, a
//! datagram, or a wake-up → read datagrams → `on_timeout` → take queued
//! frames → read streams → write streams → send datagrams. Reads and sends
//! are bounded per turn (`BURST`): a sender that floods the socket without
//! reading overflows its receive buffer with the peer's ACKs.
//!
//! Frames are the TCP links' frames (`tcp/frame.rs`). Each side writes on
//! its own unidirectional streams: stream 0 carries credits, streams
//! 1..=`LANE_STREAMS` carry data, a lane always on the same stream (so a
//! lane stays in order) and different lanes mostly on different ones (so
//! a lost datagram or a stalled lane holds up only its own stream).
//! A bulk descriptor stops its stream until the sidecar has brought its
//! payload; the other streams go on.

use crate::tcp::frame::{FrameType, Header, HEADER_LEN};
use crate::tcp::link::{heartbeat_interval, Budget, Shared};
use crate::tcp::rx::{on_data, on_header, Next};
use crate::{Payload, TransportError};
use crossbeam_channel::{Receiver, Sender};
use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Data streams per direction (plus stream 0 for credits).
pub(crate) const LANE_STREAMS: u64 = 8;
/// Datagrams read, and datagrams sent, per turn of the loop at most.
const BURST: usize = 32;
/// Largest datagram read.
const RECV_BUF: usize = 65_535;
/// How long a closing link waits for the peer to acknowledge what it
/// sent, at most.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// A closing link stops waiting for acknowledgements once the peer has
/// sent nothing for this long (it is frozen, cut off, or gone).
const CLOSE_IDLE: Duration = Duration::from_millis(500);

pub(crate) const WAKE: mio::Token = mio::Token(0);
const SOCKET: mio::Token = mio::Token(1);

/// An item for a link's thread.
#[derive(Debug)]
pub(crate) enum Cmd {
    /// A frame; `budgeted` bytes return to the link's budget once quiche
    /// has taken them.
    Frame {
        header: [u8; HEADER_LEN],
        payload: Payload,
        stream: u64,
        budgeted: usize,
    },
    /// Flush, let the peer acknowledge, close.
    Close,
    /// The peer's sidecar ended: deliver what can be, then the peer is
    /// gone.
    SidecarEnded,
}

/// The application threads' handle on a link.
#[derive(Debug)]
pub(crate) struct QLink {
    pub peer: u32,
    tx: Sender<Cmd>,
    waker: mio::Waker,
    budget: Budget,
}

/// The stream (index) of a frame: credits on 0, a lane always on the
/// same one of the rest.
fn stream_of(h: &Header) -> u64 {
    if h.ftype == FrameType::Credit {
        return 0;
    }
    let mut x = h
        .comm
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(h.tag)
        .wrapping_add(h.kind as u64);
    x ^= x >> 29;
    1 + x % LANE_STREAMS
}

impl QLink {
    pub(crate) fn new(peer: u32, tx: Sender<Cmd>, waker: mio::Waker, budget: usize) -> QLink {
        QLink {
            peer,
            tx,
            waker,
            budget: Budget::new(budget),
        }
    }

    /// Queue a frame, waiting (within the deadline) while the link has
    /// more than its budget queued.
    pub(crate) fn send(
        &self,
        shared: &Shared,
        header: Header,
        parts: &[&[u8]],
        dst: u32,
    ) -> Result<(), TransportError> {
        let len: usize = parts.iter().map(|p| p.len()).sum::<usize>() + HEADER_LEN;
        self.budget.acquire(len, shared.timeout(), dst)?;
        let cmd = Cmd::Frame {
            header: header.encode(),
            payload: Payload::from_parts_in(parts, Some(&shared.pool)),
            stream: stream_of(&header),
            budgeted: len,
        };
        if self.tx.send(cmd).is_err() {
            self.budget.release(len);
            return Err(TransportError::PeerDisconnected { rank: dst });
        }
        self.wake();
        Ok(())
    }

    /// Queue a relayed frame, unbudgeted (the relaying thread must not
    /// block).
    pub(crate) fn push(&self, h: Header, payload: Payload) {
        self.push_on(stream_of(&h), h, payload);
    }

    /// `push` on a given stream.
    pub(crate) fn push_on(&self, stream: u64, h: Header, payload: Payload) {
        let cmd = Cmd::Frame {
            header: h.encode(),
            payload,
            stream,
            budgeted: 0,
        };
        if self.tx.send(cmd).is_ok() {
            self.wake();
        }
    }

    /// See `Cmd::SidecarEnded`; `false` if the link's thread has ended.
    pub(crate) fn sidecar_ended(&self) -> bool {
        let sent = self.tx.send(Cmd::SidecarEnded).is_ok();
        if sent {
            self.wake();
        }
        sent
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

/// A peer stream's frame assembler.
#[derive(Debug)]
struct StreamRx {
    head: [u8; HEADER_LEN],
    have: usize,
    body: Option<(Header, Vec<u8>, usize)>,
    /// A bulk descriptor waiting for its payload from the sidecar.
    blocked: Option<Header>,
    ended: bool,
}

impl Default for StreamRx {
    fn default() -> StreamRx {
        StreamRx {
            head: [0; HEADER_LEN],
            have: 0,
            body: None,
            blocked: None,
            ended: false,
        }
    }
}

/// What the link's thread owns.
pub(crate) struct Io {
    pub peer: u32,
    pub conn: quiche::Connection,
    pub socket: mio::net::UdpSocket,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub poll: mio::Poll,
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

struct State {
    out: Vec<VecDeque<Chunk>>,
    opened: Vec<bool>,
    streams: HashMap<u64, StreamRx>,
    rbuf: Vec<u8>,
    sbuf: Vec<u8>,
    last_sent: Instant,
    last_recv: Instant,
    closing: Option<Instant>,
    fin_sent: bool,
    sidecar_ended: bool,
    /// The thread must turn again at once (a burst was cut short).
    again: bool,
}

impl Io {
    fn stream_id(&self, index: u64) -> u64 {
        // Client-initiated unidirectional: 2 mod 4; server-initiated: 3.
        index * 4 + if self.dialer { 2 } else { 3 }
    }

    /// Read up to a burst of datagrams into quiche.
    fn recv(&mut self, st: &mut State) -> Result<(), String> {
        for _ in 0..BURST {
            match self.socket.recv(&mut st.rbuf) {
                Ok(n) => {
                    st.last_recv = Instant::now();
                    let info = quiche::RecvInfo {
                        from: self.remote,
                        to: self.local,
                    };
                    match self.conn.recv(&mut st.rbuf[..n], info) {
                        Ok(_) | Err(quiche::Error::Done) => {}
                        Err(e) => tracing::debug!(peer = self.peer, "QUIC recv: {e}"),
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // An ICMP error for an earlier datagram (the peer's port
                // closed, a route gone): transient or not, quiche's timers
                // and the deadline decide, not one datagram.
                Err(e) => {
                    tracing::trace!(peer = self.peer, "UDP receive: {e}");
                    return Ok(());
                }
            }
        }
        st.again = true;
        Ok(())
    }

    /// Send up to a burst of datagrams.
    fn flush(&mut self, st: &mut State) -> Result<(), String> {
        for _ in 0..BURST {
            let n = match self.conn.send(&mut st.sbuf) {
                Ok((n, _)) => n,
                Err(quiche::Error::Done) => return Ok(()),
                Err(e) => return Err(format!("QUIC send: {e}")),
            };
            match self.socket.send(&st.sbuf[..n]) {
                Ok(_) => st.last_sent = Instant::now(),
                // The datagram is lost; quiche's loss recovery resends.
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    st.again = true;
                    return Ok(());
                }
                // Lost too: refused by a firewall (EPERM), no buffer, no
                // route (a cut cable). quiche resends; a path that stays
                // dead is the deadline's and the idle timeout's to report.
                Err(e) => tracing::trace!(peer = self.peer, "UDP send: {e}"),
            }
        }
        st.again = true;
        Ok(())
    }

    /// Hand queued bytes to quiche, stream by stream, as far as its flow
    /// control allows.
    fn write_streams(&mut self, st: &mut State, link: &QLink) -> Result<(), String> {
        for index in 0..st.out.len() {
            let id = self.stream_id(index as u64);
            while let Some(chunk) = st.out[index].front_mut() {
                let n = match self.conn.stream_send(id, chunk.bytes.as_ref(), false) {
                    Ok(n) => n,
                    Err(quiche::Error::Done) => 0,
                    Err(e) => return Err(format!("QUIC stream {id}: {e}")),
                };
                st.opened[index] = true;
                chunk.bytes.advance(n);
                if !chunk.bytes.is_empty() {
                    break;
                }
                if let Some(chunk) = st.out[index].pop_front() {
                    link.budget.release(chunk.release);
                }
            }
        }
        Ok(())
    }

    /// Read every stream that has data (and retry those waiting for the
    /// sidecar). `Err`: a protocol error; the link must close.
    fn read_streams(&mut self, st: &mut State, shared: &Shared) -> Result<(), String> {
        let mut ids: Vec<u64> = self.conn.readable().collect();
        let blocked: Vec<u64> = st
            .streams
            .iter()
            .filter(|(id, s)| s.blocked.is_some() && !ids.contains(id))
            .map(|(id, _)| *id)
            .collect();
        ids.extend(blocked);
        for id in ids {
            // Only the peer's unidirectional streams carry frames.
            let theirs = if self.dialer { 3 } else { 2 };
            if id % 4 != theirs || id / 4 > LANE_STREAMS {
                return Err(format!("frames on unexpected stream {id}"));
            }
            let mut s = st.streams.remove(&id).unwrap_or_default();
            let res = self.read_stream(id, &mut s, shared);
            st.streams.insert(id, s);
            res?;
        }
        Ok(())
    }

    fn read_stream(&mut self, id: u64, s: &mut StreamRx, shared: &Shared) -> Result<(), String> {
        let q = shared.quic.as_ref().ok_or("not a QUIC group")?;
        loop {
            if let Some(d) = s.blocked {
                let Some((h, payload)) = q.take_body(self.peer, d.aux) else {
                    return Ok(());
                };
                s.blocked = None;
                let same = (h.kind, h.src, h.dst, h.comm, h.tag, h.len)
                    == (d.kind, d.src, d.dst, d.comm, d.tag, d.len);
                if !same || payload.len() as u64 != d.len {
                    return Err(format!(
                        "sidecar payload {} does not match its descriptor",
                        d.aux
                    ));
                }
                if !on_data(shared, self.peer, h, payload) {
                    return Err("misaddressed frame".into());
                }
                continue;
            }
            if let Some((h, buf, read)) = s.body.as_mut() {
                if *read == buf.len() {
                    let (h, buf, _) = s.body.take().ok_or("no body")?;
                    let payload = Payload::from_vec_in(buf, Some(&shared.pool));
                    if !on_data(shared, self.peer, h, payload) {
                        return Err("misaddressed frame".into());
                    }
                    continue;
                }
                match self.conn.stream_recv(id, &mut buf[*read..]) {
                    Ok((n, fin)) => {
                        *read += n;
                        shared.inbox.progress(h.src);
                        if fin && *read < buf.len() {
                            return Err(format!("stream {id} ended inside a frame"));
                        }
                        s.ended |= fin;
                    }
                    Err(quiche::Error::Done) => return Ok(()),
                    Err(e) => return Err(format!("stream {id}: {e}")),
                }
                continue;
            }
            if s.ended {
                return Ok(());
            }
            let have = s.have;
            let (n, fin) = match self.conn.stream_recv(id, &mut s.head[have..]) {
                Ok(x) => x,
                Err(quiche::Error::Done) => return Ok(()),
                Err(e) => return Err(format!("stream {id}: {e}")),
            };
            s.have += n;
            if fin {
                s.ended = true;
                if s.have != 0 && s.have < HEADER_LEN {
                    return Err(format!("stream {id} ended inside a frame"));
                }
            }
            if s.have < HEADER_LEN {
                continue;
            }
            s.have = 0;
            let h = Header::decode(&s.head, shared.world, shared.max_message_bytes)
                .map_err(|e| e.to_string())?;
            match on_header(shared, self.peer, h, true) {
                Next::Continue => {}
                Next::End => return Err("the peer ended the link".into()),
                Next::Bulk(h) => s.blocked = Some(h),
                Next::Body(h) => {
                    // Larger payloads travel on the sidecar: a QUIC frame
                    // over the threshold is a protocol error, not an
                    // allocation.
                    if h.len >= q.threshold as u64 {
                        return Err(format!(
                            "a {}-byte frame over QUIC (threshold {})",
                            h.len, q.threshold
                        ));
                    }
                    s.body = Some((h, shared.pool.take_filled(h.len as usize), 0));
                }
            }
        }
    }

    /// Whether everything this side sent has been acknowledged (quiche
    /// forgets a stream once its data and end are acknowledged).
    fn all_acked(&mut self, st: &State) -> bool {
        (0..st.opened.len())
            .all(|i| !st.opened[i] || self.conn.stream_capacity(self.stream_id(i as u64)).is_err())
    }
}

/// The link's thread. Ends when the connection closes: by this side's
/// `Close`, by the peer, or by a failure (the peer's ranks are then gone).
pub(crate) fn run(shared: Arc<Shared>, link: Arc<QLink>, rx: Receiver<Cmd>, mut io: Io) {
    let peer = io.peer;
    let streams = (LANE_STREAMS + 1) as usize;
    let mut st = State {
        out: (0..streams).map(|_| VecDeque::new()).collect(),
        opened: vec![false; streams],
        streams: HashMap::new(),
        rbuf: vec![0; RECV_BUF],
        sbuf: vec![0; quiche::MAX_CONN_ID_LEN.max(16_384) + 1_024],
        last_sent: Instant::now(),
        last_recv: Instant::now(),
        closing: None,
        fin_sent: false,
        sidecar_ended: false,
        again: false,
    };
    if let Err(e) = io
        .poll
        .registry()
        .register(&mut io.socket, SOCKET, mio::Interest::READABLE)
    {
        tracing::error!(peer, "cannot poll the QUIC socket: {e}");
        shared.lost_now(peer);
        return;
    }
    let mut events = mio::Events::with_capacity(8);
    let failure = loop {
        let hb = heartbeat_interval(shared.timeout());
        let wait = if st.again {
            Duration::ZERO
        } else {
            io.conn.timeout().map_or(hb, |t| t.min(hb))
        };
        st.again = false;
        if let Err(e) = io.poll.poll(&mut events, Some(wait)) {
            if e.kind() != ErrorKind::Interrupted {
                break Some(format!("poll: {e}"));
            }
        }
        if let Err(e) = io.recv(&mut st) {
            break Some(e);
        }
        if io.conn.timeout() == Some(Duration::ZERO) {
            io.conn.on_timeout();
        }
        while let Ok(cmd) = rx.try_recv() {
            match cmd {
                Cmd::Frame {
                    header,
                    payload,
                    stream,
                    budgeted,
                } => {
                    let q = &mut st.out[stream as usize];
                    q.push_back(Chunk {
                        bytes: Payload::from_parts(&[&header]),
                        release: if payload.is_empty() { budgeted } else { 0 },
                    });
                    if !payload.is_empty() {
                        q.push_back(Chunk {
                            bytes: payload,
                            release: budgeted,
                        });
                    }
                }
                Cmd::Close => {
                    st.closing
                        .get_or_insert_with(|| Instant::now() + shared.timeout().min(CLOSE_WAIT));
                }
                Cmd::SidecarEnded => st.sidecar_ended = true,
            }
        }
        if let Err(e) = io.read_streams(&mut st, &shared) {
            tracing::error!(peer, "protocol error on the QUIC link: {e}; closing it");
            let _ = io.conn.close(true, 0x1, e.as_bytes());
            let _ = io.flush(&mut st);
            break Some(e);
        }
        if st.sidecar_ended && st.closing.is_none() {
            // Every payload the sidecar brought has been matched above;
            // descriptors still waiting will never be.
            let _ = io.conn.close(true, 0x3, b"sidecar ended");
            let _ = io.flush(&mut st);
            break Some("the sidecar ended".into());
        }
        if let Err(e) = io.write_streams(&mut st, &link) {
            break Some(e);
        }
        if let Some(until) = st.closing {
            let drained = st.out.iter().all(VecDeque::is_empty);
            if drained && !st.fin_sent {
                for i in 0..streams {
                    if st.opened[i] {
                        let _ = io.conn.stream_send(io.stream_id(i as u64), &[], true);
                    }
                }
                st.fin_sent = true;
            }
            let unresponsive = st.last_recv.elapsed() >= CLOSE_IDLE || shared.inbox.is_gone(peer);
            if (st.fin_sent && io.all_acked(&st)) || unresponsive || Instant::now() >= until {
                let _ = io.conn.close(true, 0, b"bye");
                let _ = io.flush(&mut st);
                break None;
            }
        }
        if st.last_sent.elapsed() >= hb && io.conn.is_established() {
            // Keep-alive: holds NAT bindings and the idle timer.
            let _ = io.conn.send_ack_eliciting();
        }
        if let Err(e) = io.flush(&mut st) {
            break Some(e);
        }
        if io.conn.is_closed() || io.conn.is_draining() {
            if st.closing.is_some() {
                break None;
            }
            match io.conn.peer_error() {
                // The peer closed its end in order: its sidecar's bye
                // follows and ends the peer there (after the payloads
                // that descriptors here still wait for).
                Some(e) if e.is_app && e.error_code == 0 => {
                    wait_for_sidecar(&shared, &link, &rx, &mut io, &mut st, &mut events);
                    break None;
                }
                Some(e) => {
                    break Some(format!(
                        "closed by the peer: code {:#x} {}",
                        e.error_code,
                        String::from_utf8_lossy(&e.reason)
                    ))
                }
                None => {
                    break Some(
                        io.conn
                            .local_error()
                            .map_or("idle timeout".to_string(), |e| format!("{e:?}")),
                    )
                }
            }
        }
    };
    // Give back the budget of what will never be sent.
    for q in &mut st.out {
        for c in q.drain(..) {
            link.budget.release(c.release);
        }
    }
    if st.closing.is_none() {
        match failure {
            Some(e) => tracing::debug!(peer, "QUIC link ended: {e}"),
            None => tracing::debug!(peer, "QUIC link closed by the peer"),
        }
        shared.lost_now(peer);
    }
}

/// After the peer closed its QUIC end, finish the descriptors that still
/// wait for sidecar payloads, until the sidecar ends or this rank closes.
fn wait_for_sidecar(
    shared: &Shared,
    link: &QLink,
    rx: &Receiver<Cmd>,
    io: &mut Io,
    st: &mut State,
    events: &mut mio::Events,
) {
    loop {
        while let Ok(cmd) = rx.try_recv() {
            match cmd {
                Cmd::Frame { budgeted, .. } => link.budget.release(budgeted),
                Cmd::Close => return,
                Cmd::SidecarEnded => st.sidecar_ended = true,
            }
        }
        if io.read_streams(st, shared).is_err() {
            return;
        }
        let waiting = st.streams.values().any(|s| s.blocked.is_some());
        let closing = shared.closing.load(std::sync::atomic::Ordering::Acquire);
        if !waiting || st.sidecar_ended || closing {
            return;
        }
        let _ = io
            .poll
            .poll(events, Some(heartbeat_interval(shared.timeout())));
    }
}

/// The datagram socket of an accepted link: bound to the rank's port
/// beside its listening socket (`SO_REUSEPORT`) and connected to the
/// peer, so the kernel hands it that peer's datagrams.
pub(crate) fn connected_socket(
    local: SocketAddr,
    remote: SocketAddr,
) -> std::io::Result<mio::net::UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(local),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&local.into())?;
    s.connect(&remote.into())?;
    size_buffers(&s);
    Ok(mio::net::UdpSocket::from_std(s.into()))
}

/// Ask for large socket buffers (root may exceed `rmem_max`).
pub(crate) fn size_buffers(s: &socket2::Socket) {
    const WANT: usize = 8 << 20;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        let v = libc::c_int::try_from(WANT).unwrap_or(libc::c_int::MAX);
        let set = |opt| {
            // SAFETY: a valid socket and a c_int option value of the size
            // passed.
            unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(s),
                    libc::SOL_SOCKET,
                    opt,
                    (&v as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            }
        };
        if set(force) != 0 {
            set(plain);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LaneKind;

    #[test]
    fn a_lane_keeps_its_stream_and_credits_have_their_own() {
        let mut h = Header::control(FrameType::Data, 0, 1);
        h.kind = LaneKind::Collective;
        let mut seen = std::collections::BTreeSet::new();
        for tag in 0..64 {
            h.tag = tag;
            let s = stream_of(&h);
            assert_eq!(s, stream_of(&h));
            assert!((1..=LANE_STREAMS).contains(&s));
            seen.insert(s);
        }
        assert_eq!(
            seen.len() as u64,
            LANE_STREAMS,
            "lanes spread over every stream"
        );
        assert_eq!(stream_of(&Header::control(FrameType::Credit, 0, 1)), 0);
    }
}
