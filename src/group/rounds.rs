//! Federated rounds: rank 0 coordinates, the other ranks take part when
//! they can. Unlike a collective, a round does not wait for every rank: it
//! is offered to the workers present, ends at its deadline (or once every
//! invited worker has reported), and averages the weighted updates of
//! exactly those that arrived in time, if at least the minimum did. A
//! worker that is late, asleep or gone costs the round nothing but its
//! update, and the group nothing at all: no revocation, no shrink (a dead
//! worker is only skipped), and a late update is answered
//! `RoundOutcome::Late`, naming its round.
//!
//! A slow or hostile worker cannot hold the coordinator up: one that left
//! two offers unanswered is offered nothing more until it answers (its
//! lane never fills, so no send to it waits), it gets at most two answers
//! a round, and what it sends that does not fit (a length, a weight, a
//! value that is not finite) is refused, never counted.
//!
//! On a relay tree, plain rounds sum the updates at the relays
//! (`tree_round.rs`); secure rounds (`secure_round.rs`) hide each update
//! from the coordinator.
//!
//! On a fleet ([`Node::fleet`](crate::Node::fleet)) workers also come
//! and go: one whose link dropped is offered nothing until it is back, a
//! returning one (from a new address, or a new process with its rank) is
//! offered the next round, owing nothing from before.
//!
//! The messages travel on a communicator of their own (so they never
//! meet the group's point-to-point tags), point to point, under the
//! links' budgets and credits:
//!
//! | tag | from → to | body (little-endian) |
//! |---|---|---|
//! | `OFFER` | coordinator → worker | round `u64`, deadline in ms `u64`, threshold `u32` (0: a plain round; else a secure one, `secure_round.rs`), then the model's `f32`s; round `u64::MAX`, nothing more: the rounds are over |
//! | `UPDATE` | worker → coordinator | round `u64`, weight `f32`, then the update's `f32`s |
//! | `RESULT` | coordinator → worker | round `u64`, outcome `u8`, then per outcome (below) |
//!
//! A `RESULT`'s outcome: 0 done (total weight `f64`, participants `u32`
//! count and ranks, late `u32` count and ranks, the model's `f32`s); 1 late;
//! 2 too few (arrived `u32`, minimum `u32`); 3 refused (the reason,
//! UTF-8). Anything a worker sends that does not parse is refused with its
//! reason, never counted.
//!
//! The average is `Σ wᵣ·xᵣ / Σ wᵣ` over the participants in ascending
//! rank order, in f64, rounded to f32 once: the same bits whatever order
//! the updates arrived in.

use super::split::child_comm_id;
use super::ProcessGroup;
use crate::error::{Error, Result};
use meshwork_transport::{LaneKey, LaneKind, TransportError};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How a coordinator runs its rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundConfig {
    /// How long a round waits for updates once it is offered.
    pub deadline: Duration,
    /// The fewest updates a round averages; with fewer, the model is left
    /// as it was and the participants are told (`RoundOutcome::TooFew`).
    pub min_updates: u32,
}

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
    /// unmask the sum; see [`RoundCoordinator::secure_round`]); `None`
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

const OFFER: u64 = 1;
const UPDATE: u64 = 2;
pub(super) const RESULT: u64 = 3;

/// The round number that ends the rounds.
const END: u64 = u64::MAX;

const DONE: u8 = 0;
pub(super) const LATE: u8 = 1;
const TOO_FEW: u8 = 2;
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
pub(super) const MAX_ANSWERS: u32 = 2;

/// How long `finish` waits for updates still on their way.
const FINISH_GRACE: Duration = Duration::from_millis(200);

/// The rounds' state on one rank ([`ProcessGroup`] holds it).
#[derive(Debug, Default)]
pub(crate) struct RoundsState {
    /// The next round's number.
    pub(super) next: AtomicU64,
    /// A round (or `finish`) is running on this rank now.
    running: AtomicBool,
    /// Offers each worker has not answered, in a row, and the
    /// incarnation of the worker that holds them (a fleet's worker that
    /// came back on a new link owes nothing).
    unanswered: Mutex<HashMap<u32, (u32, u64)>>,
    /// This worker saw the end of the rounds.
    ended: AtomicBool,
}

