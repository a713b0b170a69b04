//! What this rank holds each sender to, and which communicators it
//! answers for: lane, byte and lane-count bounds on what a peer may have
//! queued here; the sequence window of collectives; revocations (only of
//! communicators this rank has, the rest held, bounded, until it makes
//! them); communicators forgotten once their group is done.

use super::{consumed, lane_closed, Change, Inbox, State};
use crate::{LaneKey, LaneKind};
use std::collections::VecDeque;

/// Default number of messages one sender may have queued on one budgeted
/// lane of one receiver; past it the sender waits.
pub const LANE_DEPTH: u32 = 256;

/// Lanes one sender may hold budgeted messages (point to point, RPC) on
/// here. A sender keeps to it: it waits for credit before it opens a
/// lane past it. A sender past it is refused.
pub const LANES_PER_SENDER: usize = 1 << 12;

/// Collective and control lanes one sender may hold messages on here:
/// honest traffic stays far inside (a lane per call the sender is ahead
/// of this rank by; 1 024 non-blocking calls in flight per group at
/// most); a sender past it is refused.
pub(crate) const OTHER_LANES_PER_SENDER: usize = 1 << 16;

/// What this rank holds its peers to on budgeted lanes: what every
/// sender holds itself to (`PEER_BUDGET_BYTES`, `LANE_DEPTH`, equal on
/// every rank: checked in the handshake).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub budget: u64,
    pub lane_depth: u32,
}

/// Revocations one peer may have held here for communicators this rank
/// does not have yet (see `Inbox::revoke_from`).
pub(crate) const PENDING_REVOCATIONS: usize = 16;

/// Collective sequence numbers accepted ahead of the highest this rank has
/// issued on a communicator; a peer that skips further ahead is refused
/// (its link is closed) rather than allowed to open lanes at arbitrary
/// sequence numbers. Legal programs stay far inside it: non-blocking
/// operations are capped at 1024 in flight, and only a root that sends
/// broadcasts in a loop without ever waiting could run a million calls
/// ahead of a slow receiver.
pub const SEQ_WINDOW: u64 = 1 << 20;

/// Lanes whose senders are held to a byte budget: the application decides
/// when it receives them. Collective and control traffic is bounded by the
/// algorithms' own pipelines.
pub(crate) fn budgeted(kind: LaneKind) -> bool {
    matches!(
        kind,
        LaneKind::PointToPoint | LaneKind::Matched | LaneKind::Rpc
    )
}

/// Messages one sender may have queued on one lane here, whatever its
/// kind: budgeted lanes stop an honest sender at its lane depth long
/// before this; collective lanes hold a collective's segments (a 16 GiB
/// broadcast in 256 KiB segments is 65 536); control lanes hold a handful.
/// A sender past it is misbehaving, and its link is closed.
pub(crate) fn lane_bound(kind: LaneKind) -> usize {
    match kind {
        LaneKind::Control => 1 << 12,
        LaneKind::PointToPoint | LaneKind::Matched | LaneKind::Rpc | LaneKind::Collective => {
            1 << 18
        }
    }
}

impl State {
    /// Whether one more message of `n` bytes from `src` on `key` keeps
    /// within what any sender may have queued here (see
    /// `Inbox::deliver_checked`).
    pub(super) fn check(&self, src: u32, key: LaneKey, n: u64) -> Result<(), &'static str> {
        let queued = self.lanes.get(&(src, key)).map_or(0, VecDeque::len);
        if queued >= lane_bound(key.kind) {
            return Err("more messages queued on one lane than any sender may");
        }
        let Some(p) = self.peers.get(src as usize) else {
            return Ok(());
        };
        let new_lane = queued == 0;
        if budgeted(key.kind) {
            if let Some(limits) = self.limits {
                if queued >= limits.lane_depth as usize {
                    return Err("more messages on one lane than LANE_DEPTH");
                }
                if p.budgeted_bytes > 0 && p.budgeted_bytes.saturating_add(n) > limits.budget {
                    return Err("more bytes queued than PEER_BUDGET_BYTES");
                }
            }
            if new_lane && p.budgeted_lanes >= LANES_PER_SENDER {
                return Err("messages on more point-to-point and RPC lanes than any sender may");
            }
        } else if new_lane && p.other_lanes >= OTHER_LANES_PER_SENDER {
            return Err("messages on more collective and control lanes than any sender may");
        }
        Ok(())
    }
}

impl Inbox {
    /// Hold senders off links to `limits` (see [`deliver_checked`]).
    ///
    /// [`deliver_checked`]: Self::deliver_checked
    pub(crate) fn set_limits(&self, limits: Limits) {
        self.lock().limits = Some(limits);
    }

