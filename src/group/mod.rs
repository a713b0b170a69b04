//! `ProcessGroup`: the handle through which a rank talks to its group.

mod agree;
mod cell;
mod collectives;
mod comm_adapter;
mod compress;
mod flight;
mod heap;
mod links;
#[cfg(any(feature = "cuda", test))]
mod outside;
mod p2p;
mod quorum;
#[cfg(test)]
mod quorum_tests;
mod recovery;
mod round_wire;
mod rounds;
pub(crate) mod rpc;
mod secagg;
mod secure_round;
mod split;
mod tree_round;
mod work;

pub use collectives::{Buffers, Call, OwnedBuffers};
pub use compress::Compressor;
pub use flight::{CallState, FlightEntry, FLIGHT_RECORD_LEN};
#[cfg(feature = "cuda")]
pub(crate) use outside::{pause, Progress};
pub use p2p::MatchedLane;
pub use quorum::Quorum;
pub use recovery::Recovery;
pub use rounds::{
    Offer, RoundConfig, RoundCoordinator, RoundOutcome, RoundParticipant, RoundReport,
};
pub use work::Work;

use crate::error::{Error, Result};
pub(crate) use cell::Cell;
use comm_adapter::{CollComm, Descriptor};
use crossbeam_channel::{Receiver, Sender};
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use heap::answer_to as heap_answer_to;
pub(crate) use heap::Heap;
use meshwork_collectives::{select, Algorithm, Collective, Element, ReduceOp, Topology};
use meshwork_transport::{LaneKey, LaneKind, LinkKind, Transport};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use work::Slot;

pub use meshwork_transport::DEFAULT_TIMEOUT;

/// Non-blocking operations queued per group before `*_nb` blocks. Sequence
/// numbers are 64-bit, so this is about memory, not wrap-around.
pub const MAX_IN_FLIGHT: usize = 1024;

type Job = Box<dyn FnOnce() + Send>;

/// One rank's membership of a group: collectives, point-to-point messages,
/// RPC and sub-groups. `Send + Sync`; share it as `Arc<ProcessGroup>`.
///
/// Every rank must issue a group's collectives in the same order with
/// matching arguments; a rank that does not gets `CollectiveMismatch` (or,
/// if it never sends anything another rank reads, a `Timeout` naming it).
pub struct ProcessGroup {
    cell: Arc<Cell>,
    /// The links under this group, held while it is in use: a group made
    /// from this one holds them too, so it outlives this one.
    links: Arc<links::Links>,
    /// Whether this group let go of `links` (shut down, or dropped).
    released: AtomicBool,
    /// Runs `*_nb` operations in issue order, on one thread per group,
    /// spawned on first use.
    executor: Mutex<Option<Sender<Job>>>,
    /// A job formed through a seed: what `grow` needs.
    elastic: std::sync::OnceLock<Arc<dyn Growth>>,
    /// The federated rounds' state on this rank (`rounds.rs`): kept here,
    /// so that every coordinator made on the group goes on from the last.
    rounds: rounds::RoundsState,
}

/// How a group formed through a seed grows (the node's seed client
/// implements it: `node/elastic.rs`). A trait here, so that the group
/// does not name the node that builds it.
pub(crate) trait Growth: Send + Sync + std::fmt::Debug {
    /// `group`'s growth by `joiners` new processes.
    fn grow(self: Arc<Self>, group: &ProcessGroup, joiners: u32) -> Result<Arc<ProcessGroup>>;
    /// This process back in the job as a new process, from `group` (a
    /// stale one).
    fn rejoin(self: Arc<Self>, group: &ProcessGroup) -> Result<Arc<ProcessGroup>>;
}