/// Holds `RoundsState::running` while one round or `finish` runs.
pub(super) struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl ProcessGroup {
    /// Coordinate federated rounds on this group (rank 0 only; the
    /// others call [`ProcessGroup::round_participant`]). Rounds are
    /// numbered on the group: a coordinator made again goes on from the
    /// last round any coordinator of it ran.
    pub fn round_coordinator(&self, config: RoundConfig) -> Result<RoundCoordinator<'_>> {
        if self.rank() != 0 {
            return Err(Error::InvalidArgument(format!(
                "round_coordinator: rank {} is a worker; rank 0 coordinates",
                self.rank()
            )));
        }
        if config.deadline.is_zero() || Instant::now().checked_add(config.deadline * 2).is_none() {
            return Err(Error::InvalidArgument(format!(
                "round_coordinator: a deadline of {:?} is not a positive time this clock can reach",
                config.deadline
            )));
        }
        if config.min_updates == 0 || config.min_updates >= self.world_size() {
            return Err(Error::InvalidArgument(format!(
                "round_coordinator: a minimum of {} updates; this group has {} workers (1 to that many)",
                config.min_updates,
                self.world_size() - 1
            )));
        }
        Ok(RoundCoordinator { g: self, config })
    }

    /// Take part in the federated rounds rank 0 coordinates.
    pub fn round_participant(&self) -> Result<RoundParticipant<'_>> {
        if self.rank() == 0 {
            return Err(Error::InvalidArgument(
                "round_participant: rank 0 coordinates (round_coordinator)".into(),
            ));
        }
        Ok(RoundParticipant { g: self })
    }

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

    fn unanswered(&self) -> std::sync::MutexGuard<'_, HashMap<u32, (u32, u64)>> {
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

/// Rank 0's side of the rounds ([`ProcessGroup::round_coordinator`]).
#[derive(Debug)]
pub struct RoundCoordinator<'g> {
    pub(super) g: &'g ProcessGroup,
    pub(super) config: RoundConfig,
}

