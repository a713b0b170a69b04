//! The one place where `meshwork-collectives` meets `meshwork-transport`:
//! [`CollComm`] implements the algorithms' `Comm` trait over a transport's
//! lanes for one collective call.
//!
//! # Message format
//!
//! A call's messages travel on lane `(comm, Collective, seq)`; every message
//! starts with a 24-byte descriptor of the call, so a rank that issued
//! something else at that sequence number is caught before its bytes are
//! used:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 1 | marker: 1 = data, 2 = abort (a mismatch was found), 3 = failed (the sender met a failed member), 4 = check (the pre-check of a rooted call) |
//! | 1 | 1 | collective id (`Collective::id`) |
//! | 2 | 1 | element type id (`DType::id`) |
//! | 3 | 1 | reduce operator id, 255 if none |
//! | 4 | 1 | algorithm id (`Algorithm::id`) |
//! | 5 | 3 | zero |
//! | 8 | 4 | root, little-endian, `u32::MAX` if none (failed: the failed rank) |
//! | 12 | 4 | abort: the rank whose call this descriptor is; zero otherwise |
//! | 16 | 8 | element count each rank passed, little-endian (failed: 0 gone, 1 silent, 2 left) |
//!
//! The payload follows at offset 24, which keeps it 8-byte aligned for the
//! reduction kernels. A rank that receives a mismatching descriptor sends
//! an abort to every peer on the same lane, carrying both calls and whose
//! each is (the second as 24 + 4 bytes of payload); every rank that gets
//! one passes it on, once, so ranks waiting on it — or on a neighbour that
//! waits on it — fail with `CollectiveMismatch` at once instead of at
//! their deadline. Likewise a rank whose call met a failed member tells
//! every other live member on the lane, naming the failed rank: no member
//! waits out its deadline behind a neighbour that already knows, and none
//! blames that neighbour.
//!
//! A rooted call (broadcast, reduce, gather, scatter) and a scan can end
//! on some rank without its hearing from the others (a broadcast's root,
//! a scan's rank 0), so a rank that called it with another root, say,
//! would return as if nothing were wrong. These first run a *pre-check*
//! before any of their data moves: every rank learns the least and the
//! greatest descriptor of all (in ⌈log₂ P⌉ rounds: pairwise exchanges
//! for a power of two, else a dissemination; in a star, through the
//! coordinator) and all go on only if both are its own:
//! otherwise every rank fails at once with `CollectiveMismatch` naming a
//! rank whose call differs. Check messages carry, after the header, the
//! least and the greatest descriptor seen so far, each followed by its
//! rank (56 bytes).

use crate::error::Error;
use crate::group::GroupInner;
use meshwork_collectives::{Algorithm, Collective, Comm, DType, ReduceOp};
use meshwork_transport::{LaneKey, LaneKind, Payload, Transport, TransportError};

const HEADER_LEN: usize = 24;
const MARK_DATA: u8 = 1;
const MARK_ABORT: u8 = 2;
const MARK_FAILED: u8 = 3;
const MARK_CHECK: u8 = 4;

/// What a failed notice says of its rank (its count field).
const GONE: u64 = 0;
const SILENT: u64 = 1;
/// It said goodbye (shut its group down) while the call needed it.
const LEFT: u64 = 2;

/// A descriptor as the pre-check orders them (its encoding), with the rank
/// that called it.
type Seen = ([u8; HEADER_LEN], u32);

/// What one rank called: everything that must match across ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Descriptor {
    pub coll: Collective,
    pub dtype: DType,
    pub count: u64,
    pub op: Option<ReduceOp>,
    pub root: Option<u32>,
    pub algo: Algorithm,
}

