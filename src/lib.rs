//! meshwork: tagged messages, collectives and RPC between processes and
//! machines, with no `mpirun` and no MPI library. Every call is
//! **synchronous**: it blocks the calling thread and returns a
//! [`Result`]; plain Rust programs and non-async model runners call it
//! directly.
//!
//! # Quick start
//!
//! A group of ranks is a [`ProcessGroup`] per rank. Across processes and
//! machines it comes from the [`Node`] builder — `Node::from_env()?.connect()?`
//! in a program started by `meshrun -n 4 -- ./prog`, or
//! `Node::new(rank, world).peers([...])?.connect()?` — over QUIC with
//! mutual TLS and a TCP sidecar for large payloads (the default) or plain
//! TCP ([`TransportKind`]), in a mesh or (for workers behind NAT) a star;
//! ranks on one host talk through shared memory ([`Node::shared_memory`]).
//! [`local()`] makes a whole world inside one process (each rank on its own
//! thread), which is how the examples below run.
//!
//! ```
//! use meshwork::{local, ReduceOp};
//! use std::thread;
//!
//! let world = local(4)?;
//! let results: Vec<Vec<f32>> = thread::scope(|s| {
//!     let handles: Vec<_> = world
//!         .iter()
//!         .map(|g| s.spawn(move || {
//!             let mut grads = vec![g.rank() as f32; 1 << 10];
//!             g.all_reduce(&mut grads, ReduceOp::Sum)?;
//!             g.barrier()?;
//!             Ok::<_, meshwork::Error>(grads)
//!         }))
//!         .collect();
//!     handles.into_iter().map(|h| h.join().unwrap()).collect::<Result<_, _>>()
//! })?;
//! assert!(results.iter().all(|g| g.iter().all(|&x| x == 6.0)));
//! # Ok::<(), meshwork::Error>(())
//! ```
//!
//! # Collectives
//!
//! Eleven, on every [`Element`] type (`f32, f64, f16, bf16, i8, i16, i32,
//! i64, u8, u16, u32, u64`): `all_reduce, broadcast, all_gather, reduce_scatter,
//! reduce, all_to_all, gather, scatter, scan, exclusive_scan, barrier`, each
//! also non-blocking (`*_nb`), taking owned buffers and returning a
//! [`Work`]:
//!
//! ```
//! # use meshwork::{local, ReduceOp};
//! # let world = local(3)?;
//! std::thread::scope(|s| {
//!     for g in &world {
//!         s.spawn(move || {
//!             // Two operations in flight at once; wait in any order.
//!             let a = g.all_reduce_nb(vec![1i64; 5], ReduceOp::Sum);
//!             let b = g.all_gather_nb(vec![g.rank()]);
//!             assert_eq!(b.wait().unwrap(), [0, 1, 2]);
//!             assert_eq!(a.wait().unwrap(), [3; 5]);
//!         });
//!     }
//! });
//! # Ok::<(), meshwork::Error>(())
//! ```
//!
//! Every rank must issue a group's collectives in the same order with
//! matching arguments. Each call carries a descriptor (collective, type,
//! count, operator, root, algorithm); a rank that disagrees gets
//! [`Error::CollectiveMismatch`], never garbage. Arguments are checked once,
//! before any message moves: a wrong length or a root out of range is
//! [`Error::InvalidArgument`] on the calling rank, and the group stays
//! usable. [`ReduceOp::Avg`] is for float types only.
//!
//! Each named method is a line over one entry: a [`Call`] (the
//! collective and its arguments) run on [`Buffers`] by
//! [`ProcessGroup::call`] ([`ProcessGroup::call_nb`] on [`OwnedBuffers`];
//! [`ProcessGroup::call_bytes`] on raw bytes of a [`DType`]). The C ABI,
//! the Python package and `cuda::DeviceGroup` go through it too.
//!
//! Float all_reduce results are bitwise identical on every rank: every
//! algorithm reduces each element in one fixed order. Algorithms are chosen
//! by (collective, world size, bytes) — see `meshwork_collectives` for the
//! index and cost of each — and can be forced by name with
//! [`ProcessGroup::set_algorithm`].
//!
//! # Deadlines and failures
//!
//! Nothing waits forever. Every blocking call fails with
//! [`Error::Timeout`] naming the operation and the ranks it waited on when
//! they make no progress for the group's deadline (60 s by default,
//! [`ProcessGroup::set_timeout`]); a rank that is gone is
//! [`Error::PeerDisconnected`] at once, and one frozen or cut off is named
//! within the liveness limit ([`Node::liveness`], 1 s by default: the I/O
//! threads' heartbeats stop, a busy rank's do not).
//!
//! ```
//! # use meshwork::{local, Error};
//! # use std::time::Duration;
//! let mut world = local(2)?;
//! let g0 = world.remove(0);
//! g0.set_timeout(Duration::from_millis(50));
//! // Rank 1 is alive but never joins the barrier.
//! match g0.barrier() {
//!     Err(Error::Timeout { op, waiting_on, detail }) => {
//!         assert_eq!((op.as_str(), waiting_on), ("barrier", vec![1]));
//!         // Asked, rank 1 said it never entered the barrier.
//!         assert!(detail.starts_with(": rank 1 has not entered barrier #0"), "{detail}");
//!     }
//!     other => panic!("{other:?}"),
//! }
//! drop(world); // rank 1 leaves: now it is a disconnect, reported at once
//! assert!(matches!(g0.barrier(), Err(Error::PeerDisconnected { rank: 1 })));
//! # Ok::<(), meshwork::Error>(())
//! ```
//!
//! # Point-to-point
//!
//! Tagged messages on their own lanes, FIFO per sender and tag:
//!
//! ```
//! # let world = meshwork::local(2)?;
//! std::thread::scope(|s| {
//!     s.spawn(|| world[0].send(&[1.5f64, 2.5], 1, 7).unwrap());
//!     s.spawn(|| {
//!         let mut got = [0f64; 2];
//!         world[1].recv(&mut got, 0, 7).unwrap();
//!         assert_eq!(got, [1.5, 2.5]);
//!     });
//! });
//! # Ok::<(), meshwork::Error>(())
//! ```
//!
//! A group can survive a failed member: every survivor names the same
//! failed rank ([`ProcessGroup::failed`]); [`ProcessGroup::revoke`],
//! [`ProcessGroup::agree`] and [`ProcessGroup::shrink`] let the survivors
//! go on without it, or [`Recovery::Shrink`] (`RECOVERY=shrink`) does it
//! in place and the failing call returns [`Error::GroupShrunk`] to retry.
//! Recovery goes on only on a side holding a strict majority of the group
//! ([`Quorum`]): a side of a cut network without one fails every call
//! with [`Error::NoQuorum`] instead of going on as a smaller world. A job
//! formed through a seed grows back: the members call
//! [`ProcessGroup::grow`], new processes [`Node::join_running`], and a
//! rank the others went on without [`ProcessGroup::rejoin`].
//!
//! # One-sided operations
//!
//! With a symmetric heap ([`Node::heap_bytes`], `HEAP_MB`), a rank reads
//! and writes another's heap without it calling anything:
//! [`ProcessGroup::put`], [`ProcessGroup::get`],
//! [`ProcessGroup::fetch_add`], [`ProcessGroup::compare_swap`]; its own
//! with [`ProcessGroup::heap_write`], [`ProcessGroup::heap_read`] and
//! [`ProcessGroup::atomic_load`].
//!
//! # Forming a group across machines
//!
//! [`Node`] finds the other ranks in one of these ways:
//!
//! - static addresses: [`Node::peers`] (`PEERS`), every rank's in rank
//!   order, or only the coordinator's for a star worker;
//! - a seed: [`Node::seed`] (`SEED`), the one address everyone knows. It
//!   hands out ranks ([`Node::join`] asks for the lowest free one), the peer
//!   table and TLS identities from its own CA. Rank 0 hosts it (and it
//!   serves the job's growths while rank 0's group lives), or
//!   [`serve_seed`] (`meshrun seed`) runs it as a process of its own;
//! - discovery on a LAN: [`Node::discover`] (`DISCOVER=1`) by UDP
//!   broadcast for a mesh; [`Node::discover_via`] (`DISCOVER_HOST`), a
//!   unicast query to the coordinator's host, for star workers behind NAT
//!   or in containers; mDNS (`_meshwork._udp.local.`, the `mdns` feature,
//!   on by default) for a star when no host is given.
//!
//! A cluster token ([`Node::cluster_token`], `CLUSTER_TOKEN`, at least
//! [`MIN_TOKEN_BYTES`] bytes; [`random_token`] or `meshrun token` makes
//! one) is required as soon as any address is not loopback; it never
//! crosses the wire. Handshakes prove it both ways before either side says
//! anything about the job; a rank with another world size or settings fails
//! at once with a typed error, one with another token or protocol version
//! at the formation deadline (a stranger could claim either, so neither
//! stops formation on its own). With a token every frame is authenticated;
//! see `docs/security.md`.
//!
//! ```no_run
//! use meshwork::Node;
//! # let on_the_seed_host = true;
//! // Rank 0 runs on 10.0.0.1 and hosts the seed there; every other
//! // process joins without a rank and is handed one.
//! let seed = "10.0.0.1:29400".parse().unwrap();
//! let node = if on_the_seed_host { Node::new(0, 4) } else { Node::join(4) };
//! let group = node
//!     .seed(seed)
//!     .cluster_token("a secret of at least sixteen bytes")
//!     .connect()?;
//! group.barrier()?;
//! # Ok::<(), meshwork::Error>(())
//! ```
//!
//! # Environment
//!
//! `Node::from_env` reads `RANK`, `WORLD`, `PEERS`, `TOPOLOGY`,
//! `CLUSTER_TOKEN`, `TIMEOUT_S`, … — the one table is [`env::VARS`]; a
//! malformed variable is an error naming it.
//!
//! # RPC, sub-groups, averaging, traffic
//!
//! ```
//! # let world = meshwork::local(2)?;
//! std::thread::scope(|s| {
//!     for g in &world {
//!         s.spawn(move || {
//!             g.register_rpc(1, |caller, args| [args, &[caller as u8]].concat());
//!             g.barrier().unwrap();
//!             let peer = 1 - g.rank();
//!             assert_eq!(g.rpc(peer, 1, b"hi").unwrap(), [b'h', b'i', g.rank() as u8]);
//!             // Every rank alone in its own sub-group, with its own sequence.
//!             let solo = g.split(g.rank(), 0).unwrap();
//!             assert_eq!(solo.world_size(), 1);
//!             // Weighted mean, bitwise equal everywhere: (1·1 + 3·2) / 3.
//!             let mut x = [g.rank() as f32 * 2.0 + 1.0];
//!             g.federated_average(&mut x, g.rank() as f32 + 1.0).unwrap();
//!             assert_eq!(x, [7.0 / 3.0]);
//!             assert!(g.stats()[peer as usize].sent_messages > 0);
//!             g.barrier().unwrap();
//!         });
//!     }
//! });
//! # Ok::<(), meshwork::Error>(())
//! ```
//!
//! Point-to-point and RPC senders are held to a byte budget per receiver
//! ([`DEFAULT_PEER_BUDGET`]) and a depth per lane: a fast sender waits (up
//! to the deadline) instead of growing the receiver's memory.
//!
//! # Features
//!
//! - `mdns` (default): star discovery by mDNS when no `DISCOVER_HOST` is
//!   given.
//! - `cuda`: collectives and point-to-point on CUDA device buffers
//!   (`meshwork::cuda`), through NCCL among the GPUs of one host (and,
//!   across hosts, all_reduce in three tiers), else staged through pinned
//!   host memory; the driver and NCCL are loaded at
//!   run time, so it builds without CUDA (docs/gpu.md).
//!
//! # What meshwork does not do (yet)
//!
//! A C ABI is in the workspace's `ffi/` crate (`libmeshwork`,
//! `ffi/include/meshwork.h`), Python bindings in `ffi/python`. Not yet:
//! CUDA IPC between ranks sharing a GPU (they stage through host memory),
//! CUDA tensors in meshwork's own Python calls (the torch backend stages
//! them), RDMA.
//! Not planned: variable-count (`_v`) collectives, wildcard receives.

