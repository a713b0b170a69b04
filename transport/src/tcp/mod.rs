//! The TCP transport: one connection per linked pair of ranks.
//!
//! * **Mesh**: every pair is linked; rank `r` dials every higher rank and
//!   accepts every lower one. Dials retry until the formation deadline, so
//!   ranks may start in any order.
//! * **Star**: rank 0 (the coordinator) listens and every worker dials it;
//!   workers need no inbound port (NAT, containers). The coordinator relays
//!   worker-to-worker frames, so every lane works between any two ranks.
//!
//! Each link is authenticated by the handshake (`handshake.rs`), then sent
//! on by application threads and its writer thread (`link.rs`) and read by
//! a resumable frame assembler that its reader thread or a waiting
//! application thread drives (`rx.rs`).

pub(crate) mod frame;
pub(crate) mod handshake;
pub(crate) mod link;
pub(crate) mod rx;
pub(crate) mod seal;

pub use handshake::PROTOCOL_VERSION;

use crate::inbox::{budgeted, Inbox};
use crate::{BufferPool, LaneKey, Payload, PeerStats, Transport, TransportError};
use handshake::{HandshakeError, Identity, Keys};
use link::{Budget, LinkTx, Out, Shared, Wire};
use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How to form a TCP group.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    pub rank: u32,
    pub world: u32,
    /// Addresses in rank order. Mesh: every rank's. Star: at least the
    /// coordinator's (index 0); workers' entries are not used.
    pub peers: Vec<SocketAddr>,
    pub star: bool,
    /// The cluster token; `None` only on loopback (unauthenticated).
    pub token: Option<String>,
    /// Formation deadline, and how long a link may be silent.
    pub timeout: Duration,
    /// Largest message accepted or sent.
    pub max_message_bytes: u64,
    /// Bytes queued per link before a sender waits.
    pub send_budget_bytes: usize,
    /// Point-to-point and RPC bytes one sender may have queued at one
    /// receiver before it waits for the receiver to take them.
    pub peer_budget_bytes: u64,
    /// Messages one sender may have queued on one lane of one receiver.
    pub lane_depth: u32,
    /// Protocol version to announce (for tests of version negotiation).
    pub protocol_version: u32,
    /// Seal every data payload with AES-256-GCM under per-link keys from
    /// the handshake (`ENCRYPT_BULK`; meaningful only with a token).
    pub seal: bool,
    /// Where to listen, if not this rank's own entry of `peers` (which is
    /// then only the address others dial: behind NAT, in a container).
    pub bind: Option<SocketAddr>,
}

impl TcpConfig {
    /// Defaults for everything but the addresses.
    pub fn new(rank: u32, world: u32, peers: Vec<SocketAddr>) -> TcpConfig {
        TcpConfig {
            rank,
            world,
            peers,
            star: false,
            token: None,
            timeout: crate::DEFAULT_TIMEOUT,
            max_message_bytes: crate::DEFAULT_MAX_MESSAGE_BYTES,
            send_budget_bytes: 64 << 20,
            peer_budget_bytes: crate::DEFAULT_PEER_BUDGET,
            lane_depth: crate::LANE_DEPTH,
            protocol_version: PROTOCOL_VERSION,
            seal: false,
            bind: None,
        }
    }
}

/// Why a group could not form.
#[derive(Debug, thiserror::Error)]
pub enum FormationError {
    #[error("rank {rank} is already taken")]
    RankConflict { rank: u32 },
    #[error("rank {rank} holds another cluster token")]
    TokenMismatch { rank: u32 },
    #[error("rank {rank} speaks protocol {theirs}, we speak {ours}")]
    ProtocolMismatch { rank: u32, ours: u32, theirs: u32 },
    #[error("rank {rank} expects a world of {theirs}, we expect {ours}")]
    WorldMismatch { rank: u32, ours: u32, theirs: u32 },
    #[error("rank {rank} uses the other topology (star vs mesh)")]
    TopologyMismatch { rank: u32 },
    #[error("ranks {missing:?} did not connect before the deadline")]
    Timeout { missing: Vec<u32> },
    #[error("cannot connect to rank {rank}: {reason}")]
    ConnectionFailed { rank: u32, reason: String },
}

