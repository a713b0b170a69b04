//! The QUIC transport: a QUIC connection per linked pair of ranks, with
//! mutual TLS from the cluster CA, plus a TCP bulk sidecar.
//!
//! Formation first builds the TCP streams exactly as for TCP links
//! (`form/`): same topology, same token handshake and typed refusals, and
//! the hello says "QUIC with this sidecar threshold" so ranks configured
//! differently fail at once, naming the difference. Those streams become
//! the sidecars: a [`TcpLink`] each, whose frames go to this link's order
//! keeper rather than to the core. Then each pair opens a QUIC connection the same way round
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
//! What strangers can hold there, before and after formation, is bounded
//! (`former.rs`: the 1200-byte Initial, a handshake deadline, a share per
//! source address and in all, the oldest giving way).
//!
//! Messages under the threshold travel as frames on QUIC streams
//! (`engine.rs`); larger ones on the sidecar, announced by a descriptor on
//! their lane's stream so the lane stays in order.

mod engine;
mod former;
pub(crate) mod order;
#[cfg(test)]
mod tests;

use crate::auth::handshake;
use crate::auth::tls::{ClusterCa, RankIdentity};
use crate::form::{self, FormationError};
use crate::link::{Core, Gone, Link, LinkTransport, Posted, ProtocolError, Reservation, Sink};
use crate::spec::Spec;
use crate::tcp::TcpLink;
use crate::wire::{FrameType, Header};
use crate::{LinkKind, Payload, TransportError};
use engine::{stream_of, Io, QLink, STREAMS};
#[cfg(test)]
use former::random_cid;
use former::{fail, Former, Pending, LISTEN};
pub use order::MIN_THRESHOLD;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Default size from which a payload goes over the TCP sidecar. QUIC
/// costs ≈ 4–5 µs of CPU per datagram on each side, against TCP's copy
/// into the kernel: measured here, QUIC matches TCP's ping-pong time up to
/// 4 KiB and is 1.7× slower at 16 KiB, 3× at 64 KiB (docs/transports.md).
pub const DEFAULT_SIDECAR_THRESHOLD: usize = 4 << 10;

/// The ALPN both sides must offer.
const ALPN: &[u8] = b"meshwork/2";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The handshake's transport word for QUIC with `threshold`.
fn transport_word(threshold: usize) -> u64 {
    handshake::TRANSPORT_QUIC
        | (threshold as u64
            & !(handshake::TRANSPORT_QUIC
                | handshake::TRANSPORT_SEALED
                | handshake::TRANSPORT_UNAUTHENTICATED))
}

/// Form a QUIC group: the TCP sidecar streams first, then the QUIC
/// connections.
pub(crate) fn connect(
    spec: &Spec,
    threshold: usize,
    upgrade: form::Upgrade,
) -> Result<LinkTransport, FormationError> {
    let (core, refusers) = form_links(spec, threshold, upgrade)?;
    Ok(LinkTransport::start(core, form::background(refusers)))
}

