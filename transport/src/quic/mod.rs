//! The QUIC transport: a QUIC connection per linked pair of ranks, with
//! mutual TLS from the cluster CA, plus a TCP bulk sidecar.
//!
//! Formation first builds the TCP links exactly as the TCP transport does
//! (`tcp/`): same topology, same token handshake and typed refusals, and
//! the hello says "QUIC with this sidecar threshold" so ranks configured
//! differently fail at once, naming the difference. Those links become the
//! sidecar. Then each pair opens a QUIC connection the same way round
//! (mesh: lower rank dials; star: workers dial the coordinator) and each
//! side checks the other's leaf: issued by the cluster CA, naming the
//! rank expected.
//!
//! A rank's one UDP port (its data port) serves every inbound peer: the
//! first datagram of a new peer reaches the listening socket, which opens
//! a socket of its own for that peer on the same port (`SO_REUSEPORT`)
//! connected to the peer's address; the kernel delivers the peer's later
//! datagrams to it, so each link's thread reads only its own datagrams and
//! needs no connection-id demultiplexing. After formation the listening
//! socket stays open to refuse latecomers (a stranger fails the TLS
//! handshake; a member's duplicate is closed with "formation is over").
//!
//! Messages under the threshold travel as frames on QUIC streams
//! (`link.rs`); larger ones on the sidecar, announced by a descriptor on
//! their lane's stream so the lane stays in order.

mod link;
mod order;
pub mod tls;

use crate::tcp::frame::Header;
use crate::tcp::link::{LinkTx, Shared};
use crate::tcp::{FormationError, TcpConfig, TcpTransport};
use crate::{LaneKey, Payload, PeerStats, Transport, TransportError};
use link::{Io, QLink};
pub use order::MIN_THRESHOLD;
use std::collections::{BTreeSet, HashMap};
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
pub use tls::{ClusterCa, RankIdentity};

/// Default size from which a payload goes over the TCP sidecar. QUIC
/// costs ≈ 4–5 µs of CPU per datagram on each side, against TCP's copy
/// into the kernel: measured here, QUIC matches TCP's ping-pong time up to
/// 4 KiB and is 1.7× slower at 16 KiB, 3× at 64 KiB (README, "QUIC").
pub const DEFAULT_SIDECAR_THRESHOLD: usize = 4 << 10;

/// The ALPN both sides must offer.
const ALPN: &[u8] = b"meshwork/2";

/// How to form a QUIC group.
#[derive(Clone, Debug)]
pub struct QuicConfig {
    /// Ranks, addresses, token, deadlines, budgets: as for TCP. Each rank
    /// listens on its address's port for both UDP (QUIC) and TCP (sidecar).
    pub tcp: TcpConfig,
    /// Payloads of at least this many bytes go over the TCP sidecar.
    pub sidecar_threshold: usize,
    /// This rank's leaf and the CA it trusts; `None` derives them: from
    /// the token, or without one (loopback), from the job's parameters.
    pub identity: Option<RankIdentity>,
}

impl QuicConfig {
    /// Defaults for everything but the addresses.
    pub fn new(rank: u32, world: u32, peers: Vec<SocketAddr>) -> QuicConfig {
        QuicConfig {
            tcp: TcpConfig::new(rank, world, peers),
            sidecar_threshold: DEFAULT_SIDECAR_THRESHOLD,
            identity: None,
        }
    }
}

