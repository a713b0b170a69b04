//! What a rank needs to form its links: [`Spec`], given to [`connect`].

use crate::auth::tls::RankIdentity;
use crate::form_error::FormationError;
use crate::link::CoreConfig;
pub use crate::route::Shape;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A rank's listening sockets, bound before it started: a launcher
/// (`meshrun`) binds every rank's port and hands each child its own, so no
/// other program can take the port between the launcher's choice and the
/// rank's bind. Formation uses them for this rank's own address instead of
/// binding; a socket bound elsewhere is not used (and is closed).
#[derive(Clone, Debug, Default)]
pub struct BoundSockets {
    tcp: Arc<Mutex<Option<TcpListener>>>,
    udp: Arc<Mutex<Option<UdpSocket>>>,
}

impl BoundSockets {
    /// A TCP listener and, for QUIC, a UDP socket on the same port (bound
    /// with `SO_REUSEPORT`: QUIC gives each accepted peer a socket of its
    /// own on that port).
    pub fn new(tcp: TcpListener, udp: Option<UdpSocket>) -> BoundSockets {
        BoundSockets {
            tcp: Arc::new(Mutex::new(Some(tcp))),
            udp: Arc::new(Mutex::new(udp)),
        }
    }

    /// The TCP listener, if it is bound to `addr` (taken once).
    pub(crate) fn take_tcp(&self, addr: SocketAddr) -> Option<TcpListener> {
        let l = self.tcp.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        (l.local_addr().ok() == Some(addr)).then_some(l)
    }

    /// The UDP socket, if it is bound to `addr` and shares its port
    /// (`SO_REUSEPORT`) (taken once).
    pub(crate) fn take_udp(&self, addr: SocketAddr) -> Option<UdpSocket> {
        let s = self.udp.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        let shared = socket2::SockRef::from(&s).reuse_port().unwrap_or(false);
        (s.local_addr().ok() == Some(addr) && shared).then_some(s)
    }
}

/// Which links carry the group's traffic between hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// One TCP connection per linked pair.
    Tcp,
    /// One QUIC connection per linked pair (mutual TLS from the cluster
    /// CA), with payloads of at least `sidecar_threshold` bytes on a TCP
    /// sidecar.
    Quic {
        /// Payloads of at least this many bytes go over the sidecar
        /// (raised to [`crate::MIN_SIDECAR_THRESHOLD`]).
        sidecar_threshold: usize,
    },
}

/// One rank's view of the group to form. Its `Debug` never shows the
/// token.
#[derive(Clone)]
#[non_exhaustive]
pub struct Spec {
    /// This rank.
    pub rank: u32,
    /// Number of ranks.
    pub world: u32,
    /// Addresses in rank order. Mesh: every rank's. Star: at least the
    /// coordinator's (index 0); workers' entries are not used.
    pub peers: Vec<SocketAddr>,
    /// Other addresses of each rank, in rank order (shorter than `peers`,
    /// or empty, where there are none): a host known by several (a name
    /// that resolves to several, a dead bridge's listed first) is dialled
    /// at each in turn until one completes the handshake.
    pub alternates: Vec<Vec<SocketAddr>>,
    /// Mesh, star, or a sparse shape whose ranks relay.
    pub shape: Shape,
    /// TCP, or QUIC with a TCP sidecar.
    pub backend: Backend,
    /// The cluster token; `None` only on loopback (unauthenticated).
    pub token: Option<String>,
    /// Formation deadline, and the deadline of every wait.
    pub timeout: Duration,
    /// How long a linked peer may send nothing, not even a heartbeat,
    /// before it counts as failed (at most `timeout`; `LIVENESS_S`).
    /// Heartbeats go out four times as often; a peer's own setting, which
    /// its heartbeats carry, is waited for when it is longer.
    pub liveness: Duration,
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
    /// Seal every data payload sent over TCP with AES-256-GCM under
    /// per-link keys from the handshake (`ENCRYPT_BULK`; needs a token).
    pub seal: bool,
    /// With a token, authenticate every frame over TCP (`FRAME_AUTH`; on
    /// by default; `seal` implies it).
    pub authenticate_frames: bool,
    /// Where to listen, if not this rank's own entry of `peers` (which is
    /// then only the address others dial: behind NAT, in a container).
    pub bind: Option<SocketAddr>,
    /// QUIC: this rank's leaf and the CA it trusts; `None` derives them
    /// from the token (or, without one, from the job's parameters).
    pub identity: Option<RankIdentity>,
    /// Listening sockets bound for this rank before it started.
    pub sockets: Option<BoundSockets>,
    /// Reach peers on this host (same kernel boot, same network
    /// namespace, same user) through shared memory (`SHM`; on by
    /// default). Either side off keeps the network link for that pair.
    pub shared_memory: bool,
    /// Shared memory: messages of at least this many bytes are copied
    /// once, straight from the sender's memory, where the kernel allows
    /// it (`SHM_SINGLE_COPY`; 0: never, every byte goes through the ring).
    pub shm_single_copy: usize,
    /// The symmetric heap's size in bytes (`HEAP_MB`; 0: none): checked
    /// equal in every link's handshake.
    pub heap_bytes: u64,
    /// A fleet (`FLEET_AWAY_S`; `None`: not one): a star over TCP whose workers
    /// come and go. A worker whose link ends is away, not failed — no one
    /// is told, nothing is revoked — and may come back, from any address,
    /// by dialling again with its identity; the coordinator's door admits
    /// it at any time, its new link replacing the old. A worker whose
    /// coordinator is away dials it again with backoff for this long
    /// before it gives up (then calls naming rank 0 fail). Workers absent
    /// at formation come later; the coordinator waits for them only until
    /// the deadline.
    pub fleet: Option<Duration>,
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every field named: one added to Spec must be added here too.
        let Spec {
            rank,
            world,
            peers,
            alternates,
            shape,
            backend,
            token,
            timeout,
            liveness,
            max_message_bytes,
            send_budget_bytes,
            peer_budget_bytes,
            lane_depth,
            protocol_version,
            seal,
            authenticate_frames,
            bind,
            identity,
            sockets,
            shared_memory,
            shm_single_copy,
            heap_bytes,
            fleet,
        } = self;
        f.debug_struct("Spec")
            .field("rank", rank)
            .field("world", world)
            .field("peers", peers)
            .field("alternates", alternates)
            .field("shape", shape)
            .field("backend", backend)
            .field("token", &token.as_ref().map(|_| "<redacted>"))
            .field("timeout", timeout)
            .field("liveness", liveness)
            .field("max_message_bytes", max_message_bytes)
            .field("send_budget_bytes", send_budget_bytes)
            .field("peer_budget_bytes", peer_budget_bytes)
            .field("lane_depth", lane_depth)
            .field("protocol_version", protocol_version)
            .field("seal", seal)
            .field("authenticate_frames", authenticate_frames)
            .field("bind", bind)
            .field("identity", identity)
            .field("sockets", sockets)
            .field("shared_memory", shared_memory)
            .field("shm_single_copy", shm_single_copy)
            .field("heap_bytes", heap_bytes)
            .field("fleet", fleet)
            .finish()
    }
}