    /// Whether `n` more bytes of budgeted lanes from `src` fit in the byte
    /// budget every sender holds itself to, counting `held` bytes of its
    /// that wait outside the inbox for their turn (the QUIC order keeper)
    /// and, when they are for this rank (`here`), what it has queued here.
    /// The rule is [`State::check`]'s: one message fits when nothing is
    /// counted, else the total stays within `PEER_BUDGET_BYTES`. A sender
    /// reserves its budget before it sends and gets it back only after
    /// this rank took the message, so an honest sender never has more
    /// held and queued here than that. Senders in this process (no
    /// limits) always fit.
    pub(crate) fn budget_admits(&self, src: u32, held: u64, n: u64, here: bool) -> bool {
        let st = self.lock();
        let Some(limits) = st.limits else {
            return true;
        };
        let queued = match st.peers.get(src as usize) {
            Some(p) if here => p.budgeted_bytes,
            _ => 0,
        };
        let counted = held.saturating_add(queued);
        counted == 0 || counted.saturating_add(n) <= limits.budget
    }

    /// A peer's revocation of `comm`: revoked (as [`revoke`]) if this rank
    /// has the communicator — `Some(first)` — else held until it does,
    /// `None`. A peer cannot revoke what this rank does not have (an
    /// agreement's communicator, which must outlive revocation, or one
    /// made up), nor grow the revoked set: revocations of communicators
    /// not (yet) here are held at most [`PENDING_REVOCATIONS`] per peer,
    /// the oldest giving way.
    ///
    /// A revocation counts only from a member of `comm` (a rank that
    /// passes one on has the communicator, so is one), here or when the
    /// communicator is made.
    ///
    /// [`revoke`]: Self::revoke
    pub(crate) fn revoke_from(&self, peer: u32, comm: u64) -> Option<bool> {
        let mut st = self.lock();
        if let Some(members) = st.members.get(&comm) {
            if !members.contains(&peer) {
                // Not its group (a rank a shrink expelled, a member of a
                // sibling): its word does not void this group's calls.
                tracing::warn!(
                    peer,
                    comm,
                    "a revocation from a rank that is not a member; ignored"
                );
                return None;
            }
            drop(st);
            return Some(self.revoke(comm));
        }
        if st.forgotten.contains(&comm) || st.pending_revocations.contains(&(peer, comm)) {
            return None;
        }
        let held = st
            .pending_revocations
            .iter()
            .filter(|(p, _)| *p == peer)
            .count();
        if held >= PENDING_REVOCATIONS {
            if let Some(i) = st.pending_revocations.iter().position(|(p, _)| *p == peer) {
                st.pending_revocations.remove(i);
            }
        }
        st.pending_revocations.push_back((peer, comm));
        None
    }

    /// Revoke communicator `comm`: every wait on its lanes, now and
    /// later, fails with `Revoked`. Whether it was the first revocation.
    pub(crate) fn revoke(&self, comm: u64) -> bool {
        let mut st = self.lock();
        let first = st.revoked.insert(comm);
        st.wake(Change::All);
        first
    }

    /// This rank is done with `comm` (`Transport::forget`): what is queued
    /// for it is dropped (and owed back to its senders as credit), its
    /// waits end with `Closed`, and what comes for it later is dropped.
    pub(crate) fn forget(&self, comm: u64) {
        let mut st = self.lock();
        if !st.forgotten.insert(comm) {
            return;
        }
        let lanes: Vec<(u32, LaneKey)> = st
            .lanes
            .keys()
            .filter(|(_, key)| key.comm == comm)
            .copied()
            .collect();
        for (src, key) in lanes {
            for msg in st.lanes.remove(&(src, key)).unwrap_or_default() {
                consumed(&mut st, src, key, msg.len());
            }
            lane_closed(&mut st, src, key);
        }
        st.members.remove(&comm);
        st.issued.remove(&comm);
        st.wake(Change::All);
    }

    /// A collective of `comm` needs every one of `members`: its waits fail
    /// as soon as one of them is known failed, naming it.
    /// Whether a member revoked `comm` before it was made here (the
    /// caller then revokes it).
    pub(crate) fn set_members(&self, comm: u64, members: Vec<u32>) -> bool {
        let mut st = self.lock();
        let by_member = st
            .pending_revocations
            .iter()
            .any(|(p, c)| *c == comm && members.contains(p));
        st.pending_revocations.retain(|(_, c)| *c != comm);
        st.members.insert(comm, members);
        by_member
    }

    pub(crate) fn is_revoked(&self, comm: u64) -> bool {
        !self.glance.none_revoked() && self.lock().revoked.contains(&comm)
    }

    /// This rank issued collective `seq` on `comm`.
    pub(crate) fn note_issued(&self, comm: u64, seq: u64) {
        let mut st = self.lock();
        let e = st.issued.entry(comm).or_insert(0);
        *e = (*e).max(seq);
    }

    /// Whether a collective message for `seq` on `comm` is within the
    /// window this rank accepts.
    pub(crate) fn in_window(&self, comm: u64, seq: u64) -> bool {
        let issued = self.lock().issued.get(&comm).copied().unwrap_or(0);
        seq < issued.saturating_add(SEQ_WINDOW)
    }
}
