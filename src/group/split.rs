//! `split`: sub-groups that share the parent's links. A sub-group is a view
//! of the parent's transport with its own ranks and its own communicator
//! id, so its collectives, tags, RPC and control lanes never meet the
//! parent's or a sibling's.

use super::{Call, GroupInner, ProcessGroup};
use crate::error::{Error, Result};
use meshwork_collectives::select::RING_SEGMENT_BYTES;
use meshwork_collectives::{all_reduce, Algorithm, ReduceOp, Topology};
use meshwork_transport::{LaneKey, LinkKind, Payload, PeerStats, Transport, TransportError};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

    /// The sub-rank of parent rank `parent`; `None` for a rank outside
    /// this group.
    fn sub_rank(&self, parent: u32) -> Option<u32> {
        self.members
            .iter()
            .position(|&m| m == parent)
            .map(|i| i as u32)
    }

    /// Name ranks in the sub-group's numbering in errors. A rank outside
    /// the group (a relay between two members, say) has no number here:
    /// the error names `instead`, the member the call was for.
    fn translate(&self, e: TransportError, instead: u32) -> TransportError {
        let sub = |parent: u32| self.sub_rank(parent).unwrap_or(instead);
        match e {
            TransportError::Timeout { waiting_on } => TransportError::Timeout {
                waiting_on: sub(waiting_on),
            },
            TransportError::PeerDisconnected { rank } => {
                TransportError::PeerDisconnected { rank: sub(rank) }
            }
            TransportError::LengthMismatch { from, got, want } => TransportError::LengthMismatch {
                from: sub(from),
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
            .map_err(|e| self.translate(e, dst))
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
            .map_err(|e| self.translate(e, src))
    }

    /// The next message on `key` from a member. The lane is this group's
    /// own, but any rank of the links may write to it: what a rank
    /// outside the group sends there is dropped (it is no member, and
    /// has no number here to be reported under).
    fn recv_any(&self, key: LaneKey, timeout: Duration) -> Result<(u32, Payload), TransportError> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_open()?;
            let left = deadline.saturating_duration_since(Instant::now());
            let (src, msg) = self
                .parent
                .recv_any(key, left)
                .map_err(|e| self.translate(e, u32::MAX))?;
            match self.sub_rank(src) {
                Some(sub) => return Ok((sub, msg)),
                None => tracing::warn!(
                    src,
                    comm = key.comm,
                    bytes = msg.len(),
                    "a message from a rank outside this group on its lane; dropped"
                ),
            }
        }
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

    fn liveness(&self) -> Duration {
        self.parent.liveness()
    }

    fn failed_in_order(&self) -> Vec<u32> {
        self.parent
            .failed_in_order()
            .into_iter()
            .filter_map(|p| self.sub_rank(p))
            .collect()
    }

    fn queued(&self, src: u32, key: LaneKey) -> bool {
        self.parent_rank(src)
            .is_ok_and(|p| self.parent.queued(p, key))
    }

    fn left(&self) -> Vec<u32> {
        self.parent
            .left()
            .into_iter()
            .filter_map(|p| self.sub_rank(p))
            .collect()
    }

    fn await_failure_of(&self, rank: u32, timeout: Duration) -> bool {
        self.members
            .get(rank as usize)
            .is_some_and(|&p| self.parent.await_failure_of(p, timeout))
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
        let members = Arc::new(Members {
            members: self.members.clone(),
            answerer,
        });
        self.parent.set_answerer(key, members)
    }

    fn view_of(&self) -> Option<(Arc<dyn Transport>, Vec<u32>)> {
        Some((Arc::clone(&self.parent), self.members.clone()))
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

    /// The view's communicator is done: forgotten by the links (which
    /// stay up), and the view closed.
    fn forget(&self, comm: u64) {
        self.parent.forget(comm);
        self.close();
    }
}

/// A view's answerer: answers the group's members only. A request from
/// a rank outside the group is left to the inbox, where the group's
/// server drops it (`SubTransport::recv_any`).
struct Members {
    members: Vec<u32>,
    answerer: Arc<dyn meshwork_transport::Answerer>,
}

impl meshwork_transport::Answerer for Members {
    fn answer(
        &self,
        src: u32,
        request: &[u8],
        room: &mut dyn FnMut(LaneKey, usize) -> bool,
    ) -> Option<(LaneKey, Vec<u8>)> {
        if !self.members.contains(&src) {
            return None;
        }
        self.answerer.answer(src, request, room)
    }
}

/// Mixed into the parent's id for [`ProcessGroup::subgroup`]'s
/// communicators.
const SUBGROUP_SALT: u64 = 0x7375_6267_726f_7570;

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
    /// the parent and its siblings. It shares the parent's links and
    /// outlives the parent: `g = g.split(..)?` drops the parent and goes
    /// on over the same links, which close when the last group over them
    /// is shut down or dropped.
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

    /// A group of `members` (ranks of this group, in the order that numbers
    /// them: `members[i]` is its rank `i`) over this group's links, made
    /// without a collective: every member calls it with the same
    /// `members` and `key`, and no other rank need call anything — the
    /// shape of `torch.distributed.new_group`, whose non-members do not
    /// take part. `key` names the group among those made from this one
    /// (the same `key` twice is the same communicator: use each once).
    /// `InvalidArgument` if a member is out of range or listed twice, or
    /// if this rank is not a member.
    ///
    /// ```
    /// let world = meshwork::local(3)?;
    /// let handles: Vec<_> = world
    ///     .into_iter()
    ///     .filter(|g| g.rank() != 1)
    ///     .map(|g| std::thread::spawn(move || {
    ///         let pair = g.subgroup(&[0, 2], 7)?;
    ///         let mut x = [g.rank()];
    ///         pair.all_reduce(&mut x, meshwork::ReduceOp::Sum)?;
    ///         Ok::<_, meshwork::Error>((pair.rank(), x[0]))
    ///     }))
    ///     .collect();
    /// let got: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect::<Result<_, _>>()?;
    /// assert_eq!(got, [(0, 2), (1, 2)]);
    /// # Ok::<(), meshwork::Error>(())
    /// ```
    pub fn subgroup(&self, members: &[u32], key: u64) -> Result<Arc<ProcessGroup>> {
        let world = self.world_size();
        if let Some(&r) = members.iter().find(|&&r| r >= world) {
            return Err(Error::InvalidArgument(format!(
                "subgroup: rank {r} is out of range; this group has ranks 0..{world}"
            )));
        }
        let mut seen = members.to_vec();
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::InvalidArgument(format!(
                "subgroup: rank {} is listed twice",
                w[0]
            )));
        }
        self.inner().check_usable()?;
        // Apart from splits (sequence numbers) and shrinks (agreements):
        // a key of its own mixed with the parent's id.
        let comm = child_comm_id(self.inner().comm_id ^ SUBGROUP_SALT, key, u32::MAX - 2);
        self.view(members.to_vec(), comm).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "subgroup: this rank ({}) is not among the members {members:?}",
                self.rank()
            ))
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
        let group = ProcessGroup::over(self.links.hold(), sub, comm, self.timeout(), topology);
        group.inner().inherit_routes(inner);
        group.inherit_overrides(self);
        group.set_recovery(self.recovery());
        if let Some(e) = self.elastic.get() {
            group.set_elastic(Arc::clone(e));
        }
        if let Some(h) = inner.heap_of() {
            group.inner().attach_heap(h);
            group.inner().inherit_mapped(inner);
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
        let inner = GroupInner::new(
            sub,
            comm,
            self.timeout(),
            topology,
            Arc::clone(&self.rpc),
            Arc::clone(&self.heap),
        );
        inner.inherit_routes(self);
        let overrides = self
            .overrides
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        *inner.overrides.lock().unwrap_or_else(|e| e.into_inner()) = overrides;
        inner.set_recovery(self.recovery());
        inner.set_quorum(self.quorum());
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
        let call = self
            .shared()
            .begin::<f64>(Call::AllReduce { op: ReduceOp::Sum }, x.len() + 1)?;
        let total = self.inner().run(&call, |c, a| match a {
            // Where every byte goes through rank 0 anyway (a star, a
            // relay tree): leaves send their f32 values, parents fold them
            // into f64 weighted sums, rank 0 divides and the f32 averages
            // come down (`Averaging`).
            Algorithm::Tree | Algorithm::Star => {
                let mut turn = Averaging {
                    x: &*x,
                    weight,
                    acc: Vec::new(),
                    avg: Vec::new(),
                    weights: Vec::new(),
                    total: 0.0,
                };
                let seg = all_reduce::seg_elems::<f64>(RING_SEGMENT_BYTES);
                all_reduce::all_reduce_tree_turned(c, &mut turn, ReduceOp::Sum, seg)?;
                let avg = turn.avg;
                let total = avg[0];
                if total > 0.0 {
                    x.copy_from_slice(&avg[1..]);
                }
                Ok(f64::from(total))
            }
            a => {
                let mut acc = weighted(x, weight);
                all_reduce::all_reduce(c, &mut acc, ReduceOp::Sum, a)?;
                let total = acc[0];
                if total > 0.0 {
                    for (v, a) in x.iter_mut().zip(&acc[1..]) {
                        *v = (a / total) as f32;
                    }
                }
                Ok(total)
            }
        })?;
        if total.is_nan() || total <= 0.0 {
            return Err(non_positive(total));
        }
        Ok(())
    }
}

