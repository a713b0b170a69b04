//! `agree` and `shrink`: the survivors of a failure settle, together, what
//! failed, and go on without it — on the side of a partition that holds a
//! quorum only.
//!
//! # The agreement
//!
//! On a tree (where any other pair's messages are relayed) a coordinator
//! gathers and decides, and a quorum of the survivors confirms, as below.
//! On a mesh and a star, `attempt_pairwise`: every member sends its flags
//! to every other, hears the decision of each lower rank in turn
//! (hierarchical consensus with a perfect failure detector, Cachin,
//! Guerraoui and Rodrigues 2011, algorithm 5.2), confirms to every
//! survivor, then tells every survivor whether it saw a quorum confirm:
//! one that did not (a member failed after confirming to some survivors
//! only) takes the decision from one that did, rather than stop bound.
//! The same quorum, vouching and attempt rules hold.
//!
//! A coordinator gathers and decides; a quorum of the survivors confirms
//! (a rotating-coordinator consensus, with the coordinators' ranks as
//! ballots: Chandra and Toueg's, and Paxos's rule for a value that may
//! already be chosen). Every message goes to or from the coordinator, so
//! an agreement costs O(P) messages — on a star or a relay tree, where
//! any other pair's messages are relayed, that is what lets a fleet of a
//! thousand workers agree at all.
//!
//! 1. The coordinator is the lowest rank a member does not know failed.
//!    Each member sends it its flags (and the decision it is bound to,
//!    if any: below). The coordinator hears every member it does not
//!    know failed, or learns it failed, until a deadline.
//! 2. It decides: the decision a member it heard is bound to, the one of
//!    the highest coordinator if several (it may already have been
//!    confirmed, and acted on); otherwise the AND of the flags heard and
//!    the set failed (known failed, or unheard). If fewer than a quorum
//!    (`quorum.rs`) of its survivors were heard, the group goes stale
//!    (`NoQuorum`) and the members are told so.
//! 3. A member takes the decision only if its own detector vouches for
//!    it (every rank it names failed is failed here too, within a
//!    grace); it confirms it to the coordinator and is *bound* to it:
//!    it confirms no other. One that does not vouch refuses and counts
//!    the coordinator failed. Once a quorum of the survivors (itself
//!    included) confirmed, the coordinator tells every member heard, and
//!    each returns the decision. One that never hears the outcome (the
//!    coordinator failed) tells the next coordinator what it is bound
//!    to, which decides the same.
//!
//! A decision is returned only once a quorum confirmed it; any quorum a
//! later coordinator hears holds a member bound to it, and that
//! coordinator proposes it again: every member that returns returns the
//! same value, even if coordinators fail during the agreement. "Failed"
//! is the transport's failure detector (`Transport::failed`: gone
//! without a goodbye, silent for the liveness limit, a stopped same-host
//! process), plus a rank that sends nothing for a whole deadline. A
//! partition makes the detector imperfect (each side sees the other
//! failed): the quorum is what keeps two sides from both acting, since
//! two quorums share a member.
//!
//! An agreement may take several *attempts*: a stale member that confirmed
//! nothing tries the agreement that failed again (its next attempt), and
//! every message says its attempt, so members that tried a different
//! number of times meet at the latest one.
//!
//! Its messages travel on a communicator of their own, derived from the
//! group's, which revocation never touches: a revoked group can still
//! agree and shrink. Each agreement has its own, forgotten once this rank
//! is done with it, so that what it did not need to read never piles up.

use super::quorum::Stale;
use super::{GroupInner, ProcessGroup};
use crate::error::{Error, Result};
use meshwork_transport::{LaneKey, LaneKind, Payload, TransportError};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a rank waiting on others looks for news of their failure.
const LOOK: Duration = Duration::from_millis(20);

/// The phases of an attempt (a message's second field). A member sends
/// its coordinator `FLAGS`, then `CONFIRM`; a coordinator sends the
/// members `START`, then `DECISION`, then `OUTCOME`. Between two ranks
/// the roles never swap within an attempt (the coordinator is the lower
/// of the two), so each sender's phases come in order.
const FLAGS: u8 = 0;
const START: u8 = 1;
const DECISION: u8 = 2;
const CONFIRM: u8 = 3;
const OUTCOME: u8 = 4;