/// [`connect`]'s formation: the core with every link in its table (not
/// started yet), and the threads refusing latecomers.
fn form_links(
    spec: &Spec,
    threshold: usize,
    upgrade: form::Upgrade,
) -> Result<(Arc<Core>, Vec<form::Refuser>), FormationError> {
    let threshold = threshold.max(MIN_THRESHOLD);
    let rank = spec.rank;
    let identity = match spec.identity.clone() {
        Some(i) => i,
        None => derive_identity(spec).map_err(|e| fail(rank, format!("TLS setup: {e}")))?,
    };
    let config = quiche_config(
        &identity,
        spec.timeout,
        spec.peers.iter().all(|a| a.ip().is_loopback()),
    )
    .map_err(|e| fail(rank, format!("QUIC setup: {e}")))?;
    let (mut accept_from, mut dial_to) = form::plan(spec.shape, rank, spec.world);
    // The UDP port is bound before the TCP streams form, so that a peer
    // done with them early finds it (its datagrams queue meanwhile).
    let listener = if accept_from.is_empty() {
        None
    } else {
        let addr = spec.bind.map_or_else(|| spec.addr_of(rank), Ok)?;
        let s = match spec.sockets.as_ref().and_then(|s| s.take_udp(addr)) {
            Some(s) => s
                .set_nonblocking(true)
                .map(|()| s)
                .map_err(|e| fail(rank, format!("cannot use the UDP socket on {addr}: {e}")))?,
            None => socket2::Socket::new(
                socket2::Domain::for_address(addr),
                socket2::Type::DGRAM,
                Some(socket2::Protocol::UDP),
            )
            .and_then(|s| {
                s.set_reuse_port(true)?;
                s.set_nonblocking(true)?;
                s.bind(&addr.into())?;
                Ok(s.into())
            })
            .map_err(|e| fail(rank, format!("cannot listen on UDP {addr}: {e}")))?,
        };
        Some(mio::net::UdpSocket::from_std(s))
    };
    let mut formed = form::form(spec, transport_word(threshold))?;
    // A peer known by several addresses: its QUIC port is on the one its
    // TCP stream was formed over (the UDP socket shares the port).
    let formed_at: BTreeMap<u32, SocketAddr> = formed
        .streams
        .iter()
        .filter_map(|(peer, s, _)| s.peer_addr().ok().map(|a| (*peer, a)))
        .collect();
    // On any failure below, dropping it stops the TCP listener's thread.
    let mut refusers: Vec<form::Refuser> = formed.refuser.take().into_iter().collect();
    // Peers on this host need no QUIC connection.
    let upgraded = upgrade(spec, &mut formed.streams)?;
    for (peer, _) in &upgraded {
        accept_from.remove(peer);
        dial_to.retain(|p| p != peer);
    }
    let deadline = Instant::now() + spec.timeout;
    let poll = mio::Poll::new().map_err(|e| fail(rank, e))?;
    let expected = accept_from
        .iter()
        .flat_map(|&r| spec.addrs_of(r).unwrap_or_default())
        .map(|a| a.ip());
    let mut former = Former::new(rank, config, listener, poll, accept_from.clone(), expected);
    let up = quic_links(
        spec,
        &mut former,
        &accept_from,
        &dial_to,
        &formed_at,
        deadline,
    )?;
    tracing::info!(
        rank,
        world = spec.world,
        shape = %spec.shape.name(),
        links = up.len(),
        threshold,
        "QUIC group formed (mutual TLS, TCP sidecar)"
    );
    let core = Arc::new(Core::new(&spec.core_config()));
    let mut streams = formed.streams;
    let mut links: Vec<Option<Arc<dyn Link>>> = vec![None; spec.world as usize];
    for (peer, make) in upgraded {
        links[peer as usize] = Some(make(&core));
    }
    for (peer, p) in up {
        let Some(i) = streams.iter().position(|(r, ..)| *r == peer) else {
            return Err(fail(peer, "a QUIC link without a sidecar"));
        };
        let (_, stream, keys) = streams.swap_remove(i);
        match QuicLink::new(&core, spec, threshold, peer, p, stream, &keys) {
            Ok(link) => links[peer as usize] = Some(Arc::new(link)),
            Err(e) => {
                tracing::error!(peer, "cannot set up the QUIC link: {e}");
                core.inbox.set_gone(peer);
            }
        }
    }
    core.set_links(links);
    refusers.extend(former::refuse_latecomers(former));
    Ok((core, refusers))
}

/// Dial and accept until every QUIC link of this rank is up.
fn quic_links(
    spec: &Spec,
    former: &mut Former,
    accept_from: &BTreeSet<u32>,
    dial_to: &[u32],
    formed_at: &BTreeMap<u32, SocketAddr>,
    deadline: Instant,
) -> Result<Vec<(u32, Pending)>, FormationError> {
    if let Some(l) = former.listener.as_mut() {
        former
            .poll
            .registry()
            .register(l, LISTEN, mio::Interest::READABLE)
            .map_err(|e| fail(spec.rank, e))?;
    }
    for &peer in dial_to {
        let addr = match formed_at.get(&peer) {
            Some(&a) => a,
            None => spec.addr_of(peer)?,
        };
        former.dial(peer, addr)?;
    }
    let want: BTreeSet<u32> = accept_from.iter().chain(dial_to).copied().collect();
    let mut formed: BTreeSet<u32> = BTreeSet::new();
    let mut links = Vec::new();
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
    Ok(links)
}

/// A link's lane order across QUIC and its sidecar (`order.rs`), and the
/// sidecar's sink.
#[derive(Debug)]
pub(crate) struct Order {
    /// Order stamps of what this rank sends.
    out: Mutex<order::Out>,
    /// What the link brought that waits for its turn.
    inn: Mutex<order::In>,
    quic: Arc<QLink>,
}

