//! What the rounds' sides share (`rounds.rs`, `secure_round.rs`,
//! `tree_round.rs`): the messages' tags and encodings, what a round
//! reports, and the group's lanes, offers and claims for them. The
//! table of the messages is in `rounds.rs`.

use super::split::child_comm_id;
use super::ProcessGroup;
use crate::error::{Error, Result};
use meshwork_transport::{LaneKey, LaneKind, Payload, TransportError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What a round came to.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RoundReport {
    /// The round's number, from 0.
    pub round: u64,
    /// The workers whose updates were averaged, ascending.
    pub participants: Vec<u32>,
    /// The workers offered the round whose update was not in by its
    /// deadline (late, asleep or gone), ascending.
    pub late: Vec<u32>,
    /// The participants' weights, summed.
    pub total_weight: f64,
    /// Whether the model was updated (at least the minimum arrived).
    pub applied: bool,
}

/// A round offered to a worker.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Offer {
    /// The round's number.
    pub round: u64,
    /// The model the round starts from.
    pub model: Vec<f32>,
    /// How long the round waits for updates from its offer.
    pub deadline: Duration,
    /// A secure round's threshold (the fewest workers whose shares
    /// unmask the sum; see [`RoundCoordinator::secure_round`](crate::RoundCoordinator::secure_round)); `None`
    /// for a plain round. `submit` runs the secure steps by itself.
    pub threshold: Option<u32>,
    /// When it came (a relay's cutoff on a tree counts from it).
    pub(super) received: Instant,
}

/// What became of a worker's update.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RoundOutcome {
    /// It was averaged: the new model, and who took part.
    Done {
        /// The round's average.
        model: Vec<f32>,
        /// Who took part and who was late.
        report: RoundReport,
    },
    /// It came after the round's deadline and was not counted.
    Late {
        /// The round it was for.
        round: u64,
    },
    /// Fewer than the minimum arrived: nothing was averaged.
    TooFew {
        /// The round.
        round: u64,
        /// How many updates arrived in time.
        arrived: u32,
        /// The minimum.
        min: u32,
    },
    /// The coordinator refused it (a length or weight it cannot use).
    Refused {
        /// The round it was for.
        round: u64,
        /// Why.
        reason: String,
    },
}

pub(super) const OFFER: u64 = 1;
pub(super) const UPDATE: u64 = 2;
pub(super) const RESULT: u64 = 3;

/// The round number that ends the rounds.
pub(super) const END: u64 = u64::MAX;

pub(super) const DONE: u8 = 0;
pub(super) const LATE: u8 = 1;
pub(super) const TOO_FEW: u8 = 2;
pub(super) const REFUSED: u8 = 3;

/// Salt of the rounds' communicator ("rounds").
const ROUNDS_SALT: u64 = 0x726f_756e_6473;

/// Offers a worker may have unanswered: past them it is offered nothing
/// until it answers (the newest offer it holds is then late), so a
/// sleeping worker's lane never fills and a send to it never waits.
const MAX_UNANSWERED: u32 = 2;

/// Answers (refusals, lates) one worker gets per round at most: a worker
/// that sends update after update without reading cannot make the
/// coordinator wait on its full lane.
const MAX_ANSWERS: u32 = 2;

/// The answers each worker was given in one round ([`MAX_ANSWERS`] at
/// most).
#[derive(Debug, Default)]
pub(super) struct Answers(HashMap<u32, u32>);

impl Answers {
    /// Whether `to` may be given one more answer (then counted).
    pub(super) fn one_more(&mut self, to: u32) -> bool {
        let given = self.0.entry(to).or_insert(0);
        let more = *given < MAX_ANSWERS;
        if more {
            *given += 1;
        }
        more
    }
}