impl RoundCoordinator<'_> {
    /// Run one round: offer `model` to every worker present, wait until
    /// the deadline or until every one offered has reported, and, if at
    /// least the minimum did, replace `model` with the weighted average
    /// of exactly their updates. Each participant is sent the outcome;
    /// an update for an earlier round that arrives meanwhile is answered
    /// `Late`. Fails only for this rank's own reasons (the group revoked
    /// or shut down), never for a worker's.
    pub fn round(&mut self, model: &mut [f32]) -> Result<RoundReport> {
        let g = self.g;
        let _running = g.claim_rounds("round")?;
        // Numbered on the group, so a coordinator made again goes on.
        let round = g.rounds.next.fetch_add(1, Ordering::Relaxed);
        let invited = self.invite(round, 0, model)?;
        let deadline = Instant::now() + self.config.deadline;
        let mut answers: HashMap<u32, u32> = HashMap::new();
        // Who took part, their weights summed, and their weighted values
        // summed (in f64).
        let (participants, total_weight, sums) = match super::tree_round::fanout(g) {
            Some(fanout) => super::tree_round::collect(
                g,
                fanout,
                round,
                &invited,
                deadline,
                model.len(),
                &mut answers,
            )?,
            None => self.collect_star(round, &invited, deadline, model, &mut answers)?,
        };
        let late: Vec<u32> = invited
            .iter()
            .copied()
            .filter(|w| !participants.contains(w))
            .collect();
        let applied = participants.len() >= self.config.min_updates as usize;
        // The average is made apart and written into `model` only once
        // every participant was sent it: a failure on the way (the group
        // revoked) leaves the model as it was.
        let mut average = Vec::new();
        let result = if applied {
            average = sums.iter().map(|s| (s / total_weight) as f32).collect();
            result_done(round, total_weight, &participants, &late, &average)
        } else {
            result_too_few(round, participants.len() as u32, self.config.min_updates)
        };
        for &w in &participants {
            g.round_send(w, RESULT, &result)?;
        }
        if super::tree_round::fanout(g).is_some() {
            // On a tree an update may have waited at a relay that never
            // passed it on: whoever was late hears so now.
            let late_answer = answer(round, LATE, &[]);
            for &w in &late {
                g.round_send(w, RESULT, &late_answer)?;
            }
        }
        if applied {
            model.copy_from_slice(&average);
        }
        Ok(RoundReport {
            round,
            participants,
            late,
            total_weight,
            applied,
        })
    }

    /// A star's updates for `round` from `invited` until `deadline` (or
    /// all are in): the participants, their weights summed, and their
    /// weighted values summed in f64 in ascending rank order (the same
    /// bits whatever order they came in).
    fn collect_star(
        &self,
        round: u64,
        invited: &[u32],
        deadline: Instant,
        model: &[f32],
        answers: &mut HashMap<u32, u32>,
    ) -> Result<(Vec<u32>, f64, Vec<f64>)> {
        let g = self.g;
        let mut arrived: BTreeMap<u32, (f32, Vec<f32>)> = BTreeMap::new();
        while arrived.len() < invited.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let (from, msg) = match g.inner().transport.recv_any(g.round_key(UPDATE), left) {
                Ok(got) => got,
                Err(TransportError::Timeout { .. }) => break,
                Err(e) => return Err(Error::from_transport(e, "round")),
            };
            g.answered(from);
            let (r, outcome, why) = match parse_update(msg.as_ref(), model.len()) {
                Ok((r, weight, update)) if r == round && invited.contains(&from) => {
                    match arrived.entry(from) {
                        std::collections::btree_map::Entry::Vacant(v) => {
                            v.insert((weight, update));
                            continue;
                        }
                        std::collections::btree_map::Entry::Occupied(_) => (
                            r,
                            REFUSED,
                            format!("rank {from}'s update for round {r} is in already"),
                        ),
                    }
                }
                Ok((r, ..)) if r < round => (r, LATE, String::new()),
                Ok((r, ..)) if r == round => {
                    (r, REFUSED, format!("rank {from} was not offered round {r}"))
                }
                Ok((r, ..)) => (
                    r,
                    REFUSED,
                    format!("round {r} is not open (this is round {round})"),
                ),
                Err((r, why)) => (r, REFUSED, why),
            };
            let given = answers.entry(from).or_insert(0);
            if *given < MAX_ANSWERS {
                *given += 1;
                g.round_send(from, RESULT, &answer(r, outcome, why.as_bytes()))?;
            }
        }
        let participants: Vec<u32> = arrived.keys().copied().collect();
        let total_weight: f64 = arrived.values().map(|(w, _)| f64::from(*w)).sum();
        let mut sums = vec![0f64; model.len()];
        for (w, update) in arrived.values() {
            for (s, &x) in sums.iter_mut().zip(update) {
                *s += f64::from(*w) * f64::from(x);
            }
        }
        Ok((participants, total_weight, sums))
    }

    /// End the rounds: every worker present is told (its
    /// [`RoundParticipant::next_round`] returns `None`), and updates
    /// still queued for earlier rounds are answered `Late`.
    pub fn finish(self) -> Result<()> {
        let g = self.g;
        let _running = g.claim_rounds("finish")?;
        let failed = g.inner().transport.failed();
        for w in (1..g.world_size()).filter(|w| !failed.contains(w)) {
            g.round_send(w, OFFER, &END.to_le_bytes())?;
        }
        // Updates on their way are answered too, for a short while; a
        // worker that submits after it saw the end needs no answer
        // (`RoundParticipant::submit` knows).
        let until = Instant::now() + FINISH_GRACE;
        let mut answers: HashMap<u32, u32> = HashMap::new();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let Ok((from, msg)) = g.inner().transport.recv_any(g.round_key(UPDATE), left) else {
                break;
            };
            let given = answers.entry(from).or_insert(0);
            if *given < MAX_ANSWERS {
                *given += 1;
                let r = msg.as_ref().get(..8).map_or(0, le_u64);
                g.round_send(from, RESULT, &answer(r, LATE, &[]))?;
            }
        }
        Ok(())
    }
}

/// A worker's side of the rounds ([`ProcessGroup::round_participant`]).
#[derive(Debug)]
pub struct RoundParticipant<'g> {
    g: &'g ProcessGroup,
}