/// What the rank's QUIC links share with its TCP links (`Shared::quic`).
#[derive(Debug)]
pub(crate) struct QuicShared {
    pub threshold: usize,
    /// Order stamps of what this rank sends, per link (`order.rs`).
    out: Vec<Mutex<order::Out>>,
    /// What each link brought that waits for its turn.
    inn: Vec<Mutex<order::In>>,
    links: OnceLock<Vec<Option<Arc<QLink>>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// PeerGone notices received per rank, one per stream.
    gone_marks: Vec<std::sync::atomic::AtomicU64>,
    /// Ranks this coordinator has announced gone.
    announced: Vec<AtomicBool>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl QuicShared {
    fn new(world: u32, threshold: usize) -> QuicShared {
        let streams = link::STREAMS as usize;
        QuicShared {
            threshold: threshold.max(order::MIN_THRESHOLD),
            out: (0..world)
                .map(|_| Mutex::new(order::Out::new(streams)))
                .collect(),
            inn: (0..world)
                .map(|_| Mutex::new(order::In::new(streams)))
                .collect(),
            links: OnceLock::new(),
            threads: Mutex::new(Vec::new()),
            gone_marks: (0..world).map(|_| Default::default()).collect(),
            announced: (0..world).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// The sidecar to `peer` ended: its QUIC link takes over the ending.
    /// `false`: there is no running QUIC link; end it now.
    pub(crate) fn sidecar_ended(&self, peer: u32) -> bool {
        self.link(peer).is_some_and(|l| l.sidecar_ended())
    }

    /// A coordinator tells worker `h.dst` that rank `h.src` is gone, on
    /// every stream, behind whatever it relayed there.
    pub(crate) fn tell_gone(&self, mut h: Header) {
        if let Some(l) = self.link(h.dst) {
            let mut out = lock(&self.out[h.dst as usize]);
            for s in 0..link::STREAMS {
                out.frame(s as usize, &mut h);
                l.push_on(s, h, &[]);
            }
        }
    }

    /// Whether this is the first time `rank` is found gone (its QUIC link
    /// and its sidecar may both report it).
    pub(crate) fn first_gone(&self, rank: u32) -> bool {
        self.announced
            .get(rank as usize)
            .is_some_and(|a| !a.swap(true, Ordering::AcqRel))
    }

    /// One stream's PeerGone notice for `rank`; `true` with the last.
    pub(crate) fn gone_mark(&self, rank: u32) -> bool {
        self.gone_marks
            .get(rank as usize)
            .is_some_and(|m| m.fetch_add(1, Ordering::AcqRel) + 1 == link::STREAMS)
    }

    fn link(&self, hop: u32) -> Option<&Arc<QLink>> {
        self.links.get()?.get(hop as usize)?.as_ref()
    }

    /// Send a frame over the QUIC link to `hop`, waiting (within the
    /// deadline) while the link has more than its budget queued.
    pub(crate) fn send(
        &self,
        shared: &Shared,
        hop: u32,
        mut header: Header,
        parts: &[&[u8]],
        dst: u32,
    ) -> Result<(), TransportError> {
        let gone = TransportError::PeerDisconnected { rank: dst };
        let l = self.link(hop).ok_or(gone.clone())?;
        let budgeted = l.reserve(shared, parts, dst)?;
        let s = link::stream_of(&header);
        let mut out = lock(&self.out[hop as usize]);
        out.frame(s as usize, &mut header);
        // Header and payload in one buffer: one copy, one chunk for quiche.
        let head = header.encode();
        let pieces: Vec<&[u8]> = std::iter::once(&head[..])
            .chain(parts.iter().copied())
            .collect();
        let bytes = Payload::from_parts_in(&pieces, Some(&shared.pool));
        if l.submit(shared, bytes, s, budgeted) {
            Ok(())
        } else {
            out.unstamp_frame(s as usize);
            drop(out);
            l.unreserve(budgeted);
            Err(gone)
        }
    }

    /// Send a payload over the sidecar `tcp` to `hop`, stamped for its
    /// lane's order.
    pub(crate) fn send_bulk(
        &self,
        shared: &Shared,
        hop: u32,
        mut header: Header,
        parts: &[&[u8]],
        dst: u32,
        tcp: &LinkTx,
    ) -> Result<(), TransportError> {
        let s = link::stream_of(&header) as usize;
        let mut out = lock(&self.out[hop as usize]);
        out.payload(s, &mut header);
        let sent = tcp.send(header, parts, shared, dst);
        if sent.is_err() {
            // Nothing went out: the next payload takes this one's place.
            out.unstamp_payload(s);
        }
        sent
    }

    /// A receiver waiting on `hop` reads its QUIC link itself.
    pub(crate) fn pump(&self, shared: &Shared, hop: u32) {
        if let Some(l) = self.link(hop) {
            let _ = l.try_pump(shared);
        }
    }

    /// Forward a frame to its destination (a star coordinator), without
    /// blocking: over QUIC, or over the sidecar `tcp` if large.
    pub(crate) fn relay(
        &self,
        mut h: Header,
        payload: Payload,
        tcp: &LinkTx,
        pool: &Arc<crate::BufferPool>,
    ) {
        let Some(l) = self.link(h.dst) else {
            tracing::warn!(dst = h.dst, "no QUIC link to relay to; frame dropped");
            return;
        };
        let s = link::stream_of(&h);
        let mut out = lock(&self.out[h.dst as usize]);
        if payload.len() < self.threshold {
            out.frame(s as usize, &mut h);
            l.push_on(s, h, payload.as_ref());
        } else {
            out.payload(s as usize, &mut h);
            tcp.enqueue_frame(h, payload, pool);
        }
    }

    /// A frame of stream `s` from `peer` came off QUIC.
    pub(crate) fn frame_arrived(
        &self,
        shared: &Shared,
        peer: u32,
        s: usize,
        h: Header,
        payload: Option<Payload>,
    ) -> Result<(), String> {
        lock(&self.inn[peer as usize]).frame(shared, peer, s, h, payload)
    }

    /// The sidecar from `peer` brought a payload. `false`: a protocol
    /// error (the link must close).
    pub(crate) fn bulk_arrived(
        &self,
        shared: &Shared,
        peer: u32,
        h: Header,
        payload: Payload,
    ) -> bool {
        let s = link::stream_of(&h) as usize;
        match lock(&self.inn[peer as usize]).payload(shared, peer, s, h, payload) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(peer, "protocol error on the sidecar: {e}");
                false
            }
        }
    }

    /// Flush and close every QUIC link; wait for their threads.
    pub(crate) fn close(&self) {
        for l in self.links.get().into_iter().flatten().flatten() {
            l.close();
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// One rank's endpoint of a QUIC group. Dropping it closes it.
#[derive(Debug)]
pub struct QuicTransport {
    inner: TcpTransport,
    late: Mutex<Option<Late>>,
}

/// The listening socket's thread after formation, and how to stop it.
#[derive(Debug)]
struct Late {
    stop: Arc<AtomicBool>,
    waker: Arc<mio::Waker>,
    thread: JoinHandle<()>,
}

/// What one turn of formation brought.
#[derive(Default)]
struct Turn {
    /// Links now up: (peer, connection).
    up: Vec<(u32, Pending)>,
    /// Dials that failed for good: (peer, why).
    failed: Vec<(u32, String)>,
}

fn fail(rank: u32, reason: impl std::fmt::Display) -> FormationError {
    FormationError::ConnectionFailed {
        rank,
        reason: reason.to_string(),
    }
}

/// The identity a rank derives for itself when none is given.
fn derive_identity(cfg: &TcpConfig) -> Result<RankIdentity, boring::error::ErrorStack> {
    let ca = match &cfg.token {
        Some(t) => ClusterCa::from_token(t)?,
        None => {
            // Loopback without a token: a CA per job, from what every rank
            // of the job knows. It authenticates nobody (anyone who knows
            // the job can derive it) but keeps jobs apart.
            let job = format!(
                "meshwork job\0{}\0{}\0{:?}",
                cfg.world,
                cfg.star,
                cfg.peers.first()
            );
            ClusterCa::derive(job.as_bytes())?
        }
    };
    ca.issue(cfg.rank)
}

fn quiche_config(
    identity: &RankIdentity,
    timeout: Duration,
    loopback: bool,
) -> Result<quiche::Config, String> {
    let ctx = identity.ssl_context().map_err(|e| e.to_string())?;
    let mut c = quiche::Config::with_boring_ssl_ctx_builder(quiche::PROTOCOL_VERSION, ctx)
        .map_err(|e| e.to_string())?;
    c.set_application_protos(&[ALPN])
        .map_err(|e| e.to_string())?;
    // quiche's defaults would stall or never notice a dead peer: every
    // window is 0 and the idle timeout is off. Windows: 16 MiB a stream,
    // 64 MiB a connection (payloads over the threshold take the sidecar,
    // so these hold many messages). The idle timeout is well past the
    // deadline: silence is reported as a timeout by the deadline (the
    // sidecar's heartbeats), and keep-alives hold NAT bindings.
    c.set_initial_max_data(64 << 20);
    c.set_initial_max_stream_data_uni(16 << 20);
    c.set_initial_max_streams_uni(2 * link::STREAMS);
    c.set_initial_max_streams_bidi(0);
    c.set_max_connection_window(128 << 20);
    c.set_max_stream_window(32 << 20);
    let idle = (timeout * 3).max(Duration::from_secs(10));
    c.set_max_idle_timeout(u64::try_from(idle.as_millis()).unwrap_or(u64::MAX));
    // Datagrams: loopback takes quiche's largest; elsewhere start at the
    // safe 1200 and let path-MTU discovery raise it.
    c.set_max_recv_udp_payload_size(16_383);
    if loopback {
        c.set_max_send_udp_payload_size(16_383);
    } else {
        c.set_max_send_udp_payload_size(8_952);
        c.discover_pmtu(true);
    }
    c.set_initial_rtt(Duration::from_millis(20));
    c.set_disable_active_migration(true);
    c.enable_pacing(false);
    Ok(c)
}

fn unspecified(addr: &SocketAddr) -> SocketAddr {
    let ip = match addr {
        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, 0)
}

fn random_cid() -> Result<quiche::ConnectionId<'static>, String> {
    let mut id = [0u8; quiche::MAX_CONN_ID_LEN];
    getrandom::getrandom(&mut id).map_err(|e| e.to_string())?;
    Ok(quiche::ConnectionId::from_vec(id.to_vec()))
}

/// A connection being set up.
struct Pending {
    conn: quiche::Connection,
    socket: mio::net::UdpSocket,
    local: SocketAddr,
    remote: SocketAddr,
    /// Dialled: the rank we expect. Accepted: `None` until its leaf says.
    expect: Option<u32>,
    /// Refused (wrong rank, formation over): close and forget.
    refused: bool,
    /// This side dialled (it writes on client-initiated streams).
    dialed: bool,
}

impl Pending {
    fn pump(&mut self, buf: &mut [u8]) {
        loop {
            match self.socket.recv(buf) {
                Ok(n) => {
                    let info = quiche::RecvInfo {
                        from: self.remote,
                        to: self.local,
                    };
                    let _ = self.conn.recv(&mut buf[..n], info);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                Err(_) => break,
            }
        }
        if self.conn.timeout() == Some(Duration::ZERO) {
            self.conn.on_timeout();
        }
        while let Ok((n, _)) = self.conn.send(buf) {
            let _ = self.socket.send(&buf[..n]);
        }
    }
}

/// Sets up the QUIC links of one rank (and, after formation, refuses
/// latecomers on the listening socket).
struct Former<'a> {
    rank: u32,
    config: quiche::Config,
    listener: Option<mio::net::UdpSocket>,
    poll: mio::Poll,
    pending: HashMap<usize, Pending>,
    by_addr: HashMap<SocketAddr, usize>,
    next_token: usize,
    accept_from: &'a BTreeSet<u32>,
    buf: Vec<u8>,
}

/// The acceptor's one-byte "admitted" message: the server-initiated
/// unidirectional stream after the link's own.
const ADMIT_STREAM: u64 = 4 * link::STREAMS + 3;

const LISTEN: mio::Token = mio::Token(0);
const STOP: mio::Token = mio::Token(1);
/// Connections being set up at once, at most (strangers included).
const MAX_PENDING: usize = 256;

impl<'a> Former<'a> {
    fn new(
        rank: u32,
        config: quiche::Config,
        listener: Option<mio::net::UdpSocket>,
        poll: mio::Poll,
        accept_from: &'a BTreeSet<u32>,
    ) -> Former<'a> {
        Former {
            rank,
            config,
            listener,
            poll,
            pending: HashMap::new(),
            by_addr: HashMap::new(),
            // Tokens 0 and 1: the listener and the stop waker.
            next_token: 2,
            accept_from,
            buf: vec![0; 65_535],
        }
    }

    fn dial(&mut self, peer: u32, addr: SocketAddr) -> Result<(), FormationError> {
        let s = std::net::UdpSocket::bind(unspecified(&addr)).map_err(|e| fail(peer, e))?;
        s.connect(addr).map_err(|e| fail(peer, e))?;
        s.set_nonblocking(true).map_err(|e| fail(peer, e))?;
        link::size_buffers(&socket2::SockRef::from(&s));
        let local = s.local_addr().map_err(|e| fail(peer, e))?;
        let mut socket = mio::net::UdpSocket::from_std(s);
        let scid = random_cid().map_err(|e| fail(peer, e))?;
        let name = tls::rank_name(peer);
        let conn = quiche::connect(Some(&name), &scid, local, addr, &mut self.config)
            .map_err(|e| fail(peer, format!("QUIC: {e}")))?;
        let token = self.next_token;
        self.next_token += 1;
        self.poll
            .registry()
            .register(&mut socket, mio::Token(token), mio::Interest::READABLE)
            .map_err(|e| fail(peer, e))?;
        let mut p = Pending {
            conn,
            socket,
            local,
            remote: addr,
            expect: Some(peer),
            refused: false,
            dialed: true,
        };
        p.pump(&mut self.buf);
        self.pending.insert(token, p);
        Ok(())
    }

    /// Take every datagram waiting on the listening socket: a known peer's
    /// goes to its connection, a new peer's Initial opens one.
    fn accept(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        let Ok(local) = listener.local_addr() else {
            return;
        };
        loop {
            let (n, from) = match listener.recv_from(&mut self.buf) {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let info = quiche::RecvInfo { from, to: local };
            if let Some(p) = self
                .by_addr
                .get(&from)
                .and_then(|t| self.pending.get_mut(t))
            {
                let _ = p.conn.recv(&mut self.buf[..n], info);
                continue;
            }
            let Ok(hdr) = quiche::Header::from_slice(&mut self.buf[..n], quiche::MAX_CONN_ID_LEN)
            else {
                continue;
            };
            if hdr.ty != quiche::Type::Initial
                || !quiche::version_is_supported(hdr.version)
                || self.pending.len() >= MAX_PENDING
            {
                continue;
            }
            let opened = link::connected_socket(local, from).and_then(|mut socket| {
                let token = self.next_token;
                self.poll.registry().register(
                    &mut socket,
                    mio::Token(token),
                    mio::Interest::READABLE,
                )?;
                Ok((token, socket))
            });
            let (token, socket) = match opened {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(%from, "cannot open a socket for a new QUIC peer: {e}");
                    continue;
                }
            };
            let Ok(scid) = random_cid() else { continue };
            let mut conn = match quiche::accept(&scid, None, local, from, &mut self.config) {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(%from, "QUIC accept: {e}");
                    continue;
                }
            };
            let _ = conn.recv(&mut self.buf[..n], info);
            self.next_token += 1;
            self.by_addr.insert(from, token);
            self.pending.insert(
                token,
                Pending {
                    conn,
                    socket,
                    local,
                    remote: from,
                    expect: None,
                    refused: false,
                    dialed: false,
                },
            );
        }
    }

    /// One turn: wait, read, send; what came up and what failed.
    fn turn(&mut self, until: Instant, formed: &BTreeSet<u32>, events: &mut mio::Events) -> Turn {
        let mut wait = until.saturating_duration_since(Instant::now());
        for p in self.pending.values() {
            if let Some(t) = p.conn.timeout() {
                wait = wait.min(t);
            }
        }
        if let Err(e) = self.poll.poll(events, Some(wait)) {
            if e.kind() != ErrorKind::Interrupted {
                tracing::warn!("poll: {e}");
            }
        }
        self.accept();
        let mut turn = Turn::default();
        let mut gone = Vec::new();
        let mut admitted: BTreeSet<u32> = formed.clone();
        for (&token, p) in self.pending.iter_mut() {
            p.pump(&mut self.buf);
            if p.conn.is_closed() {
                gone.push(token);
                if let (Some(peer), false) = (p.expect, p.refused) {
                    let why = match (p.conn.peer_error(), p.conn.local_error()) {
                        (Some(e), _) | (None, Some(e)) => format!(
                            "QUIC handshake refused: code {:#x} {}",
                            e.error_code,
                            String::from_utf8_lossy(&e.reason)
                        ),
                        (None, None) => "QUIC handshake timed out".into(),
                    };
                    turn.failed.push((peer, why));
                }
                continue;
            }
            if p.refused || !p.conn.is_established() {
                continue;
            }
            let named = p.conn.peer_cert().and_then(tls::rank_of);
            let ok = match (p.expect, named) {
                (Some(want), Some(got)) => want == got,
                (None, Some(got)) => {
                    self.accept_from.contains(&got) && admitted.insert(got) && {
                        p.expect = Some(got);
                        true
                    }
                }
                _ => false,
            };
            if ok && !p.dialed {
                // The acceptor has checked the dialer's leaf (a TLS 1.3
                // client is "established" before that): say so.
                let _ = p.conn.stream_send(ADMIT_STREAM, &[1], true);
                p.pump(&mut self.buf);
                gone.push(token);
            } else if ok {
                // The dialer waits for that word before its link is up.
                let mut word = [0u8; 1];
                if matches!(p.conn.stream_recv(ADMIT_STREAM, &mut word), Ok((1, _))) && word[0] == 1
                {
                    gone.push(token);
                }
            } else {
                tracing::warn!(
                    remote = %p.remote,
                    ?named,
                    "refused a QUIC peer: its leaf names no rank expected here"
                );
                let _ = p.conn.close(true, 0x2, b"rank taken or not expected");
                p.refused = true;
                p.pump(&mut self.buf);
            }
        }
        for token in gone {
            if let Some(mut p) = self.pending.remove(&token) {
                self.by_addr.remove(&p.remote);
                let _ = self.poll.registry().deregister(&mut p.socket);
                if !p.conn.is_closed() {
                    if let Some(peer) = p.expect {
                        turn.up.push((peer, p));
                    }
                }
            }
        }
        turn
    }
}

impl QuicTransport {
    /// Form the group: the TCP sidecar links first, then the QUIC links.
    pub fn connect(cfg: QuicConfig) -> Result<QuicTransport, FormationError> {
        let tcp = &cfg.tcp;
        let rank = tcp.rank;
        let identity = match cfg.identity.clone() {
            Some(i) => i,
            None => derive_identity(tcp).map_err(|e| fail(rank, format!("TLS setup: {e}")))?,
        };
        let config = quiche_config(
            &identity,
            tcp.timeout,
            tcp.peers.iter().all(|a| a.ip().is_loopback()),
        )
        .map_err(|e| fail(rank, format!("QUIC setup: {e}")))?;
        let (accept_from, dial_to) = crate::tcp::plan(tcp.star, rank, tcp.world);
        let addr_of = |r: u32| {
            tcp.peers
                .get(r as usize)
                .copied()
                .ok_or_else(|| fail(r, format!("no address for rank {r}")))
        };
        // The UDP port is bound before the TCP links form, so that a peer
        // done with them early finds it (its datagrams queue meanwhile).
        let listener = if accept_from.is_empty() {
            None
        } else {
            let addr = tcp.bind.map_or_else(|| addr_of(rank), Ok)?;
            let s = socket2::Socket::new(
                socket2::Domain::for_address(addr),
                socket2::Type::DGRAM,
                Some(socket2::Protocol::UDP),
            )
            .and_then(|s| {
                s.set_reuse_port(true)?;
                s.set_nonblocking(true)?;
                s.bind(&addr.into())?;
                Ok(s)
            })
            .map_err(|e| fail(rank, format!("cannot listen on UDP {addr}: {e}")))?;
            Some(mio::net::UdpSocket::from_std(s.into()))
        };
        let inner = TcpTransport::form(
            tcp,
            Some(QuicShared::new(tcp.world, cfg.sidecar_threshold.max(1))),
        )?;
        let deadline = Instant::now() + tcp.timeout;
        let poll = mio::Poll::new().map_err(|e| fail(rank, e))?;
        let mut former = Former::new(rank, config, listener, poll, &accept_from);
        if let Some(l) = former.listener.as_mut() {
            former
                .poll
                .registry()
                .register(l, LISTEN, mio::Interest::READABLE)
                .map_err(|e| fail(rank, e))?;
        }
        for &peer in &dial_to {
            former.dial(peer, addr_of(peer)?)?;
        }
        let want: BTreeSet<u32> = accept_from.iter().chain(&dial_to).copied().collect();
        let mut formed: BTreeSet<u32> = BTreeSet::new();
        let mut links: Vec<(u32, Pending)> = Vec::new();
        let mut events = mio::Events::with_capacity(64);
        while formed != want {
            if Instant::now() >= deadline {
                return Err(FormationError::Timeout {
                    missing: want.difference(&formed).copied().collect(),
                });
            }
            let turn = former.turn(deadline, &formed, &mut events);
            for (peer, p) in turn.up {
                formed.insert(peer);
                links.push((peer, p));
            }
            if let Some((peer, why)) = turn.failed.into_iter().next() {
                return Err(fail(peer, why));
            }
        }
        tracing::info!(
            rank,
            world = tcp.world,
            star = tcp.star,
            links = links.len(),
            threshold = cfg.sidecar_threshold,
            "QUIC group formed (mutual TLS, TCP sidecar)"
        );
        let t = QuicTransport {
            inner,
            late: Mutex::new(None),
        };
        t.start(links, tcp.send_budget_bytes)
            .map_err(|e| fail(rank, e))?;
        t.inner.start_links();
        t.refuse_latecomers(former);
        Ok(t)
    }

