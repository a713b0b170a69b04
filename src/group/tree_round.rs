//! Plain rounds on a relay tree (`Topology::Tree`): partial sums at the
//! relays, so the coordinator takes one message per child a round, not
//! one per worker.
//!
//! Offers still go to every worker directly (routed through the relays
//! by the transport), and results come back to each directly. Updates go
//! up the tree as **aggregates**: a worker sends its parent the ranks it
//! speaks for, their weights summed and their weighted values summed (in
//! f64). A relay adds its own update to its children's aggregates, taken
//! until they are all in or until its cutoff — the deadline cut in equal
//! steps, one a level, so that a relay stops a step before its parent —
//! and sends one aggregate up. What reaches a relay after it sent its own (a
//! slow child) is passed straight on to the coordinator, which counts it
//! if its round is still open and answers `Late` to every rank in it if
//! not. Every worker offered who did not take part is told `Late` when
//! the round ends (its update may have waited at a relay that never
//! passed it on).
//!
//! The average is the same quotient as on a star, its f64 sums added in
//! the tree's order rather than by rank: its bits may differ from a star's
//! in the last place.
//!
//! | tag | from → to | body (little-endian) |
//! |---|---|---|
//! | `AGGREGATE` | worker → parent (or, late, → coordinator) | round `u64`, count `u32` and ranks, total weight `f64`, then the weighted values' sums, `f64`s |

use super::round_wire::{
    answer, await_answer, le_u32, le_u64, Answers, Offer, RoundOutcome, LATE, REFUSED, RESULT,
};
use super::ProcessGroup;
use crate::error::{Error, Result};
use crate::Topology;
use meshwork_transport::{Shape, TransportError};
use std::collections::BTreeSet;
use std::time::Instant;

/// Worker → parent (or coordinator).
pub(super) const AGGREGATE: u64 = 6;

/// The tree's fanout if the group's rounds aggregate on one.
pub(super) fn fanout(g: &ProcessGroup) -> Option<u32> {
    match g.topology() {
        Topology::Tree { fanout } if fanout > 0 => Some(fanout),
        _ => None,
    }
}

/// Partial sums on their way up.
#[derive(Debug)]
struct Aggregate {
    round: u64,
    ranks: Vec<u32>,
    weight: f64,
    sums: Vec<f64>,
}

impl Aggregate {
    fn encode(&self) -> Vec<u8> {
        let mut m = Vec::with_capacity(20 + 4 * self.ranks.len() + 8 * self.sums.len());
        m.extend_from_slice(&self.round.to_le_bytes());
        m.extend_from_slice(&(self.ranks.len() as u32).to_le_bytes());
        self.ranks
            .iter()
            .for_each(|r| m.extend_from_slice(&r.to_le_bytes()));
        m.extend_from_slice(&self.weight.to_le_bytes());
        self.sums
            .iter()
            .for_each(|s| m.extend_from_slice(&s.to_le_bytes()));
        m
    }

    /// An aggregate of `n` values, or its round (0 if unreadable) and why
    /// it cannot be used.
    fn parse(b: &[u8], n: usize) -> std::result::Result<Aggregate, (u64, String)> {
        let round = b.get(..8).map_or(0, le_u64);
        let count = b.get(8..12).map_or(0, le_u32) as usize;
        let ranks_end = count
            .checked_mul(4)
            .and_then(|c| c.checked_add(12))
            .filter(|&e| e <= b.len())
            .ok_or((
                round,
                format!("an aggregate of {} bytes is cut short", b.len()),
            ))?;
        if b.len() != ranks_end + 8 + 8 * n {
            return Err((
                round,
                format!(
                    "an aggregate of {} bytes for {count} ranks; the model has {n} values",
                    b.len()
                ),
            ));
        }
        let ranks: Vec<u32> = b[12..ranks_end].chunks_exact(4).map(le_u32).collect();
        let f64_at = |i: usize| f64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let weight = f64_at(ranks_end);
        let sums: Vec<f64> = (0..n).map(|i| f64_at(ranks_end + 8 + 8 * i)).collect();
        let distinct: BTreeSet<u32> = ranks.iter().copied().collect();
        if ranks.is_empty() || distinct.len() != ranks.len() {
            return Err((
                round,
                "an aggregate that names no rank, or one twice".into(),
            ));
        }
        if !(weight.is_finite() && weight > 0.0) || sums.iter().any(|s| !s.is_finite()) {
            return Err((
                round,
                "an aggregate with a weight or a sum that is not finite".into(),
            ));
        }
        Ok(Aggregate {
            round,
            ranks,
            weight,
            sums,
        })
    }