pub(crate) struct GroupInner {
    pub(crate) rank: u32,
    pub(crate) world: u32,
    pub(crate) comm_id: u64,
    pub(crate) transport: Arc<dyn Transport>,
    topology: Topology,
    timeout_ns: AtomicU64,
    next_seq: AtomicU64,
    overrides: Mutex<HashMap<Collective, Algorithm>>,
    shut_down: AtomicBool,
    /// `Recovery` as a number (`Manual` 0, `Abort` 1).
    recovery: std::sync::atomic::AtomicU8,
    /// Agreements started (`agree`, `shrink`): the next one's number.
    agreements: AtomicU64,
    rpc: Arc<rpc::Rpc>,
    /// This rank's symmetric heap once it has one, served to the others by
    /// the RPC server and the links' readers (shared with sub-groups).
    heap: heap::HeapSlot,
    /// The group this communicator belongs to (for `Recovery::Shrink`).
    cell: std::sync::OnceLock<std::sync::Weak<Cell>>,
    /// Set once `Recovery::Shrink` replaced this communicator: the ranks
    /// agreed failed.
    shrunk: std::sync::OnceLock<Vec<u32>>,
    /// Communicators split from this one (revoked when it is shrunk).
    children: Mutex<Vec<u64>>,
    /// Same-host peers' heaps mapped here.
    mapped: std::sync::OnceLock<heap::Mapped>,
    /// Its ranks reach each other along fixed routes through relays (a
    /// sparse topology, or a group made from one): routes do not go
    /// around failed ranks, so it cannot shrink or grow.
    fixed_relays: AtomicBool,
    /// Its ranks reach each other along a tree (a tree topology, or a
    /// group made from one): it can shrink (routes go around a failed
    /// rank) but not grow.
    tree_routes: AtomicBool,
    /// What recovery needs on this rank's side (`quorum.rs`).
    quorum: Mutex<Quorum>,
    /// Why the group is stale, if it is (`quorum.rs`); `is_stale` says
    /// whether without the lock.
    stale: Mutex<Option<quorum::Stale>>,
    is_stale: AtomicBool,
    /// A shrink replaced this communicator with the survivors': its
    /// members take part in no other agreement on it.
    replaced: AtomicBool,
}

/// A validated collective call, holding its sequence number and the
/// communicator it was issued on.
#[derive(Clone)]
pub(crate) struct Begun {
    seq: u64,
    desc: Descriptor,
    inner: Arc<GroupInner>,
    /// Its number in the flight record.
    flight: u64,
}

impl GroupInner {
    /// A communicator over `transport`, serving `rpc`'s handlers.
    pub(crate) fn new(
        transport: Arc<dyn Transport>,
        comm_id: u64,
        timeout: Duration,
        topology: Topology,
        rpc: Arc<rpc::Rpc>,
        heap: heap::HeapSlot,
    ) -> Arc<GroupInner> {
        transport.set_timeout(timeout);
        let members: Vec<u32> = (0..transport.world()).collect();
        transport.collective_members(comm_id, &members);
        // Heap requests are answered by whichever thread reads them off
        // the link; the server answers what that thread leaves to it.
        let replies = heap::Replies::new(Arc::clone(&transport), comm_id, Arc::clone(&heap));
        rpc::serve(Arc::clone(&transport), comm_id, Arc::clone(&rpc), replies);
        let answerer = heap::Answerer {
            heap: Arc::clone(&heap),
            comm: comm_id,
        };
        transport.set_answerer(rpc::request_key(comm_id), Arc::new(answerer));
        Arc::new(GroupInner {
            rank: transport.rank(),
            world: transport.world(),
            comm_id,
            transport,
            topology,
            timeout_ns: AtomicU64::new(duration_ns(timeout)),
            next_seq: AtomicU64::new(0),
            overrides: Mutex::new(HashMap::new()),
            shut_down: AtomicBool::new(false),
            recovery: std::sync::atomic::AtomicU8::new(0),
            agreements: AtomicU64::new(0),
            rpc,
            heap,
            cell: std::sync::OnceLock::new(),
            shrunk: std::sync::OnceLock::new(),
            children: Mutex::new(Vec::new()),
            mapped: std::sync::OnceLock::new(),
            fixed_relays: AtomicBool::new(crate::shape::fixed_routes(crate::shape::shape_of(
                topology,
            ))),
            tree_routes: AtomicBool::new(matches!(topology, Topology::Tree { .. })),
            quorum: Mutex::new(Quorum::default()),
            stale: Mutex::new(None),
            is_stale: AtomicBool::new(false),
            replaced: AtomicBool::new(false),
        })
    }

    /// See the field: whether shrinking and growing are refused.
    pub(crate) fn fixed_relays(&self) -> bool {
        self.fixed_relays.load(Ordering::Relaxed)
    }

    /// A communicator made from `parent` keeps its routes.
    pub(crate) fn inherit_routes(&self, parent: &GroupInner) {
        if parent.fixed_relays() {
            self.fixed_relays.store(true, Ordering::Relaxed);
        }
        if parent.tree_routes() {
            self.tree_routes.store(true, Ordering::Relaxed);
        }
    }