    fn shared(&self) -> &Arc<Shared> {
        self.inner.shared()
    }

    fn start(&self, links: Vec<(u32, Pending)>, budget: usize) -> std::io::Result<()> {
        let sh = self.shared();
        let q = sh
            .quic
            .as_ref()
            .ok_or_else(|| std::io::Error::other("not QUIC"))?;
        let mut handles: Vec<Option<Arc<QLink>>> = vec![None; sh.world as usize];
        let mut started = Vec::new();
        for (peer, p) in links {
            let poll = mio::Poll::new()?;
            let waker = mio::Waker::new(poll.registry(), link::WAKE)?;
            let io = Io {
                peer,
                conn: p.conn,
                socket: p.socket,
                local: p.local,
                remote: p.remote,
                dialer: p.dialed,
            };
            let l = Arc::new(QLink::new(io, waker, budget));
            handles[peer as usize] = Some(Arc::clone(&l));
            started.push((l, poll));
        }
        let _ = q.links.set(handles);
        let mut threads = q.threads.lock().unwrap_or_else(|e| e.into_inner());
        for (l, poll) in started {
            let s = Arc::clone(sh);
            let name = format!("meshwork-q{}-{}", sh.rank, l.peer);
            threads.push(
                std::thread::Builder::new()
                    .name(name)
                    .spawn(move || link::run(s, l, poll))?,
            );
        }
        Ok(())
    }