impl FormationError {
    fn from_handshake(e: HandshakeError, rank: u32) -> FormationError {
        match e {
            HandshakeError::Protocol { ours, theirs } => {
                FormationError::ProtocolMismatch { rank, ours, theirs }
            }
            HandshakeError::World { ours, theirs } => {
                FormationError::WorldMismatch { rank, ours, theirs }
            }
            HandshakeError::RankConflict { rank } => FormationError::RankConflict { rank },
            HandshakeError::Topology => FormationError::TopologyMismatch { rank },
            HandshakeError::Token => FormationError::TokenMismatch { rank },
            e @ HandshakeError::Transport { .. } => FormationError::ConnectionFailed {
                rank,
                reason: e.to_string(),
            },
            HandshakeError::Stranger => FormationError::ConnectionFailed {
                rank,
                reason: "the peer is not a meshwork node".into(),
            },
            HandshakeError::Io(e) => FormationError::ConnectionFailed {
                rank,
                reason: e.to_string(),
            },
        }
    }
}

struct LinkThreads {
    stream: TcpStream,
    writer: JoinHandle<()>,
    reader: JoinHandle<()>,
}

/// One rank's endpoint of a TCP group. Dropping it closes it.
#[derive(Debug)]
pub struct TcpTransport {
    shared: Arc<Shared>,
    threads: Mutex<Vec<LinkThreads>>,
    /// Links formed but not yet running (`start_links`).
    unstarted: Mutex<Vec<Unstarted>>,
    /// Answers processes that arrive after formation (a duplicate rank, a
    /// restarted one, a stranger) with a typed refusal; stopped on close.
    late: Mutex<Option<(Arc<mio::Waker>, JoinHandle<()>)>>,
}

impl std::fmt::Debug for LinkThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkThreads")
            .field("stream", &self.stream)
            .finish()
    }
}

/// Handshake I/O deadline per attempt: a peer that says nothing is dropped.
fn handshake_timeout(timeout: Duration) -> Duration {
    timeout.clamp(Duration::from_millis(100), Duration::from_secs(5))
}

fn io_fail(rank: u32, e: std::io::Error) -> FormationError {
    FormationError::ConnectionFailed {
        rank,
        reason: e.to_string(),
    }
}

/// How long a receiving thread reads its peer's link itself before it
/// parks and leaves the link to the reader thread.
const CALLER_POLL: Duration = Duration::from_micros(60);

const WAKE: mio::Token = mio::Token(0);
const LISTEN: mio::Token = mio::Token(1);

impl TcpTransport {
    /// Form the group: listen, dial, authenticate, start the link threads.
    pub fn connect(cfg: TcpConfig) -> Result<TcpTransport, FormationError> {
        TcpTransport::form(&cfg, None)
    }