    /// See the field.
    pub(crate) fn tree_routes(&self) -> bool {
        self.tree_routes.load(Ordering::Relaxed)
    }

    /// Give this communicator `heap`, served to the other ranks on it by
    /// its RPC server.
    pub(crate) fn attach_heap(&self, heap: &Arc<heap::Heap>) {
        if heap.len() > 0 {
            let _ = self.heap.set(Arc::clone(heap));
        }
    }

    /// This rank's heap, if this communicator has one.
    pub(crate) fn heap_of(&self) -> Option<&Arc<heap::Heap>> {
        self.heap.get()
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_nanos(self.timeout_ns.load(Ordering::Relaxed))
    }

    pub(crate) fn recovery(&self) -> Recovery {
        match self.recovery.load(Ordering::Relaxed) {
            1 => Recovery::Abort,
            2 => Recovery::Shrink,
            _ => Recovery::Manual,
        }
    }

    pub(crate) fn set_recovery(&self, recovery: Recovery) {
        let n = match recovery {
            Recovery::Manual => 0,
            Recovery::Abort => 1,
            Recovery::Shrink => 2,
        };
        self.recovery.store(n, Ordering::Relaxed);
    }

    /// `Revoked` once the group is revoked (under `Recovery::Shrink`: the
    /// group shrinks, `GroupShrunk`), `ShutDown` once shut down.
    pub(crate) fn check_usable(&self) -> Result<()> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(Error::ShutDown);
        }
        if let Some(failed) = self.shrunk.get() {
            return Err(Error::GroupShrunk {
                failed: failed.clone(),
            });
        }
        if self.is_stale.load(Ordering::Acquire) {
            // Under `Recovery::Shrink` a stale group that confirmed nothing
            // tries again, once a liveness period (the network may have
            // healed); otherwise, and meanwhile, every call fails.
            let retry = (self.recovery() == Recovery::Shrink).then(|| self.transport.liveness());
            if let Some(e) = self.stale_error(retry) {
                return Err(e);
            }
            return Err(self.recover(Error::Revoked));
        }
        if self.transport.is_revoked(self.comm_id) {
            return Err(match self.recovery() {
                Recovery::Shrink => self.recover(Error::Revoked),
                _ => Error::Revoked,
            });
        }
        Ok(())
    }

    /// Check what is common to every call (state, root, operator), take the
    /// next sequence number and choose the algorithm.
    fn begin<T: Element>(self: &Arc<Self>, call: Call, count: usize) -> Result<Begun> {
        let (coll, op, root) = (call.collective(), call.op(), call.root());
        self.check_usable()?;
        if let Some(root) = root {
            if root >= self.world {
                return Err(Error::InvalidArgument(format!(
                    "{}: root {root} is out of range; this group has ranks 0..{}",
                    coll.name(),
                    self.world
                )));
            }
        }
        if op == Some(ReduceOp::Avg) && !T::DTYPE.is_float() {
            return Err(Error::InvalidArgument(format!(
                "{}: ReduceOp::Avg needs a float element type, not {}",
                coll.name(),
                T::DTYPE.name()
            )));
        }
        let bytes = count.saturating_mul(T::DTYPE.size());
        let algo = self
            .overrides
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&coll)
            .copied()
            .unwrap_or_else(|| select(coll, self.world as usize, bytes, self.topology));
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        self.transport.note_collective(self.comm_id, seq);
        let flight = self.record_start(coll.name(), seq, bytes as u64, T::DTYPE.name());
        Ok(Begun {
            seq,
            flight,
            inner: Arc::clone(self),
            desc: Descriptor {
                coll,
                dtype: T::DTYPE,
                count: count as u64,
                op,
                root,
                algo,
            },
        })
    }

    /// The sequence number the next collective will take.
    pub(crate) fn peek_seq(&self) -> u64 {
        self.next_seq.load(Ordering::Relaxed)
    }

    /// Run an algorithm for `call` over the transport.
    /// (On the communicator the call was issued on, whichever `self` is.)
    fn run<R>(
        &self,
        call: &Begun,
        f: impl FnOnce(&mut CollComm<'_>, Algorithm) -> Result<R>,
    ) -> Result<R> {
        let mut comm = CollComm::new(&call.inner, call.seq, call.desc);
        tracing::trace!(seq = call.seq, op = %call.desc.describe(), "collective");
        let outcome = comm.precheck().and_then(|()| f(&mut comm, call.desc.algo));
        call.inner.rpc.flight.end(call.flight, &outcome);
        outcome
    }
}