impl Descriptor {
    fn encode(&self, marker: u8) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0] = marker;
        h[1] = self.coll.id();
        h[2] = self.dtype.id();
        h[3] = self.op.map_or(u8::MAX, ReduceOp::id);
        h[4] = self.algo.id();
        h[8..12].copy_from_slice(&self.root.unwrap_or(u32::MAX).to_le_bytes());
        h[16..24].copy_from_slice(&self.count.to_le_bytes());
        h
    }

    /// Decode a header; `None` if it is not one (garbage on the lane).
    fn decode(h: &[u8]) -> Option<(u8, Descriptor)> {
        let h: &[u8; HEADER_LEN] = h.get(..HEADER_LEN)?.try_into().ok()?;
        let root = u32::from_le_bytes(h[8..12].try_into().ok()?);
        let op = match h[3] {
            u8::MAX => None,
            id => Some(ReduceOp::from_id(id)?),
        };
        Some((
            h[0],
            Descriptor {
                coll: Collective::from_id(h[1])?,
                dtype: DType::from_id(h[2])?,
                op,
                algo: Algorithm::from_id(h[4])?,
                root: (root != u32::MAX).then_some(root),
                count: u64::from_le_bytes(h[16..24].try_into().ok()?),
            },
        ))
    }

    /// Human form for errors: `all_reduce(f32 × 3, sum, recursive_doubling)`.
    pub(crate) fn describe(&self) -> String {
        let mut s = format!(
            "{}({} × {}",
            self.coll.name(),
            self.dtype.name(),
            self.count
        );
        if let Some(op) = self.op {
            s += &format!(", {}", op.name());
        }
        if let Some(root) = self.root {
            s += &format!(", root {root}");
        }
        s + &format!(", {})", self.algo.name())
    }
}

/// One collective call's view of the transport.
pub(crate) struct CollComm<'a> {
    inner: &'a GroupInner,
    key: LaneKey,
    desc: Descriptor,
    header: [u8; HEADER_LEN],
    /// An abort was sent (or passed on) for this call already.
    aborted: bool,
}

impl<'a> CollComm<'a> {
    pub(crate) fn new(inner: &'a GroupInner, seq: u64, desc: Descriptor) -> Self {
        CollComm {
            inner,
            key: LaneKey {
                comm: inner.comm_id,
                kind: LaneKind::Collective,
                tag: seq,
            },
            desc,
            header: desc.encode(MARK_DATA),
            aborted: false,
        }
    }

    fn transport(&self) -> &dyn Transport {
        &*self.inner.transport
    }

    fn map_err(&self, e: TransportError) -> Error {
        let err = self
            .inner
            .error_in(e, self.desc.coll.name(), Some(self.key.tag));
        self.tell_failed(&err);
        err
    }

    /// This call met a failed member: tell every other live member on the
    /// call's lane, so that those waiting fail now, naming it.
    fn tell_failed(&self, err: &Error) {
        let (rank, mut how) = match err {
            Error::PeerDisconnected { rank } => (*rank, GONE),
            Error::Timeout { waiting_on, .. } => match waiting_on.first() {
                Some(&r) => (r, SILENT),
                None => return,
            },
            _ => return,
        };
        let failed = self.transport().failed();
        if !failed.contains(&rank) {
            if how == GONE && self.transport().left().contains(&rank) {
                // It left (shut down) while this call needed it.
                how = LEFT;
            } else {
                // A timeout on a rank nobody knows failed (a rank that
                // skipped the call, say): nothing to tell.
                return;
            }
        }
        let mut h = self.desc.encode(MARK_FAILED);
        h[8..12].copy_from_slice(&rank.to_le_bytes());
        h[16..24].copy_from_slice(&how.to_le_bytes());
        let me = self.transport().rank();
        for peer in (0..self.transport().world()).filter(|p| *p != me && !failed.contains(p)) {
            // Best effort: collective lanes take a send without waiting
            // for credit, and the failed ranks (whose rings may be full)
            // are left out.
            let _ = self.transport().send(peer, self.key, &[&h]);
        }
    }

