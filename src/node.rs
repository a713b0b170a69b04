//! `Node`: the builder that forms a networked group, and every way it
//! finds the peers — each in its own file here:
//!
//! | file | peers found by |
//! |---|---|
//! | `from_env.rs` | the environment (the table in `src/env.rs`: `RANK`, `PEERS`, …, with Open MPI's, Slurm's and torchrun's names as aliases) |
//! | `discovery/` | UDP broadcast on the LAN, or a unicast query to a coordinator (through NAT) |
//! | `mdns.rs` | mDNS (`_meshwork._udp.local.`) |
//! | `iface.rs` | which interface and address to announce (`IFNAME`) |
//! | `seed.rs` | a seed that hands out ranks and certificates (its wire and server: `meshwork_transport::seed`) |
//! | `slurm.rs`, `kubernetes.rs` | the job's own description of its hosts: each a launcher (`from_env.rs`) that says whether it applies here and yields the seed, and the rank and world where the table does not |
//! | `elastic.rs` | processes joining a running job through its seed |
//! | `sockets.rs`, `translate.rs` | listening sockets bound before formation (`meshrun`'s); formation failures in the facade's words |
//!
//! Whichever way, one rule says when a `CLUSTER_TOKEN` is needed: [`token_rule`].

use crate::env::lookup;
use crate::error::{Error, Result};
use crate::group::{ProcessGroup, Quorum, Recovery, DEFAULT_TIMEOUT};
use meshwork_collectives::{Algorithm, Collective, Topology};
use meshwork_transport::mem::MemHub;
use meshwork_transport::Transport;
use meshwork_transport::{Backend, Spec, DEFAULT_SIDECAR_THRESHOLD, PROTOCOL_VERSION};
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

pub(crate) mod discovery;
mod elastic;
mod from_env;
mod iface;
mod kubernetes;
#[cfg(feature = "mdns")]
mod mdns;
mod seed;
mod slurm;
mod sockets;
mod translate;

use crate::shape::{shape_of, sparse_cannot};
use translate::from_formation;

pub(crate) use elastic::Elastic;

pub use seed::serve_seed;
pub use sockets::bind_rank_sockets;

/// Which wire carries the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum TransportKind {
    /// One TCP connection per linked pair (`TRANSPORT=tcp`).
    Tcp,
    /// One QUIC connection per linked pair, mutual TLS from the cluster
    /// CA, and a TCP sidecar for payloads from the sidecar threshold up
    /// (`TRANSPORT=quic`). The default.
    #[default]
    Quic,
}

/// How a process joins a group: who it is, where its peers are, and how to
/// reach them.
///
/// ```no_run
/// use meshwork::{Node, ReduceOp};
/// let group = Node::new(0, 2)
///     .peers(["127.0.0.1:29500", "127.0.0.1:29501"])?
///     .connect()?;
/// let mut x = [1.0f32; 3];
/// group.all_reduce(&mut x, ReduceOp::Sum)?;
/// # Ok::<(), meshwork::Error>(())
/// ```
#[derive(Clone)]
pub struct Node {
    rank: u32,
    world: u32,
    peers: Vec<SocketAddr>,
    /// Each peer's other addresses (its name resolved to several), in
    /// rank order: dialled too, in turn (`Spec::alternates`).
    peers_also: Vec<Vec<SocketAddr>>,
    topology: Topology,
    transport: TransportKind,
    timeout: Duration,
    liveness: Duration,
    token: Option<String>,
    max_message_bytes: u64,
    peer_budget_bytes: u64,
    lane_depth: u32,
    sidecar_threshold: usize,
    encrypt_bulk: bool,
    frame_auth: bool,
    shared_memory: bool,
    shm_single_copy: usize,
    recovery: Recovery,
    quorum: Quorum,
    /// Seed bootstrap: the seed's address; whether the seed picks the rank.
    seed: Option<SocketAddr>,
    /// The seed's other addresses (its name resolved to several).
    seed_also: Vec<SocketAddr>,
    join_any: bool,
    advertise: Option<SocketAddr>,
    /// `IFNAME`: the interface to announce and advertise.
    interface: Option<String>,
    algorithms: Vec<(Collective, Algorithm)>,
    /// Discovery ports (discovery port, data port base), if discovering.
    discover: Option<(u16, u16)>,
    discover_host: Option<String>,
    /// Sockets bound beforehand for this rank's own address.
    listen: Option<meshwork_transport::BoundSockets>,
    /// `join_running`: a new process for a running elastic job.
    running: bool,
    /// The symmetric heap's size in bytes (0: none).
    heap_bytes: usize,
    /// A fleet: how long a worker dials an away coordinator again.
    fleet: Option<Duration>,
    /// A growth: the member's heap, kept by the grown group.
    keep_heap: Option<Arc<crate::group::Heap>>,
    /// A member's growth of the job: how many new processes it admits.
    grow: u32,
    /// What `join_running` could not read from the environment, for
    /// `connect` to report.
    deferred: Option<String>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("peers", &self.peers)
            .field("topology", &self.topology)
            .field("transport", &self.transport)
            .field("timeout", &self.timeout)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("seed", &self.seed)
            .finish()
    }
}