    /// Form the TCP links of a group; with `quic`, they are a QUIC group's
    /// sidecar (the handshake checks that every rank agrees).
    pub(crate) fn form(
        cfg: &TcpConfig,
        quic: Option<crate::quic::QuicShared>,
    ) -> Result<TcpTransport, FormationError> {
        let (rank, world) = (cfg.rank, cfg.world);
        let id = Identity {
            rank,
            world,
            star: cfg.star,
            key: handshake::derive_key(cfg.token.as_deref()),
            version: cfg.protocol_version,
            transport: quic.as_ref().map_or(0, |q| {
                handshake::TRANSPORT_QUIC
                    | (q.threshold as u64
                        & !(handshake::TRANSPORT_QUIC | handshake::TRANSPORT_SEALED))
            }) | if cfg.seal {
                handshake::TRANSPORT_SEALED
            } else {
                0
            },
        };
        let (accept_from, dial_to) = plan(cfg.star, rank, world);
        let addr_of = |r: u32| -> Result<SocketAddr, FormationError> {
            cfg.peers
                .get(r as usize)
                .copied()
                .ok_or_else(|| FormationError::ConnectionFailed {
                    rank: r,
                    reason: format!("no address for rank {r} ({} given)", cfg.peers.len()),
                })
        };
        let deadline = Instant::now() + cfg.timeout;
        let listener = match accept_from.is_empty() {
            true => None,
            false => Some(listen(
                cfg.bind.map_or_else(|| addr_of(rank), Ok)?,
                &id,
                cfg.timeout,
            )?),
        };

        let mut poll = mio::Poll::new().map_err(|e| io_fail(rank, e))?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE).map_err(|e| io_fail(rank, e))?);
        if let Some(l) = &listener {
            poll.registry()
                .register(
                    &mut mio::unix::SourceFd(&l.as_raw_fd()),
                    LISTEN,
                    mio::Interest::READABLE,
                )
                .map_err(|e| io_fail(rank, e))?;
        }
        let cancel = Arc::new(AtomicBool::new(false));
        let (results_tx, results_rx) = crossbeam_channel::unbounded();
        for &peer in &dial_to {
            let addr = addr_of(peer)?;
            let (id, tx, waker, cancel) = (
                id.clone(),
                results_tx.clone(),
                Arc::clone(&waker),
                Arc::clone(&cancel),
            );
            let timeout = cfg.timeout;
            std::thread::Builder::new()
                .name(format!("meshwork-dial-{peer}"))
                .spawn(move || {
                    let res = dial_until(addr, peer, &id, deadline, timeout, &cancel);
                    let _ = tx.send((peer, res));
                    let _ = waker.wake();
                })
                .map_err(|e| io_fail(rank, e))?;
        }

        let mut formed: Vec<(u32, TcpStream, Keys)> = Vec::new();
        let mut dials_left = dial_to.len();
        let mut accepted: BTreeSet<u32> = BTreeSet::new();
        let mut events = mio::Events::with_capacity(16);
        let outcome: Result<(), FormationError> = loop {
            let mut failed = None;
            while let Ok((peer, res)) = results_rx.try_recv() {
                dials_left -= 1;
                match res {
                    Ok((s, keys)) => formed.push((peer, s, keys)),
                    Err(FormationError::Timeout { .. }) => {}
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
            if let Some(e) = failed {
                break Err(e);
            }
            let now = Instant::now();
            if accepted.len() == accept_from.len() && dials_left == 0 || now >= deadline {
                let mut missing: Vec<u32> = accept_from.difference(&accepted).copied().collect();
                missing.extend(
                    dial_to
                        .iter()
                        .filter(|&&p| !formed.iter().any(|(r, ..)| *r == p)),
                );
                missing.sort_unstable();
                break if missing.is_empty() {
                    Ok(())
                } else {
                    Err(FormationError::Timeout { missing })
                };
            }
            if let Err(e) = poll.poll(&mut events, Some(deadline - now)) {
                if e.kind() != ErrorKind::Interrupted {
                    break Err(io_fail(rank, e));
                }
            }
            if let Some(l) = &listener {
                if let Err(e) = accept_ready(
                    l,
                    &id,
                    &accept_from,
                    &mut accepted,
                    &mut formed,
                    cfg.timeout,
                ) {
                    break Err(e);
                }
            }
        };
        cancel.store(true, Ordering::Release);
        outcome?;
        tracing::info!(
            rank,
            world,
            star = cfg.star,
            links = formed.len(),
            "TCP group formed"
        );
        let on_quic = quic.is_some();
        let transport = TcpTransport::start(cfg, formed, quic);
        if !on_quic {
            transport.start_links();
        }
        if let Some(l) = listener {
            let timeout = cfg.timeout;
            let late = std::thread::Builder::new()
                .name(format!("meshwork-late-{rank}"))
                .spawn(move || refuse_latecomers(l, poll, &id, timeout));
            match late {
                Ok(h) => {
                    *transport.late.lock().unwrap_or_else(|e| e.into_inner()) = Some((waker, h))
                }
                Err(e) => tracing::warn!("cannot keep the listener open after formation: {e}"),
            }
        }
        Ok(transport)
    }

    fn start(
        cfg: &TcpConfig,
        formed: Vec<(u32, TcpStream, Keys)>,
        quic: Option<crate::quic::QuicShared>,
    ) -> TcpTransport {
        let shared = Arc::new(Shared {
            rank: cfg.rank,
            world: cfg.world,
            star: cfg.star,
            inbox: Inbox::new(cfg.world),
            pool: Arc::new(BufferPool::new()),
            timeout_ns: AtomicU64::new(u64::try_from(cfg.timeout.as_nanos()).unwrap_or(u64::MAX)),
            max_message_bytes: cfg.max_message_bytes,
            flow: (0..cfg.world)
                .map(|_| Budget::new(usize::try_from(cfg.peer_budget_bytes).unwrap_or(usize::MAX)))
                .collect(),
            sent: (0..cfg.world)
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
            lanes_in_flight: Mutex::new(std::collections::HashMap::new()),
            lanes_freed: std::sync::Condvar::new(),
            links: OnceLock::new(),
            rxs: OnceLock::new(),
            lane_depth: cfg.lane_depth.max(1),
            spin: {
                // Ranks on this host (same address as ours) against its
                // cores: spinning only pays when each rank has a core.
                let me = cfg.peers.get(cfg.rank as usize).map(SocketAddr::ip);
                let here = cfg
                    .peers
                    .iter()
                    .filter(|a| Some(a.ip()) == me)
                    .count()
                    .max(1);
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                here <= cores
            },
            closing: AtomicBool::new(false),
            quic,
        });
        let mut links: Vec<Option<LinkTx>> = vec![None; cfg.world as usize];
        let mut rxs: Vec<Option<Arc<rx::Rx>>> = vec![None; cfg.world as usize];
        let mut unstarted = Vec::new();
        for (peer, stream, keys) in formed {
            let sealer = cfg.seal.then(|| seal::Sealer::new(keys.send));
            let opener = cfg.seal.then(|| seal::Opener::new(keys.recv));
            let _ = stream.set_nodelay(true);
            let (tx, rx) = crossbeam_channel::unbounded::<Out>();
            let budget = Arc::new(Budget::new(cfg.send_budget_bytes));
            let (ws, rs, keep) = match (stream.try_clone(), stream.try_clone()) {
                (Ok(w), Ok(r)) => (Arc::new(Wire::new(w, sealer)), r, stream),
                _ => {
                    tracing::error!(peer, "cannot clone the socket; the link is unusable");
                    shared.inbox.set_gone(peer);
                    continue;
                }
            };
            let link = LinkTx {
                tx,
                budget,
                wire: ws,
            };
            links[peer as usize] = Some(link.clone());
            let receiver = Arc::new(rx::Rx::new(peer, rs, opener));
            rxs[peer as usize] = Some(Arc::clone(&receiver));
            unstarted.push(Unstarted {
                peer,
                link,
                queue: rx,
                receiver,
                stream: keep,
            });
        }
        // Every link is in the tables before any thread reads one: a
        // frame to relay may arrive at once (a star worker that formed
        // first), and must find the link it goes out on.
        let _ = shared.links.set(links);
        let _ = shared.rxs.set(rxs);
        TcpTransport {
            shared,
            threads: Mutex::new(Vec::new()),
            unstarted: Mutex::new(unstarted),
            late: Mutex::new(None),
        }
    }

    /// Start the links' threads. On QUIC, only once the QUIC links are up
    /// too: the sidecar's payloads may have to be relayed over them.
    pub(crate) fn start_links(&self) {
        let sh = &self.shared;
        let unstarted =
            std::mem::take(&mut *self.unstarted.lock().unwrap_or_else(|e| e.into_inner()));
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        for u in unstarted {
            let peer = u.peer;
            let (s1, s2) = (Arc::clone(sh), Arc::clone(sh));
            let (link, queue, receiver) = (u.link, u.queue, u.receiver);
            let writer = std::thread::Builder::new()
                .name(format!("meshwork-w{}-{peer}", sh.rank))
                .spawn(move || link::writer(s1, peer, link, queue));
            let reader = std::thread::Builder::new()
                .name(format!("meshwork-r{}-{peer}", sh.rank))
                .spawn(move || rx::reader(s2, receiver));
            match (writer, reader) {
                (Ok(writer), Ok(reader)) => threads.push(LinkThreads {
                    stream: u.stream,
                    writer,
                    reader,
                }),
                _ => {
                    tracing::error!(peer, "cannot spawn link threads; the link is unusable");
                    sh.inbox.set_gone(peer);
                }
            }
        }
    }
}