impl Order {
    /// A frame of stream `s` came off QUIC.
    pub(crate) fn frame_arrived(
        &self,
        core: &Core,
        peer: u32,
        s: usize,
        h: Header,
        payload: Option<Payload>,
    ) -> Result<(), ProtocolError> {
        lock(&self.inn).frame(core, peer, s, h, payload)
    }
}

impl Sink for Order {
    fn data(&self, core: &Core, peer: u32, h: Header, payload: Payload) -> bool {
        let s = stream_of(&h) as usize;
        match lock(&self.inn).payload(core, peer, s, h, payload) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(peer, "protocol error on the sidecar: {e}");
                false
            }
        }
    }

    fn reads_direct(&self) -> bool {
        true
    }

    fn direct_now(&self, _core: &Core, _peer: u32, h: &Header) -> bool {
        lock(&self.inn).payload_is_next(stream_of(h) as usize, h)
    }

    fn took_direct(&self, core: &Core, peer: u32, h: &Header) -> Result<(), ProtocolError> {
        lock(&self.inn).payload_taken(core, peer, stream_of(h) as usize)
    }

    /// The sidecar ended: the QUIC link first delivers what it still holds
    /// (frames whose payloads the sidecar brought just before it ended),
    /// then ends the peer; if its thread has ended already, end it now.
    fn ended(&self, core: &Core, peer: u32) {
        if !self.quic.sidecar_ended() {
            core.lost(peer);
        }
    }
}

/// A QUIC link and its TCP sidecar; see the module docs.
#[derive(Debug)]
pub(crate) struct QuicLink {
    peer: u32,
    threshold: usize,
    quic: Arc<QLink>,
    order: Arc<Order>,
    sidecar: Arc<TcpLink>,
    /// The link thread's poll, until it starts; then its handle.
    poll: Mutex<Option<mio::Poll>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// How long closing waits for the QUIC connection to be done with.
    close_wait: Duration,
}

impl QuicLink {
    fn new(
        core: &Core,
        spec: &Spec,
        threshold: usize,
        peer: u32,
        p: Pending,
        stream: std::net::TcpStream,
        keys: &handshake::Keys,
    ) -> std::io::Result<QuicLink> {
        let poll = mio::Poll::new()?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), engine::WAKE)?);
        let io = Io {
            peer,
            conn: p.conn,
            socket: p.socket,
            local: p.local,
            remote: p.remote,
            dialer: p.dialed,
        };
        let quic = Arc::new(QLink::new(io, waker, spec.send_budget_bytes, threshold));
        let order = Arc::new(Order {
            out: Mutex::new(order::Out::new(STREAMS as usize)),
            inn: Mutex::new(order::In::new(STREAMS as usize)),
            quic: Arc::clone(&quic),
        });
        let sink: Arc<dyn Sink> = Arc::clone(&order) as Arc<dyn Sink>;
        let sidecar = Arc::new(TcpLink::new(core, peer, stream, keys, spec, sink)?);
        Ok(QuicLink {
            peer,
            threshold,
            quic,
            order,
            sidecar,
            poll: Mutex::new(Some(poll)),
            thread: Mutex::new(None),
            close_wait: spec.timeout,
        })
    }
}

impl Link for QuicLink {
    fn kind(&self) -> LinkKind {
        LinkKind::Quic
    }