    fn refuse_latecomers(&self, mut former: Former<'_>) {
        if former.listener.is_none() {
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let waker = match mio::Waker::new(former.poll.registry(), STOP) {
            Ok(w) => Arc::new(w),
            Err(e) => {
                tracing::warn!("cannot keep the QUIC port open after formation: {e}");
                return;
            }
        };
        let (flag, config) = (Arc::clone(&stop), former.config);
        let (listener, poll, rank) = (former.listener.take(), former.poll, former.rank);
        let spawned = std::thread::Builder::new()
            .name(format!("meshwork-qlate-{rank}"))
            .spawn(move || {
                let none = BTreeSet::new();
                let mut f = Former::new(rank, config, listener, poll, &none);
                let mut events = mio::Events::with_capacity(16);
                while !flag.load(Ordering::Acquire) {
                    let until = Instant::now() + Duration::from_secs(1);
                    // Nobody is admitted: whoever completes a handshake
                    // is closed with "rank taken or not expected".
                    drop(f.turn(until, &none, &mut events));
                }
            });
        match spawned {
            Ok(thread) => {
                *self.late.lock().unwrap_or_else(|e| e.into_inner()) = Some(Late {
                    stop,
                    waker,
                    thread,
                })
            }
            Err(e) => tracing::warn!("cannot keep the QUIC port open after formation: {e}"),
        }
    }
}

impl Transport for QuicTransport {
    fn rank(&self) -> u32 {
        self.inner.rank()
    }

