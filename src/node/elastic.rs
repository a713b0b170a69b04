//! Elastic membership: a job formed through a seed grows back through it
//! (`ProcessGroup::grow`, `Node::join_running`).
//!
//! Every member of the group calls `grow(k)`; each joins the job's seed
//! again asking for its own rank in a group of `world + k`, the first
//! to arrive opening the growth. New processes that wait at the seed
//! (`join_running`) take the ranks after the old ones in arrival order.
//! Once all are in, the seed sends the table and every one of them forms
//! a fresh group (new links, new TLS identities from the job's CA) and
//! passes the seed's ready barrier, as when the job first formed. The old
//! group stays as it was until the program drops it.
//!
//! Each member proves to the seed that its claim is its own with the
//! membership the seed sealed to it when the group it grows formed (only
//! the seed and that process know it): a process that merely holds the
//! token can take a new process's rank, never a member's.

use super::Node;
use crate::error::{Error, Result};
use crate::group::{Growth, ProcessGroup};
use meshwork_transport::seed::{Membership, Seed, GROW_MAX};
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// What a job formed through a seed keeps to grow: how it was built, the
/// seed's address, and (on the rank that hosts it) the seed itself, which
/// serves as long as a group of the job lives here.
pub(crate) struct Elastic {
    node: Node,
    seed: SocketAddr,
    /// Kept running; stopped when the last group holding it is dropped.
    _hosted: Option<Seed>,
    /// One growth at a time from this process.
    growing: Mutex<()>,
    /// This process's membership of the group the seed formed last with
    /// it (the first formation, then each growth).
    membership: Mutex<Option<Membership>>,
}

impl fmt::Debug for Elastic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Elastic")
            .field("seed", &self.seed)
            .field("hosting", &self._hosted.is_some())
            .finish()
    }
}

impl Elastic {
    /// The elastic state of a job `node` joined through `seed`.
    pub(super) fn new(node: &Node, seed: SocketAddr, hosted: Option<Seed>) -> Arc<Elastic> {
        let mut node = node.clone();
        // Sockets are a formation's own; a growth binds fresh ones (and
        // a fixed advertised port is the old group's).
        node.listen = None;
        node.advertise = node.advertise.map(|a| SocketAddr::new(a.ip(), 0));
        node.running = false;
        node.join_any = false;
        Arc::new(Elastic {
            node,
            seed,
            _hosted: hosted,
            growing: Mutex::new(()),
            membership: Mutex::new(None),
        })
    }

    /// A group of the job formed through the seed with this process in
    /// it: `membership` is what it grows the job with from now on.
    pub(super) fn formed(&self, membership: Membership) {
        *self.membership.lock().unwrap_or_else(|e| e.into_inner()) = Some(membership);
    }

    /// What this process proves its membership with (`None` before a
    /// group formed).
    pub(super) fn membership(&self) -> Option<Membership> {
        self.membership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Growth for Elastic {
    /// `group`'s growth by `joiners` new processes (see the module).
    fn grow(self: Arc<Elastic>, group: &ProcessGroup, joiners: u32) -> Result<Arc<ProcessGroup>> {
        let _one = self.growing.lock().unwrap_or_else(|e| e.into_inner());
        let world = group
            .world_size()
            .checked_add(joiners)
            .filter(|_| (1..=GROW_MAX).contains(&joiners))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "grow({joiners}): between 1 and {GROW_MAX} new processes"
                ))
            })?;
        let mut node = self.node.clone();
        node.rank = group.rank();
        node.world = world;
        node.grow = joiners;
        node.timeout = group.timeout();
        node.recovery = group.recovery();
        node.keep_heap = group.heap_handle();
        tracing::info!(
            rank = node.rank,
            world,
            joiners,
            "growing the job through its seed"
        );
        let grown = node.join_seed(self.seed, Some(Arc::clone(&self)))?;
        grown.inherit_overrides(group);
        Ok(grown)
    }

    /// Back in the job through its seed as a new process would come
    /// (`Node::join_running`), once the members grow the job: a rank the
    /// others went on without (`NoQuorum`, `Expelled`). The seed this
    /// process may host keeps serving: the grown group holds this state.
    fn rejoin(self: Arc<Elastic>, group: &ProcessGroup) -> Result<Arc<ProcessGroup>> {
        let _one = self.growing.lock().unwrap_or_else(|e| e.into_inner());
        let mut node = self.node.clone();
        node.rank = 0;
        node.world = 0;
        node.join_any = true;
        node.running = true;
        node.timeout = group.timeout();
        node.recovery = group.recovery();
        tracing::info!(seed = %self.seed, "rejoining the job through its seed");
        let joined = node.join_seed(self.seed, Some(Arc::clone(&self)))?;
        joined.inherit_overrides(group);
        Ok(joined)
    }
}