    /// Under the threshold: a frame on the lane's QUIC stream. Otherwise
    /// the payload goes over the sidecar, stamped for its lane's order.
    fn send(
        &self,
        core: &Core,
        mut header: Header,
        parts: &[&[u8]],
        dst: u32,
    ) -> Result<(), TransportError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let s = stream_of(&header) as usize;
        if len >= self.threshold {
            let mut out = lock(&self.order.out);
            out.payload(s, &mut header);
            let sent = self.sidecar.send(core, header, parts, dst);
            if sent.is_err() {
                // Nothing went out: the next payload takes this one's place.
                out.unstamp_payload(s);
            }
            return sent;
        }
        let gone = TransportError::PeerDisconnected { rank: dst };
        let budgeted = self.quic.reserve(core, parts, dst)?;
        let mut out = lock(&self.order.out);
        out.frame(s, &mut header);
        // Header and payload in one buffer: one copy, one chunk for quiche.
        let head = header.encode();
        let pieces = std::iter::once(&head[..]).chain(parts.iter().copied());
        let bytes = Payload::concat_in(pieces, Some(&core.pool));
        if self.quic.submit(core, bytes, s as u64, budgeted) {
            Ok(())
        } else {
            out.unstamp_frame(s);
            drop(out);
            self.quic.unreserve(budgeted);
            Err(gone)
        }
    }

    fn forward(&self, core: &Core, mut h: Header, payload: Payload) {
        let s = stream_of(&h);
        let mut out = lock(&self.order.out);
        if payload.len() < self.threshold {
            out.frame(s as usize, &mut h);
            self.quic.push_on(s, h, payload.as_ref());
        } else {
            out.payload(s as usize, &mut h);
            self.sidecar.enqueue(core, h, payload);
        }
    }

    /// In the budget of the path the frame takes: QUIC's under the
    /// threshold, the sidecar's from it.
    fn reserve(&self, len: usize) -> Option<Reservation> {
        if len < self.threshold {
            self.quic.try_reserve(len)
        } else {
            self.sidecar.reserve(len)
        }
    }

    fn forward_reserved(&self, core: &Core, mut h: Header, payload: Payload, room: Reservation) {
        let small = payload.len() < self.threshold;
        if small != (room.len < self.threshold) {
            // Reserved on the other path (the frame is not the length it
            // was reserved for): given back there, sent unreserved.
            self.unreserve(room);
            self.forward(core, h, payload);
            return;
        }
        let s = stream_of(&h);
        let mut out = lock(&self.order.out);
        if small {
            out.frame(s as usize, &mut h);
            let bytes = Payload::concat_in(
                [&h.encode()[..], payload.as_ref()].into_iter(),
                Some(&core.pool),
            );
            if !self.quic.submit(core, bytes, s, room.bytes) {
                self.quic.unreserve(room.bytes);
            }
        } else {
            out.payload(s as usize, &mut h);
            self.sidecar.enqueue_reserved(core, h, payload, room);
        }
    }

    fn unreserve(&self, room: Reservation) {
        if room.len < self.threshold {
            self.quic.unreserve(room.bytes);
        } else {
            self.sidecar.unreserve(room);
        }
    }

    /// The sidecar's queue, and what answers hold on QUIC's.
    #[cfg(test)]
    fn queued_bytes(&self) -> usize {
        self.sidecar.queued_bytes() + self.quic.reserved()
    }

    /// On every stream, behind whatever was relayed there.
    fn tell_gone(&self, _core: &Core, gone: u32, how: Gone, dst: u32) {
        let mut h = Header {
            aux: how as u32,
            ..Header::control(FrameType::PeerGone, gone, dst)
        };
        let mut out = lock(&self.order.out);
        for s in 0..STREAMS {
            out.frame(s as usize, &mut h);
            self.quic.push_on(s, h, &[]);
        }
    }

    fn poll(&self, core: &Core, want_len: Option<usize>) -> bool {
        // A message known to be over the threshold comes over the
        // sidecar: no need to read QUIC for it.
        if want_len.is_none_or(|n| n < self.threshold) {
            self.quic.try_pump(core, &self.order);
        }
        // And one known to be under it does not come over the sidecar
        // (what the sidecar brings meanwhile, its thread reads: the caller
        // does not watch it, see `caller_polls`).
        if want_len.is_some_and(|n| n < self.threshold) {
            return false;
        }
        self.sidecar.pump(core)
    }

    fn poll_into(&self, core: &Core, posted: &mut Posted<'_>) -> bool {
        if posted.len() < self.threshold {
            return self.poll(core, Some(posted.len()));
        }
        // It comes over the sidecar: read straight into the posted
        // buffers once its turn in its lane has come (`Order::direct_now`).
        Link::poll_into(&*self.sidecar, core, posted)
    }

    fn caller_polls(&self, core: &Core, on: bool, want_len: Option<usize>) {
        // Only the path the awaited message takes (as `poll` reads it):
        // QUIC below the threshold, the sidecar from it.
        if want_len.is_none_or(|n| n < self.threshold) {
            if on {
                self.quic.watch.begin(false);
            } else {
                self.quic.watch.end(core.answered(), false);
            }
        }
        if want_len.is_none_or(|n| n >= self.threshold) {
            self.sidecar.caller_polls(core, on, want_len);
        }
    }

    fn want(&self, _kind: crate::LaneKind, on: bool) -> bool {
        let quic = self.quic.watch.park(on);
        let sidecar = self.sidecar.park(on);
        quic || sidecar
    }

    fn want_standing(&self, _kind: crate::LaneKind, _on: bool) -> bool {
        false
    }

    fn start(self: Arc<Self>, core: &Arc<Core>) {
        let Some(poll) = lock(&self.poll).take() else {
            return;
        };
        let (c, q, o, side) = (
            Arc::clone(core),
            Arc::clone(&self.quic),
            Arc::clone(&self.order),
            Arc::clone(&self.sidecar),
        );
        let spawned = std::thread::Builder::new()
            .name(format!("meshwork-q{}-{}", core.rank, self.peer))
            .spawn(move || engine::run(c, q, o, side, poll));
        match spawned {
            Ok(t) => *lock(&self.thread) = Some(t),
            Err(e) => {
                tracing::error!(peer = self.peer, "cannot spawn the link's thread: {e}");
                core.inbox.set_gone(self.peer);
            }
        }
    }

    /// QUIC first: it delivers what it carries before the sidecar says bye.
    fn close_begin(&self) {
        self.quic.close();
    }

    fn close_drain(&self) {
        self.quic.wait_done(self.close_wait);
        self.sidecar.begin_close();
    }

    fn close_flush(&self) {
        self.sidecar.wait_flushed();
    }

    fn close_end(&self) {
        self.sidecar.shutdown();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
    }
}