pub use meshwork_transport::DEFAULT_MAX_MESSAGE_BYTES;

impl Node {
    /// Rank `rank` of a group of `world`.
    pub fn new(rank: u32, world: u32) -> Node {
        Node {
            rank,
            world,
            peers: Vec::new(),
            peers_also: Vec::new(),
            topology: Topology::Mesh,
            transport: TransportKind::Quic,
            timeout: DEFAULT_TIMEOUT,
            liveness: meshwork_transport::DEFAULT_LIVENESS,
            token: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            peer_budget_bytes: meshwork_transport::DEFAULT_PEER_BUDGET,
            lane_depth: meshwork_transport::LANE_DEPTH,
            sidecar_threshold: DEFAULT_SIDECAR_THRESHOLD,
            encrypt_bulk: false,
            frame_auth: true,
            shared_memory: true,
            shm_single_copy: meshwork_transport::DEFAULT_SHM_SINGLE_COPY,
            recovery: Recovery::Manual,
            quorum: Quorum::Majority,
            seed: None,
            seed_also: Vec::new(),
            join_any: false,
            advertise: None,
            interface: None,
            algorithms: Vec::new(),
            discover: None,
            discover_host: None,
            listen: None,
            running: false,
            heap_bytes: 0,
            fleet: None,
            keep_heap: None,
            grow: 0,
            deferred: None,
        }
    }

    /// A new process for a running job (`SEED` and `CLUSTER_TOKEN`, and
    /// the rest of the environment as `from_env` reads it but `RANK` and
    /// `WORLD`): `connect` waits, within the deadline, until the job's
    /// members call [`ProcessGroup::grow`], and returns the grown group,
    /// in which this process has one of the new ranks (after the old
    /// ones, in arrival order). The job's seed must still serve it: a
    /// seed hosted by rank 0 does for as long as rank 0's group lives;
    /// `meshrun seed --elastic` until it is stopped.
    pub fn join_running() -> Node {
        let mut node = Node::from_env().unwrap_or_else(|e| {
            let mut n = Node::new(0, 0);
            n.deferred = Some(e.to_string());
            n
        });
        node.rank = 0;
        node.world = 0;
        node.join_any = true;
        node.running = true;
        node
    }

    /// A rank of a group of `world` whose rank the seed assigns (the
    /// lowest free one, in arrival order); needs `seed`.
    pub fn join(world: u32) -> Node {
        let mut n = Node::new(0, world);
        n.join_any = true;
        n
    }

