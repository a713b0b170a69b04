//! `agree` and `shrink`: the survivors of a failure settle, together, what
//! failed, and go on without it — on the side of a partition that holds a
//! quorum only.
//!
//! # The agreement
//!
//! Hierarchical consensus with a perfect failure detector (Cachin,
//! Guerraoui and Rodrigues, *Introduction to Reliable and Secure
//! Distributed Programming*, 2011, algorithm 5.2), after an exchange of
//! the members' flags, and followed by a confirmation:
//!
//! 1. Every member sends its flags to every other member it does not know
//!    failed, then hears each of them (or learns it failed). Its proposal
//!    is the AND of the flags it heard and the set it knows failed.
//! 2. Round `i` is led by rank `i`. A member hears the leader of every
//!    round below its own rank, adopting each leader's proposal it hears
//!    and its own detector vouches for (every rank it names failed is
//!    failed here too, within a grace), and passing over a leader it
//!    learns failed; in its own round it sends what it holds to every
//!    member above it.
//! 3. If the decision's survivors are fewer than the quorum
//!    (`quorum.rs`), the group goes stale (`NoQuorum`). Otherwise each
//!    survivor sends the decision to the others and returns it once a
//!    quorum of them (itself included) sent the same; one that does not
//!    see that is bound to it and stale for good (`Expelled`).
//!
//! Every member above the lowest surviving rank adopts that rank's
//! proposal (it is alive: its message arrives), and the ranks below it
//! failed: every survivor holds the same value, even if members fail
//! during the agreement. "Failed" is the transport's failure detector
//! (`Transport::failed`: gone without a goodbye, silent for the liveness
//! limit, a stopped same-host process), plus a member that sends nothing
//! for a whole deadline. A partition makes the detector imperfect (each
//! side sees the other failed): the confirmation is what keeps two sides
//! from both acting, since two quorums share a member.
//!
//! An agreement may take several *attempts*: a stale member that confirmed
//! nothing tries the agreement that failed again (its next attempt), and
//! every message says its attempt, so members that tried a different
//! number of times meet at the latest one.
//!
//! Its messages travel on a communicator of their own, derived from the
//! group's, which revocation never touches: a revoked group can still
//! agree and shrink.

use super::quorum::Stale;
use super::{GroupInner, ProcessGroup};
use crate::error::{Error, Result};
use meshwork_transport::{LaneKey, LaneKind, Payload, TransportError};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a member waiting on one other looks for news of its failure.
const LOOK: Duration = Duration::from_millis(20);

/// The phases of an attempt (a message's second field).
const FLAGS: u8 = 0;
const DECISION: u8 = 1;
const CONFIRM: u8 = 2;

/// Where an attempt's messages are read from: one lane per agreement, on
/// which every message says its attempt and phase (`[attempt: u32 LE]
/// [phase: u8][body]`). What comes for a later phase of the attempt
/// waits in `early`; a message of a later attempt ends this one.
struct Attempt<'a> {
    inner: &'a GroupInner,
    lane: LaneKey,
    number: u32,
    /// Messages read ahead: by (sender, attempt, phase).
    early: HashMap<(u32, u32, u8), Payload>,
}

impl Attempt<'_> {
    /// Whether a wait for member `m` ends before its deadline: on a first
    /// attempt, once `m` is known failed; on a retry (a stale group, the
    /// network perhaps healed), only once its link has ended. After a
    /// long cut each direction of each link heals when its own
    /// retransmission comes, so members see each other back at different
    /// moments: a retry that gave up on members it still saw silent would
    /// leave those that see it waiting, attempt after attempt.
    fn given_up(&self, m: u32) -> bool {
        let t = &self.inner.transport;
        if self.number == 0 {
            t.failed().contains(&m)
        } else {
            t.is_gone(m)
        }
    }
}

/// What one read of a member's messages gave.
enum Taken {
    Message(Payload),
    /// The member is on this later attempt.
    Later(u32),
}