/// A link whose threads have not started yet.
#[derive(Debug)]
struct Unstarted {
    peer: u32,
    link: LinkTx,
    queue: crossbeam_channel::Receiver<Out>,
    receiver: Arc<rx::Rx>,
    stream: TcpStream,
}

/// Whom `rank` accepts links from and whom it dials: in a mesh, every
/// lower rank dials every higher one; in a star, workers dial rank 0.
pub(crate) fn plan(star: bool, rank: u32, world: u32) -> (BTreeSet<u32>, Vec<u32>) {
    match (star, rank) {
        (true, 0) => ((1..world).collect(), Vec::new()),
        (true, _) => (BTreeSet::new(), vec![0]),
        (false, _) => ((0..rank).collect(), (rank + 1..world).collect()),
    }
}

/// After formation every rank is taken: anyone who dials gets a typed
/// refusal (`RankConflict`, or the protocol/world mismatch it has), until
/// the waker says the transport is closing.
fn refuse_latecomers(listener: TcpListener, mut poll: mio::Poll, id: &Identity, timeout: Duration) {
    let mut events = mio::Events::with_capacity(8);
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if events.iter().any(|e| e.token() == WAKE) {
            return;
        }
        let (mut none, mut refused) = (BTreeSet::new(), Vec::new());
        if let Err(e) = accept_ready(
            &listener,
            id,
            &BTreeSet::new(),
            &mut none,
            &mut refused,
            timeout,
        ) {
            tracing::warn!("a latecomer was refused: {e}");
        }
    }
}