impl ProcessGroup {
    /// A world group over `transport`, the one holder of its links so far.
    pub(crate) fn new(
        transport: Arc<dyn Transport>,
        comm_id: u64,
        timeout: Duration,
        topology: Topology,
    ) -> Self {
        let links = links::Links::new(Arc::clone(&transport));
        ProcessGroup::over(links, transport, comm_id, timeout, topology)
    }

    /// A group over `transport` (the links `links` hold, or a view of
    /// them), holding `links`.
    fn over(
        links: Arc<links::Links>,
        transport: Arc<dyn Transport>,
        comm_id: u64,
        timeout: Duration,
        topology: Topology,
    ) -> Self {
        let inner = GroupInner::new(
            transport,
            comm_id,
            timeout,
            topology,
            rpc::Rpc::new(),
            heap::HeapSlot::default(),
        );
        let cell = Arc::new(Cell::new(Arc::clone(&inner)));
        let _ = inner.cell.set(Arc::downgrade(&cell));
        ProcessGroup {
            cell,
            links,
            released: AtomicBool::new(false),
            executor: Mutex::new(None),
            elastic: std::sync::OnceLock::new(),
            rounds: rounds::RoundsState::default(),
        }
    }

    /// This rank's heap, if the group has one.
    pub(crate) fn heap_handle(&self) -> Option<Arc<Heap>> {
        self.inner().heap_of().cloned()
    }

    /// Make the group able to grow through its job's seed.
    pub(crate) fn set_elastic(&self, elastic: Arc<dyn Growth>) {
        let _ = self.elastic.set(elastic);
    }

    /// The current communicator (`Recovery::Shrink` may replace it).
    #[inline]
    pub(crate) fn inner(&self) -> &GroupInner {
        self.cell.now()
    }

    /// The current communicator, for a caller that keeps it.
    pub(crate) fn shared(&self) -> Arc<GroupInner> {
        self.cell.current()
    }

    /// This process's rank in the group, `0..world_size()`.
    #[inline]
    pub fn rank(&self) -> u32 {
        self.inner().rank
    }

    /// Number of ranks in the group.
    #[inline]
    pub fn world_size(&self) -> u32 {
        self.inner().world
    }

    /// How the ranks are linked.
    pub fn topology(&self) -> Topology {
        self.inner().topology
    }

    /// The deadline of every blocking call: a call fails with `Timeout` when
    /// the ranks it waits on make no progress for this long.
    pub fn timeout(&self) -> Duration {
        self.inner().timeout()
    }

    /// Change this rank's deadline (see [`ProcessGroup::timeout`]); applies
    /// to calls issued afterwards.
    pub fn set_timeout(&self, timeout: Duration) {
        self.inner()
            .timeout_ns
            .store(duration_ns(timeout), Ordering::Relaxed);
        self.inner().transport.set_timeout(timeout);
    }

    /// What this rank does when a call meets a failed member (see
    /// [`Recovery`]); set by [`crate::Node::recovery`] / `RECOVERY`.
    pub fn recovery(&self) -> Recovery {
        self.inner().recovery()
    }

    /// Change this rank's [`Recovery`] policy (every rank should use the
    /// same).
    pub fn set_recovery(&self, recovery: Recovery) {
        self.inner().set_recovery(recovery);
    }

    /// How many members recovery needs on this rank's side (see
    /// [`Quorum`]); set by [`crate::Node::quorum`] / `QUORUM`.
    pub fn quorum(&self) -> Quorum {
        self.inner().quorum()
    }

    /// Whether the group is stale: an agreement here ended without quorum,
    /// or the others went on without this rank. Every call on a stale
    /// group fails with [`Error::NoQuorum`] or [`Error::Expelled`].
    pub fn is_stale(&self) -> bool {
        self.inner().stale().is_some()
    }

    /// The ranks this rank knows have failed, ascending: gone without a
    /// goodbye (killed, crashed, reset), silent for a whole deadline, or
    /// (on this host) a stopped process.
    pub fn failed(&self) -> Vec<u32> {
        self.inner().transport.failed()
    }