impl RoundParticipant<'_> {
    /// The newest round offered (older offers still queued are passed
    /// over: a worker that slept joins the round now open), waiting at
    /// most `timeout` for one; `None` once the coordinator has ended the
    /// rounds. `Timeout` naming rank 0 if none comes.
    pub fn next_round(&mut self, timeout: Duration) -> Result<Option<Offer>> {
        let g = self.g;
        let inner = g.inner();
        inner.check_usable()?;
        let key = g.round_key(OFFER);
        let mut msg = inner
            .transport
            .recv(0, key, timeout, None)
            .map_err(|e| Error::from_transport(e, "next_round"))?;
        while let Ok(newer) = inner.transport.recv(0, key, Duration::ZERO, None) {
            msg = newer;
        }
        let bytes = msg.as_ref();
        let round = bytes.get(..8).map_or(END, le_u64);
        if round == END {
            g.rounds.ended.store(true, Ordering::Release);
            return Ok(None);
        }
        let deadline = Duration::from_millis(bytes.get(8..16).map_or(0, le_u64));
        let threshold = bytes.get(16..20).map_or(0, le_u32);
        Ok(Some(Offer {
            round,
            model: f32s(bytes.get(20..).unwrap_or_default()),
            deadline,
            threshold: (threshold > 0).then_some(threshold),
            received: Instant::now(),
        }))
    }

    /// Send this worker's `update` to `offer`'s round with `weight` (its
    /// sample count, say: finite and positive), and wait, within the
    /// group's deadline, for what became of it.
    pub fn submit(&mut self, offer: &Offer, update: &[f32], weight: f32) -> Result<RoundOutcome> {
        if update.len() != offer.model.len() {
            return Err(Error::InvalidArgument(format!(
                "submit: the update has {} elements, round {}'s model {}",
                update.len(),
                offer.round,
                offer.model.len()
            )));
        }
        if !(weight.is_finite() && weight > 0.0) {
            return Err(Error::InvalidArgument(format!(
                "submit: weight {weight} is not a positive number"
            )));
        }
        if let Some(i) = update.iter().position(|x| !x.is_finite()) {
            return Err(Error::InvalidArgument(format!(
                "submit: update[{i}] is {}; updates are finite",
                update[i]
            )));
        }
        let g = self.g;
        if g.rounds.ended.load(Ordering::Acquire) {
            // The coordinator ended the rounds: it answers nothing more.
            return Ok(RoundOutcome::Late { round: offer.round });
        }
        if let Some(threshold) = offer.threshold {
            g.inner().check_usable()?;
            return super::secure_round::submit(g, offer, update, weight, threshold);
        }
        if let Some(fanout) = super::tree_round::fanout(g) {
            g.inner().check_usable()?;
            return super::tree_round::submit(g, fanout, offer, update, weight);
        }
        let mut body = Vec::with_capacity(12 + 4 * update.len());
        body.extend_from_slice(&offer.round.to_le_bytes());
        body.extend_from_slice(&weight.to_le_bytes());
        body.extend_from_slice(bytemuck::cast_slice(update));
        let inner = g.inner();
        inner.check_usable()?;
        inner
            .transport
            .send(0, g.round_key(UPDATE), &[&body])
            .map_err(|e| Error::from_transport(e, "submit"))?;
        // The round's own deadline, then the group's for the answer.
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
            // An answer to an earlier submission not waited for is passed over.
            match parse_result(msg.as_ref()) {
                Some(outcome) if outcome_round(&outcome) == offer.round => return Ok(outcome),
                Some(_) => continue,
                None => {
                    return Err(Error::InvalidArgument(
                        "submit: the coordinator's answer does not parse".into(),
                    ))
                }
            }
        }
    }
}