/// Holds `RoundsState::running` while one round or `finish` runs.
pub(super) struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl ProcessGroup {
    /// The communicator the rounds' messages travel on.
    pub(crate) fn rounds_comm(&self) -> u64 {
        child_comm_id(self.inner().comm_id ^ ROUNDS_SALT, 0, u32::MAX - 3)
    }

    /// The lane of the rounds' messages tagged `tag`.
    pub(super) fn round_key(&self, tag: u64) -> LaneKey {
        LaneKey {
            comm: self.rounds_comm(),
            kind: LaneKind::PointToPoint,
            tag,
        }
    }

    /// This rank's claim to run a round (or `finish`) now: one at a time,
    /// or two would take each other's updates.
    pub(super) fn claim_rounds(&self, op: &str) -> Result<Running<'_>> {
        if self.rounds.running.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidArgument(format!(
                "{op}: another round is running on this group now; run one at a time"
            )));
        }
        Ok(Running(&self.rounds.running))
    }

    pub(super) fn unanswered(&self) -> std::sync::MutexGuard<'_, HashMap<u32, (u32, u64)>> {
        self.rounds
            .unanswered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// `from` answered: it owes no offers (in its incarnation now).
    pub(super) fn answered(&self, from: u32) {
        let incarnation = self.inner().transport.incarnation(from);
        self.unanswered().insert(from, (0, incarnation));
    }

    /// The next rounds' message tagged `tag` from any rank, waiting until
    /// `until`; `None` once that has passed.
    pub(super) fn round_recv_any(
        &self,
        tag: u64,
        until: Instant,
        op: &str,
    ) -> Result<Option<(u32, Payload)>> {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        match self.inner().transport.recv_any(self.round_key(tag), left) {
            Ok(got) => Ok(Some(got)),
            Err(TransportError::Timeout { .. }) => Ok(None),
            Err(e) => Err(Error::from_transport(e, op)),
        }
    }

    /// Send a round message; a worker that is gone is away, not an error.
    pub(super) fn round_send(&self, to: u32, tag: u64, body: &[u8]) -> Result<bool> {
        let inner = self.inner();
        inner.check_usable()?;
        match inner.transport.send(to, self.round_key(tag), &[body]) {
            Ok(()) => Ok(true),
            Err(TransportError::PeerDisconnected { .. } | TransportError::Timeout { .. }) => {
                Ok(false)
            }
            Err(e) => Err(Error::from_transport(e, "a round")),
        }
    }
}

/// Offer round `round` (secure with `threshold` if not 0), its deadline
/// `deadline`, to every worker present that owes fewer than the most
/// unanswered offers; the workers offered.
pub(super) fn invite(
    g: &ProcessGroup,
    deadline: Duration,
    round: u64,
    threshold: u32,
    model: &[f32],
) -> Result<Vec<u32>> {
    let deadline_ms = u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX);
    let mut offer = Vec::with_capacity(20 + 4 * model.len());
    offer.extend_from_slice(&round.to_le_bytes());
    offer.extend_from_slice(&deadline_ms.to_le_bytes());
    offer.extend_from_slice(&threshold.to_le_bytes());
    offer.extend_from_slice(bytemuck::cast_slice(model));
    invite_key(g, &offer)
}

/// Send `offer` to every worker present that owes fewer than
/// [`MAX_UNANSWERED`] offers (a worker that left its last offers
/// unanswered is asleep or slow: offered nothing more until it answers);
/// the workers offered.
fn invite_key(g: &ProcessGroup, offer: &[u8]) -> Result<Vec<u32>> {
    let failed = g.inner().transport.failed();
    let mut invited = Vec::new();
    for w in (1..g.world_size()).filter(|w| !failed.contains(w)) {
        let incarnation = g.inner().transport.incarnation(w);
        let owed = match g.unanswered().get(&w) {
            Some(&(n, i)) if i == incarnation => n,
            _ => 0,
        };
        if owed < MAX_UNANSWERED && g.round_send(w, OFFER, offer)? {
            invited.push(w);
            g.unanswered().insert(w, (owed + 1, incarnation));
        }
    }
    Ok(invited)
}