    fn world(&self) -> u32 {
        self.inner.world()
    }

    fn send(&self, dst: u32, key: LaneKey, parts: &[&[u8]]) -> Result<(), TransportError> {
        self.inner.send(dst, key, parts)
    }

    fn recv(
        &self,
        src: u32,
        key: LaneKey,
        timeout: Duration,
        want_len: Option<usize>,
    ) -> Result<Payload, TransportError> {
        self.inner.recv(src, key, timeout, want_len)
    }

    fn note_collective(&self, comm: u64, seq: u64) {
        self.inner.note_collective(comm, seq);
    }

    fn stats(&self) -> Vec<PeerStats> {
        self.inner.stats()
    }

    fn set_timeout(&self, timeout: Duration) {
        self.inner.set_timeout(timeout);
    }

    fn recv_any(&self, key: LaneKey, timeout: Duration) -> Result<(u32, Payload), TransportError> {
        self.inner.recv_any(key, timeout)
    }

    fn close(&self) {
        let late = self.late.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(late) = late {
            late.stop.store(true, Ordering::Release);
            let _ = late.waker.wake();
            let _ = late.thread.join();
        }
        self.inner.close();
    }
}

impl Drop for QuicTransport {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    //! Peers that must not get in or must be cut off: QUIC clients with a
    //! self-signed leaf or one from another cluster's CA; and a hostile
    //! member, which holds the token (so it passes the sidecar's handshake
    //! and gets a leaf from the cluster CA) and then sends garbage over
    //! QUIC. The rank it talks to closes the link and reports the peer
    //! gone; nothing panics, nothing is allocated for a claimed length.