    /// How often `rank` came back on a new link: a fleet's worker that
    /// returned (after its link dropped, from a new address, or as a new
    /// process), or, on a worker, its coordinator (see [`Node::fleet`]).
    /// 0 until it first does, and on every group that is not a fleet.
    ///
    /// [`Node::fleet`]: crate::Node::fleet
    pub fn incarnation(&self, rank: u32) -> u64 {
        self.inner().transport.incarnation(rank)
    }

    /// Revoke the group: every member's pending and later calls on it
    /// fail at once with [`Error::Revoked`] — the way to stop a job
    /// everywhere after one rank meets a failure (`Recovery::Abort` does
    /// it by itself). The notice is passed on by every rank that gets it,
    /// so it arrives even if this rank dies while sending it.
    pub fn revoke(&self) {
        self.inner().transport.revoke(self.inner().comm_id);
    }

    /// The group's flight record: its last [`FLIGHT_RECORD_LEN`] collective
    /// calls, oldest first — each one's operation, sequence number, bytes,
    /// element type, members, start and end and outcome. Kept all the time
    /// (a lock at the start and the end of each call); when a call times
    /// out, every member's record is what the others are told about it
    /// (see [`Error::Timeout`]). `FLIGHT_RECORD_DUMP=<file>` writes every
    /// group's record there on `SIGUSR1`.
    pub fn flight_record(&self) -> Vec<FlightEntry> {
        self.inner().rpc.flight.snapshot()
    }

    /// Traffic with each rank (indexed by rank): messages and bytes sent
    /// and received, and bytes received but not yet taken by a receive, now
    /// and at most — to see traffic and back-pressure.
    pub fn stats(&self) -> Vec<meshwork_transport::PeerStats> {
        self.inner().transport.stats()
    }

    /// What carries this rank's traffic to each rank (indexed by rank):
    /// `Local` for this rank, `Memory` in a `local()` world, `Tcp` or
    /// `Quic` for a link of its own, `Relayed` for a rank reached through
    /// another (a star worker's peers other than the coordinator).
    ///
    /// ```
    /// use meshwork::LinkKind;
    /// let groups = meshwork::local(3)?;
    /// assert_eq!(groups[1].links(), [LinkKind::Memory, LinkKind::Local, LinkKind::Memory]);
    /// # Ok::<(), meshwork::Error>(())
    /// ```
    pub fn links(&self) -> Vec<meshwork_transport::LinkKind> {
        self.inner().transport.links()
    }