/// Bind `addr`. If it is taken, ask whoever holds it whether it is this
/// rank: a meshwork node answering so means a duplicate rank.
fn listen(
    addr: SocketAddr,
    id: &Identity,
    timeout: Duration,
) -> Result<TcpListener, FormationError> {
    match TcpListener::bind(addr) {
        Ok(l) => {
            l.set_nonblocking(true).map_err(|e| io_fail(id.rank, e))?;
            Ok(l)
        }
        Err(e) if e.kind() == ErrorKind::AddrInUse => {
            let probe =
                TcpStream::connect_timeout(&addr, handshake_timeout(timeout)).and_then(|mut s| {
                    s.set_read_timeout(Some(handshake_timeout(timeout)))?;
                    Ok(handshake::dial(&mut s, id))
                });
            match probe {
                Ok(Err(HandshakeError::RankConflict { rank })) => {
                    Err(FormationError::RankConflict { rank })
                }
                _ => Err(FormationError::ConnectionFailed {
                    rank: id.rank,
                    reason: format!("cannot listen on {addr}: address in use by another program"),
                }),
            }
        }
        Err(e) => Err(FormationError::ConnectionFailed {
            rank: id.rank,
            reason: format!("cannot listen on {addr}: {e}"),
        }),
    }
}

/// Accept and authenticate every pending connection.
fn accept_ready(
    listener: &TcpListener,
    id: &Identity,
    accept_from: &BTreeSet<u32>,
    accepted: &mut BTreeSet<u32>,
    formed: &mut Vec<(u32, TcpStream, Keys)>,
    timeout: Duration,
) -> Result<(), FormationError> {
    loop {
        let (mut stream, from) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                return Ok(());
            }
        };
        let hs = handshake_timeout(timeout);
        let configured = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_read_timeout(Some(hs)))
            .and_then(|()| stream.set_write_timeout(Some(hs)));
        if let Err(e) = configured {
            tracing::warn!(%from, "cannot configure an accepted socket: {e}");
            continue;
        }
        let wanted = |r: u32| accept_from.contains(&r) && !accepted.contains(&r);
        match handshake::accept(&mut stream, id, wanted) {
            Ok(admitted) => {
                let _ = stream.set_read_timeout(None);
                let _ = stream.set_write_timeout(None);
                accepted.insert(admitted.rank);
                formed.push((admitted.rank, stream, admitted.keys));
            }
            Err((_, HandshakeError::Stranger | HandshakeError::Io(_))) => {
                tracing::warn!(%from, "dropped a connection that did not complete the handshake");
            }
            Err((_, HandshakeError::RankConflict { rank })) => {
                tracing::warn!(%from, "refused a process claiming rank {rank}, which is taken or not expected here");
            }
            Err((claimed, e)) => {
                return Err(FormationError::from_handshake(
                    e,
                    claimed.unwrap_or(u32::MAX),
                ))
            }
        }
    }
}