/// A `RESULT` saying the round was averaged.
pub(super) fn result_done(
    round: u64,
    total_weight: f64,
    participants: &[u32],
    late: &[u32],
    average: &[f32],
) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&total_weight.to_le_bytes());
    for list in [participants, late] {
        body.extend_from_slice(&(list.len() as u32).to_le_bytes());
        list.iter()
            .for_each(|r| body.extend_from_slice(&r.to_le_bytes()));
    }
    body.extend_from_slice(bytemuck::cast_slice(average));
    answer(round, DONE, &body)
}

/// A `RESULT` saying fewer than `min` arrived.
pub(super) fn result_too_few(round: u64, arrived: u32, min: u32) -> Vec<u8> {
    let mut body = arrived.to_le_bytes().to_vec();
    body.extend_from_slice(&min.to_le_bytes());
    answer(round, TOO_FEW, &body)
}

pub(super) fn outcome_round(o: &RoundOutcome) -> u64 {
    match o {
        RoundOutcome::Done { report, .. } => report.round,
        RoundOutcome::Late { round }
        | RoundOutcome::TooFew { round, .. }
        | RoundOutcome::Refused { round, .. } => *round,
    }
}

pub(super) fn le_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))
}

pub(super) fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().unwrap_or([0; 4]))
}

/// Little-endian `f32`s (a trailing partial one is dropped).
pub(super) fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub(super) fn answer(round: u64, outcome: u8, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(9 + body.len());
    m.extend_from_slice(&round.to_le_bytes());
    m.push(outcome);
    m.extend_from_slice(body);
    m
}

/// The coordinator's answer to this worker's update for `offer`'s
/// round, waiting the round's own deadline and then the group's; answers
/// to earlier submissions not waited for are passed over.
pub(super) fn await_answer(g: &ProcessGroup, offer: &Offer) -> Result<RoundOutcome> {
    let inner = g.inner();
    let wait = offer.deadline.saturating_add(inner.timeout());
    let until = Instant::now()
        .checked_add(wait)
        .unwrap_or_else(|| Instant::now() + inner.timeout());
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let msg = inner
            .transport
            .recv(0, g.round_key(RESULT), left, None)
            .map_err(|e| Error::from_transport(e, "submit"))?;
        match parse_result(msg.as_ref()) {
            Some(outcome) if outcome_round(&outcome) == offer.round => return Ok(outcome),
            Some(_) => {}
            None => {
                return Err(Error::InvalidArgument(
                    "submit: the coordinator's answer does not parse".into(),
                ))
            }
        }
    }
}

/// A coordinator's answer, or `None` if it does not parse.
pub(super) fn parse_result(b: &[u8]) -> Option<RoundOutcome> {
    let round = le_u64(b.get(..8)?);
    let body = b.get(9..)?;
    Some(match *b.get(8)? {
        DONE => {
            let total_weight = f64::from_le_bytes(body.get(..8)?.try_into().ok()?);
            let mut at: usize = 8;
            let mut list = || -> Option<Vec<u32>> {
                let n = le_u32(body.get(at..at.checked_add(4)?)?) as usize;
                let end = n.checked_mul(4)?.checked_add(at + 4)?;
                let ranks = body.get(at + 4..end)?;
                at = end;
                Some(ranks.chunks_exact(4).map(le_u32).collect())
            };
            let participants = list()?;
            let late = list()?;
            let model = f32s(body.get(at..)?);
            RoundOutcome::Done {
                model,
                report: RoundReport {
                    round,
                    participants,
                    late,
                    total_weight,
                    applied: true,
                },
            }
        }
        LATE => RoundOutcome::Late { round },
        TOO_FEW => RoundOutcome::TooFew {
            round,
            arrived: le_u32(body.get(..4)?),
            min: le_u32(body.get(4..8)?),
        },
        REFUSED => RoundOutcome::Refused {
            round,
            reason: String::from_utf8_lossy(body).into_owned(),
        },
        _ => return None,
    })
}
