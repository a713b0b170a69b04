//! `agree` and `shrink`: the survivors of a failure settle, together, what
//! failed, and go on without it.
//!
//! # The agreement
//!
//! Hierarchical consensus with a perfect failure detector (Cachin,
//! Guerraoui and Rodrigues, *Introduction to Reliable and Secure
//! Distributed Programming*, 2011, algorithm 5.2), after an exchange of
//! the members' flags:
//!
//! 1. Every member sends its flags to every other member it does not know
//!    failed, then hears each of them (or learns it failed). Its proposal
//!    is the AND of the flags it heard and the set it knows failed.
//! 2. Round `i` is led by rank `i`. A member hears the leader of every
//!    round below its own rank, adopting each leader's proposal it hears,
//!    and passing over a leader it learns failed; in its own round it
//!    sends what it holds to every member above it and returns it.
//!
//! Every member above the lowest surviving rank adopts that rank's
//! proposal (it is alive: its message arrives), and the ranks below it
//! failed: every survivor returns the same value, even if members fail
//! during the agreement. "Failed" is the transport's failure detector
//! (`Transport::failed`: gone without a goodbye, silent for a whole
//! deadline, a stopped same-host process), plus a member that sends
//! nothing for a whole deadline — which is the detector's accuracy: a
//! member that is merely slow past the deadline is counted failed.
//!
//! Its messages travel on a communicator of their own, derived from the
//! group's, which revocation never touches: a revoked group can still
//! agree and shrink.

use super::{GroupInner, ProcessGroup};
use crate::error::{Error, Result};
use meshwork_transport::{LaneKey, LaneKind, Payload, TransportError};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a member waiting on another looks for news of its failure.
const LOOK: Duration = Duration::from_millis(20);

impl GroupInner {
    /// The communicator of this group's agreements.
    fn agree_comm(&self) -> u64 {
        super::split::child_comm_id(self.comm_id, u64::MAX, u32::MAX)
    }

    /// The next message from `m` on `key`, or `None` once `m` is known
    /// failed (added to `failed`) or sends nothing for a whole deadline.
    fn hear(&self, m: u32, key: LaneKey, failed: &mut BTreeSet<u32>) -> Result<Option<Payload>> {
        let t = &self.transport;
        let deadline = Instant::now() + self.timeout();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match t.recv(m, key, left.min(LOOK), None) {
                Ok(msg) => return Ok(Some(msg)),
                Err(TransportError::PeerDisconnected { .. }) => {}
                Err(TransportError::Timeout { .. }) => {
                    if !left.is_zero() && !t.failed().contains(&m) {
                        continue;
                    }
                }
                Err(e) => return Err(Error::from_transport(e, "agree")),
            }
            failed.insert(m);
            return Ok(None);
        }
    }
}

impl GroupInner {
    /// See [`ProcessGroup::agree`].
    pub(crate) fn agree(&self, flags: u64) -> Result<(u64, Vec<u32>)> {
        let inner = self;
        if inner.shut_down.load(Ordering::Acquire) {
            return Err(Error::ShutDown);
        }
        let n = inner.agreements.fetch_add(1, Ordering::Relaxed);
        let key = |phase: u64| LaneKey {
            comm: inner.agree_comm(),
            kind: LaneKind::PointToPoint,
            tag: n.wrapping_mul(2).wrapping_add(phase),
        };
        let t = &inner.transport;
        let (me, world) = (inner.rank, inner.world);
        let mut failed: BTreeSet<u32> = t.failed().into_iter().collect();
        let others = |failed: &BTreeSet<u32>| -> Vec<u32> {
            (0..world)
                .filter(|r| *r != me && !failed.contains(r))
                .collect()
        };
        // 1: the flags.
        for m in others(&failed) {
            // Best effort: one that cannot take them is found failed below.
            let _ = t.send(m, key(0), &[&flags.to_le_bytes()]);
        }
        let mut and = flags;
        for m in others(&failed) {
            if let Some(msg) = inner.hear(m, key(0), &mut failed)? {
                let theirs = msg.as_ref().get(..8).and_then(|b| b.try_into().ok());
                let Some(theirs) = theirs else {
                    return Err(Error::InvalidArgument(format!(
                        "agree: rank {m} sent a malformed proposal"
                    )));
                };
                and &= u64::from_le_bytes(theirs);
            }
        }
        let mut held = (and, failed.clone());
        // 2: rounds led by each lower rank, then this rank's own.
        for leader in 0..me {
            if failed.contains(&leader) {
                continue;
            }
            if let Some(msg) = inner.hear(leader, key(1), &mut failed)? {
                held = decode(msg.as_ref(), world).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "agree: rank {leader} sent a malformed decision"
                    ))
                })?;
            }
        }
        let decision = encode(held.0, &held.1);
        for m in others(&failed).into_iter().filter(|&m| m > me) {
            let _ = t.send(m, key(1), &[&decision]);
        }
        tracing::debug!(agreement = n, flags = held.0, failed = ?held.1, "agreed");
        Ok((held.0, held.1.into_iter().collect()))
    }
}