/// Send `offer` to every worker present that owes fewer than
/// [`MAX_UNANSWERED`] offers (a worker that left its last offers
/// unanswered is asleep or slow: offered nothing more until it answers);
/// the workers offered.
pub(super) fn invite_key(g: &ProcessGroup, offer: &[u8]) -> Result<Vec<u32>> {
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

impl RoundParticipant<'_> {
    /// For tests: take a secure round's steps up to the masked input and
    /// stop there, sending nothing more — a worker that drops out after
    /// masking (its masks are in the others' inputs, its shares with
    /// them).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn drop_after_masking(&mut self, offer: &Offer, update: &[f32], weight: f32) -> Result<()> {
        let threshold = offer.threshold.ok_or_else(|| {
            Error::InvalidArgument("drop_after_masking: not a secure round".into())
        })?;
        super::secure_round::submit_until(self.g, offer, update, weight, threshold, true)
            .map(|_| ())
    }
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
fn f32s(b: &[u8]) -> Vec<f32> {
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

/// An update's round, weight and values, or its round (0 if unreadable)
/// and why it cannot be used.
fn parse_update(b: &[u8], n: usize) -> std::result::Result<(u64, f32, Vec<f32>), (u64, String)> {
    let round = b.get(..8).map_or(0, le_u64);
    if b.len() < 12 {
        return Err((
            round,
            format!("an update of {} bytes has no header", b.len()),
        ));
    }
    let weight = f32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    let values = &b[12..];
    if values.len() != 4 * n {
        return Err((
            round,
            format!(
                "the update has {} bytes of values; the model has {n} f32s",
                values.len()
            ),
        ));
    }
    if !(weight.is_finite() && weight > 0.0) {
        return Err((round, format!("weight {weight} is not a positive number")));
    }
    let values = f32s(values);
    if let Some(i) = values.iter().position(|x| !x.is_finite()) {
        return Err((round, format!("value {i} of the update is {}", values[i])));
    }
    Ok((round, weight, values))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_back_and_garbage_does_not() {
        let mut body = 2.5f64.to_le_bytes().to_vec();
        for list in [&[1u32, 3][..], &[2][..]] {
            body.extend_from_slice(&(list.len() as u32).to_le_bytes());
            list.iter()
                .for_each(|r| body.extend_from_slice(&r.to_le_bytes()));
        }
        body.extend_from_slice(bytemuck::cast_slice(&[1.5f32, -2.0]));
        match parse_result(&answer(7, DONE, &body)) {
            Some(RoundOutcome::Done { model, report }) => {
                assert_eq!(model, [1.5, -2.0]);
                assert_eq!((report.round, report.total_weight), (7, 2.5));
                assert_eq!((report.participants, report.late), (vec![1, 3], vec![2]));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse_result(&answer(4, LATE, &[])),
            Some(RoundOutcome::Late { round: 4 })
        );
        // Truncated lists, unknown outcomes, short headers.
        assert_eq!(parse_result(&answer(7, DONE, &body[..14])), None);
        assert_eq!(parse_result(&answer(7, 9, &[])), None);
        assert_eq!(parse_result(&[1, 2, 3]), None);
    }

    /// Two rounds at once on one group would take each other's updates.
    #[test]
    fn a_second_round_while_one_runs_is_refused() {
        let world = crate::local(2).unwrap();
        let held = world[0].claim_rounds("round").unwrap();
        let config = RoundConfig {
            deadline: Duration::from_secs(1),
            min_updates: 1,
        };
        let mut model = [0f32; 2];
        let r = world[0]
            .round_coordinator(config)
            .unwrap()
            .round(&mut model);
        assert!(
            matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("another round")),
            "{r:?}"
        );
        drop(held);
        assert!(world[0].claim_rounds("round").is_ok());
    }

    #[test]
    fn an_update_that_does_not_fit_is_refused_with_its_reason() {
        let mut u = 3u64.to_le_bytes().to_vec();
        u.extend_from_slice(&1.0f32.to_le_bytes());
        u.extend_from_slice(bytemuck::cast_slice(&[1.0f32, 2.0]));
        assert_eq!(parse_update(&u, 2), Ok((3, 1.0, vec![1.0, 2.0])));
        assert!(parse_update(&u, 3)
            .unwrap_err()
            .1
            .contains("model has 3 f32s"));
        u[8..12].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(parse_update(&u, 2)
            .unwrap_err()
            .1
            .contains("not a positive"));
        u[8..12].copy_from_slice(&1.0f32.to_le_bytes());
        u[16..20].copy_from_slice(&f32::INFINITY.to_le_bytes());
        let why = parse_update(&u, 2).unwrap_err().1;
        assert!(why.contains("value 1 of the update is inf"), "{why}");
        assert_eq!(parse_update(&[9; 5], 2).unwrap_err().0, 0);
    }
}