    /// A member's notice that the call met a failed rank. The notice
    /// voids this call either way (its sender has left it); it names the
    /// rank as failed only if this rank's own failure detector agrees, now
    /// or within the grace an honest notice needs (its sender told every
    /// member of the failure through the transport before it wrote the
    /// notice). A member's word alone never makes a rank failed here.
    fn failed_notice(&self, from: u32, msg: &[u8]) -> Option<Error> {
        let h: &[u8; HEADER_LEN] = msg.get(..HEADER_LEN)?.try_into().ok()?;
        if h[0] != MARK_FAILED {
            return None;
        }
        let rank = u32::from_le_bytes(h[8..12].try_into().ok()?);
        let how = u64::from_le_bytes(h[16..24].try_into().ok()?);
        let silent = how == SILENT;
        let plausible = rank != self.inner.rank && rank < self.inner.world;
        let seen = plausible
            && if how == LEFT {
                self.left_within(rank, self.inner.grace())
            } else {
                self.transport().await_failure_of(rank, self.inner.grace())
            };
        if !seen {
            tracing::warn!(
                from,
                rank,
                "a member says rank {rank} failed, which this rank does not see; the call is void"
            );
            return Some(self.mismatch(
                from,
                format!("a notice that rank {rank} failed, which this rank does not see"),
            ));
        }
        let err = if silent {
            Error::Timeout {
                op: self.desc.coll.name().to_string(),
                waiting_on: vec![rank],
                detail: String::new(),
            }
        } else {
            Error::PeerDisconnected { rank }
        };
        if self.inner.recovery() == super::Recovery::Abort {
            self.transport().revoke(self.inner.comm_id);
        }
        Some(err)
    }

    /// Whether `rank` is known here to have left (said goodbye, link
    /// ended), now or within `grace`: a member's notice that it left is
    /// checked against this rank's own links as a failure notice is.
    fn left_within(&self, rank: u32, grace: std::time::Duration) -> bool {
        let until = std::time::Instant::now() + grace;
        loop {
            if self.transport().left().contains(&rank) {
                return true;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            // A departure's goodbye reaches every member within a round
            // trip; look again shortly.
            self.transport()
                .await_failure(self.key.comm, std::time::Duration::from_millis(5));
        }
    }

    fn mismatch(&self, from: u32, theirs: String) -> Error {
        Error::CollectiveMismatch {
            op: self.desc.coll.name().to_string(),
            ours: self.desc.describe(),
            theirs,
            rank: from,
        }
    }

    /// Tell every peer this call is void, so none waits for its deadline:
    /// `first` called one thing, `second` another (once per call).
    fn abort_all(&mut self, first: (Descriptor, u32), second: (Descriptor, u32)) {
        if std::mem::replace(&mut self.aborted, true) {
            return;
        }
        let mut head = first.0.encode(MARK_ABORT);
        head[12..16].copy_from_slice(&first.1.to_le_bytes());
        let mut other = [0u8; HEADER_LEN + 4];
        other[..HEADER_LEN].copy_from_slice(&second.0.encode(MARK_DATA));
        other[HEADER_LEN..].copy_from_slice(&second.1.to_le_bytes());
        let me = self.transport().rank();
        for peer in (0..self.transport().world()).filter(|&p| p != me) {
            // Best effort: a peer that is gone needs no notice.
            let _ = self.transport().send(peer, self.key, &[&head, &other]);
        }
    }

    /// This rank's call and `from`'s differ (`theirs`, `None`: an
    /// undecodable message): void the call everywhere and say so.
    fn mismatch_from(&mut self, from: u32, theirs: Option<Descriptor>) -> Error {
        let me = (self.desc, self.inner.rank);
        match theirs {
            Some(d) => {
                self.abort_all((d, from), me);
                self.mismatch(from, d.describe())
            }
            None => {
                self.abort_all(me, me);
                self.mismatch(from, "an undecodable message".into())
            }
        }
    }

    /// An abort from `from`: which call differs from this rank's, and
    /// whose; passed on to every peer, once.
    fn aborted_by(&mut self, from: u32, msg: &[u8]) -> Error {
        let first = Descriptor::decode(msg).map(|(_, d)| {
            let rank = msg
                .get(12..16)
                .and_then(|b| b.try_into().ok())
                .map_or(from, u32::from_le_bytes);
            (d, rank)
        });
        let second = msg.get(HEADER_LEN..HEADER_LEN * 2 + 4).and_then(|b| {
            let (_, d) = Descriptor::decode(b)?;
            let rank = u32::from_le_bytes(b[HEADER_LEN..].try_into().ok()?);
            Some((d, rank))
        });
        let theirs = [first, second]
            .into_iter()
            .flatten()
            .find(|(d, _)| *d != self.desc)
            .or(first);
        match theirs {
            Some((d, rank)) => {
                self.abort_all((d, rank), second.unwrap_or((self.desc, self.inner.rank)));
                self.mismatch(rank, d.describe())
            }
            None => self.mismatch(from, "an undecodable abort".into()),
        }
    }
}

impl Comm for CollComm<'_> {
    type Error = Error;
    type Buf = Payload;

