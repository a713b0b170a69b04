//! `split`: sub-groups that share the parent's links. A sub-group is a view
//! of the parent's transport with its own ranks and its own communicator
//! id, so its collectives, tags, RPC and control lanes never meet the
//! parent's or a sibling's.

use super::{GroupInner, ProcessGroup};
use crate::error::{Error, Result};
use meshwork_collectives::Topology;
use meshwork_transport::{LaneKey, LinkKind, Payload, PeerStats, Transport, TransportError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The parent's transport seen through a sub-group's rank numbering.
#[derive(Debug)]
struct SubTransport {
    parent: Arc<dyn Transport>,
    /// Parent rank of each sub-rank.
    members: Vec<u32>,
    rank: u32,
    closed: AtomicBool,
}

impl SubTransport {
    fn parent_rank(&self, sub: u32) -> Result<u32, TransportError> {
        self.members
            .get(sub as usize)
            .copied()
            .ok_or(TransportError::NoSuchRank {
                rank: sub,
                world: self.members.len() as u32,
            })
    }

    fn sub_rank(&self, parent: u32) -> u32 {
        self.members
            .iter()
            .position(|&m| m == parent)
            .map_or(parent, |i| i as u32)
    }

    /// Name ranks in the sub-group's numbering in errors.
    fn translate(&self, e: TransportError) -> TransportError {
        match e {
            TransportError::Timeout { waiting_on } => TransportError::Timeout {
                waiting_on: self.sub_rank(waiting_on),
            },
            TransportError::PeerDisconnected { rank } => TransportError::PeerDisconnected {
                rank: self.sub_rank(rank),
            },
            TransportError::LengthMismatch { from, got, want } => TransportError::LengthMismatch {
                from: self.sub_rank(from),
                got,
                want,
            },
            other => other,
        }
    }

    fn check_open(&self) -> Result<(), TransportError> {
        if self.closed.load(Ordering::Acquire) {
            Err(TransportError::Closed)
        } else {
            Ok(())
        }
    }
}

impl Transport for SubTransport {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn world(&self) -> u32 {
        self.members.len() as u32
    }

    fn send(&self, dst: u32, key: LaneKey, parts: &[&[u8]]) -> Result<(), TransportError> {
        self.check_open()?;
        let p = self.parent_rank(dst)?;
        self.parent
            .send(p, key, parts)
            .map_err(|e| self.translate(e))
    }

    fn recv(
        &self,
        src: u32,
        key: LaneKey,
        timeout: Duration,
        want_len: Option<usize>,
    ) -> Result<Payload, TransportError> {
        self.check_open()?;
        let p = self.parent_rank(src)?;
        self.parent
            .recv(p, key, timeout, want_len)
            .map_err(|e| self.translate(e))
    }

    fn recv_any(&self, key: LaneKey, timeout: Duration) -> Result<(u32, Payload), TransportError> {
        self.check_open()?;
        let (src, msg) = self
            .parent
            .recv_any(key, timeout)
            .map_err(|e| self.translate(e))?;
        Ok((self.sub_rank(src), msg))
    }

    /// The parent's counters for this group's members (all of their
    /// traffic with this rank, any communicator).
    fn stats(&self) -> Vec<PeerStats> {
        let all = self.parent.stats();
        self.members
            .iter()
            .map(|&m| all.get(m as usize).copied().unwrap_or_default())
            .collect()
    }

    /// The parent's links to this group's members.
    fn links(&self) -> Vec<LinkKind> {
        let all = self.parent.links();
        self.members
            .iter()
            .map(|&m| all.get(m as usize).copied().unwrap_or(LinkKind::Relayed))
            .collect()
    }

    fn note_collective(&self, comm: u64, seq: u64) {
        self.parent.note_collective(comm, seq);
    }

    /// The links' deadline belongs to the parent.
    fn set_timeout(&self, _timeout: Duration) {}

    /// The parent's failed ranks that are members here, in this group's
    /// numbering.
    fn failed(&self) -> Vec<u32> {
        let failed = self.parent.failed();
        (0..self.members.len() as u32)
            .filter(|&r| failed.contains(&self.members[r as usize]))
            .collect()
    }

    fn revoke(&self, comm: u64) {
        self.parent.revoke(comm);
    }

    fn max_message_bytes(&self) -> u64 {
        self.parent.max_message_bytes()
    }

    fn is_gone(&self, rank: u32) -> bool {
        self.members
            .get(rank as usize)
            .is_none_or(|&p| self.parent.is_gone(p))
    }

    /// The parent's links read this group's lanes too (an answer goes
    /// back to the parent's rank that asked: no numbering to translate).
    fn set_answerer(&self, key: LaneKey, answerer: Arc<dyn meshwork_transport::Answerer>) -> bool {
        self.parent.set_answerer(key, answerer)
    }

    fn view_of(&self) -> Option<(Arc<dyn Transport>, Vec<u32>)> {
        Some((Arc::clone(&self.parent), self.members.clone()))
    }

    fn learned_failed(&self, rank: u32, silent: bool) {
        if let Some(&p) = self.members.get(rank as usize) {
            self.parent.learned_failed(p, silent);
        }
    }

    fn collective_members(&self, comm: u64, members: &[u32]) {
        let parents: Vec<u32> = members
            .iter()
            .filter_map(|&m| self.members.get(m as usize).copied())
            .collect();
        self.parent.collective_members(comm, &parents);
    }

    fn is_revoked(&self, comm: u64) -> bool {
        self.parent.is_revoked(comm)
    }

    fn await_failure(&self, comm: u64, timeout: Duration) -> Vec<u32> {
        let until = std::time::Instant::now() + timeout;
        loop {
            let failed = self.failed();
            let left = until.saturating_duration_since(std::time::Instant::now());
            if !failed.is_empty() || left.is_zero() || self.is_revoked(comm) {
                return failed;
            }
            // A failure outside this group wakes the parent's wait; look
            // again for one inside.
            self.parent
                .await_failure(comm, left.min(Duration::from_millis(10)));
        }
    }

    /// Closes the view only; the parent's links stay up.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

/// A communicator id for a split, the same on every member: the parent's
/// id, the sequence number of the split's exchange, and the colour, mixed.
pub(super) fn child_comm_id(parent: u64, seq: u64, color: u32) -> u64 {
    let mut z =
        parent ^ seq.rotate_left(21) ^ u64::from(color).rotate_left(42) ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    // Never 0: that is the world group's.
    (z ^ (z >> 31)) | 1
}

impl ProcessGroup {
    /// Split into sub-groups: ranks passing the same `color` form one,
    /// ordered by `key`, ties by parent rank. Every rank of this group must
    /// call it (it is a collective). Each sub-group has its own collective
    /// sequence, tag space and RPC namespace and may run concurrently with
    /// the parent and its siblings; it shares the parent's links, so it
    /// lives no longer than they do.
    pub fn split(&self, color: u32, key: u32) -> Result<Arc<ProcessGroup>> {
        let world = self.world_size() as usize;
        let seq = self.inner().peek_seq();
        let mut all = vec![0u32; 2 * world];
        self.all_gather(&[color, key], &mut all)?;
        let mut members: Vec<(u32, u32)> = (0..world as u32)
            .filter(|&r| all[2 * r as usize] == color)
            .map(|r| (all[2 * r as usize + 1], r))
            .collect();
        members.sort_unstable();
        let members: Vec<u32> = members.into_iter().map(|(_, r)| r).collect();
        self.view(members, child_comm_id(self.inner().comm_id, seq, color))
            .ok_or_else(|| {
                Error::InvalidArgument("split: this rank is missing from its own colour".into())
            })
    }

    /// A group of `members` (ranks of this group, ascending) over this
    /// group's links, with communicator `comm`; `None` if this rank is not
    /// a member.
    pub(super) fn view(&self, members: Vec<u32>, comm: u64) -> Option<Arc<ProcessGroup>> {
        let inner = self.inner();
        let (sub, topology) = inner.sub_transport(members)?;
        inner
            .children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(comm);
        let group = ProcessGroup::new(sub, comm, self.timeout(), topology);
        group.inner().inherit_routes(&inner);
        group.inherit_overrides(self);
        group.set_recovery(self.recovery());
        if let Some(e) = self.elastic.get() {
            group.set_elastic(Arc::clone(e));
        }
        if let Some(h) = inner.heap_of() {
            group.inner().attach_heap(h);
            group.inner().inherit_mapped(&inner);
        }
        Some(Arc::new(group))
    }
}

impl GroupInner {
    /// This communicator's transport seen through `members` (ranks of
    /// it, ascending) and the topology a group of them runs; `None` if
    /// this rank is not a member.
    fn sub_transport(&self, members: Vec<u32>) -> Option<(Arc<dyn Transport>, Topology)> {
        let rank = members.iter().position(|&m| m == self.rank)? as u32;
        // A sub-group led by the star's coordinator keeps the star's
        // algorithms; any other is served by relays and runs mesh ones.
        let topology = match self.topology {
            Topology::Star if members[0] == 0 => Topology::Star,
            _ => Topology::Mesh,
        };
        // Made of the transport underneath a view: a sub-group outlives
        // the group it was made from (a shrunk group its predecessor).
        let (parent, members) = match self.transport.view_of() {
            Some((base, of)) => (base, members.iter().map(|&m| of[m as usize]).collect()),
            None => (Arc::clone(&self.transport), members),
        };
        let sub = SubTransport {
            parent,
            members,
            rank,
            closed: AtomicBool::new(false),
        };
        Some((Arc::new(sub), topology))
    }

    /// `Recovery::Shrink`'s new communicator: every rank but `failed`,
    /// renumbered in order, serving the same RPC handlers, with the same
    /// settings; `None` if this rank is among `failed`. `n`: the
    /// agreement that settled it (the same on every survivor).
    pub(super) fn survivors(&self, failed: &[u32], n: u64) -> Option<Arc<GroupInner>> {
        let members: Vec<u32> = (0..self.world).filter(|r| !failed.contains(r)).collect();
        let (sub, topology) = self.sub_transport(members)?;
        let comm = child_comm_id(self.comm_id, n, u32::MAX - 1);
        let inner = GroupInner::new(sub, comm, self.timeout(), topology, Arc::clone(&self.rpc));
        inner.inherit_routes(self);
        let overrides = self
            .overrides
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        *inner.overrides.lock().unwrap_or_else(|e| e.into_inner()) = overrides;
        inner.set_recovery(self.recovery());
        if let Some(cell) = self.cell.get() {
            let _ = inner.cell.set(cell.clone());
        }
        if let Some(h) = self.heap_of() {
            inner.attach_heap(h);
            inner.inherit_mapped(self);
        }
        Some(inner)
    }
}

impl ProcessGroup {
    /// Federated averaging: `x ← Σ wᵣ·xᵣ / Σ wᵣ` over all ranks, computed in
    /// f64 and rounded to f32 once, with the same bits on every rank (the
    /// star use case: workers with different sample counts). A non-positive
    /// total weight is `InvalidArgument` on every rank, and `x` is left
    /// unchanged.
    pub fn federated_average(&self, x: &mut [f32], weight: f32) -> Result<()> {
        if !weight.is_finite() {
            return Err(Error::InvalidArgument(format!(
                "federated_average: weight {weight} is not finite"
            )));
        }
        let w = f64::from(weight);
        let mut acc: Vec<f64> = x.iter().map(|&v| f64::from(v) * w).chain([w]).collect();
        self.all_reduce(&mut acc, meshwork_collectives::ReduceOp::Sum)?;
        let total = acc[x.len()];
        if total.is_nan() || total <= 0.0 {
            return Err(Error::InvalidArgument(format!(
                "federated_average: the weights sum to {total}; the sum must be positive"
            )));
        }
        for (v, a) in x.iter_mut().zip(&acc) {
            *v = (a / total) as f32;
        }
        Ok(())
    }
}
