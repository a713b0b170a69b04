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

use super::round_wire::{
    answer, await_answer, f32s, invite, le_u32, le_u64, result_done, result_too_few, Answers, END,
    LATE, OFFER, REFUSED, RESULT, UPDATE,
};
pub use super::round_wire::{Offer, RoundOutcome, RoundReport};
use super::ProcessGroup;
use crate::error::{Error, Result};
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

/// How long `finish` waits for updates still on their way.
const FINISH_GRACE: Duration = Duration::from_millis(200);

/// The rounds' state on one rank ([`ProcessGroup`] holds it).
#[derive(Debug, Default)]
pub(crate) struct RoundsState {
    /// The next round's number.
    pub(super) next: AtomicU64,
    /// A round (or `finish`) is running on this rank now.
    pub(super) running: AtomicBool,
    /// Offers each worker has not answered, in a row, and the
    /// incarnation of the worker that holds them (a fleet's worker that
    /// came back on a new link owes nothing).
    pub(super) unanswered: Mutex<HashMap<u32, (u32, u64)>>,
    /// This worker saw the end of the rounds.
    ended: AtomicBool,
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
        let invited = invite(g, self.config.deadline, round, 0, model)?;
        let deadline = Instant::now() + self.config.deadline;
        let mut answers = Answers::default();
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
        answers: &mut Answers,
    ) -> Result<(Vec<u32>, f64, Vec<f64>)> {
        let g = self.g;
        let mut arrived: BTreeMap<u32, (f32, Vec<f32>)> = BTreeMap::new();
        while arrived.len() < invited.len() {
            let Some((from, msg)) = g.round_recv_any(UPDATE, deadline, "round")? else {
                break;
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
            if answers.one_more(from) {
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

    /// Run one round as [`round`](Self::round) does, but secure: the
    /// coordinator learns only the weighted sum of the participants'
    /// updates (and their total weight), never one worker's update, as
    /// long as fewer than `threshold` workers collude with it (see the
    /// module docs of `secure_round.rs` and docs/topologies.md,
    /// "Federated rounds"). Workers that drop out after masking are removed from the
    /// sum with `threshold` of the others' shares; the result is the
    /// average of exactly the workers whose masked input came in time, to
    /// within the fixed-point step. `threshold` is at least 2 and at most
    /// the workers; a round with fewer than `threshold` (or the minimum)
    /// at any step ends `TooFew`.
    pub fn secure_round(&mut self, model: &mut [f32], threshold: u32) -> Result<RoundReport> {
        let config = self.config;
        super::secure_round::coordinate(
            self.g,
            config.deadline,
            config.min_updates,
            model,
            threshold,
        )
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
        let mut answers = Answers::default();
        while let Ok(Some((from, msg))) = g.round_recv_any(UPDATE, until, "finish") {
            if answers.one_more(from) {
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
        await_answer(g, offer)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::round_wire::{parse_result, DONE};

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