    /// Peer addresses in rank order, self included (mesh); a star worker may
    /// give only the coordinator's. A name that resolves to several
    /// addresses is dialled at each in turn, until one completes the
    /// handshake.
    pub fn peers(mut self, addrs: impl IntoIterator<Item = impl ToSocketAddrs>) -> Result<Node> {
        (self.peers, self.peers_also) = addrs
            .into_iter()
            .enumerate()
            .map(|(i, a)| {
                let mut all = a
                    .to_socket_addrs()
                    .map_err(|e| Error::InvalidArgument(format!("peer address {i}: {e}")))?;
                let first = all.next().ok_or_else(|| {
                    Error::InvalidArgument(format!("peer address {i} resolves to nothing"))
                })?;
                Ok((first, all.collect()))
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        Ok(self)
    }

    /// Find the peers instead of listing them (`DISCOVER=1`, `DISC_PORT`,
    /// `DATA_PORT`): in a mesh by UDP broadcast on `disc_port` (every rank
    /// then listens on `data_base + rank`); in a star, rank 0 answers
    /// queries on `disc_port` and workers ask the host given to
    /// [`Node::discover_via`]. Needs a cluster token: announcements are
    /// authenticated with it and tied to this job. They are also stamped
    /// with the sender's clock and refused more than 30 s off, so the
    /// hosts' clocks must agree that well (NTP).
    pub fn discover(mut self, disc_port: u16, data_base: u16) -> Node {
        self.discover = Some((disc_port, data_base));
        self
    }

    /// Star discovery through `host` (`DISCOVER_HOST`): the coordinator's
    /// host, reachable from this worker (through NAT, from a container).
    /// Implies [`Node::discover`] with the default ports if not set.
    pub fn discover_via(mut self, host: impl Into<String>) -> Node {
        self.discover_host = Some(host.into());
        self.discover.get_or_insert((29600, 29500));
        self
    }

    /// Mesh (every pair linked; the default), star (workers dial rank 0),
    /// or a sparse shape whose ranks relay for each other
    /// ([`Topology::KRegular`], [`Topology::Hypercube`]; checked at
    /// `connect`: `InvalidArgument` for a shape the world cannot take).
    pub fn topology(mut self, topology: Topology) -> Node {
        self.topology = topology;
        self
    }

    /// The wire to use.
    pub fn transport(mut self, kind: TransportKind) -> Node {
        self.transport = kind;
        self
    }

    /// Deadline of formation and of every blocking call of the group
    /// (`TIMEOUT_S`): a call fails when its peers make no progress this long.
    pub fn timeout(mut self, timeout: Duration) -> Node {
        self.timeout = timeout;
        self
    }

    /// How long a member may send nothing, not even a heartbeat, before
    /// every rank linked to it counts it failed (`LIVENESS_S`; default
    /// 1 s, at most the deadline). Heartbeats come from the I/O threads
    /// (a same-host member's process state is read instead), so a member
    /// busy in its own code for minutes is never suspected; a frozen
    /// process, a cut link or a dead host is, after this long. The price
    /// of a short one: a link that delivers nothing for that long (a
    /// host swapping hard, a network dropping every packet for a second)
    /// has its member counted failed, and under `RECOVERY=shrink`
    /// expelled. Give every rank the same; a peer's longer setting is
    /// waited for (its heartbeats carry it).
    pub fn liveness(mut self, liveness: Duration) -> Node {
        self.liveness = liveness;
        self
    }

    /// Make the star a fleet whose workers come and go
    /// (`FLEET_AWAY_S=<seconds>`; needs `TOPOLOGY=star` and
    /// `TRANSPORT=tcp`, refused at `connect` otherwise). A worker whose
    /// link ends is *away*, not failed: nothing is revoked and no other
    /// rank is told; it may come back at any time — the same process
    /// after its link dropped or NAT gave it a new address, or a new
    /// process with its rank — by proving its identity (the token, or
    /// its certificate from the seed) as at formation, and its new link
    /// replaces the old. A worker whose coordinator is away dials it
    /// again with backoff for up to `away` (logging how long it has been
    /// away), then gives up: calls naming rank 0 fail. A coordinator
    /// goes on at its deadline with the workers present; the others join
    /// when they come. Made for federated rounds
    /// ([`ProcessGroup::round_coordinator`](crate::ProcessGroup::round_coordinator)),
    /// which offer each round to the workers present: collectives still
    /// need every rank, and fail naming those away. Links are TCP only
    /// (no shared memory), so a worker on the coordinator's host can
    /// come back too. Whoever proves a rank takes its place, the newest
    /// link winning: with a token only, any holder can take a live
    /// worker's rank; with the seed's certificates, only that rank's
    /// holder can.
    pub fn fleet(mut self, away: Duration) -> Node {
        self.fleet = Some(away);
        self
    }

    /// The shared secret every rank must hold (`CLUSTER_TOKEN`); required
    /// when any address is not loopback. It never crosses the wire.
    pub fn cluster_token(mut self, secret: impl Into<String>) -> Node {
        self.token = Some(secret.into());
        self
    }

    /// Largest message sent or accepted (`MAX_MESSAGE_BYTES`, default
    /// 16 GiB); longer ones fail with `MessageTooLarge` before anything is
    /// allocated.
    pub fn max_message_bytes(mut self, max: u64) -> Node {
        self.max_message_bytes = max;
        self
    }

    /// Point-to-point and RPC bytes this rank may have queued at one
    /// receiver before `send` waits for it to take them
    /// (`PEER_BUDGET_BYTES`, default 64 MiB); a single larger message is
    /// still sent when nothing is queued.
    pub fn peer_budget_bytes(mut self, bytes: u64) -> Node {
        self.peer_budget_bytes = bytes;
        self
    }

    /// Messages this rank may have queued on one tag (lane) of one
    /// receiver before `send` waits (`LANE_DEPTH`, default 256, at least 1).
    pub fn lane_depth(mut self, depth: u32) -> Node {
        self.lane_depth = depth.max(1);
        self
    }

    /// QUIC transport: payloads of at least `bytes` go over the TCP
    /// sidecar rather than QUIC (`SIDECAR_THRESHOLD`, default 4 KiB, at
    /// least 2 KiB;
    /// every rank must give the same, or formation fails saying so).
    pub fn sidecar_threshold(mut self, bytes: usize) -> Node {
        self.sidecar_threshold = bytes;
        self
    }

    /// Shared memory: copy messages of at least `bytes` once, straight
    /// from the sender's memory (`process_vm_readv`) where the kernel
    /// allows it, not through the ring (`SHM_SINGLE_COPY`; 0, the
    /// default: never, as the rings were faster where measured).
    pub fn shm_single_copy(mut self, bytes: usize) -> Node {
        self.shm_single_copy = bytes;
        self
    }

    /// Encrypt the payloads that travel over TCP — QUIC's sidecar, or
    /// every payload of the TCP transport — with AES-256-GCM under
    /// per-link keys from the token handshake (`ENCRYPT_BULK=1`; needs a
    /// cluster token; every rank must agree, or formation fails saying
    /// so). QUIC itself is always encrypted (TLS 1.3).
    pub fn encrypt_bulk(mut self, on: bool) -> Node {
        self.encrypt_bulk = on;
        self
    }

    /// Authenticate every frame that travels over TCP (the default with a
    /// token; `FRAME_AUTH=0` turns it off). Off, an attacker on the path
    /// can alter or inject what travels over TCP — QUIC's sidecar payloads
    /// from 4 KiB, or everything on the TCP transport — unnoticed: only
    /// for a fabric nobody else can touch, and logged as a warning. Every
    /// rank must agree, or formation fails saying so. `encrypt_bulk`
    /// authenticates whatever this says.
    pub fn frame_authentication(mut self, on: bool) -> Node {
        self.frame_auth = on;
        self
    }

    /// Give every rank a symmetric heap of `bytes` (`HEAP_MB`; 0, the
    /// default: none) for one-sided operations (`put`, `get`,
    /// `fetch_add`, `compare_swap`). Every rank must give the same size:
    /// `connect` checks it, and a difference is `InvalidArgument` on every
    /// rank.
    pub fn heap_bytes(mut self, bytes: usize) -> Node {
        self.heap_bytes = bytes;
        self
    }

    /// What the group does when a call meets a failed member (`RECOVERY`;
    /// `Manual` by default): see [`Recovery`]. Every rank should use the
    /// same.
    pub fn recovery(mut self, recovery: Recovery) -> Node {
        self.recovery = recovery;
        self
    }

    /// Recovery needs at least `n` members on this rank's side, and
    /// always a strict majority of the group's last agreed membership
    /// (`QUORUM=n`; see [`Quorum`]). An `n` below a majority of the world
    /// is refused at `connect` (`InvalidArgument`): use
    /// [`Node::quorum_unsafe`] if two sides of a partition may both go on.
    pub fn quorum(mut self, n: u32) -> Node {
        self.quorum = Quorum::AtLeast(n);
        self
    }

    /// Recovery needs at least `n` members on this rank's side, even when
    /// that is not a majority (`QUORUM=unsafe:n`): **a partition may
    /// leave two groups that both carry on**, each believing it is the
    /// job. Only for a job that reconciles its halves itself.
    pub fn quorum_unsafe(mut self, n: u32) -> Node {
        self.quorum = Quorum::UnsafeAtLeast(n);
        self
    }

    /// Reach ranks on this host through shared memory (on by default;
    /// `SHM=0` turns it off). "This host" is the same kernel boot, network
    /// namespace and user; other ranks keep the network link. A pair where
    /// either side has it off, where a ring cannot be made (say, its
    /// memory cannot be reserved), or where one cannot open the other's
    /// (ranks in different process-id namespaces) keeps the network link
    /// too (logged); the job never fails for it. Rings and heaps are
    /// sealed memfds, not files in `/dev/shm`: nothing is left behind.
    /// `g.links()` tells which peers use it.
    pub fn shared_memory(mut self, on: bool) -> Node {
        self.shared_memory = on;
        self
    }

    /// Bootstrap through a seed at `addr` (`SEED`, or `MASTER_ADDR` +
    /// `MASTER_PORT`): it assigns ranks (`RankConflict` for a taken one;
    /// `Node::join` takes the lowest free one), hands out the peer table
    /// and TLS identities, and ends formation with a ready barrier. The
    /// process of rank 0 hosts the seed on `addr` (rank 0 is then kept for
    /// it) unless another process (`meshrun seed`) already does; with a
    /// seed of its own, let it assign the ranks (no `RANK`), or give every
    /// process one, since a process without one takes the lowest free
    /// rank. In a star, the seed's host is the coordinator. The joiner
    /// proves the token first and all the seed hands out is sealed under
    /// the token; without a token the seed and the ranks listen on
    /// loopback only, and an address off loopback (`ADVERTISE`, `IFNAME`)
    /// is `TokenRequired`.
    pub fn seed(mut self, addr: SocketAddr) -> Node {
        self.seed = Some(addr);
        self.seed_also.clear();
        self
    }

    /// The data address to announce through the seed, for a rank behind
    /// NAT or in a container (`ADVERTISE`): an unspecified IP becomes the
    /// one the seed sees; port 0, a free port.
    pub fn advertise(mut self, addr: SocketAddr) -> Node {
        self.advertise = Some(addr);
        self
    }

    /// Listen on sockets bound beforehand for this rank's own address: a
    /// TCP listener and, for QUIC, a UDP socket on the same port that
    /// shares it (`SO_REUSEPORT`), as [`bind_rank_sockets`] makes them. A
    /// program that chooses its ranks' ports binds first and hands the
    /// sockets over, so no other program can take a port between the
    /// choice and formation. Sockets not bound to the rank's address are
    /// not used (formation binds as usual). `meshrun` hands its ranks their
    /// sockets through `MESHRUN_SOCKETS` instead.
    pub fn listen_on(
        mut self,
        tcp: std::net::TcpListener,
        udp: Option<std::net::UdpSocket>,
    ) -> Node {
        self.listen = Some(meshwork_transport::BoundSockets::new(tcp, udp));
        self
    }

    /// On a multi-homed host, the interface whose address discovery
    /// announces and a seed is told (`IFNAME`): by name (`eth1`), name
    /// prefix (`enp`) or CIDR (`10.77.0.0/16`); the choice is logged.
    /// Default: the default route's interface.
    pub fn interface(mut self, spec: impl Into<String>) -> Node {
        self.interface = Some(spec.into());
        self
    }

    /// A star worker without `DISCOVER_HOST`: the coordinator's data
    /// address, asking every host mDNS finds (browsing on the chosen
    /// interface).
    #[cfg(feature = "mdns")]
    fn find_by_mdns(
        &self,
        job: &discovery::Job,
        disc_port: u16,
        iface: Option<&iface::Iface>,
        deadline: std::time::Instant,
    ) -> Result<SocketAddr> {
        let on = match iface {
            Some(i) => i.addr,
            None => discovery::lan_address(disc_port)?,
        };
        let found = mdns::find(job, self.rank, on, disc_port, deadline)?;
        Ok(SocketAddr::V4(found))
    }

    #[cfg(not(feature = "mdns"))]
    fn find_by_mdns(
        &self,
        _job: &discovery::Job,
        _disc_port: u16,
        _iface: Option<&iface::Iface>,
        _deadline: std::time::Instant,
    ) -> Result<SocketAddr> {
        Err(Error::InvalidArgument(
            "star discovery needs the coordinator's host (DISCOVER_HOST or Node::discover_via); mDNS is off in this build (cargo feature `mdns`)".into(),
        ))
    }

    /// The chosen interface, if `IFNAME` / `interface` asks for one.
    fn chosen_interface(&self) -> Result<Option<iface::Iface>> {
        let Some(spec) = &self.interface else {
            return Ok(None);
        };
        let i = iface::select(spec)?;
        tracing::info!(interface = %i.name, address = %i.addr, "interface chosen by IFNAME {spec:?}");
        Ok(Some(i))
    }

    /// Form the group: every rank calls `connect` and it returns once all
    /// links are up (or fails with a typed error naming what went wrong).
    pub fn connect(self) -> Result<Arc<ProcessGroup>> {
        if let Some(e) = &self.deferred {
            return Err(Error::InvalidArgument(e.clone()));
        }
        if let Some(t) = &self.token {
            check_token(t)?;
        }
        if let Some(seed) = self.seed {
            return self.connect_via_seed(seed);
        }
        if self.running {
            return Err(Error::InvalidArgument(
                "Node::join_running needs the running job's seed (Node::seed or SEED)".into(),
            ));
        }
        if self.join_any {
            return Err(Error::InvalidArgument(
                "Node::join needs a seed (Node::seed or SEED) to assign the rank".into(),
            ));
        }
        let (rank, world) = (self.rank, self.world);
        if world == 0 || rank >= world {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} is not in a world of {world}"
            )));
        }
        self.quorum.check(world).map_err(Error::InvalidArgument)?;
        if world > 1 {
            let shape = shape_of(self.topology);
            shape
                .check(world)
                .map_err(|e| Error::InvalidArgument(format!("TOPOLOGY: {e}")))?;
            if crate::shape::fixed_routes(shape) && self.recovery == Recovery::Shrink {
                return Err(Error::InvalidArgument(sparse_cannot("RECOVERY=shrink")));
            }
            if matches!(shape, meshwork_transport::Shape::Tree { .. })
                && self.recovery == Recovery::Shrink
                && self.transport == TransportKind::Quic
            {
                return Err(Error::InvalidArgument(
                    "RECOVERY=shrink on a tree needs TRANSPORT=tcp: a failed interior rank's children re-attach to its nearest live ancestor over TCP only".into(),
                ));
            }
        }
        let mut node = self;
        if let (Some((disc_port, data_base)), true) = (node.discover, world > 1) {
            node.peers = node.discovered_peers(disc_port, data_base)?;
            node.peers_also.clear();
        }
        let transport: Arc<dyn Transport> = if world == 1 {
            Arc::new(MemHub::world(1).remove(0))
        } else {
            let used: &[SocketAddr] = match node.topology {
                Topology::Star => node.peers.get(..1).ok_or_else(|| {
                    Error::InvalidArgument(
                        "PEERS is empty; a star needs at least the coordinator's address".into(),
                    )
                })?,
                topology => {
                    if node.peers.len() != world as usize {
                        return Err(Error::InvalidArgument(format!(
                            "PEERS has {} addresses; a {} of {world} needs one per rank",
                            node.peers.len(),
                            shape_of(topology).name()
                        )));
                    }
                    &node.peers
                }
            };
            let mut addrs = used.iter().chain(node.peers_also.iter().flatten());
            let off_host = addrs.any(|a| !a.ip().is_loopback());
            token_rule(node.token.as_deref(), off_host, node.encrypt_bulk)?;
            // A rank known by several addresses listens on all of them
            // (a token is needed off loopback).
            let several = node
                .peers_also
                .get(rank as usize)
                .is_some_and(|a| !a.is_empty());
            let bind = (several && node.token.is_some()).then(|| {
                let mine = node.peers[rank as usize];
                SocketAddr::new(unspecified_like(mine), mine.port())
            });
            let also = node.peers_also.clone();
            node.form(rank, node.peers.clone(), also, bind, None, None)?
        };
        node.group(rank, transport)
    }

    /// The links of rank `rank` to `peers` (and their `alternates`,
    /// `Spec::alternates`), listening on `bind` if given, on the chosen
    /// transport.
    fn form(
        &self,
        rank: u32,
        peers: Vec<SocketAddr>,
        alternates: Vec<Vec<SocketAddr>>,
        bind: Option<SocketAddr>,
        identity: Option<meshwork_transport::RankIdentity>,
        held: Option<meshwork_transport::BoundSockets>,
    ) -> Result<Arc<dyn Transport>> {
        if self.fleet.is_some()
            && (self.topology != Topology::Star || self.transport != TransportKind::Tcp)
        {
            return Err(Error::InvalidArgument(format!(
                "FLEET_AWAY_S: a fleet is a star over TCP (TOPOLOGY=star, TRANSPORT=tcp); this is a {} over {:?}",
                shape_of(self.topology).name(),
                self.transport
            )));
        }
        let mut spec = Spec::new(rank, self.world, peers);
        spec.fleet = self.fleet;
        spec.alternates = alternates;
        spec.shape = shape_of(self.topology);
        spec.backend = match self.transport {
            TransportKind::Tcp => Backend::Tcp,
            TransportKind::Quic => Backend::Quic {
                sidecar_threshold: self.sidecar_threshold,
            },
        };
        spec.token = self.token.clone();
        spec.timeout = self.timeout;
        spec.liveness = self.liveness;
        spec.max_message_bytes = self.max_message_bytes;
        spec.peer_budget_bytes = self.peer_budget_bytes;
        spec.lane_depth = self.lane_depth;
        spec.heap_bytes = self.heap_bytes as u64;
        spec.seal = self.encrypt_bulk;
        spec.authenticate_frames = self.frame_auth;
        spec.shared_memory = self.shared_memory;
        spec.shm_single_copy = self.shm_single_copy;
        if !self.frame_auth && !self.encrypt_bulk && self.token.is_some() {
            tracing::warn!(
                "FRAME_AUTH=0: frames over TCP are not authenticated; an attacker on the path can alter them"
            );
        }
        spec.bind = bind;
        spec.identity = identity;
        // Sockets held for this rank: the seed path's, else those handed
        // to `listen_on`, else — however the node was built — a launcher's
        // (this process's to listen on, taken by the first formation).
        spec.sockets = held
            .or_else(|| self.listen.clone())
            .or_else(sockets::from_launcher);
        Ok(Arc::new(
            meshwork_transport::connect(&spec).map_err(from_formation)?,
        ))
    }

    fn group(&self, rank: u32, transport: Arc<dyn Transport>) -> Result<Arc<ProcessGroup>> {
        self.quorum
            .check(self.world)
            .map_err(Error::InvalidArgument)?;
        tracing::info!(rank, world = self.world, topology = ?self.topology, transport = ?self.transport, "group formed");
        let group = ProcessGroup::new(transport, 0, self.timeout, self.topology);
        group.set_recovery(self.recovery);
        group.inner().set_quorum(self.quorum);
        for (coll, algo) in &self.algorithms {
            group.set_algorithm(coll.name(), Some(algo.name()))?;
        }
        group.make_heap(self.heap_bytes, self.keep_heap.as_ref())?;
        Ok(Arc::new(group))
    }
}