    fn rank(&self) -> usize {
        self.inner.rank as usize
    }

    fn size(&self) -> usize {
        self.inner.world as usize
    }

    /// A relay tree's fanout; any other group runs the tree algorithms as
    /// a star (every rank a child of rank 0).
    fn fanout(&self) -> usize {
        match self.inner.topology {
            meshwork_collectives::Topology::Tree { fanout } => fanout.max(1) as usize,
            _ => (self.inner.world as usize).saturating_sub(1).max(1),
        }
    }

    fn send(&mut self, to: usize, data: &[u8]) -> Result<(), Error> {
        self.transport()
            .send(to as u32, self.key, &[&self.header, data])
            .map_err(|e| self.map_err(e))
    }

    fn recv(&mut self, from: usize, len: usize) -> Result<Payload, Error> {
        let from = from as u32;
        let mut msg = self
            .transport()
            .recv(from, self.key, self.inner.timeout(), None)
            .map_err(|e| self.map_err(e))?;
        self.check(from, msg.as_ref())?;
        msg.advance(HEADER_LEN);
        if msg.len() != len {
            let me = (self.desc, self.inner.rank);
            self.abort_all(me, me);
            return Err(self.mismatch(
                from,
                format!("a {}-byte message where {len} bytes were due", msg.len()),
            ));
        }
        Ok(msg)
    }

    fn is_gone(&self, rank: usize) -> bool {
        u32::try_from(rank).is_ok_and(|r| self.transport().is_gone(r))
    }

    fn recv_into_bytes(&mut self, from: usize, dst: &mut [u8]) -> Result<(), Error> {
        let mut head = [0u8; HEADER_LEN];
        let got =
            self.transport()
                .recv_into(from as u32, self.key, self.inner.timeout(), &mut head, dst);
        match got {
            Ok(()) => self.check(from as u32, &head),
            // Of another length (an abort, a mismatched call): taken and
            // reported as `recv` reports it.
            Err(TransportError::LengthMismatch { .. }) => {
                let msg = self.recv(from, dst.len())?;
                dst.copy_from_slice(msg.as_ref());
                Ok(())
            }
            Err(e) => Err(self.map_err(e)),
        }
    }
}