/// `[w, w·x…]` in f64 (each product of two f32 exact): a rank's own
/// weighted sums, the weight first so that the total is in the first
/// segment to arrive.
fn weighted(x: &[f32], weight: f32) -> Vec<f64> {
    let w = f64::from(weight);
    std::iter::once(w)
        .chain(x.iter().map(|&v| f64::from(v) * w))
        .collect()
}

/// A federated average up a tree (`all_reduce::Turn`). Element 0 is the
/// weight, element `i + 1` the value `x[i]`. A leaf sends `[w, x…]` as
/// f32; its parent folds them into f64 sums `[Σw, Σw·x…]` (each product
/// of two f32 exact in f64), which interior ranks fold and send on; rank 0
/// divides, and the f32 averages come down, element 0 carrying the total
/// (positive if it is; else its sign, or NaN, for the error every rank
/// reports).
struct Averaging<'a> {
    x: &'a [f32],
    weight: f32,
    /// The f64 sums (a rank that folds only).
    acc: Vec<f64>,
    /// A leaf's own part going up, then everyone's averages coming down.
    avg: Vec<f32>,
    /// Each leaf child's weight, by its slot, once its first segment came.
    weights: Vec<f64>,
    total: f64,
}

impl all_reduce::Turn for Averaging<'_> {
    type Up = f64;
    type Leaf = f32;
    type Down = f32;
    fn elements(&self) -> usize {
        self.x.len() + 1
    }
    fn begin(&mut self, folds: bool) {
        if folds {
            self.acc = weighted(self.x, self.weight);
            self.avg = vec![0.0; self.x.len() + 1];
        } else {
            self.avg = std::iter::once(self.weight)
                .chain(self.x.iter().copied())
                .collect();
        }
    }
    fn up(&mut self, r: Range<usize>) -> &mut [f64] {
        &mut self.acc[r]
    }
    fn leaf(&mut self, r: Range<usize>) -> &[f32] {
        &self.avg[r]
    }
    fn fold_leaf(&mut self, child: usize, r: Range<usize>, x: &[f32], _: ReduceOp) {
        if self.weights.len() <= child {
            self.weights.resize(child + 1, 0.0);
        }
        let (mut acc, mut x) = (&mut self.acc[r.clone()], x);
        if r.start == 0 && !x.is_empty() {
            // Segments come in order: the weight before the values.
            self.weights[child] = f64::from(x[0]);
            acc[0] += self.weights[child];
            (acc, x) = (&mut acc[1..], &x[1..]);
        }
        let w = self.weights[child];
        for (a, &v) in acc.iter_mut().zip(x) {
            *a += f64::from(v) * w;
        }
    }
    fn down(&mut self, r: Range<usize>) -> &mut [f32] {
        &mut self.avg[r]
    }
    fn turn(&mut self, r: Range<usize>) {
        for i in r {
            if i == 0 {
                self.total = self.acc[0];
                self.avg[0] = match self.total {
                    t if t > 0.0 => (t as f32).max(f32::MIN_POSITIVE),
                    t => t as f32,
                };
            } else {
                self.avg[i] = (self.acc[i] / self.total) as f32;
            }
        }
    }
}