/// The identity a rank derives for itself when none is given.
fn derive_identity(cfg: &Spec) -> Result<RankIdentity, boring::error::ErrorStack> {
    let ca = match &cfg.token {
        Some(t) => ClusterCa::from_token(t)?,
        None => {
            // Loopback without a token: a CA per job, from what every rank
            // of the job knows. It authenticates nobody (anyone who knows
            // the job can derive it) but keeps jobs apart.
            let job = format!(
                "meshwork job\0{}\0{}\0{:?}",
                cfg.world,
                cfg.shape.word(),
                cfg.peers.first()
            );
            ClusterCa::derive(job.as_bytes())?
        }
    };
    ca.issue(cfg.rank)
}

/// How often an idle QUIC connection sends a keep-alive: well within
/// quiche's idle timeout (`quic::idle_timeout`) and the 30 s a NAT keeps
/// a UDP binding, and never more often than the sidecar's heartbeat. The
/// sidecar's heartbeats, not these, tell a silent peer.
pub(crate) fn keep_alive_interval(timeout: Duration) -> Duration {
    (idle_timeout(timeout) / 3).clamp(
        crate::link::heartbeat_interval(timeout),
        Duration::from_secs(15),
    )
}

/// quiche's idle timeout: well past the deadline (silence is reported by
/// the deadline, through the sidecar's heartbeats).
pub(crate) fn idle_timeout(timeout: Duration) -> Duration {
    (timeout * 3).max(Duration::from_secs(10))
}

/// Why a rank's QUIC configuration could not be made (a failure here).
#[derive(Debug, thiserror::Error)]
enum ConfigError {
    /// BoringSSL refused the rank's leaf, key or TLS settings.
    #[error("TLS context: {0}")]
    Tls(#[from] boring::error::ErrorStack),
    /// quiche refused the TLS context or the ALPN.
    #[error("{0}")]
    Quiche(#[from] quiche::Error),
}

fn quiche_config(
    identity: &RankIdentity,
    timeout: Duration,
    loopback: bool,
) -> Result<quiche::Config, ConfigError> {
    let ctx = identity.ssl_context()?;
    let mut c = quiche::Config::with_boring_ssl_ctx_builder(quiche::PROTOCOL_VERSION, ctx)?;
    c.set_application_protos(&[ALPN])?;
    // quiche's defaults would stall or never notice a dead peer: every
    // window is 0 and the idle timeout is off. Windows: 16 MiB a stream,
    // 64 MiB a connection (payloads over the threshold take the sidecar,
    // so these hold many messages). The idle timeout is well past the
    // deadline: silence is reported as a timeout by the deadline (the
    // sidecar's heartbeats), and keep-alives hold NAT bindings.
    c.set_initial_max_data(64 << 20);
    c.set_initial_max_stream_data_uni(16 << 20);
    c.set_initial_max_streams_uni(2 * STREAMS);
    c.set_initial_max_streams_bidi(0);
    c.set_max_connection_window(128 << 20);
    c.set_max_stream_window(32 << 20);
    let idle = idle_timeout(timeout);
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

#[cfg(test)]
mod order_tests;