/// Dial `peer` until admitted, refused for good, or past the deadline.
fn dial_until(
    addr: SocketAddr,
    peer: u32,
    id: &Identity,
    deadline: Instant,
    timeout: Duration,
    cancel: &AtomicBool,
) -> Result<(TcpStream, Keys), FormationError> {
    let mut backoff = Backoff::new();
    loop {
        let now = Instant::now();
        if now >= deadline || cancel.load(Ordering::Acquire) {
            return Err(FormationError::Timeout {
                missing: vec![peer],
            });
        }
        let attempt = (deadline - now).min(Duration::from_secs(2));
        match TcpStream::connect_timeout(&addr, attempt) {
            Ok(mut s) => {
                let hs = handshake_timeout(timeout);
                let _ = s.set_read_timeout(Some(hs));
                let _ = s.set_write_timeout(Some(hs));
                match handshake::dial(&mut s, id) {
                    Ok(a) if a.rank == peer => {
                        let _ = s.set_read_timeout(None);
                        let _ = s.set_write_timeout(None);
                        return Ok((s, a.keys));
                    }
                    Ok(a) => {
                        return Err(FormationError::ConnectionFailed {
                            rank: peer,
                            reason: format!("{addr} answered as rank {}", a.rank),
                        })
                    }
                    Err(HandshakeError::Io(e)) => {
                        tracing::debug!(peer, "handshake interrupted: {e}; retrying")
                    }
                    Err(e) => return Err(FormationError::from_handshake(e, peer)),
                }
            }
            Err(e) => tracing::trace!(peer, "dial {addr}: {e}"),
        }
        backoff.pause(deadline);
    }
}

/// The pause between attempts to dial a peer that is not up yet: 5 ms,
/// doubling to 200 ms, never past the deadline.
#[derive(Debug)]
pub(crate) struct Backoff(Duration);

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff(Duration::from_millis(5))
    }

    pub(crate) fn pause(&mut self, deadline: Instant) {
        let pause = self
            .0
            .min(deadline.saturating_duration_since(Instant::now()));
        #[allow(
            clippy::disallowed_methods,
            reason = "back-off between dial attempts, not synchronisation"
        )]
        std::thread::sleep(pause);
        self.0 = (self.0 * 2).min(Duration::from_millis(200));
    }
}

/// Which of `fds` are readable (or closed), waiting at most `timeout`;
/// `None` if `poll(2)` itself failed.
pub(crate) fn poll_readable(fds: &[std::os::fd::RawFd], timeout: Duration) -> Option<Vec<bool>> {
    let mut ps: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `ps` is a valid array of `ps.len()` pollfds for the call.
    let n = unsafe { libc::poll(ps.as_mut_ptr(), ps.len() as libc::nfds_t, ms) };
    (n >= 0).then(|| ps.iter().map(|p| p.revents != 0).collect())
}

impl TcpTransport {
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Return consumed budget to `src` once enough has been taken (or its
    /// queue here is empty, so a waiting sender is never left waiting).
    fn credit(&self, src: u32, key: LaneKey) {
        let sh = &self.shared;
        if src == sh.rank {
            return;
        }
        let batch = sh.flow.first().map_or(1, |b| b.max() / 16).max(1) as u64;
        let Some(credit) = sh.inbox.take_credit(src, key, batch, sh.lane_depth) else {
            return;
        };
        let hop = sh.hop(src);
        let mut bytes = credit.bytes;
        for (lane, count) in credit.lanes {
            let mut h = frame::Header::control(frame::FrameType::Credit, sh.rank, src);
            (h.comm, h.kind, h.tag, h.aux, h.len) = (lane.comm, lane.kind, lane.tag, count, bytes);
            bytes = 0;
            if sh.transmit(hop, h, &[], src).is_err() {
                tracing::debug!(src, "cannot return credit; the link is gone");
                return;
            }
        }
    }
}

impl Transport for TcpTransport {
    fn rank(&self) -> u32 {
        self.shared.rank
    }

    fn world(&self) -> u32 {
        self.shared.world
    }