    fn add(&mut self, other: Aggregate) {
        self.ranks.extend(other.ranks);
        self.weight += other.weight;
        self.sums
            .iter_mut()
            .zip(&other.sums)
            .for_each(|(s, o)| *s += o);
    }
}

/// The coordinator's side: aggregates for `round` until `deadline` or
/// until every one of `invited` is in. Returns the participants
/// (ascending), their total weight and their sums.
pub(super) fn collect(
    g: &ProcessGroup,
    fanout: u32,
    round: u64,
    invited: &[u32],
    deadline: Instant,
    n: usize,
    answers: &mut Answers,
) -> Result<(Vec<u32>, f64, Vec<f64>)> {
    let shape = Shape::Tree { fanout };
    let world = g.world_size();
    let offered: BTreeSet<u32> = invited.iter().copied().collect();
    let mut total = Aggregate {
        round,
        ranks: Vec::new(),
        weight: 0.0,
        sums: vec![0.0; n],
    };
    let mut counted: BTreeSet<u32> = BTreeSet::new();
    while counted.len() < offered.len() {
        let Some((from, msg)) = g.round_recv_any(AGGREGATE, deadline, "round")? else {
            break;
        };
        g.answered(from);
        let (r, ranks, outcome, why) = match Aggregate::parse(msg.as_ref(), n) {
            Ok(a) if a.round == round => {
                // A sender speaks for its own subtree only, for ranks
                // offered the round and not counted yet.
                let foreign = a.ranks.iter().find(|&&w| {
                    !offered.contains(&w)
                        || counted.contains(&w)
                        || !in_subtree(shape, world, from, w)
                });
                match foreign {
                    None => {
                        // Each rank in it answered its offer (through its
                        // relays).
                        a.ranks.iter().for_each(|&w| g.answered(w));
                        counted.extend(a.ranks.iter().copied());
                        total.add(a);
                        continue;
                    }
                    Some(&w) => (
                        round,
                        vec![from],
                        REFUSED,
                        format!("rank {from}'s aggregate names rank {w}, which it cannot speak for in round {round}"),
                    ),
                }
            }
            Ok(a) if a.round < round => {
                let mine: Vec<u32> = a
                    .ranks
                    .into_iter()
                    .filter(|&w| in_subtree(shape, world, from, w))
                    .collect();
                mine.iter().for_each(|&w| g.answered(w));
                (a.round, mine, LATE, String::new())
            }
            Ok(a) => (
                a.round,
                vec![from],
                REFUSED,
                format!("round {} is not open (this is round {round})", a.round),
            ),
            Err((r, why)) => (r, vec![from], REFUSED, why),
        };
        for w in ranks {
            if answers.one_more(w) {
                g.round_send(w, RESULT, &answer(r, outcome, why.as_bytes()))?;
            }
        }
    }
    Ok((counted.into_iter().collect(), total.weight, total.sums))
}

/// Whether `w` is `r` or below it on the tree.
fn in_subtree(shape: Shape, world: u32, r: u32, mut w: u32) -> bool {
    let _ = world;
    loop {
        if w == r {
            return true;
        }
        match shape.parent(w) {
            Some(p) => w = p,
            None => return false,
        }
    }
}

/// How many levels hang below `rank` on a tree of `fanout` among `world`
/// ranks.
fn height(fanout: u32, world: u32, rank: u32) -> u32 {
    let k = u64::from(fanout.max(1));
    let (mut lo, mut h) = (u64::from(rank), 0);
    loop {
        lo = lo * k + 1;
        if lo >= u64::from(world) {
            return h;
        }
        h += 1;
    }
}