/// The phases of an attempt on a mesh, where every pair talks (see
/// `attempt_pairwise`); an `OUTCOME` is `[seen: 0 or 1][decision]`.
const PAIR_FLAGS: u8 = 0;
const PAIR_DECISION: u8 = 1;
const PAIR_CONFIRM: u8 = 2;
const PAIR_OUTCOME: u8 = 3;

/// What a coordinator's `DECISION` and `OUTCOME` say (their first byte):
/// a decision (in an `OUTCOME`: confirmed by enough), no quorum (the
/// ranks it could count on follow, u32 LE each), or expelled.
const PROPOSE: u8 = b'D';
const NO_QUORUM: u8 = b'Q';
const EXPELLED: u8 = b'X';

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

    /// Those of `waiting` given up on (see [`given_up`](Self::given_up)),
    /// asking the detector once.
    fn given_up_of(&self, waiting: &BTreeSet<u32>) -> Vec<u32> {
        let t = &self.inner.transport;
        if self.number == 0 {
            let failed = t.failed();
            waiting
                .iter()
                .copied()
                .filter(|m| failed.contains(m))
                .collect()
        } else {
            waiting.iter().copied().filter(|&m| t.is_gone(m)).collect()
        }
    }
}

/// What one read of a member's messages gave.
enum Taken {
    Message(Payload),
    /// The member is on this later attempt.
    Later(u32),
}

/// What waiting for the coordinator gave.
enum Heard {
    Message(Payload),
    /// It failed (or said nothing until the deadline): it joined `failed`.
    Failed,
    /// It is on this later attempt.
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

/// What gathering one phase from the members gave.
enum Gathered {
    /// The messages heard, in the order heard (the others' senders were
    /// added to `failed`).
    Heard(Vec<(u32, Payload)>),
    /// A member is on this later attempt.
    Later(u32),
}

impl Attempt<'_> {
    fn send(&self, to: u32, phase: u8, body: &[u8]) {
        #[cfg(feature = "test-hooks")]
        die_if_told(self.lane.tag, phase);
        let head = [self.number.to_le_bytes().as_slice(), &[phase]].concat();
        // Best effort: one that cannot take it is found failed when heard.
        let _ = self.inner.transport.send(to, self.lane, &[&head, body]);
    }

    /// A message's attempt and phase, the header taken off; `None` for
    /// an undecodable one.
    fn split(m: u32, mut msg: Payload) -> Option<(u32, u8, Payload)> {
        let Some(&[a0, a1, a2, a3, p]) = msg.as_ref().get(..5) else {
            tracing::warn!(rank = m, "an undecodable agreement message; dropped");
            return None;
        };
        msg.advance(5);
        Some((u32::from_le_bytes([a0, a1, a2, a3]), p, msg))
    }

    /// The next message of phase `phase` of this attempt from `m`,
    /// waiting at most `wait`; or word that `m` is on a later attempt.
    fn take(&mut self, m: u32, phase: u8, wait: Duration) -> Result<Taken, TransportError> {
        if let Some(msg) = self.early.remove(&(m, self.number, phase)) {
            return Ok(Taken::Message(msg));
        }
        let mut wait = wait;
        loop {
            let msg = self.inner.transport.recv(m, self.lane, wait, None)?;
            // What is queued behind it is read without waiting.
            wait = Duration::ZERO;
            let Some((number, p, msg)) = Self::split(m, msg) else {
                continue;
            };
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

    /// The coordinator's message of `phase`, waiting until `deadline`. A
    /// coordinator known failed meanwhile, or silent until the deadline,
    /// joins `failed`.
    fn hear(
        &mut self,
        c: u32,
        phase: u8,
        deadline: Instant,
        failed: &mut BTreeSet<u32>,
    ) -> Result<Heard> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.take(c, phase, left.min(LOOK)) {
                Ok(Taken::Message(msg)) => return Ok(Heard::Message(msg)),
                Ok(Taken::Later(number)) => return Ok(Heard::Later(number)),
                Err(TransportError::PeerDisconnected { .. }) => {}
                Err(TransportError::Timeout { .. }) => {
                    if !left.is_zero() && !self.given_up(c) {
                        continue;
                    }
                }
                Err(e) => return Err(Error::from_transport(e, "agree")),
            }
            failed.insert(c);
            return Ok(Heard::Failed);
        }
    }