    fn send(&self, dst: u32, key: LaneKey, parts: &[&[u8]]) -> Result<(), TransportError> {
        let sh = &self.shared;
        if dst >= sh.world {
            return Err(TransportError::NoSuchRank {
                rank: dst,
                world: sh.world,
            });
        }
        if sh.inbox.is_closed() {
            return Err(TransportError::Closed);
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len as u64 > sh.max_message_bytes {
            return Err(TransportError::MessageTooLarge {
                len: len as u64,
                max: sh.max_message_bytes,
            });
        }
        if dst == sh.rank {
            sh.inbox
                .deliver(dst, key, Payload::from_parts_in(parts, Some(&sh.pool)));
            return Ok(());
        }
        if sh.inbox.is_gone(dst) {
            return Err(TransportError::PeerDisconnected { rank: dst });
        }
        let hop = sh.hop(dst);
        let header = frame::Header {
            ftype: frame::FrameType::Data,
            kind: key.kind,
            src: sh.rank,
            dst,
            comm: key.comm,
            tag: key.tag,
            len: len as u64,
            aux: 0,
            seq: 0,
        };
        if budgeted(key.kind) {
            sh.acquire_lane(dst, key)?;
            if let Err(e) = sh.flow[dst as usize].acquire(len, sh.timeout(), dst) {
                sh.release_lane(dst, key, 1);
                return Err(e);
            }
        }
        let sent = sh.transmit(hop, header, parts, dst);
        if sent.is_ok() {
            let (m, b) = &sh.sent[dst as usize];
            m.fetch_add(1, Ordering::Relaxed);
            b.fetch_add(len as u64, Ordering::Relaxed);
        }
        sent
    }

    fn recv(
        &self,
        src: u32,
        key: LaneKey,
        timeout: Duration,
        want_len: Option<usize>,
    ) -> Result<Payload, TransportError> {
        let sh = &self.shared;
        // Caller-driven progress: read the link to `src` ourselves for a
        // moment before parking, so a prompt reply needs no thread hand-off
        // (on QUIC, its QUIC link as well as the sidecar).
        let hop = sh.hop(src);
        if let Some(rx) = sh
            .rxs
            .get()
            .and_then(|r| r.get(hop as usize))
            .and_then(Option::as_ref)
        {
            let until = Instant::now() + CALLER_POLL.min(timeout);
            loop {
                if let Some(taken) = sh.inbox.try_take(src, key, want_len) {
                    let msg = taken?;
                    if budgeted(key.kind) {
                        self.credit(src, key);
                    }
                    return Ok(msg);
                }
                // A message known to be over the threshold comes over the
                // sidecar: no need to read QUIC for it.
                match &sh.quic {
                    Some(q) if want_len.is_none_or(|n| n < q.threshold) => q.pump(sh, hop),
                    _ => {}
                }
                if rx.try_pump(sh) || Instant::now() >= until {
                    break;
                }
                if sh.spin {
                    std::hint::spin_loop();
                } else {
                    // More ranks than cores here: the peer we wait for may
                    // need this core.
                    std::thread::yield_now();
                }
            }
        }
        let msg = sh.inbox.recv(src, key, timeout, want_len)?;
        if budgeted(key.kind) {
            self.credit(src, key);
        }
        Ok(msg)
    }

    fn recv_any(&self, key: LaneKey, timeout: Duration) -> Result<(u32, Payload), TransportError> {
        let (src, msg) = self.shared.inbox.recv_any(key, timeout)?;
        if budgeted(key.kind) {
            self.credit(src, key);
        }
        Ok((src, msg))
    }

    fn stats(&self) -> Vec<PeerStats> {
        self.shared
            .inbox
            .stats()
            .into_iter()
            .zip(&self.shared.sent)
            .map(|(s, (m, b))| PeerStats {
                sent_messages: m.load(Ordering::Relaxed),
                sent_bytes: b.load(Ordering::Relaxed),
                ..s
            })
            .collect()
    }

    fn note_collective(&self, comm: u64, seq: u64) {
        self.shared.inbox.note_issued(comm, seq);
    }

    fn set_timeout(&self, timeout: Duration) {
        self.shared.timeout_ns.store(
            u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    fn close(&self) {
        let sh = &self.shared;
        if sh.inbox.is_closed() {
            return;
        }
        if let Some((waker, h)) = self.late.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = waker.wake();
            let _ = h.join();
        }
        // QUIC first: its links deliver what they carry before the
        // sidecar says bye.
        if let Some(q) = &sh.quic {
            q.close();
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(links) = sh.links.get() {
            for link in links.iter().flatten() {
                link.enqueue(Out::Close);
            }
        }
        sh.closing.store(true, Ordering::Release);
        // Writers flush what was queued, say bye and end (a peer that stops
        // reading is given up on after one deadline).
        let mut readers = Vec::new();
        for t in threads {
            let _ = t.writer.join();
            readers.push((t.stream, t.reader));
        }
        sh.inbox.close();
        for (stream, reader) in readers {
            let _ = stream.shutdown(Shutdown::Both);
            let _ = reader.join();
        }
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        self.close();
    }
}