/// What waiting for one phase's messages ended with.
enum Phase {
    /// The messages heard, in the order heard (the others' senders are
    /// added to `failed`).
    Heard(Vec<(u32, Payload)>),
    /// A member is on a later attempt: this one is over.
    Later(u32),
}

impl Attempt<'_> {
    fn send(&self, to: u32, phase: u8, body: &[u8]) {
        let head = [self.number.to_le_bytes().as_slice(), &[phase]].concat();
        // Best effort: one that cannot take it is found failed when heard.
        let _ = self.inner.transport.send(to, self.lane, &[&head, body]);
    }

    /// The next message of phase `phase` of this attempt from `m`,
    /// waiting at most `wait`; or word that `m` is on a later attempt.
    fn take(&mut self, m: u32, phase: u8, wait: Duration) -> Result<Taken, TransportError> {
        if let Some(msg) = self.early.remove(&(m, self.number, phase)) {
            return Ok(Taken::Message(msg));
        }
        let mut wait = wait;
        loop {
            let mut msg = self.inner.transport.recv(m, self.lane, wait, None)?;
            // What is queued behind it is read without waiting.
            wait = Duration::ZERO;
            let Some(&[a0, a1, a2, a3, p]) = msg.as_ref().get(..5) else {
                tracing::warn!(rank = m, "an undecodable agreement message; dropped");
                continue;
            };
            let number = u32::from_le_bytes([a0, a1, a2, a3]);
            msg.advance(5);
            if number < self.number || (number == self.number && p < phase) {
                // An earlier attempt's, or a phase gone by: stale.
                continue;
            }
            if number == self.number && p == phase {
                return Ok(Taken::Message(msg));
            }
            self.early.insert((m, number, p), msg);
            if number > self.number {
                return Ok(Taken::Later(number));
            }
        }
    }

    /// One message of `phase` from each of `from`, all waited for together
    /// until `deadline`. A member known failed meanwhile, or not heard by
    /// the deadline, is added to `failed`. `enough` (asked after each
    /// message, with those so far) ends the wait early.
    fn hear_all(
        &mut self,
        from: &[u32],
        phase: u8,
        deadline: Instant,
        failed: &mut BTreeSet<u32>,
        mut enough: impl FnMut(&[(u32, Payload)]) -> bool,
    ) -> Result<Phase> {
        let mut waiting: Vec<u32> = from.to_vec();
        let mut heard = Vec::new();
        while !waiting.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            // Each member's turn is short while several are waited for:
            // one slow member does not hold up hearing the others.
            let slice = if waiting.len() > 1 {
                Duration::from_millis(2)
            } else {
                LOOK
            };
            let mut i = 0;
            while i < waiting.len() {
                let m = waiting[i];
                match self.take(m, phase, left.min(slice)) {
                    Ok(Taken::Message(msg)) => {
                        waiting.remove(i);
                        heard.push((m, msg));
                        if enough(&heard) {
                            return Ok(Phase::Heard(heard));
                        }
                        continue;
                    }
                    Ok(Taken::Later(number)) => return Ok(Phase::Later(number)),
                    Err(TransportError::PeerDisconnected { .. }) => {}
                    Err(TransportError::Timeout { .. }) => {
                        if !left.is_zero() && !self.given_up(m) {
                            i += 1;
                            continue;
                        }
                    }
                    Err(e) => return Err(Error::from_transport(e, "agree")),
                }
                failed.insert(m);
                waiting.remove(i);
            }
        }
        Ok(Phase::Heard(heard))
    }
}

/// How an attempt ended.
enum Ended {
    /// With a decision confirmed by a quorum of its survivors.
    Agreed(u64, BTreeSet<u32>),
    /// A member is on a later attempt: this rank moves to it.
    Later(u32),
}

impl GroupInner {
    /// The communicator of this group's agreements.
    fn agree_comm(&self) -> u64 {
        super::split::child_comm_id(self.comm_id, u64::MAX, u32::MAX)
    }