#![warn(missing_docs)]

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod env;
mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod group;
mod local;
mod node;
mod shape;
/// The staging pipeline of `cuda` (`cuda/staging/`), on its own in test
/// builds without CUDA: it knows nothing of CUDA, so it is tested on host
/// memory everywhere.
#[cfg(all(test, not(feature = "cuda")))]
#[path = "cuda/staging/mod.rs"]
mod staging;
#[cfg(all(feature = "cuda", feature = "test-hooks"))]
#[doc(hidden)]
pub mod testing;

pub use error::{Error, Result};
pub use group::{
    Buffers, Call, CallState, Compressor, FlightEntry, MatchedLane, Offer, OwnedBuffers,
    ProcessGroup, Quorum, Recovery, RoundConfig, RoundCoordinator, RoundOutcome, RoundParticipant,
    RoundReport, Work, DEFAULT_TIMEOUT, FLIGHT_RECORD_LEN, MAX_IN_FLIGHT,
};
pub use local::{local, local_with};
pub use meshwork_collectives::{with_dtype, DType, Element, ReduceOp, Topology};
pub use meshwork_transport::kdf::MIN_TOKEN_BYTES;
pub use meshwork_transport::{
    LinkKind, Payload, PeerStats, DEFAULT_LIVENESS, DEFAULT_PEER_BUDGET, MATCHED_WORD,
};
pub use node::{
    bind_rank_sockets, serve_seed, Node, TransportKind, DEFAULT_MAX_MESSAGE_BYTES,
    WIRE_PROTOCOL_VERSION,
};

/// A fresh random cluster token (32 random bytes as 64 hex characters),
/// what `meshrun token` prints.
pub fn random_token() -> std::io::Result<String> {
    meshwork_transport::kdf::random_token()
}

/// The token's derived key, as `meshrun` hands it to the ranks it starts
/// (`CLUSTER_TOKEN_KEY`): a launcher of its own that starts many ranks on
/// one host derives it once (Argon2id, about 0.1 s and 32 MiB) and sets
/// it beside `CLUSTER_TOKEN`, so that no rank derives it again. A rank
/// takes it only for the token it was made from.
pub fn token_key(token: &str) -> String {
    meshwork_transport::kdf::derived_key(token)
}

/// The older name of [`ReduceOp`].
pub type ReduceKind = ReduceOp;

pub use half;