    use super::*;
    use crate::tcp::frame::{FrameType, Header};
    use crate::tcp::handshake::{self, Identity};
    use crate::{LaneKey, LaneKind};
    use std::net::{TcpListener, TcpStream, UdpSocket};

    const TOKEN: &str = "hostile test token";

    fn free_addrs(n: usize) -> Vec<SocketAddr> {
        let mut held = Vec::new();
        while held.len() < n {
            let t = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = t.local_addr().unwrap();
            if let Ok(u) = UdpSocket::bind(addr) {
                held.push((t, u, addr));
            }
        }
        held.into_iter().map(|(_, _, a)| a).collect()
    }

    /// Play rank 0 of 2 against rank 1 at `addr`: the sidecar handshake,
    /// then a QUIC connection with a genuine leaf; send `garbage` on
    /// stream `stream`. Returns the sidecar so it stays open.
    fn impostor(addr: SocketAddr, stream: u64, garbage: &[u8]) -> TcpStream {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut tcp = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => std::thread::yield_now(),
                Err(e) => panic!("cannot reach rank 1: {e}"),
            }
        };
        let id = Identity {
            rank: 0,
            world: 2,
            star: false,
            key: handshake::derive_key(Some(TOKEN)),
            version: handshake::PROTOCOL_VERSION,
            transport: handshake::TRANSPORT_QUIC | DEFAULT_SIDECAR_THRESHOLD as u64,
        };
        assert_eq!(handshake::dial(&mut tcp, &id).unwrap().rank, 1);
        let leaf = ClusterCa::from_token(TOKEN).unwrap().issue(0).unwrap();
        let mut cfg = quiche_config(&leaf, Duration::from_secs(10), true).unwrap();
        let conn = client(
            addr,
            &mut cfg,
            &tls::rank_name(1),
            stream,
            garbage,
            deadline,
        );
        assert!(
            conn.is_closed() || conn.is_draining(),
            "rank 1 should close the connection (established {}, peer error {:?})",
            conn.is_established(),
            conn.peer_error()
        );
        tcp
    }