    /// Force `collective` (`"all_reduce"`, …) to use `algorithm` by name
    /// (`"ring"`, `"recursive_doubling"`, …; see
    /// `meshwork_collectives::Collective::algorithms`), or restore automatic
    /// selection with `None`. For debugging and benchmarking, like
    /// `ALGO_<COLLECTIVE>`; every rank must force the same algorithm, which
    /// is checked: ranks that differ get `CollectiveMismatch`.
    pub fn set_algorithm(&self, collective: &str, algorithm: Option<&str>) -> Result<()> {
        let coll = Collective::from_name(collective).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "unknown collective {collective:?}; one of {}",
                Collective::ALL.map(Collective::name).join(", ")
            ))
        })?;
        let inner = self.inner();
        let mut overrides = inner.overrides.lock().unwrap_or_else(|e| e.into_inner());
        match algorithm {
            None => {
                overrides.remove(&coll);
            }
            Some(name) => {
                let algo = Algorithm::from_name(name)
                    .filter(|a| coll.algorithms().contains(a))
                    .ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "{} has no algorithm {name:?}; one of {}",
                            coll.name(),
                            coll.algorithms()
                                .iter()
                                .map(|a| a.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    })?;
                overrides.insert(coll, algo);
            }
        }
        Ok(())
    }

    /// Start with `parent`'s forced algorithms (a split inherits them).
    pub(crate) fn inherit_overrides(&self, parent: &ProcessGroup) {
        let from = parent
            .inner()
            .overrides
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        *self
            .inner()
            .overrides
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = from;
    }

    /// Let queued non-blocking operations finish: the executor is FIFO, so
    /// waiting for a marker job waits for all of them (each is bounded by
    /// the deadline).
    fn drain_executor(&self) {
        if let Some(sender) = self
            .executor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let (tx, rx) = crossbeam_channel::bounded::<()>(1);
            let marker: Job = Box::new(move || {
                let _ = tx.send(());
            });
            if sender.send(marker).is_ok() {
                let _ = rx.recv();
            }
        }
    }

    /// Queue `job` on the group's executor, starting it on first use.
    fn submit<R: Send + 'static>(
        &self,
        call: Result<Begun>,
        job: impl FnOnce(&GroupInner, &Begun) -> Result<R> + Send + 'static,
    ) -> Work<R> {
        let call = match call {
            Ok(call) => call,
            Err(e) => return Work::ready(Err(e)),
        };
        let slot = Slot::new();
        let done = Arc::clone(&slot);
        let inner = self.shared();
        let task: Job = Box::new(move || {
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&inner, &call)));
            done.complete(
                outcome.unwrap_or_else(|p| Err(work::panicked(call.desc.coll.name(), &*p))),
            );
        });
        let mut executor = self.executor.lock().unwrap_or_else(|e| e.into_inner());
        let sender = executor.get_or_insert_with(|| spawn_executor(self.inner().rank));
        if let Err(crossbeam_channel::SendError(task)) = sender.send(task) {
            // The executor thread is gone (it cannot normally exit while we
            // hold its sender); run the job here rather than lose it.
            task();
        }
        Work::pending(slot)
    }

    /// Flush, confirm with every peer, and close. Every rank calls it; it
    /// waits (up to the deadline) for each peer's confirmation, so messages
    /// of the last collective are never lost. Idempotent: a second call
    /// returns `Ok`; any other call afterwards returns `Error::ShutDown`.
    /// Ranks that did not confirm in time are reported in
    /// `ShutdownIncomplete`.
    ///
    /// Only this group ends: a group made from it (`split`, `shrink`) or
    /// the group it was made from keeps working, over the same links,
    /// which close when the last group over them is shut down or dropped.
    pub fn shutdown(&self) -> Result<()> {
        if self.inner().shut_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.drain_executor();
        let confirmed = self.inner().confirm_shutdown();
        self.release();
        confirmed
    }

    /// This group is done with its links: its communicator is forgotten
    /// here (its waits end, what comes for it is dropped) and, if it was
    /// the last group over them, the links close. Once.
    fn release(&self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = self.inner();
        inner.transport.forget(inner.comm_id);
        inner.transport.forget(self.rounds_comm());
        self.links.release();
    }
}

impl GroupInner {
    /// The shutdown's confirmations (see [`ProcessGroup::shutdown`]); the
    /// caller then lets go of the links.
    fn confirm_shutdown(&self) -> Result<()> {
        let t = &self.transport;
        let key = shutdown_key(self.comm_id);
        let (rank, world) = (self.rank, self.world);
        // Mesh: every pair confirms directly. Star: workers confirm to the
        // coordinator, which answers only when all have, so it stays up to
        // relay everything workers sent each other before their goodbye.
        // Sparse: every pair confirms (relayed), then the neighbours'
        // rounds below keep every relay up until all have.
        let others: Vec<u32> = (0..world).filter(|&p| p != rank).collect();
        let (first_recv, send_to, then_recv): (Vec<u32>, Vec<u32>, Vec<u32>) =
            match (self.topology, rank) {
                (Topology::Star, 0) => (others.clone(), others, Vec::new()),
                (Topology::Star, _) => (Vec::new(), vec![0], vec![0]),
                _ => (Vec::new(), others.clone(), others),
            };
        let deadline = Instant::now() + self.timeout();
        let mut unconfirmed = Vec::new();
        let confirm = |peer: u32, unconfirmed: &mut Vec<u32>| {
            let left = deadline.saturating_duration_since(Instant::now());
            if t.recv(peer, key, left, None).is_err() && !unconfirmed.contains(&peer) {
                unconfirmed.push(peer);
            }
        };
        for &peer in &first_recv {
            confirm(peer, &mut unconfirmed);
        }
        for &peer in &send_to {
            if t.send(peer, key, &[b"bye"]).is_err() && !unconfirmed.contains(&peer) {
                unconfirmed.push(peer);
            }
        }
        for &peer in &then_recv {
            confirm(peer, &mut unconfirmed);
        }
        let shape = crate::shape::shape_of(self.topology);
        if shape.is_sparse() && world > 1 {
            // A rank done confirming may still relay others' goodbyes. In
            // round i each rank tells its neighbours and hears theirs:
            // after as many rounds as the longest route has links, every
            // rank has confirmed, so nothing is left to relay. Rounds go
            // over links only, never through a relay.
            let rounds = (1..world)
                .map(|to| shape.relays(world, 0, to).len() + 1)
                .max()
                .unwrap_or(1);
            let near = shape.neighbours(world, rank);
            let key = LaneKey {
                tag: CONTROL_QUIESCE,
                ..key
            };
            for _ in 0..rounds {
                for &peer in &near {
                    if t.send(peer, key, &[b"done"]).is_err() && !unconfirmed.contains(&peer) {
                        unconfirmed.push(peer);
                    }
                }
                for &peer in &near {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if t.recv(peer, key, left, None).is_err() && !unconfirmed.contains(&peer) {
                        unconfirmed.push(peer);
                    }
                }
            }
        }
        if unconfirmed.is_empty() {
            Ok(())
        } else {
            unconfirmed.sort_unstable();
            Err(Error::ShutdownIncomplete { ranks: unconfirmed })
        }
    }
}