fn non_positive(total: f64) -> Error {
    Error::InvalidArgument(format!(
        "federated_average: the weights sum to {total}; the sum must be positive"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshwork_transport::mem::MemHub;
    use meshwork_transport::LaneKind;

    const LANE: LaneKey = LaneKey {
        comm: 77,
        kind: LaneKind::PointToPoint,
        tag: 3,
    };

    /// A world of 4 as raw endpoints.
    fn world() -> Vec<Arc<dyn Transport>> {
        MemHub::world(4)
            .into_iter()
            .map(|t| Arc::new(t) as Arc<dyn Transport>)
            .collect()
    }

    fn view(parent: &Arc<dyn Transport>, members: Vec<u32>) -> SubTransport {
        let rank = members.iter().position(|&m| m == parent.rank()).unwrap() as u32;
        SubTransport {
            parent: Arc::clone(parent),
            members,
            rank,
            closed: AtomicBool::new(false),
        }
    }

    /// Ranks 2 and 3 form a group; rank 1, outside it, writes to its
    /// lane first. The group hears its member (sub-rank 1), never rank
    /// 1's message under the number 1.
    #[test]
    fn a_non_member_on_the_lane_is_not_taken_for_a_member() {
        let w = world();
        let sub = view(&w[2], vec![2, 3]);
        w[1].send(2, LANE, &[b"forged"]).unwrap();
        w[3].send(2, LANE, &[b"genuine"]).unwrap();
        let (from, msg) = sub.recv_any(LANE, Duration::from_secs(5)).unwrap();
        assert_eq!((from, msg.as_ref()), (1, &b"genuine"[..]));
        // Dropped, not left queued under the lane.
        let again = sub.recv_any(LANE, Duration::from_millis(1));
        assert!(
            matches!(again, Err(TransportError::Timeout { .. })),
            "{again:?}"
        );
    }

    /// An error about a rank outside the group (a relay, say) names the
    /// member the call was for, never a member that happens to have that
    /// number here.
    #[test]
    fn errors_about_non_members_name_the_member_called() {
        let w = world();
        let sub = view(&w[2], vec![2, 3]);
        let e = sub.translate(TransportError::PeerDisconnected { rank: 1 }, 0);
        assert_eq!(e, TransportError::PeerDisconnected { rank: 0 });
        let e = sub.translate(TransportError::Timeout { waiting_on: 3 }, 0);
        assert_eq!(e, TransportError::Timeout { waiting_on: 1 });
    }

    /// A group's answerer answers its members only.
    #[test]
    fn a_view_answers_only_its_members() {
        struct Echo;
        impl meshwork_transport::Answerer for Echo {
            fn answer(
                &self,
                _src: u32,
                request: &[u8],
                _room: &mut dyn FnMut(LaneKey, usize) -> bool,
            ) -> Option<(LaneKey, Vec<u8>)> {
                Some((LANE, request.to_vec()))
            }
        }
        let only = Members {
            members: vec![2, 3],
            answerer: Arc::new(Echo),
        };
        use meshwork_transport::Answerer as _;
        let mut room = |_: LaneKey, _: usize| true;
        assert!(only.answer(1, b"get", &mut room).is_none());
        assert!(only.answer(3, b"get", &mut room).is_some());
    }

    /// Ranks 2 and 3 as a group serving RPC; rank 1, outside it, sends a
    /// request under the id member 3's own call will use. Member 3's call
    /// gets its own answer, and the handler only ever hears members.
    #[test]
    fn a_non_member_cannot_call_or_answer_in_a_group() {
        let w = world();
        let groups: Vec<Arc<ProcessGroup>> = w
            .iter()
            .map(|t| {
                Arc::new(ProcessGroup::new(
                    Arc::clone(t),
                    0,
                    Duration::from_secs(10),
                    Topology::Mesh,
                ))
            })
            .collect();
        let comm = 0x5eed_0001;
        let subs: Vec<Arc<ProcessGroup>> = [2, 3]
            .iter()
            .map(|&r| groups[r].view(vec![2, 3], comm).unwrap())
            .collect();
        let callers = Arc::new(std::sync::Mutex::new(Vec::new()));
        let heard = Arc::clone(&callers);
        subs[0].register_rpc(9, move |caller, args| {
            heard.lock().unwrap().push(caller);
            args.to_vec()
        });
        // Rank 1 (no member) asks for fn 9 with request id 0 — member 3's
        // first call's id — so an answer to it would land in that call.
        let head = super::super::rpc::request_head(9, 0);
        w[1].send(2, super::super::rpc::request_key(comm), &[&head, b"forged"])
            .unwrap();
        let got = subs[1].rpc(0, 9, b"mine").unwrap();
        assert_eq!(got, b"mine");
        assert_eq!(*callers.lock().unwrap(), [1]);
    }
}