/// A worker's side: its update, with what its children sent by its
/// cutoff, goes to its parent; then the coordinator's answer, passing on
/// to the coordinator what comes from its children meanwhile.
pub(super) fn submit(
    g: &ProcessGroup,
    fanout: u32,
    offer: &Offer,
    update: &[f32],
    weight: f32,
) -> Result<RoundOutcome> {
    let shape = Shape::Tree { fanout };
    let (me, world) = (g.rank(), g.world_size());
    let inner = g.inner();
    let n = update.len();
    let w = f64::from(weight);
    let mut mine = Aggregate {
        round: offer.round,
        ranks: vec![me],
        weight: w,
        sums: update.iter().map(|&x| w * f64::from(x)).collect(),
    };
    let failed = inner.transport.failed();
    let dead = |r: u32| failed.contains(&r);
    // Its children now: the live ranks whose nearest live ancestor it is
    // (a failed child's children too).
    let children: BTreeSet<u32> = (1..world)
        .filter(|&r| !dead(r) && shape.live_parent(r, &dead) == Some(me))
        .collect();
    let key = g.round_key(AGGREGATE);
    // Passed straight on: the coordinator counts it if it can.
    let pass_on = |msg: &[u8]| -> Result<()> {
        match inner.transport.send(0, key, &[msg]) {
            Ok(()) | Err(TransportError::PeerDisconnected { .. }) => Ok(()),
            Err(e) => Err(Error::from_transport(e, "submit")),
        }
    };
    if !children.is_empty() {
        // The deadline in equal steps, one a level: a relay stops a step
        // before its parent does.
        let top = height(fanout, world, 0);
        let levels = top.saturating_sub(height(fanout, world, me));
        let share = 1.0 - f64::from(levels) / f64::from(top + 1);
        let cutoff = offer.received + offer.deadline.mul_f64(share);
        let mut heard: BTreeSet<u32> = BTreeSet::new();
        while heard.len() < children.len() {
            let Some((from, msg)) = g.round_recv_any(AGGREGATE, cutoff, "submit")? else {
                break;
            };
            // A child speaks for its own subtree only, once a round.
            let fits = |a: &Aggregate| {
                children.contains(&from)
                    && a.ranks
                        .iter()
                        .all(|&r| in_subtree(shape, world, from, r) && !mine.ranks.contains(&r))
            };
            match Aggregate::parse(msg.as_ref(), n) {
                Ok(a) if a.round == offer.round && !heard.contains(&from) && fits(&a) => {
                    heard.insert(from);
                    mine.add(a);
                }
                // Another round's: the coordinator counts it if that
                // round is open, else answers its ranks `Late`.
                Ok(a) if a.round != offer.round && fits(&a) => pass_on(msg.as_ref())?,
                // A second one, or one that does not fit: dropped (its
                // ranks hear `Late` at the round's end).
                _ => tracing::warn!(
                    round = offer.round,
                    from,
                    "an aggregate from below that does not fit; dropped"
                ),
            }
        }
    }
    let parent = shape.live_parent(me, &dead).unwrap_or(0);
    inner
        .transport
        .send(parent, key, &[&mine.encode()])
        .map_err(|e| Error::from_transport(e, "submit"))?;
    await_answer(g, offer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heights_and_subtrees_of_a_tree() {
        // fanout 2, 10 ranks: 0 | 1 2 | 3 4 5 6 | 7 8 9
        assert_eq!(height(2, 10, 0), 3);
        assert_eq!(height(2, 10, 1), 2);
        assert_eq!(height(2, 10, 2), 1);
        assert_eq!(height(2, 10, 3), 1);
        assert_eq!(height(2, 10, 5), 0);
        let t = Shape::Tree { fanout: 2 };
        assert!(in_subtree(t, 10, 1, 8) && in_subtree(t, 10, 3, 7) && in_subtree(t, 10, 0, 9));
        assert!(!in_subtree(t, 10, 2, 8) && !in_subtree(t, 10, 4, 3));
    }

    #[test]
    fn aggregates_parse_back_and_bad_ones_are_refused() {
        let a = Aggregate {
            round: 5,
            ranks: vec![3, 7],
            weight: 2.5,
            sums: vec![1.0, -2.0],
        };
        let b = a.encode();
        let p = Aggregate::parse(&b, 2).unwrap();
        assert_eq!(
            (p.round, p.ranks, p.weight, p.sums),
            (5, vec![3, 7], 2.5, vec![1.0, -2.0])
        );
        assert!(Aggregate::parse(&b, 3).is_err());
        assert!(Aggregate::parse(&b[..10], 2).is_err());
        let twice = Aggregate {
            ranks: vec![3, 3],
            ..Aggregate::parse(&b, 2).unwrap()
        };
        assert!(Aggregate::parse(&twice.encode(), 2).is_err());
        let mut bad = b.clone();
        let at = bad.len() - 8;
        bad[at..].copy_from_slice(&f64::NAN.to_le_bytes());
        assert!(Aggregate::parse(&bad, 2).is_err());
    }
}