    /// A plain QUIC client of `addr` under `cfg`, as `name`: once its side
    /// is established it sends `garbage` on `stream`; it runs until the
    /// connection ends or `until`, and returns it.
    fn client(
        addr: SocketAddr,
        cfg: &mut quiche::Config,
        name: &str,
        stream: u64,
        garbage: &[u8],
        until: Instant,
    ) -> quiche::Connection {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(addr).unwrap();
        let local = sock.local_addr().unwrap();
        let scid = random_cid().unwrap();
        let mut conn = quiche::connect(Some(name), &scid, local, addr, cfg).unwrap();
        let mut buf = vec![0u8; 65_535];
        let mut sent = false;
        while !(conn.is_closed() || conn.is_draining()) && Instant::now() < until {
            while let Ok((n, _)) = conn.send(&mut buf) {
                sock.send(&buf[..n]).unwrap();
            }
            let wait = conn.timeout().unwrap_or(Duration::from_millis(20));
            sock.set_read_timeout(Some(
                wait.clamp(Duration::from_millis(1), Duration::from_millis(20)),
            ))
            .unwrap();
            match sock.recv(&mut buf) {
                Ok(n) => {
                    let info = quiche::RecvInfo {
                        from: addr,
                        to: local,
                    };
                    let _ = conn.recv(&mut buf[..n], info);
                }
                Err(_) => conn.on_timeout(),
            }
            if conn.is_established() && !sent {
                let _ = conn.stream_send(stream, garbage, false);
                sent = true;
            }
        }
        conn
    }

    /// A client with its own context, dialling `addr` as `name`; the
    /// error code the server closed its connection with.
    fn rogue_dial(addr: SocketAddr, ctx: boring::ssl::SslContextBuilder, name: &str) -> u64 {
        let mut cfg =
            quiche::Config::with_boring_ssl_ctx_builder(quiche::PROTOCOL_VERSION, ctx).unwrap();
        cfg.set_application_protos(&[ALPN]).unwrap();
        cfg.set_max_idle_timeout(3000);
        cfg.set_initial_max_data(1 << 20);
        cfg.set_initial_max_stream_data_uni(1 << 20);
        cfg.set_initial_max_streams_uni(16);
        let until = Instant::now() + Duration::from_secs(8);
        // Garbage where frames belong, in case the handshake let it in.
        let conn = client(addr, &mut cfg, name, 2, &[0xAB; 100], until);
        assert!(
            conn.is_closed() || conn.is_draining(),
            "still open after 8 s"
        );
        let e = conn
            .peer_error()
            .expect("closed by the server, not by a timeout");
        assert!(!e.is_app, "{e:?}");
        e.error_code
    }

    /// TLS alerts travel as QUIC transport errors 0x100 + alert.
    const UNKNOWN_CA: u64 = 0x100 + 48;
    const DECRYPT_ERROR: u64 = 0x100 + 51;