fn encode(flags: u64, failed: &BTreeSet<u32>) -> Vec<u8> {
    let mut m = flags.to_le_bytes().to_vec();
    for r in failed {
        m.extend_from_slice(&r.to_le_bytes());
    }
    m
}

fn decode(m: &[u8], world: u32) -> Option<(u64, BTreeSet<u32>)> {
    let flags = u64::from_le_bytes(m.get(..8)?.try_into().ok()?);
    let rest = &m[8..];
    if !rest.len().is_multiple_of(4) {
        return None;
    }
    let failed: BTreeSet<u32> = rest
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    failed.iter().all(|&r| r < world).then_some((flags, failed))
}

impl ProcessGroup {
    /// Fault-tolerant agreement: every live member calls it, and every one
    /// that returns gets the same `(flags, failed)` — the AND of the
    /// surviving members' `flags` and the set of ranks agreed failed,
    /// ascending — even if members fail during it. It works on a revoked
    /// group. Each call waits on each member at most the deadline (one
    /// that sends nothing that long counts as failed). The algorithm is
    /// described in `docs/fault-tolerance.md`.
    pub fn agree(&self, flags: u64) -> Result<(u64, Vec<u32>)> {
        self.inner().agree(flags)
    }

    /// A new group of the survivors: agree on the failed set (see
    /// [`agree`](Self::agree)), then form a fresh communicator of every
    /// other member, ranks renumbered in their old order, over the same
    /// links. Every live member calls it; each gets the same group. A
    /// member the others agreed failed (one that was only slow) gets
    /// `InvalidArgument` saying so.
    pub fn shrink(&self) -> Result<Arc<ProcessGroup>> {
        if self.inner().fixed_relays() {
            return Err(Error::InvalidArgument(crate::shape::sparse_cannot(
                "shrink",
            )));
        }
        let n = self.inner().agreements.load(Ordering::Relaxed);
        let (_, failed) = self.agree(u64::MAX)?;
        let members: Vec<u32> = (0..self.inner().world)
            .filter(|r| !failed.contains(r))
            .collect();
        // The same on every survivor: the agreement's number.
        let comm = super::split::child_comm_id(self.inner().comm_id, n, u32::MAX - 1);
        tracing::info!(?failed, world = members.len(), "group shrunk");
        self.view(members, comm).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "shrink: the other members agreed that this rank ({}) failed",
                self.inner().rank
            ))
        })
    }
}

impl ProcessGroup {
    /// A larger group: this one's members keep their ranks and `joiners`
    /// new processes (started with [`Node::join_running`]) take the ranks
    /// after them, in the order they reached the job's seed. Every member
    /// calls it with the same `joiners`; it returns once all of them and
    /// the new processes have formed the new group (fresh links and TLS
    /// identities), or fails within the deadline naming the ranks that
    /// never came (`FormationTimeout`). The job must have formed through
    /// a seed that still serves it (see `docs/fault-tolerance.md`). This
    /// group stays usable; drop it when done.
    ///
    /// [`Node::join_running`]: crate::Node::join_running
    pub fn grow(&self, joiners: u32) -> Result<Arc<ProcessGroup>> {
        if self.inner().fixed_relays() {
            return Err(Error::InvalidArgument(crate::shape::sparse_cannot("grow")));
        }
        let elastic = self.elastic.get().ok_or_else(|| {
            Error::InvalidArgument(
                "grow: the group did not form through a seed (SEED), so there is none to admit new processes"
                    .into(),
            )
        })?;
        Arc::clone(elastic).grow(self, joiners)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_round_trip_and_garbage_is_refused() {
        let failed: BTreeSet<u32> = [1, 3].into_iter().collect();
        let m = encode(0b1010, &failed);
        assert_eq!(decode(&m, 4), Some((0b1010, failed)));
        assert_eq!(decode(&m, 3), None, "a rank outside the world");
        assert_eq!(decode(&m[..9], 4), None, "a torn rank");
        assert_eq!(decode(&m[..7], 4), None, "short");
    }

    /// Garbage of every length decodes to `None` or to what re-encodes to
    /// the same bytes; never a panic (fixed seed).
    #[test]
    fn garbage_decisions_never_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..200usize {
            for _ in 0..50 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        (x % 7) as u8
                    })
                    .collect();
                if let Some((flags, failed)) = decode(&bytes, 5) {
                    assert!(failed.iter().all(|&r| r < 5));
                    let again = encode(flags, &failed);
                    assert_eq!(decode(&again, 5), Some((flags, failed)));
                }
            }
        }
    }
}