impl Spec {
    /// What the envelopes of this rank's TCP links protect: with a token,
    /// every frame is authenticated (and with `seal`, payloads encrypted
    /// too); without one (loopback only) nothing is.
    pub(crate) fn protect(&self) -> Option<crate::auth::seal::Protect> {
        use crate::auth::seal::Protect;
        match (self.seal, &self.token) {
            (true, _) => Some(Protect::Encrypt),
            (false, Some(_)) if self.authenticate_frames => Some(Protect::Authenticate),
            (false, _) => None,
        }
    }

    /// Defaults for everything but the addresses: a QUIC mesh.
    pub fn new(rank: u32, world: u32, peers: Vec<SocketAddr>) -> Spec {
        Spec {
            rank,
            world,
            peers,
            alternates: Vec::new(),
            shape: Shape::Mesh,
            backend: Backend::Quic {
                sidecar_threshold: crate::DEFAULT_SIDECAR_THRESHOLD,
            },
            token: None,
            timeout: crate::DEFAULT_TIMEOUT,
            liveness: crate::DEFAULT_LIVENESS,
            max_message_bytes: crate::DEFAULT_MAX_MESSAGE_BYTES,
            send_budget_bytes: 64 << 20,
            peer_budget_bytes: crate::DEFAULT_PEER_BUDGET,
            lane_depth: crate::LANE_DEPTH,
            protocol_version: crate::PROTOCOL_VERSION,
            seal: false,
            authenticate_frames: true,
            bind: None,
            identity: None,
            sockets: None,
            shared_memory: true,
            shm_single_copy: crate::DEFAULT_SHM_SINGLE_COPY,
            heap_bytes: 0,
            fleet: None,
        }
    }

    /// The same, on plain TCP.
    pub fn tcp(rank: u32, world: u32, peers: Vec<SocketAddr>) -> Spec {
        Spec {
            backend: Backend::Tcp,
            ..Spec::new(rank, world, peers)
        }
    }

    /// Whether the ranks form a star.
    pub fn star(&self) -> bool {
        self.shape == Shape::Star
    }

    /// What the link core needs of it.
    pub(crate) fn core_config(&self) -> CoreConfig {
        // Ranks on this host (same address as ours), against its cores.
        let me = self.peers.get(self.rank as usize).map(|a| a.ip());
        CoreConfig {
            rank: self.rank,
            world: self.world,
            shape: self.shape,
            timeout: self.timeout,
            liveness: self.liveness,
            max_message_bytes: self.max_message_bytes,
            peer_budget_bytes: self.peer_budget_bytes,
            lane_depth: self.lane_depth,
            ranks_here: self.peers.iter().filter(|a| Some(a.ip()) == me).count(),
        }
    }

    /// Every address of `rank`, its entry of `peers` first, or why there
    /// is none.
    pub(crate) fn addrs_of(&self, rank: u32) -> Result<Vec<SocketAddr>, FormationError> {
        let first = self.addr_of(rank)?;
        let others = self.alternates.get(rank as usize).into_iter().flatten();
        Ok(std::iter::once(first).chain(others.copied()).collect())
    }

    /// The address of `rank`, or why there is none.
    pub(crate) fn addr_of(&self, rank: u32) -> Result<SocketAddr, FormationError> {
        self.peers
            .get(rank as usize)
            .copied()
            .ok_or_else(|| FormationError::ConnectionFailed {
                rank,
                reason: format!("no address for rank {rank} ({} given)", self.peers.len()),
            })
    }
}