impl Node {
    /// Run discovery: every rank's data address, in rank order (a star
    /// worker learns only the coordinator's).
    fn discovered_peers(&self, disc_port: u16, data_base: u16) -> Result<Vec<SocketAddr>> {
        // Discovery is on the LAN, and its job is named by the token.
        token_rule(self.token.as_deref(), true, self.encrypt_bulk)?;
        let token = self.token.as_deref().ok_or(Error::TokenRequired)?;
        let job = discovery::Job::new(token, self.world, disc_port, data_base);
        let deadline = std::time::Instant::now() + self.timeout;
        let iface = self.chosen_interface()?;
        match (self.topology, self.rank) {
            (
                Topology::Mesh
                | Topology::KRegular { .. }
                | Topology::Hypercube
                | Topology::Tree { .. },
                _,
            ) => discovery::broadcast(
                &job,
                self.rank,
                disc_port,
                data_base,
                deadline,
                iface.as_ref(),
            ),
            (Topology::Star, 0) => {
                let me = discovery::coordinator_address(disc_port, data_base, iface.as_ref())?;
                tracing::info!(%me, disc_port, "answering discovery queries");
                #[cfg(feature = "mdns")]
                let keep = match mdns::publish(job.id(), *me.ip(), disc_port) {
                    Ok(a) => Some(a),
                    Err(e) => {
                        tracing::warn!("not published by mDNS: {e}; workers need DISCOVER_HOST");
                        None
                    }
                };
                #[cfg(not(feature = "mdns"))]
                let keep = ();
                discovery::answer_queries(job, disc_port, me, deadline + discovery::LINGER, keep)?;
                Ok(vec![SocketAddr::V4(me)])
            }
            (Topology::Star, rank) => Ok(vec![match &self.discover_host {
                Some(host) => discovery::query(&job, rank, host, disc_port, deadline)?,
                None => self.find_by_mdns(&job, disc_port, iface.as_ref(), deadline)?,
            }]),
        }
    }
}