impl CollComm<'_> {
    /// A received message's descriptor against this call's: a mismatch
    /// voids the call on every rank.
    fn check(&mut self, from: u32, msg: &[u8]) -> Result<(), Error> {
        if let Some(err) = self.failed_notice(from, msg) {
            return Err(err);
        }
        match Descriptor::decode(msg) {
            Some((MARK_DATA, theirs)) if theirs == self.desc => Ok(()),
            Some((MARK_ABORT, _)) => Err(self.aborted_by(from, msg)),
            Some((_, theirs)) => Err(self.mismatch_from(from, Some(theirs))),
            None => Err(self.mismatch_from(from, None)),
        }
    }

    /// The pre-check of a call that some rank may end without hearing
    /// from the others (see the module docs): `Ok` once every rank is
    /// known to have called the same.
    pub(crate) fn precheck(&mut self) -> Result<(), Error> {
        let coll = self.desc.coll;
        let rooted = matches!(
            coll,
            Collective::Broadcast
                | Collective::Reduce
                | Collective::Gather
                | Collective::Scatter
                | Collective::Scan
                | Collective::ExclusiveScan
        );
        let (me, world) = (self.inner.rank, self.inner.world);
        if !rooted || world < 2 {
            return Ok(());
        }
        let own = (self.desc.encode(MARK_DATA), me);
        let (mut least, mut most) = (own, own);
        if self.inner.topology == meshwork_collectives::Topology::Star {
            if me == 0 {
                for w in 1..world {
                    let (l, m) = self.hear_check(w)?;
                    least = least.min(l);
                    most = most.max(m);
                }
                for w in 1..world {
                    self.send_check(w, least, most)?;
                }
            } else {
                self.send_check(0, own, own)?;
                (least, most) = self.hear_check(0)?;
            }
        } else {
            // A power of two exchanges in pairs (`r xor 2^k`, both ways,
            // as recursive doubling does); other worlds disseminate (to
            // `r + 2^k`, from `r − 2^k`). Pairs wait on the rank they send
            // to, which on ranks sharing cores costs fewer hand-offs.
            let pairs = world.is_power_of_two();
            let mut step = 1u32;
            while step < world {
                let (to, from) = if pairs {
                    (me ^ step, me ^ step)
                } else {
                    ((me + step) % world, (me + world - step) % world)
                };
                self.send_check(to, least, most)?;
                let (l, m) = self.hear_check(from)?;
                least = least.min(l);
                most = most.max(m);
                step = step.saturating_mul(2);
            }
        }
        // Every rank holds the same least and greatest: all fail, or none.
        let other = [least, most].into_iter().find(|s| s.0 != own.0);
        match other.and_then(|(bytes, rank)| Some((Descriptor::decode(&bytes)?.1, rank))) {
            None => Ok(()),
            Some((d, rank)) => Err(self.mismatch(rank, d.describe())),
        }
    }

    fn send_check(&self, to: u32, least: Seen, most: Seen) -> Result<(), Error> {
        let mut body = [0u8; 2 * (HEADER_LEN + 4)];
        for (i, (bytes, rank)) in [least, most].into_iter().enumerate() {
            let at = i * (HEADER_LEN + 4);
            body[at..at + HEADER_LEN].copy_from_slice(&bytes);
            body[at + HEADER_LEN..at + HEADER_LEN + 4].copy_from_slice(&rank.to_le_bytes());
        }
        let head = self.desc.encode(MARK_CHECK);
        self.transport()
            .send(to, self.key, &[&head, &body])
            .map_err(|e| self.map_err(e))
    }

    /// `from`'s check message: the least and greatest descriptors it has
    /// seen (decodable ones only: a rank's own encoding is checked).
    fn hear_check(&mut self, from: u32) -> Result<(Seen, Seen), Error> {
        let msg = self
            .transport()
            .recv(from, self.key, self.inner.timeout(), None)
            .map_err(|e| self.map_err(e))?;
        let msg = msg.as_ref();
        if let Some(err) = self.failed_notice(from, msg) {
            return Err(err);
        }
        let seen = |at: usize| -> Option<Seen> {
            let bytes: [u8; HEADER_LEN] = msg.get(at..at + HEADER_LEN)?.try_into().ok()?;
            let rank = u32::from_le_bytes(
                msg.get(at + HEADER_LEN..at + HEADER_LEN + 4)?
                    .try_into()
                    .ok()?,
            );
            let (marker, _) = Descriptor::decode(&bytes)?;
            (marker == MARK_DATA && rank < self.inner.world).then_some((bytes, rank))
        };
        match Descriptor::decode(msg) {
            Some((MARK_CHECK, _)) => match (seen(HEADER_LEN), seen(2 * HEADER_LEN + 4)) {
                (Some(l), Some(m)) if msg.len() == HEADER_LEN + 2 * (HEADER_LEN + 4) => Ok((l, m)),
                _ => Err(self.mismatch_from(from, None)),
            },
            Some((MARK_ABORT, _)) => Err(self.aborted_by(from, msg)),
            Some((_, theirs)) => Err(self.mismatch_from(from, Some(theirs))),
            None => Err(self.mismatch_from(from, None)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::ProcessGroup;
    use meshwork_transport::{pipe_world, Shape};
    use std::sync::Arc;
    use std::time::Duration;

    /// Rank 0 of a world of three, holding the token but hostile, writes
    /// on the first collective's lane that rank 2 failed. Ranks 1 and 2
    /// run the collective: rank 1's call is void (the notice's sender left
    /// it) and names rank 0 as the one who voided it; rank 2 is not taken
    /// for failed, here or anywhere.
    #[test]
    fn a_members_word_does_not_make_a_rank_failed() {
        let mut world = pipe_world(3, Shape::Mesh).unwrap().into_iter();
        let hostile: Arc<dyn Transport> = Arc::new(world.next().unwrap());
        let groups: Vec<Arc<ProcessGroup>> = world
            .map(|t| {
                Arc::new(ProcessGroup::new(
                    Arc::new(t),
                    0,
                    Duration::from_millis(300),
                    meshwork_collectives::Topology::Mesh,
                ))
            })
            .collect();
        let desc = Descriptor {
            coll: Collective::AllReduce,
            dtype: DType::U32,
            count: 2,
            op: Some(ReduceOp::Sum),
            root: None,
            algo: Algorithm::RecursiveDoubling,
        };
        let mut notice = desc.encode(MARK_FAILED);
        notice[8..12].copy_from_slice(&2u32.to_le_bytes());
        let lane = LaneKey {
            comm: 0,
            kind: LaneKind::Collective,
            tag: 0,
        };
        hostile.send(1, lane, &[&notice]).unwrap();
        let calls: Vec<_> = groups
            .iter()
            .map(|g| {
                let g = Arc::clone(g);
                std::thread::spawn(move || {
                    g.set_algorithm("all_reduce", Some("recursive_doubling"))
                        .unwrap();
                    let mut x = [1u32; 2];
                    g.all_reduce(&mut x, ReduceOp::Sum)
                })
            })
            .collect();
        let got: Vec<_> = calls.into_iter().map(|c| c.join().unwrap()).collect();
        match &got[0] {
            Err(Error::CollectiveMismatch {
                rank: 0, theirs, ..
            }) => {
                assert!(theirs.contains("rank 2 failed"), "{theirs}");
            }
            other => panic!("rank 1: {other:?}"),
        }
        assert!(got[1].is_err(), "rank 0 never joined the call");
        for g in &groups {
            assert!(
                !g.failed().contains(&2),
                "rank {}: {:?}",
                g.rank(),
                g.failed()
            );
        }
    }

    #[test]
    fn descriptor_round_trips() {
        let d = Descriptor {
            coll: Collective::Broadcast,
            dtype: DType::BF16,
            count: 1 << 40,
            op: None,
            root: Some(3),
            algo: Algorithm::Chain,
        };
        assert_eq!(
            Descriptor::decode(&d.encode(MARK_DATA)),
            Some((MARK_DATA, d))
        );
        assert_eq!(
            d.describe(),
            "broadcast(bf16 × 1099511627776, root 3, chain)"
        );
        assert_eq!(Descriptor::decode(&[1, 2, 3]), None);
        assert_eq!(
            Descriptor::decode(&[
                1, 99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
            ]),
            None
        );
    }
}