    /// One message of `phase` from each of `from`, taken in the order
    /// they come, until `deadline`. A member known failed meanwhile, or
    /// not heard by the deadline, joins `failed`. `done` (asked with
    /// those heard so far and how many are still awaited) ends the wait
    /// early.
    fn gather(
        &mut self,
        from: &[u32],
        phase: u8,
        deadline: Instant,
        failed: &mut BTreeSet<u32>,
        mut done: impl FnMut(&[(u32, Payload)], usize) -> bool,
    ) -> Result<Gathered> {
        let mut waiting: BTreeSet<u32> = from.iter().copied().collect();
        let mut heard = Vec::new();
        for &m in from {
            if let Some(msg) = self.early.remove(&(m, self.number, phase)) {
                waiting.remove(&m);
                heard.push((m, msg));
            }
        }
        let mut looked = Instant::now();
        loop {
            if waiting.is_empty() || done(&heard, waiting.len()) {
                return Ok(Gathered::Heard(heard));
            }
            let now = Instant::now();
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() {
                failed.extend(waiting);
                return Ok(Gathered::Heard(heard));
            }
            if now.duration_since(looked) >= LOOK {
                looked = now;
                for m in self.given_up_of(&waiting) {
                    waiting.remove(&m);
                    failed.insert(m);
                }
                continue;
            }
            let (m, msg) = match self.inner.transport.recv_any(self.lane, left.min(LOOK)) {
                Ok(got) => got,
                Err(TransportError::Timeout { .. } | TransportError::PeerDisconnected { .. }) => {
                    continue;
                }
                Err(e) => return Err(Error::from_transport(e, "agree")),
            };
            let Some((number, p, msg)) = Self::split(m, msg) else {
                continue;
            };
            if number < self.number {
                continue;
            }
            if number == self.number && p == phase && waiting.remove(&m) {
                heard.push((m, msg));
                continue;
            }
            self.early.insert((m, number, p), msg);
            if number > self.number {
                return Ok(Gathered::Later(number));
            }
        }
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
    /// This rank is done with agreement `n` (it returned a decision, or
    /// is stale for good): what is left on its communicator (the
    /// confirmations and outcomes it did not need) is dropped and
    /// credited back, and what still comes for it is dropped. Left there,
    /// each agreement held a lane of each sender's here, and some four
    /// thousand agreements on (`LANES_PER_SENDER`) a sender could open no
    /// more: its messages were lost and the agreement failed.
    fn done_with(&self, n: u64) {
        let comm = agreement_comm(self.comm_id, n);
        match self.transport.view_of() {
            Some((base, _)) => base.forget(comm),
            None => self.transport.forget(comm),
        }
    }

    /// This group was replaced by its survivors' (a shrink): its members
    /// take part in no agreement on it again (the one that shrank it is
    /// forgotten: what a stale member still sends for it is dropped).
    pub(crate) fn retire(&self) {
        self.replaced.store(true, Ordering::Release);
    }

    /// Whether this rank takes a decision of `leader`'s naming `named`
    /// failed: each of them must be failed here too, now or within
    /// `within` — the time an honest leader's view needs to reach this
    /// rank (a dead process's links end everywhere at once; a silence
    /// shows on every link within the liveness limit). A decision naming
    /// a rank this rank still hears — itself included — is a member's
    /// word against this rank's own detector (or a partition only the
    /// leader is behind): it is not taken.
    fn vouches_for(
        &self,
        leader: u32,
        named: &BTreeSet<u32>,
        failed: &BTreeSet<u32>,
        within: Duration,
    ) -> bool {
        let until = Instant::now() + within;
        for &r in named.difference(failed) {
            let left = until.saturating_duration_since(Instant::now());
            if r == self.rank || !self.transport.await_failure_of(r, left) {
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
                comm: agreement_comm(self.comm_id, n),
                kind: LaneKind::PointToPoint,
                tag: n,
            },
            number,
            early: HashMap::new(),
        };
        let agreed = self.agree_on(&mut attempt, flags, n);
        // A stale group that may try again keeps the agreement's lanes.
        if !matches!(self.stale(), Some(Stale::NoQuorum { .. })) {
            self.done_with(n);
        }
        agreed
    }

    /// Agreement `n`'s attempts, from `attempt` on, until one ends it.
    fn agree_on(&self, attempt: &mut Attempt<'_>, flags: u64, n: u64) -> Result<(u64, Vec<u32>)> {
        loop {
            // A mesh's ranks talk pairwise; on a tree every other pair's
            // messages are relayed, and only a coordinator keeps the
            // agreement O(P).
            let ended = if self.tree_routes() {
                self.attempt(attempt, flags, n)?
            } else {
                self.attempt_pairwise(attempt, flags, n)?
            };
            match ended {
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

    /// The group goes stale after attempt `a` of agreement `n` ended
    /// without a decision this rank saw confirmed. Bound to one (it
    /// confirmed a decision) on a first attempt, it is stale for good:
    /// that decision may have been confirmed elsewhere. Otherwise it may
    /// try again: no quorum, counting on `reachable`.
    fn stop(&self, a: &Attempt<'_>, n: u64, bound: bool, reachable: Vec<u32>) -> Error {
        if bound && a.number == 0 {
            return self.make_stale(Stale::Expelled);
        }
        self.make_stale(Stale::NoQuorum {
            reachable,
            needed: self.quorum().needed(self.world),
            agreement: n,
            attempt: a.number,
            at: Instant::now(),
        })
    }

    /// A member is on attempt `number`: this rank moves to it, unless it
    /// is bound in this one (see [`stop`](Self::stop)).
    fn later(&self, a: &Attempt<'_>, n: u64, number: u32, bound: bool) -> Result<Ended> {
        if bound {
            return Err(self.stop(a, n, true, vec![self.rank]));
        }
        Ok(Ended::Later(number))
    }

    /// One attempt of agreement `n` on a mesh: the three rounds between
    /// every pair (see the module).
    fn attempt_pairwise(&self, a: &mut Attempt<'_>, flags: u64, n: u64) -> Result<Ended> {
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
            a.send(m, PAIR_FLAGS, &flags.to_le_bytes());
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
        let heard = match a.hear_all(&from, PAIR_FLAGS, deadline, &mut failed, |_| false)? {
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
            let msg =
                match a.hear_all(&[leader], PAIR_DECISION, deadline, &mut failed, |_| false)? {
                    Phase::Heard(mut heard) => heard.pop(),
                    Phase::Later(number) => return Ok(Ended::Later(number)),
                };
            let Some((_, msg)) = msg else { continue };
            match decode(msg.as_ref(), world) {
                Some(d) if self.vouches_for(leader, &d.1, &failed, self.grace()) => held = d,
                Some(_) => {}
                None => {
                    tracing::warn!(leader, "rank {leader} sent a malformed decision; not taken")
                }
            }
        }
        let decision = encode(held.0, &held.1);
        for m in others(&failed).into_iter().filter(|&m| m > me) {
            a.send(m, PAIR_DECISION, &decision);
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
            a.send(m, PAIR_CONFIRM, &decision);
        }
        let matching = |heard: &[(u32, Payload)]| {
            1 + heard
                .iter()
                .filter(|(_, msg)| msg.as_ref() == decision.as_slice())
                .count() as u32
        };
        let deadline = Instant::now() + self.timeout();
        let mut unheard = BTreeSet::new();
        let heard = match a.hear_all(&others, PAIR_CONFIRM, deadline, &mut unheard, |h| {
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
        // 4: the outcome. Each rank tells the others whether it saw enough
        // confirm; one that did not may learn from one that did (a member
        // that failed after confirming to some survivors and not to
        // others).
        let seen = (confirmed.len() as u32) >= enough;
        let outcome = [&[u8::from(seen)], decision.as_slice()].concat();
        for &m in &others {
            a.send(m, PAIR_OUTCOME, &outcome);
        }
        if seen || self.seen_elsewhere(a, &confirmed, &decision)? {
            return Ok(Ended::Agreed(held.0, held.1));
        }
        confirmed.sort_unstable();
        if !retry {
            // The decision may have been confirmed by a quorum elsewhere:
            // this rank is bound to it, and stale for good here.
            return Err(self.make_stale(Stale::Expelled));
        }
        // A retry's needed every survivor, this rank included, whose
        // confirmation was sent to all: any group it made holds this rank,
        // so none can go on without it; the next attempt may try again.
        Err(self.make_stale(stale(confirmed)))
    }

    /// Whether a member that confirmed `decision` with this rank (of
    /// `confirmed`) saw enough confirm it: its outcome says so. The
    /// others' outcomes are sent before they wait for any, so this waits
    /// for no more than each one's own count of confirmations.
    fn seen_elsewhere(
        &self,
        a: &mut Attempt<'_>,
        confirmed: &[u32],
        decision: &[u8],
    ) -> Result<bool> {
        let from: Vec<u32> = confirmed
            .iter()
            .copied()
            .filter(|&m| m != self.rank)
            .collect();
        let deadline = Instant::now() + self.timeout();
        let seen = |msg: &Payload| msg.as_ref().split_first() == Some((&1, decision));
        let mut gone = BTreeSet::new();
        let heard = a.hear_all(&from, PAIR_OUTCOME, deadline, &mut gone, |h| {
            h.iter().any(|(_, msg)| seen(msg))
        })?;
        let saw = matches!(heard, Phase::Heard(h) if h.iter().any(|(_, msg)| seen(msg)));
        if saw {
            tracing::debug!(
                agreement = a.lane.tag,
                attempt = a.number,
                "a member saw the decision confirmed"
            );
        }
        Ok(saw)
    }

    /// A retry whose coordinator, alive or cut off, did not answer: a
    /// retry brings back the whole group or nothing (see `coordinate`).
    /// If a quorum of the members is alive (they went on without this
    /// side), or too few are linked to ever agree, only the seed brings
    /// this rank back; otherwise the next attempt may.
    fn unanswered(&self, a: &Attempt<'_>, n: u64, bound: bool) -> Error {
        let t = &self.transport;
        let (me, world) = (self.rank, self.world);
        let needed = self.quorum().needed(world);
        let now_failed = t.failed();
        let alive = (0..world)
            .filter(|&m| m != me && !now_failed.contains(&m))
            .count() as u32;
        let linked = world - (0..world).filter(|&m| m != me && t.is_gone(m)).count() as u32;
        if alive >= needed || linked < needed {
            return self.make_stale(Stale::Expelled);
        }
        let reachable = (0..world)
            .filter(|&m| m == me || !now_failed.contains(&m))
            .collect();
        self.stop(a, n, bound, reachable)
    }

    /// One attempt of agreement `n` (see the module): this rank's part
    /// as a member of the lowest rank it does not know failed, or as the
    /// coordinator when that is itself.
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
        failed.remove(&me);
        // The decision this rank confirmed in this attempt, and whose it
        // was: it confirms no other, and tells the next coordinator.
        let mut bound: Option<(u32, Vec<u8>)> = None;
        loop {
            let c = (0..world).find(|r| !failed.contains(r)).unwrap_or(me);
            if c == me {
                return self.coordinate(a, flags, n, failed, bound);
            }
            tracing::debug!(
                agreement = n,
                attempt = a.number,
                coordinator = c,
                "an attempt of the agreement"
            );
            a.send(c, FLAGS, &encode_flags(flags, bound.as_ref()));
            // The coordinator hears every member before it decides, up
            // to a deadline for the slowest, and counts confirmations up
            // to another.
            let deadline = Instant::now() + 2 * self.timeout();
            let word = match a.hear(c, DECISION, deadline, &mut failed)? {
                Heard::Message(word) => word,
                Heard::Failed if a.number > 0 && !t.is_gone(c) => {
                    return Err(self.unanswered(a, n, bound.is_some()));
                }
                Heard::Failed => continue,
                Heard::Later(number) => return self.later(a, n, number, bound.is_some()),
            };
            let (decision, dflags, dfailed) = match decode_word(word.as_ref(), world) {
                Some(Word::Decision(d, dflags, dfailed)) => (d, dflags, dfailed),
                Some(Word::NoQuorum(reachable)) => {
                    return Err(self.stop(a, n, bound.is_some(), reachable));
                }
                Some(Word::Expelled) => return Err(self.make_stale(Stale::Expelled)),
                None => {
                    tracing::warn!(rank = c, "rank {c} sent a malformed decision; not taken");
                    failed.insert(c);
                    continue;
                }
            };
            let takes = match &bound {
                Some((_, mine)) => *mine == decision,
                // A member may have come in on the coordinator's
                // revocation, before its own links showed the failure the
                // decision names (on a loaded host, later than the grace):
                // it waits for its detector as long as the coordinator
                // waits for confirmations, less a margin.
                None => self.vouches_for(
                    c,
                    &dfailed,
                    &failed,
                    self.grace().max(self.timeout() * 3 / 4),
                ),
            };
            if !takes {
                // Refused (the coordinator may stop waiting for it), and
                // the coordinator counted failed here: the next one is
                // heard instead.
                a.send(c, CONFIRM, &[]);
                failed.insert(c);
                continue;
            }
            a.send(c, CONFIRM, &decision);
            bound = Some((c, decision));
            let deadline = Instant::now() + 2 * self.timeout();
            let word = match a.hear(c, OUTCOME, deadline, &mut failed)? {
                Heard::Message(word) => word,
                Heard::Failed if a.number > 0 && !t.is_gone(c) => {
                    return Err(self.unanswered(a, n, true));
                }
                // Bound, it tells the next coordinator what it confirmed.
                Heard::Failed => continue,
                Heard::Later(number) => return self.later(a, n, number, true),
            };
            match decode_word(word.as_ref(), world) {
                Some(Word::Decision(d, ..)) if bound.as_ref().is_some_and(|b| b.1 == d) => {
                    return Ok(Ended::Agreed(dflags, dfailed));
                }
                Some(Word::NoQuorum(reachable)) => return Err(self.stop(a, n, true, reachable)),
                Some(Word::Expelled) => return Err(self.make_stale(Stale::Expelled)),
                Some(Word::Decision(..)) | None => {
                    tracing::warn!(
                        rank = c,
                        "rank {c} confirmed another decision than the one it proposed; not taken"
                    );
                    failed.insert(c);
                }
            }
        }
    }

    /// This rank coordinates attempt `a`: it hears every member's flags,
    /// decides, and counts the confirmations (see the module). `failed`
    /// holds every rank below it.
    fn coordinate(
        &self,
        a: &mut Attempt<'_>,
        flags: u64,
        n: u64,
        mut failed: BTreeSet<u32>,
        bound: Option<(u32, Vec<u8>)>,
    ) -> Result<Ended> {
        let t = &self.transport;
        let (me, world) = (self.rank, self.world);
        let needed = self.quorum().needed(world);
        let retry = a.number > 0;
        let was_bound = bound.is_some();
        let from: Vec<u32> = (0..world)
            .filter(|r| *r != me && !failed.contains(r))
            .collect();
        tracing::debug!(
            agreement = n,
            attempt = a.number,
            members = from.len(),
            "coordinating an attempt of the agreement"
        );
        // A member still on an earlier attempt hears this one begin
        // (none is before a first attempt).
        if a.number > 0 {
            for &m in &from {
                a.send(m, START, &[]);
            }
        }
        // 1: every member's flags (or word that it failed).
        let deadline = Instant::now() + self.timeout();
        let heard = match a.gather(&from, FLAGS, deadline, &mut failed, |_, _| false)? {
            Gathered::Heard(heard) => heard,
            Gathered::Later(number) => return self.later(a, n, number, was_bound),
        };
        tracing::debug!(agreement = n, attempt = a.number, ?failed, "flags heard");
        let mut members: Vec<u32> = heard.iter().map(|(m, _)| *m).collect();
        members.sort_unstable();
        let tell = |a: &Attempt<'_>, to: &[u32], phase: u8, word: &[u8]| {
            for &m in to {
                a.send(m, phase, word);
            }
        };
        if retry {
            // A retry (a stale group, the network perhaps healed) brings
            // back the whole group or nothing: it goes on only if every
            // member whose link lives took part. One that did not makes
            // the attempt come to nothing — nothing confirmed, nothing
            // bound — and the next attempt tries again; unless a quorum
            // of members is alive and takes no part (they went on without
            // this side, in the group the agreement it missed made), or
            // too few are linked to ever agree: then only the seed brings
            // it back.
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
                    tell(a, &members, DECISION, &[EXPELLED]);
                    return Err(self.make_stale(Stale::Expelled));
                }
                let reachable: Vec<u32> = (0..world).filter(|m| !failed.contains(m)).collect();
                tell(a, &members, DECISION, &no_quorum(&reachable));
                return Err(self.stop(a, n, was_bound, reachable));
            }
        }
        // The decision: the latest one a member (or this rank) confirmed
        // for an earlier coordinator — it may have been confirmed by a
        // quorum, and whoever saw that went on with it — or else the AND
        // of the flags and the set that failed.
        let mut and = flags;
        let mut adopted = bound;
        for (m, msg) in &heard {
            let Some((theirs, their_bound)) = decode_flags(msg.as_ref(), world) else {
                return Err(Error::InvalidArgument(format!(
                    "agree: rank {m} sent malformed flags"
                )));
            };
            and &= theirs;
            if let Some((ballot, d)) = their_bound {
                if adopted.as_ref().is_none_or(|(b, _)| ballot > *b) {
                    adopted = Some((ballot, d));
                }
            }
        }
        let decision = match adopted {
            Some((_, d)) => d,
            None => encode(and, &failed),
        };
        let Some((dflags, dfailed)) = decode(&decision, world) else {
            return Err(Error::InvalidArgument(
                "agree: a member was bound to a malformed decision".into(),
            ));
        };
        // Who may confirm it: the survivors heard, and this rank if it is
        // one (a decision it adopted may name it failed; it still sees
        // the decision through for those bound to it).
        let counts_me = !dfailed.contains(&me);
        let voters: Vec<u32> = members
            .iter()
            .copied()
            .filter(|m| !dfailed.contains(m))
            .collect();
        let can_confirm = voters.len() as u32 + u32::from(counts_me);
        if can_confirm < needed {
            let mut reachable = voters.clone();
            if counts_me {
                reachable.push(me);
                reachable.sort_unstable();
            }
            if retry {
                // Too few are linked to ever agree here.
                tell(a, &members, DECISION, &[EXPELLED]);
                return Err(self.make_stale(Stale::Expelled));
            }
            tell(a, &members, DECISION, &no_quorum(&reachable));
            return Err(self.stop(a, n, was_bound, reachable));
        }
        // A retry's decision counts only if every survivor confirms it: a
        // decision that leaves out no member whose link lives, which no
        // other group can also have made.
        let survivors = world - dfailed.len() as u32;
        let enough = if retry { survivors } else { needed };
        // Every member asked hears it: one it names failed learns so.
        let word = [&[PROPOSE], decision.as_slice()].concat();
        tell(a, &from, DECISION, &word);
        // 2: the confirmations. This rank is bound to the decision from
        // here on (`quorum.rs`).
        let matching = |heard: &[(u32, Payload)]| {
            u32::from(counts_me)
                + heard
                    .iter()
                    .filter(|(_, msg)| msg.as_ref() == decision.as_slice())
                    .count() as u32
        };
        let deadline = Instant::now() + self.timeout();
        let mut unheard = BTreeSet::new();
        let confirmations =
            match a.gather(&voters, CONFIRM, deadline, &mut unheard, |h, left| {
                let got = matching(h);
                // Done once enough matched, or once too few are left to.
                got >= enough || got + (left as u32) < enough
            })? {
                Gathered::Heard(heard) => heard,
                // Another attempt began after this rank proposed: bound.
                Gathered::Later(_) => Vec::new(),
            };
        let mut confirmed: Vec<u32> = Vec::new();
        if counts_me {
            confirmed.push(me);
        }
        for (m, msg) in &confirmations {
            if msg.as_ref() == decision.as_slice() {
                confirmed.push(*m);
            } else {
                tracing::warn!(rank = m, "rank {m} did not confirm this rank's decision");
            }
        }
        confirmed.sort_unstable();
        if (confirmed.len() as u32) < enough {
            if !retry {
                // It may yet have been confirmed elsewhere (a bound member
                // tells the next coordinator): those bound to it are stale
                // for good here.
                tell(a, &voters, OUTCOME, &[EXPELLED]);
                return Err(self.make_stale(Stale::Expelled));
            }
            // A retry's needed every survivor, this rank included: any
            // group it made holds this rank, so none can go on without
            // it; the next attempt may try again.
            tell(a, &voters, OUTCOME, &no_quorum(&confirmed));
            return Err(self.stop(a, n, false, confirmed));
        }
        tell(a, &voters, OUTCOME, &word);
        if !counts_me {
            return Err(self.make_stale(Stale::Expelled));
        }
        Ok(Ended::Agreed(dflags, dfailed))
    }
}

/// The communicator of agreement `n` of the group whose communicator is
/// `comm`: one of its own, forgotten once a rank is done with it
/// (`GroupInner::done_with`).
pub(super) fn agreement_comm(comm: u64, n: u64) -> u64 {
    let agreements = super::split::child_comm_id(comm, u64::MAX, u32::MAX);
    super::split::child_comm_id(agreements, n, u32::MAX)
}

/// A member's flags, and the decision it is bound to with its
/// coordinator: `[flags: u64 LE]([coordinator: u32 LE][decision])`.
fn encode_flags(flags: u64, bound: Option<&(u32, Vec<u8>)>) -> Vec<u8> {
    let mut m = flags.to_le_bytes().to_vec();
    if let Some((c, d)) = bound {
        m.extend_from_slice(&c.to_le_bytes());
        m.extend_from_slice(d);
    }
    m
}

type Bound = Option<(u32, Vec<u8>)>;

fn decode_flags(m: &[u8], world: u32) -> Option<(u64, Bound)> {
    let flags = u64::from_le_bytes(m.get(..8)?.try_into().ok()?);
    if m.len() == 8 {
        return Some((flags, None));
    }
    let c = u32::from_le_bytes(m.get(8..12)?.try_into().ok()?);
    let d = &m[12..];
    (c < world && decode(d, world).is_some()).then(|| (flags, Some((c, d.to_vec()))))
}

/// A coordinator's `DECISION` or `OUTCOME`, read.
enum Word {
    /// A decision: its bytes, its flags and failed set.
    Decision(Vec<u8>, u64, BTreeSet<u32>),
    NoQuorum(Vec<u32>),
    Expelled,
}

fn no_quorum(reachable: &[u32]) -> Vec<u8> {
    let mut m = vec![NO_QUORUM];
    for r in reachable {
        m.extend_from_slice(&r.to_le_bytes());
    }
    m
}

fn decode_word(m: &[u8], world: u32) -> Option<Word> {
    let (&kind, rest) = m.split_first()?;
    match kind {
        PROPOSE => {
            let (flags, failed) = decode(rest, world)?;
            Some(Word::Decision(rest.to_vec(), flags, failed))
        }
        NO_QUORUM if rest.len().is_multiple_of(4) => {
            let ranks: Vec<u32> = rest
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            ranks
                .iter()
                .all(|&r| r < world)
                .then_some(Word::NoQuorum(ranks))
        }
        EXPELLED if rest.is_empty() => Some(Word::Expelled),
        _ => None,
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

/// For the multi-process tests (`test-hooks`): with
/// `MESHWORK_TEST_DIE_IN_AGREEMENT=n:phase:k` (a mesh's phase: `flags`,
/// `decision`, `confirm` or `outcome`), this process kills itself (no
/// goodbye, as `SIGKILL` from outside) just before it sends message `k`
/// (from 0) of that phase of agreement `n` of any of its groups: a
/// member that dies at an exact point of an agreement.
#[cfg(feature = "test-hooks")]
fn die_if_told(n: u64, phase: u8) {
    use std::sync::{Mutex, OnceLock};
    static TOLD: OnceLock<Option<(u64, u8, u32)>> = OnceLock::new();
    static SENT: Mutex<(u64, u8, u32)> = Mutex::new((u64::MAX, 0, 0));
    let told = TOLD.get_or_init(|| {
        let v = std::env::var("MESHWORK_TEST_DIE_IN_AGREEMENT").ok()?;
        let mut it = v.split(':');
        let n = it.next()?.parse().ok()?;
        let phase = match it.next()? {
            "flags" => PAIR_FLAGS,
            "decision" => PAIR_DECISION,
            "confirm" => PAIR_CONFIRM,
            "outcome" => PAIR_OUTCOME,
            _ => return None,
        };
        Some((n, phase, it.next()?.parse().ok()?))
    });
    let Some((at_n, at_phase, at_k)) = *told else {
        return;
    };
    if (n, phase) != (at_n, at_phase) {
        return;
    }
    let mut sent = SENT.lock().unwrap_or_else(|e| e.into_inner());
    if (sent.0, sent.1) != (n, phase) {
        *sent = (n, phase, 0);
    }
    if sent.2 == at_k {
        // SAFETY: kill with this process's own pid and a signal number.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    sent.2 += 1;
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