/// The wire protocol version this build speaks.
pub const WIRE_PROTOCOL_VERSION: u32 = PROTOCOL_VERSION;

/// Why a `host:port` gave no address to dial.
#[derive(Debug, thiserror::Error)]
enum Unresolved {
    #[error("{hostport}: {source}")]
    Lookup {
        hostport: String,
        source: std::io::Error,
    },
    #[error("{0} resolves to nothing")]
    Nothing(String),
}

/// Every address `hostport` resolves to: the first, and the others (a
/// host known by several, each dialled in turn).
fn resolve(hostport: &str) -> std::result::Result<(SocketAddr, Vec<SocketAddr>), Unresolved> {
    let mut all = hostport
        .to_socket_addrs()
        .map_err(|source| Unresolved::Lookup {
            hostport: hostport.to_string(),
            source,
        })?;
    let first = all
        .next()
        .ok_or_else(|| Unresolved::Nothing(hostport.to_string()))?;
    let mut also: Vec<SocketAddr> = all.filter(|a| *a != first).collect();
    also.dedup();
    Ok((first, also))
}

/// The unspecified address of `addr`'s family.
fn unspecified_like(addr: SocketAddr) -> std::net::IpAddr {
    match addr {
        SocketAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    }
}

/// The token rule, written once for every way of forming: a group needs
/// a `CLUSTER_TOKEN` when its traffic can leave this host (`off_host`:
/// an address that is not loopback, a job on several hosts, discovery on
/// the LAN) or its bulk is to be encrypted (keys derived from no secret
/// would encrypt for nobody); a token given must be long enough
/// ([`check_token`]). On loopback alone a group may go without one,
/// unauthenticated.
pub(crate) fn token_rule(token: Option<&str>, off_host: bool, encrypt_bulk: bool) -> Result<()> {
    match token {
        Some(t) => check_token(t),
        None if off_host || encrypt_bulk => Err(Error::TokenRequired),
        None => {
            tracing::warn!(
                "no CLUSTER_TOKEN: the group is unauthenticated (allowed on loopback only)"
            );
            Ok(())
        }
    }
}

/// Refuse a cluster token too short to resist guessing.
fn check_token(token: &str) -> Result<()> {
    meshwork_transport::kdf::check_token(token).map_err(|e| match e {
        meshwork_transport::kdf::TokenError::TooShort { len } => Error::TokenTooShort { len },
        e => Error::InvalidArgument(e.to_string()),
    })
}