    /// This group was replaced by its survivors' (a shrink): its members
    /// take part in no agreement on it again, and what a stale member
    /// still sends for one is dropped here from now on.
    pub(crate) fn retire(&self) {
        self.replaced.store(true, Ordering::Release);
        let comm = self.agree_comm();
        match self.transport.view_of() {
            Some((base, _)) => base.forget(comm),
            None => self.transport.forget(comm),
        }
    }

    /// Whether this rank takes a leader's decision naming `named` failed:
    /// each of them must be failed here too, now or within the grace an
    /// honest leader's view needs to reach this rank (a dead process's
    /// links end everywhere at once; a silence shows on every link within
    /// the liveness limit). A decision naming a rank this rank still
    /// hears is a member's word against this rank's own detector (or a
    /// partition only the leader is behind): it is not taken, and the
    /// confirmation round settles whether any decision has quorum.
    fn vouches_for(&self, leader: u32, named: &BTreeSet<u32>, failed: &BTreeSet<u32>) -> bool {
        let grace = self.grace();
        for &r in named.difference(failed) {
            if r == self.rank || !self.transport.await_failure_of(r, grace) {
                tracing::warn!(
                    leader,
                    rank = r,
                    "rank {leader}'s decision names rank {r} failed, which this rank does not see; not taken"
                );
                return false;
            }
        }
        true
    }