    fn self_signed_context() -> boring::ssl::SslContextBuilder {
        use boring::ec::{EcGroup, EcKey};
        use boring::pkey::PKey;
        use boring::ssl::{SslContextBuilder, SslMethod, SslVerifyMode};
        use boring::x509::{X509Name, X509};
        let key = PKey::from_ec_key(
            EcKey::generate(&EcGroup::from_curve_name(boring::nid::Nid::X9_62_PRIME256V1).unwrap())
                .unwrap(),
        )
        .unwrap();
        let mut name = X509Name::builder().unwrap();
        name.append_entry_by_nid(boring::nid::Nid::COMMONNAME, "rank-0.meshwork")
            .unwrap();
        let name = name.build();
        let mut b = X509::builder().unwrap();
        b.set_version(2).unwrap();
        b.set_subject_name(&name).unwrap();
        b.set_issuer_name(&name).unwrap();
        b.set_pubkey(&key).unwrap();
        let from = boring::asn1::Asn1Time::days_from_now(0).unwrap();
        let until = boring::asn1::Asn1Time::days_from_now(30).unwrap();
        b.set_not_before(&from).unwrap();
        b.set_not_after(&until).unwrap();
        b.sign(&key, boring::hash::MessageDigest::sha256()).unwrap();
        let cert = b.build();
        let mut ctx = SslContextBuilder::new(SslMethod::tls()).unwrap();
        ctx.set_certificate(&cert).unwrap();
        ctx.set_private_key(&key).unwrap();
        ctx.set_verify(SslVerifyMode::NONE);
        ctx
    }

    /// A client with a self-signed leaf, and one with a leaf from another
    /// cluster's CA that claims a real rank, are both refused by a rank's
    /// QUIC port; the group goes on undisturbed.
    #[test]
    fn strangers_and_other_clusters_are_refused() {
        let addrs = free_addrs(2);
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let mut cfg = QuicConfig::new(r, 2, addrs.clone());
                cfg.tcp.token = Some(TOKEN.into());
                cfg.tcp.timeout = Duration::from_secs(10);
                std::thread::spawn(move || QuicTransport::connect(cfg).unwrap())
            })
            .collect();
        let ts: Vec<QuicTransport> = hs.into_iter().map(|h| h.join().unwrap()).collect();

        let code = rogue_dial(addrs[1], self_signed_context(), "rank-1.meshwork");
        assert_eq!(code, UNKNOWN_CA, "a self-signed leaf: unknown CA");

        let other = ClusterCa::from_token("another cluster")
            .unwrap()
            .issue(0)
            .unwrap();
        let mut ctx = other.ssl_context().unwrap();
        ctx.set_verify(boring::ssl::SslVerifyMode::NONE);
        let code = rogue_dial(addrs[1], ctx, "rank-1.meshwork");
        // Same CA name, another key: the signature does not verify.
        assert_eq!(code, DECRYPT_ERROR, "a leaf from another cluster's CA");

        // The group is undisturbed.
        let t = Duration::from_secs(10);
        let key = |tag| LaneKey {
            comm: 0,
            kind: LaneKind::PointToPoint,
            tag,
        };
        for n in [10usize, 200_000] {
            ts[0].send(1, key(3), &[&vec![5u8; n]]).unwrap();
            assert_eq!(ts[1].recv(0, key(3), t, None).unwrap().len(), n);
            ts[1].send(0, key(4), &[&vec![6u8; n]]).unwrap();
            assert_eq!(ts[0].recv(1, key(4), t, None).unwrap().len(), n);
        }
    }

    fn header(ftype: FrameType, dst: u32, len: u64) -> Header {
        let mut h = Header::control(ftype, 0, dst);
        h.kind = LaneKind::PointToPoint;
        h.len = len;
        h
    }

    #[test]
    fn garbage_over_quic_closes_the_link_and_ends_the_peer() {
        let mut junk = header(FrameType::Data, 1, 0).encode().to_vec();
        junk[0] = 99; // unknown frame type
        let over = header(FrameType::Data, 1, 1 << 40).encode().to_vec(); // over the cap
        let big = header(FrameType::Data, 1, 1 << 20).encode().to_vec(); // belongs on the sidecar
        let misaddressed = {
            let mut f = header(FrameType::Data, 0, 3).encode().to_vec();
            f.extend_from_slice(b"abc");
            f
        };
        let cases: [(u64, Vec<u8>); 5] = [
            (2 + 4, junk),
            (2 + 4, over),
            (2 + 4, big),
            (2 + 4, misaddressed),
            // A stream quiche allows but meshwork does not use.
            (4 * 10 + 2, header(FrameType::Data, 1, 0).encode().to_vec()),
        ];
        for (i, (stream, garbage)) in cases.into_iter().enumerate() {
            let addrs = free_addrs(2);
            let mut cfg = QuicConfig::new(1, 2, addrs.clone());
            cfg.tcp.token = Some(TOKEN.into());
            cfg.tcp.timeout = Duration::from_secs(10);
            let rank1 = std::thread::spawn(move || {
                let t = QuicTransport::connect(cfg).unwrap();
                let key = LaneKey {
                    comm: 0,
                    kind: LaneKind::PointToPoint,
                    tag: 0,
                };
                t.recv(0, key, Duration::from_secs(10), None)
            });
            let _sidecar = impostor(addrs[1], stream, &garbage);
            let got = rank1.join().unwrap();
            assert_eq!(
                got,
                Err(TransportError::PeerDisconnected { rank: 0 }),
                "case {i}"
            );
        }
    }
}