impl Drop for ProcessGroup {
    /// A best-effort graceful close: queued non-blocking operations finish
    /// (each bounded by the deadline), then this group lets go of its
    /// links; if no other group (one made from it, or the one it was made
    /// from) is over them, the transport flushes what is queued and
    /// closes, and peers see this rank leave (`PeerDisconnected`).
    /// [`ProcessGroup::shutdown`] is the confirmed form. On a sparse
    /// topology dropping is `shutdown` (its error ignored): a rank done
    /// with its own calls may still have others' traffic to relay, so it
    /// stays until every rank has finished, or the deadline.
    fn drop(&mut self) {
        let inner = self.shared();
        let sparse = crate::shape::shape_of(inner.topology).is_sparse();
        if sparse && !inner.shut_down.swap(true, Ordering::AcqRel) {
            self.drain_executor();
            // Let go behind the confirmation (this group is gone: no one
            // else can release it).
            self.released.store(true, Ordering::Release);
            // Released when the confirmation is done (or never starts).
            let hold = links::Release(Arc::clone(&self.links));
            // The ranks of an in-process world may be dropped one after
            // another on one thread: each confirms behind its drop, so
            // none waits for one dropped after it.
            let in_process = inner.transport.links().contains(&LinkKind::Memory);
            let confirm = move || {
                if let Err(e) = inner.confirm_shutdown() {
                    tracing::warn!("dropping a group of a sparse topology: {e}");
                }
                inner.transport.forget(inner.comm_id);
                drop(hold);
            };
            if !in_process {
                confirm();
            } else if let Err(e) = std::thread::Builder::new()
                .name("meshwork-drop".into())
                .spawn(confirm)
            {
                tracing::warn!("cannot confirm the shutdown behind the drop: {e}");
            }
            return;
        }
        self.drain_executor();
        self.release();
    }
}

// The group's control-lane tags, all of them: the shutdown's two below,
// and the same-host heap exchange's two, which spell "heap"
// (`heap/share.rs`: 0x6865_6170_0000_0001 and _0002).

/// Control-lane tag of the shutdown confirmation.
const CONTROL_SHUTDOWN: u64 = 1;

/// The lane of communicator `comm`'s shutdown goodbyes.
pub(crate) fn shutdown_key(comm: u64) -> LaneKey {
    LaneKey {
        comm,
        kind: LaneKind::Control,
        tag: CONTROL_SHUTDOWN,
    }
}
/// Control-lane tag of a sparse shape's shutdown rounds between
/// neighbours.
const CONTROL_QUIESCE: u64 = 2;

fn spawn_executor(rank: u32) -> Sender<Job> {
    let (tx, rx): (Sender<Job>, Receiver<Job>) = crossbeam_channel::bounded(MAX_IN_FLIGHT);
    let spawned = std::thread::Builder::new()
        .name(format!("meshwork-nb-{rank}"))
        .spawn(move || {
            for job in rx {
                job();
            }
        });
    if let Err(e) = spawned {
        // Without a thread the channel's receiver is dropped and `submit`
        // runs jobs inline: slower, never lost.
        tracing::warn!("cannot spawn the non-blocking executor: {e}; running operations inline");
    }
    tx
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("rank", &self.inner().rank)
            .field("world", &self.inner().world)
            .field("comm_id", &self.inner().comm_id)
            .finish()
    }
}