    /// See [`ProcessGroup::agree`].
    pub(crate) fn agree(&self, flags: u64) -> Result<(u64, Vec<u32>)> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(Error::ShutDown);
        }
        if self.replaced.load(Ordering::Acquire) {
            return Err(Error::InvalidArgument(
                "agree: this group was replaced by its shrink; agree on the shrunk group".into(),
            ));
        }
        // A stale group that may try again does so in the agreement that
        // ended without quorum, at its next attempt; expelled (or bound),
        // it takes part in no agreement here again.
        let (n, number) = match self.stale() {
            Some(Stale::NoQuorum {
                agreement, attempt, ..
            }) => (agreement, attempt + 1),
            Some(stale) => return Err(stale.error(self.rank)),
            None => (self.agreements.fetch_add(1, Ordering::Relaxed), 0),
        };
        let mut attempt = Attempt {
            inner: self,
            lane: LaneKey {
                comm: self.agree_comm(),
                kind: LaneKind::PointToPoint,
                tag: n,
            },
            number,
            early: HashMap::new(),
        };
        loop {
            match self.attempt(&mut attempt, flags, n)? {
                Ended::Agreed(flags, failed) => {
                    self.clear_stale();
                    tracing::debug!(
                        agreement = n,
                        attempt = attempt.number,
                        flags,
                        ?failed,
                        "agreed"
                    );
                    return Ok((flags, failed.into_iter().collect()));
                }
                Ended::Later(number) => {
                    tracing::debug!(
                        agreement = n,
                        attempt = number,
                        "a member is on a later attempt"
                    );
                    attempt.number = number;
                    attempt.early.retain(|k, _| k.1 >= number);
                }
            }
        }
    }

    /// One attempt of agreement `n`: the three rounds (see the module).
    fn attempt(&self, a: &mut Attempt<'_>, flags: u64, n: u64) -> Result<Ended> {
        let t = &self.transport;
        let (me, world) = (self.rank, self.world);
        // A first attempt passes over the members known failed; a retry
        // waits for every member whose link lives (see `given_up`).
        let mut failed: BTreeSet<u32> = if a.number == 0 {
            t.failed().into_iter().collect()
        } else {
            (0..world).filter(|&m| m != me && t.is_gone(m)).collect()
        };
        let others = |failed: &BTreeSet<u32>| -> Vec<u32> {
            (0..world)
                .filter(|r| *r != me && !failed.contains(r))
                .collect()
        };
        // 1: the flags.
        for m in others(&failed) {
            a.send(m, FLAGS, &flags.to_le_bytes());
        }
        let mut and = flags;
        let from = others(&failed);
        tracing::debug!(
            agreement = n,
            attempt = a.number,
            ?from,
            "an attempt of the agreement"
        );
        let deadline = Instant::now() + self.timeout();
        let heard = match a.hear_all(&from, FLAGS, deadline, &mut failed, |_| false)? {
            Phase::Heard(heard) => heard,
            Phase::Later(number) => return Ok(Ended::Later(number)),
        };
        tracing::debug!(agreement = n, attempt = a.number, ?failed, "flags heard");
        let needed = self.quorum().needed(world);
        if a.number > 0 {
            // A retry (a stale group, the network perhaps healed) brings
            // back the whole group or nothing: it goes on only if every
            // member whose link lives took part. One that did not makes the
            // attempt come to nothing — no confirmation sent, nothing bound
            // — and the next attempt tries again; unless a quorum of members
            // is alive and takes no part (they went on without this rank,
            // in the group the agreement it missed made), or too few are
            // linked to ever agree: then only the seed brings it back.
            let unheard: Vec<u32> = from
                .iter()
                .copied()
                .filter(|m| failed.contains(m))
                .collect();
            if !unheard.is_empty() {
                let now_failed = t.failed();
                let alive_elsewhere =
                    unheard.iter().filter(|m| !now_failed.contains(m)).count() as u32;
                let linked = world - (0..world).filter(|&m| m != me && t.is_gone(m)).count() as u32;
                if alive_elsewhere >= needed || linked < needed {
                    return Err(self.make_stale(Stale::Expelled));
                }
                let reachable: Vec<u32> = (0..world).filter(|m| !failed.contains(m)).collect();
                return Err(self.make_stale(Stale::NoQuorum {
                    reachable,
                    needed,
                    agreement: n,
                    attempt: a.number,
                    at: Instant::now(),
                }));
            }
        }
        for (m, msg) in heard {
            let theirs = msg.as_ref().get(..8).and_then(|b| b.try_into().ok());
            let Some(theirs) = theirs else {
                return Err(Error::InvalidArgument(format!(
                    "agree: rank {m} sent a malformed proposal"
                )));
            };
            and &= u64::from_le_bytes(theirs);
        }
        let mut held = (and, failed.clone());
        // 2: rounds led by each lower rank, then this rank's own.
        for leader in 0..me {
            if failed.contains(&leader) {
                continue;
            }
            let deadline = Instant::now() + self.timeout();
            let msg = match a.hear_all(&[leader], DECISION, deadline, &mut failed, |_| false)? {
                Phase::Heard(mut heard) => heard.pop(),
                Phase::Later(number) => return Ok(Ended::Later(number)),
            };
            let Some((_, msg)) = msg else { continue };
            match decode(msg.as_ref(), world) {
                Some(d) if self.vouches_for(leader, &d.1, &failed) => held = d,
                Some(_) => {}
                None => {
                    tracing::warn!(leader, "rank {leader} sent a malformed decision; not taken")
                }
            }
        }
        let decision = encode(held.0, &held.1);
        for m in others(&failed).into_iter().filter(|&m| m > me) {
            a.send(m, DECISION, &decision);
        }
        // 3: quorum, and the survivors' confirmation of the decision (on a
        // retry, every survivor's).
        let survivors: Vec<u32> = (0..world).filter(|r| !held.1.contains(r)).collect();
        let retry = a.number > 0;
        let number = a.number;
        let stale = |reachable: Vec<u32>| Stale::NoQuorum {
            reachable,
            needed,
            agreement: n,
            attempt: number,
            at: Instant::now(),
        };
        if !survivors.contains(&me) {
            return Err(self.make_stale(Stale::Expelled));
        }
        if (survivors.len() as u32) < needed {
            if retry {
                // Too few are linked to ever agree here.
                return Err(self.make_stale(Stale::Expelled));
            }
            return Err(self.make_stale(stale(survivors)));
        }
        // A retry's decision counts only if every survivor confirms it: a
        // decision that leaves out no member whose link lives, which no
        // other group can also have made.
        let enough = if retry {
            survivors.len() as u32
        } else {
            needed
        };
        // Having sent its confirmation, this rank is bound to the decision
        // unless it sees a quorum confirm it (`quorum.rs`).
        let others: Vec<u32> = survivors.iter().copied().filter(|&r| r != me).collect();
        for &m in &others {
            a.send(m, CONFIRM, &decision);
        }
        let matching = |heard: &[(u32, Payload)]| {
            1 + heard
                .iter()
                .filter(|(_, msg)| msg.as_ref() == decision.as_slice())
                .count() as u32
        };
        let deadline = Instant::now() + self.timeout();
        let mut unheard = BTreeSet::new();
        let heard = match a.hear_all(&others, CONFIRM, deadline, &mut unheard, |h| {
            matching(h) >= enough
        })? {
            Phase::Heard(heard) => heard,
            // Another attempt began after this rank confirmed: bound.
            Phase::Later(_) => Vec::new(),
        };
        let mut confirmed = vec![me];
        for (m, msg) in &heard {
            if msg.as_ref() == decision.as_slice() {
                confirmed.push(*m);
            } else {
                tracing::warn!(
                    rank = m,
                    "rank {m} confirmed another decision than this rank's"
                );
            }
        }
        if (confirmed.len() as u32) < enough {
            confirmed.sort_unstable();
            if !retry {
                // The decision may have been confirmed by a quorum elsewhere:
                // this rank is bound to it, and stale for good here.
                return Err(self.make_stale(Stale::Expelled));
            }
            // A retry's needed every survivor, this rank included, whose
            // confirmation was sent to all: any group it made holds this
            // rank, so none can go on without it; the next attempt may try
            // again.
            return Err(self.make_stale(stale(confirmed)));
        }
        Ok(Ended::Agreed(held.0, held.1))
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
        // Its members go on in the new group: none of them confirms
        // another decision here (`quorum.rs`).
        self.inner().retire();
        let group = self.view(members, comm).ok_or(Error::Expelled {
            rank: self.inner().rank,
        })?;
        group.inner().set_quorum(self.inner().quorum());
        Ok(group)
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
        if self.inner().tree_routes() {
            return Err(Error::InvalidArgument(crate::shape::tree_cannot_grow()));
        }
        if let Some(e) = self.inner().stale_error(None) {
            // Only the side with quorum grows the job.
            return Err(e);
        }
        let elastic = self.elastic.get().ok_or_else(|| {
            Error::InvalidArgument(
                "grow: the group did not form through a seed (SEED), so there is none to admit new processes"
                    .into(),
            )
        })?;
        Arc::clone(elastic).grow(self, joiners)
    }

    /// Back into the job, from a stale group ([`Error::NoQuorum`],
    /// [`Error::Expelled`]: the network cut this rank off and the others
    /// went on): joins the job's seed as a new process would
    /// ([`Node::join_running`]) and returns the grown group once the
    /// members call [`grow`](Self::grow), or fails within the deadline
    /// (`FormationTimeout`; call it again). This rank takes one of the
    /// new ranks; its state (the model, the step) is the program's to
    /// catch up from the others. The job must have formed through a seed
    /// that still serves it; `InvalidArgument` on a group that is not
    /// stale (a member grows, it does not rejoin).
    ///
    /// [`Node::join_running`]: crate::Node::join_running
    pub fn rejoin(&self) -> Result<Arc<ProcessGroup>> {
        if self.inner().stale().is_none() {
            return Err(Error::InvalidArgument(
                "rejoin: the group is not stale; its members grow it (ProcessGroup::grow)".into(),
            ));
        }
        let elastic = self.elastic.get().ok_or_else(|| {
            Error::InvalidArgument(
                "rejoin: the group did not form through a seed (SEED), so there is none to rejoin through"
                    .into(),
            )
        })?;
        Arc::clone(elastic).rejoin(self)
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
