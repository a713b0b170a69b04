//! Secure rounds: the coordinator learns only the weighted sum of the
//! participants' updates (SecAgg, Bonawitz et al., CCS 2017, for an
//! honest-but-curious coordinator; the pieces are in `secagg.rs`).
//!
//! A round offered with a threshold `t` runs in four steps, each given a
//! quarter of the round's deadline; a step that ends with fewer than `t`
//! workers (or the round's minimum) ends the round `TooFew` for them:
//!
//! 1. **Keys.** Each worker sends two fresh X25519 public keys; the
//!    coordinator sends the list to those that did (U1).
//! 2. **Shares.** Each worker draws a self-mask seed `b`, splits it and
//!    its mask key's secret half into Shamir shares, `t` of |U1|, and
//!    sends each other worker its two shares sealed under their
//!    agreement (the coordinator forwards what it cannot read). U2: those
//!    whose shares came.
//! 3. **Masked input.** Each worker of U2 sends, modulo 2⁶⁴, its weighted
//!    update and its weight in fixed point, plus the mask `b` expands to,
//!    plus, for every other worker of U2, the mask their agreement
//!    expands to (added by the lower rank, taken away by the higher). U3:
//!    those whose input came.
//! 4. **Unmasking.** Each worker of U3 reveals, for every worker of U2,
//!    its share of `b` if that worker is in U3, else its share of the
//!    mask key — never both for one worker. From `t` of them the
//!    coordinator removes every self-mask and the pairwise masks of the
//!    workers that dropped after masking; what is left is the sum.
//!
//! The average is the sum over the total weight, as in a plain round, to
//! within fixed point's step (2⁻²⁴ of a weighted value, per worker).
//!
//! | tag | from → to | body (little-endian) |
//! |---|---|---|
//! | `SECURE_UP` | worker → coordinator | round `u64`, step `u8`, then: keys (two 32-byte keys); shares (count `u32`, each: to `u32`, sealed pair); masked input (`u64`s, the model's length and one); reveals (count `u32`, each: of `u32`, kind `u8`, share) |
//! | `SECURE_DOWN` | coordinator → worker | round `u64`, step `u8`, then: list (threshold `u32`, count `u32`, each: rank `u32`, two keys); forward (U2's count and ranks, then count `u32`, each: from `u32`, sealed pair); survivors (count `u32`, ranks); outcome (a `RESULT` body) |

use super::round_wire::{
    answer, invite, le_u32, le_u64, parse_result, result_done, result_too_few, Answers, Offer,
    RoundOutcome, RoundReport, LATE,
};
use super::secagg::{self, KeyPair, Share, CHUNKS, SEALED_LEN};
use super::ProcessGroup;
use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Worker → coordinator.
pub(super) const SECURE_UP: u64 = 4;
/// Coordinator → worker.
pub(super) const SECURE_DOWN: u64 = 5;

const KEYS: u8 = 1;
const LIST: u8 = 2;
const SHARES: u8 = 3;
const FORWARD: u8 = 4;
const MASKED: u8 = 5;
const SURVIVORS: u8 = 6;
const REVEAL: u8 = 7;
const OUTCOME: u8 = 8;

/// A reveal's kinds: a share of the self-mask seed, or of the mask key.
const SELF_MASK: u8 = 0;
const MASK_KEY: u8 = 1;

fn head(round: u64, step: u8) -> Vec<u8> {
    let mut m = round.to_le_bytes().to_vec();
    m.push(step);
    m
}

fn put_ranks(m: &mut Vec<u8>, ranks: &[u32]) {
    m.extend_from_slice(&(ranks.len() as u32).to_le_bytes());
    ranks
        .iter()
        .for_each(|r| m.extend_from_slice(&r.to_le_bytes()));
}

/// A little-endian reader that says `None` past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(le_u32)
    }
    fn key(&mut self) -> Option<[u8; 32]> {
        self.take(32)?.try_into().ok()
    }
    fn share(&mut self) -> Option<Share> {
        let b = self.take(CHUNKS * 8)?;
        let mut s = [0u64; CHUNKS];
        for (v, c) in s.iter_mut().zip(b.chunks_exact(8)) {
            *v = le_u64(c);
        }
        Some(s)
    }
    /// A count of entries of at least `each` bytes that can all be there.
    fn count(&mut self, each: usize) -> Option<usize> {
        let n = self.u32()? as usize;
        (n.checked_mul(each)? <= self.0.len()).then_some(n)
    }
    fn ranks(&mut self) -> Option<Vec<u32>> {
        let n = self.count(4)?;
        (0..n).map(|_| self.u32()).collect()
    }
    fn end(&self) -> Option<()> {
        self.0.is_empty().then_some(())
    }
}

impl ProcessGroup {
    /// Send a secure round's message down to `to`; a worker away is not
    /// an error.
    fn secure_send(&self, to: u32, body: &[u8]) -> Result<bool> {
        self.round_send(to, SECURE_DOWN, body)
    }
}

/// The coordinator's side of one secure round.
struct Steps<'a> {
    g: &'a ProcessGroup,
    round: u64,
    started: Instant,
    deadline: Duration,
    answers: Answers,
    /// The workers offered the round, and those told how it ended: the
    /// others (dropped at some step) are told `Late` when it ends, however
    /// it ends.
    invited: Vec<u32>,
    told: BTreeSet<u32>,
}

impl Drop for Steps<'_> {
    fn drop(&mut self) {
        let mut m = head(self.round, OUTCOME);
        m.extend_from_slice(&answer(self.round, LATE, &[]));
        for &w in self.invited.iter().filter(|w| !self.told.contains(w)) {
            // A worker away is no error; a group that failed is this
            // rank's own, reported by the call already.
            let _ = self.g.secure_send(w, &m);
        }
    }
}

impl Steps<'_> {
    /// When step `k` (1 to 4) ends.
    fn until(&self, k: u32) -> Instant {
        self.started + self.deadline * k / 4
    }

    /// Take step `step`'s messages from `expected` until each has sent
    /// one or `until`; `parse` makes what is kept of each (a message that
    /// does not parse is passed over, its sender left out). Messages for
    /// earlier rounds are answered `Late`.
    fn collect<T>(
        &mut self,
        step: u8,
        expected: &BTreeSet<u32>,
        until: Instant,
        mut parse: impl FnMut(u32, &[u8]) -> Option<T>,
    ) -> Result<BTreeMap<u32, T>> {
        let g = self.g;
        let mut got = BTreeMap::new();
        let mut refused = BTreeSet::new();
        while got.len() + refused.len() < expected.len() {
            let Some((from, msg)) = g.round_recv_any(SECURE_UP, until, "secure_round")? else {
                break;
            };
            let b = msg.as_ref();
            let round = b.get(..8).map_or(0, le_u64);
            g.answered(from);
            if round < self.round {
                if self.answers.one_more(from) {
                    let mut m = head(round, OUTCOME);
                    m.extend_from_slice(&answer(round, LATE, &[]));
                    g.secure_send(from, &m)?;
                }
                continue;
            }
            if round != self.round
                || b.get(8) != Some(&step)
                || !expected.contains(&from)
                || got.contains_key(&from)
                || refused.contains(&from)
            {
                continue;
            }
            match parse(from, &b[9..]) {
                Some(v) => {
                    got.insert(from, v);
                }
                None => {
                    tracing::warn!(
                        from,
                        step,
                        "a secure round's message that does not parse; its sender is left out"
                    );
                    refused.insert(from);
                }
            }
        }
        Ok(got)
    }

    /// Tell `ranks` the round ended with fewer than `min` of them.
    fn too_few(
        &mut self,
        ranks: impl IntoIterator<Item = u32>,
        arrived: usize,
        min: u32,
    ) -> Result<()> {
        let mut m = head(self.round, OUTCOME);
        m.extend_from_slice(&result_too_few(self.round, arrived as u32, min));
        for r in ranks {
            self.told.insert(r);
            self.g.secure_send(r, &m)?;
        }
        Ok(())
    }
}

/// The coordinator's side of a secure round
/// ([`RoundCoordinator::secure_round`](super::RoundCoordinator::secure_round)):
/// `deadline` and `min_updates` are its configuration's.
pub(super) fn coordinate(
    g: &ProcessGroup,
    deadline: Duration,
    min_updates: u32,
    model: &mut [f32],
    threshold: u32,
) -> Result<RoundReport> {
    let workers = g.world_size() - 1;
    if threshold < 2 || threshold > workers {
        return Err(Error::InvalidArgument(format!(
                "secure_round: a threshold of {threshold}; this group has {workers} workers (2 to that many)"
            )));
    }
    let _running = g.claim_rounds("secure_round")?;
    let round = g.rounds.next.fetch_add(1, Ordering::Relaxed);
    let min = threshold.max(min_updates);
    let invited = invite(g, deadline, round, threshold, model)?;
    let mut s = Steps {
        g,
        round,
        started: Instant::now(),
        deadline,
        answers: Answers::default(),
        invited: invited.clone(),
        told: BTreeSet::new(),
    };
    let report = |participants: Vec<u32>, total_weight: f64, applied: bool| RoundReport {
        round,
        late: invited
            .iter()
            .copied()
            .filter(|w| !participants.contains(w))
            .collect(),
        participants,
        total_weight,
        applied,
    };
    // 1. Keys.
    let all: BTreeSet<u32> = invited.iter().copied().collect();
    // A key that agrees nothing (a point of small order) would stop every
    // other worker: its sender is left out.
    let probe = KeyPair::generate();
    let keys = s.collect(KEYS, &all, s.until(1), |_, b| {
        let mut r = Reader(b);
        let k = (r.key()?, r.key()?);
        r.end()?;
        (probe.agree(&k.0).is_some() && probe.agree(&k.1).is_some()).then_some(k)
    })?;
    if keys.len() < min as usize {
        s.too_few(keys.keys().copied(), keys.len(), min)?;
        return Ok(report(Vec::new(), 0.0, false));
    }
    let mut list = head(round, LIST);
    list.extend_from_slice(&threshold.to_le_bytes());
    list.extend_from_slice(&(keys.len() as u32).to_le_bytes());
    for (r, (c, m)) in &keys {
        list.extend_from_slice(&r.to_le_bytes());
        list.extend_from_slice(c);
        list.extend_from_slice(m);
    }
    for &r in keys.keys() {
        g.secure_send(r, &list)?;
    }
    // 2. Shares: one sealed pair for every other member of U1.
    let u1: BTreeSet<u32> = keys.keys().copied().collect();
    let shares = s.collect(SHARES, &u1, s.until(2), |from, b| {
        let mut r = Reader(b);
        let n = r.count(4 + SEALED_LEN)?;
        let mut to = BTreeMap::new();
        for _ in 0..n {
            let v = r.u32()?;
            let sealed = r.take(SEALED_LEN)?.to_vec();
            if v == from || !u1.contains(&v) || to.insert(v, sealed).is_some() {
                return None;
            }
        }
        r.end()?;
        (to.len() + 1 == u1.len()).then_some(to)
    })?;
    if shares.len() < min as usize {
        s.too_few(u1.iter().copied(), shares.len(), min)?;
        return Ok(report(Vec::new(), 0.0, false));
    }
    let u2: Vec<u32> = shares.keys().copied().collect();
    for &v in &u2 {
        let mut m = head(round, FORWARD);
        put_ranks(&mut m, &u2);
        m.extend_from_slice(&((u2.len() - 1) as u32).to_le_bytes());
        for (&u, to) in &shares {
            if let Some(sealed) = to.get(&v) {
                m.extend_from_slice(&u.to_le_bytes());
                m.extend_from_slice(sealed);
            }
        }
        g.secure_send(v, &m)?;
    }
    // 3. Masked inputs: the model's values and the weight.
    let n = model.len() + 1;
    let u2set: BTreeSet<u32> = u2.iter().copied().collect();
    let masked = s.collect(MASKED, &u2set, s.until(3), |_, b| {
        (b.len() == 8 * n).then(|| b.chunks_exact(8).map(le_u64).collect::<Vec<u64>>())
    })?;
    if masked.len() < min as usize {
        s.too_few(u2.iter().copied(), masked.len(), min)?;
        return Ok(report(Vec::new(), 0.0, false));
    }
    let u3: Vec<u32> = masked.keys().copied().collect();
    let mut m = head(round, SURVIVORS);
    put_ranks(&mut m, &u3);
    for &r in &u3 {
        g.secure_send(r, &m)?;
    }
    // 4. Reveals: a share for every worker of U2, of the kind its
    // fate calls for.
    let u3set: BTreeSet<u32> = u3.iter().copied().collect();
    let reveals = s.collect(REVEAL, &u3set, s.until(4), |_, b| {
        let mut r = Reader(b);
        let count = r.count(5 + CHUNKS * 8)?;
        let mut got = BTreeMap::new();
        for _ in 0..count {
            let (of, kind, share) = (r.u32()?, *r.take(1)?.first()?, r.share()?);
            let want = if u3set.contains(&of) {
                SELF_MASK
            } else {
                MASK_KEY
            };
            if kind != want || !u2set.contains(&of) || got.insert(of, share).is_some() {
                return None;
            }
        }
        r.end()?;
        // A share that did not open for this worker is missing: the
        // others' may still make the secret.
        Some(got)
    })?;
    if reveals.len() < threshold as usize {
        s.too_few(u3.iter().copied(), reveals.len(), threshold)?;
        return Ok(report(Vec::new(), 0.0, false));
    }
    // Every secret the unmasking needs, or the round cannot end well.
    let mut secrets = BTreeMap::new();
    for &v in &u2 {
        let points: Vec<(u32, Share)> = reveals
            .iter()
            .filter_map(|(&holder, shares)| Some((holder, *shares.get(&v)?)))
            .collect();
        match secagg::reconstruct(&points, threshold) {
            Some(secret) => {
                secrets.insert(v, secret);
            }
            None => {
                tracing::warn!(
                    round,
                    rank = v,
                    "the shares revealed for a worker do not make its secret"
                );
                s.too_few(u3.iter().copied(), reveals.len(), threshold)?;
                return Ok(report(Vec::new(), 0.0, false));
            }
        }
    }
    let mut sum = vec![0u64; n];
    for y in masked.values() {
        sum.iter_mut()
            .zip(y)
            .for_each(|(s, v)| *s = s.wrapping_add(*v));
    }
    for &u in &u3 {
        secagg::apply_mask(&mut sum, &secrets[&u], -1);
    }
    for &d in u2.iter().filter(|d| !u3set.contains(d)) {
        let key = KeyPair::from_secret(secrets[&d]);
        for &u in &u3 {
            // u added the pair's mask if it is the lower rank of the
            // two, took it away if the higher: undo that.
            let Some(k) = key.agree(&keys[&u].1) else {
                continue;
            };
            let sign = if u < d { -1 } else { 1 };
            secagg::apply_mask(&mut sum, &secagg::pair_seed(&k, round), sign);
        }
    }
    let total_weight = secagg::decode(sum[n - 1]);
    let average: Vec<f32> = sum[..n - 1]
        .iter()
        .map(|&v| (secagg::decode(v) / total_weight) as f32)
        .collect();
    if !(total_weight > 0.0 && average.iter().all(|v| v.is_finite())) {
        s.too_few(u3.iter().copied(), 0, min)?;
        return Ok(report(Vec::new(), 0.0, false));
    }
    let late: Vec<u32> = invited
        .iter()
        .copied()
        .filter(|w| !u3set.contains(w))
        .collect();
    let mut m = head(round, OUTCOME);
    m.extend_from_slice(&result_done(round, total_weight, &u3, &late, &average));
    for &r in &u3 {
        s.told.insert(r);
        g.secure_send(r, &m)?;
    }
    model.copy_from_slice(&average);
    Ok(report(u3, total_weight, true))
}

/// A worker's side of a secure round: the four steps, then the outcome.
pub(super) fn submit(
    g: &ProcessGroup,
    offer: &Offer,
    update: &[f32],
    weight: f32,
    threshold: u32,
) -> Result<RoundOutcome> {
    submit_until(g, offer, update, weight, threshold, false)
}

/// [`submit`]; `drop_after_masking`: stop once the masked input is made,
/// sending nothing more (a test's worker that drops out then).
pub(super) fn submit_until(
    g: &ProcessGroup,
    offer: &Offer,
    update: &[f32],
    weight: f32,
    threshold: u32,
    drop_after_masking: bool,
) -> Result<RoundOutcome> {
    let me = g.rank();
    let round = offer.round;
    let inner = g.inner();
    let wait = offer.deadline.saturating_add(inner.timeout());
    let until = Instant::now()
        .checked_add(wait)
        .unwrap_or_else(|| Instant::now() + inner.timeout());
    let up = |step: u8, body: &[u8]| -> Result<()> {
        let mut m = head(round, step);
        m.extend_from_slice(body);
        inner
            .transport
            .send(0, g.round_key(SECURE_UP), &[&m])
            .map_err(|e| Error::from_transport(e, "submit"))
    };
    // The coordinator's next message of this round: the step's, or the
    // outcome that ended the round.
    let down = |step: u8| -> Result<std::result::Result<Vec<u8>, RoundOutcome>> {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let msg = inner
                .transport
                .recv(0, g.round_key(SECURE_DOWN), left, None)
                .map_err(|e| Error::from_transport(e, "submit"))?;
            let b = msg.as_ref();
            if b.len() < 9 || le_u64(&b[..8]) != round {
                continue;
            }
            if b[8] == OUTCOME {
                return parse_result(&b[9..]).map(Err).ok_or_else(|| {
                    Error::InvalidArgument("submit: the coordinator's answer does not parse".into())
                });
            }
            if b[8] == step {
                return Ok(Ok(b[9..].to_vec()));
            }
        }
    };
    let bad = |what: &str| {
        Error::InvalidArgument(format!(
            "submit: secure round {round}: the coordinator's {what} does not parse"
        ))
    };
    // 1. Keys.
    let (cipher_key, mask_key) = (KeyPair::generate(), KeyPair::generate());
    let mut body = cipher_key.public.to_vec();
    body.extend_from_slice(&mask_key.public);
    up(KEYS, &body)?;
    let list = match down(LIST)? {
        Ok(b) => b,
        Err(outcome) => return Ok(outcome),
    };
    let mut r = Reader(&list);
    let t = r.u32().ok_or_else(|| bad("list"))?;
    let count = r.count(4 + 64).ok_or_else(|| bad("list"))?;
    let mut keys: BTreeMap<u32, ([u8; 32], [u8; 32])> = BTreeMap::new();
    for _ in 0..count {
        let (rank, c, m) = (r.u32(), r.key(), r.key());
        let (Some(rank), Some(c), Some(m)) = (rank, c, m) else {
            return Err(bad("list"));
        };
        keys.insert(rank, (c, m));
    }
    // The threshold is the offer's; a list without this worker, with a
    // rank 0, or shorter than the threshold is refused.
    if t != threshold
        || t < 2
        || keys.len() < t as usize
        || !keys.contains_key(&me)
        || keys.contains_key(&0)
    {
        return Err(bad("list"));
    }
    // 2. Shares of the self-mask seed and of the mask key.
    let self_seed: [u8; 32] = secagg::random()?;
    let points: Vec<u32> = keys.keys().copied().collect();
    let b_shares = secagg::share(&self_seed, &points, t)?;
    let s_shares = secagg::share(mask_key.secret(), &points, t)?;
    // What this worker holds, by rank: (mask key share, self-mask share).
    let mut held: BTreeMap<u32, (Share, Share)> = BTreeMap::new();
    let mut body = ((points.len() - 1) as u32).to_le_bytes().to_vec();
    for (i, &v) in points.iter().enumerate() {
        if v == me {
            held.insert(me, (s_shares[i], b_shares[i]));
            continue;
        }
        let agreed = cipher_key
            .agree(&keys[&v].0)
            .ok_or_else(|| bad("list (a key of small order)"))?;
        body.extend_from_slice(&v.to_le_bytes());
        body.extend_from_slice(&secagg::seal(
            &agreed,
            round,
            me,
            v,
            (&s_shares[i], &b_shares[i]),
        ));
    }
    up(SHARES, &body)?;
    let forward = match down(FORWARD)? {
        Ok(b) => b,
        Err(outcome) => return Ok(outcome),
    };
    let mut r = Reader(&forward);
    let u2 = r.ranks().ok_or_else(|| bad("forward"))?;
    let n = r.count(4 + SEALED_LEN).ok_or_else(|| bad("forward"))?;
    for _ in 0..n {
        let (Some(u), Some(sealed)) = (r.u32(), r.take(SEALED_LEN)) else {
            return Err(bad("forward"));
        };
        let opened = keys
            .get(&u)
            .and_then(|(c, _)| cipher_key.agree(c))
            .and_then(|k| secagg::open(&k, round, u, me, sealed));
        match opened {
            Some(pair) => {
                held.insert(u, pair);
            }
            None => tracing::warn!(round, from = u, "a share that does not open; passed over"),
        }
    }
    if u2.len() < t as usize || !u2.contains(&me) || u2.iter().any(|v| !keys.contains_key(v)) {
        return Err(bad("forward"));
    }
    // 3. The masked input.
    let limit = secagg::limit(u2.len());
    let w = f64::from(weight);
    if let Some(i) = update
        .iter()
        .position(|&x| (w * f64::from(x)).abs() >= limit)
    {
        return Err(Error::InvalidArgument(format!(
            "submit: update[{i}] × weight is {}; a secure round of {} workers takes magnitudes below {limit:e}",
            w * f64::from(update[i]),
            u2.len()
        )));
    }
    if w >= limit {
        return Err(Error::InvalidArgument(format!(
            "submit: weight {w} is beyond a secure round's range ({limit:e})"
        )));
    }
    let mut y: Vec<u64> = update
        .iter()
        .map(|&x| secagg::encode(w * f64::from(x)))
        .chain(std::iter::once(secagg::encode(w)))
        .collect();
    secagg::apply_mask(&mut y, &self_seed, 1);
    for &v in u2.iter().filter(|&&v| v != me) {
        let k = mask_key
            .agree(&keys[&v].1)
            .ok_or_else(|| bad("list (a key of small order)"))?;
        secagg::apply_mask(
            &mut y,
            &secagg::pair_seed(&k, round),
            if me < v { 1 } else { -1 },
        );
    }
    if drop_after_masking {
        return Ok(RoundOutcome::Late { round });
    }
    let body: Vec<u8> = y.iter().flat_map(|v| v.to_le_bytes()).collect();
    up(MASKED, &body)?;
    let survivors = match down(SURVIVORS)? {
        Ok(b) => b,
        Err(outcome) => return Ok(outcome),
    };
    let mut r = Reader(&survivors);
    let u3 = r.ranks().ok_or_else(|| bad("survivors"))?;
    // Revealing both shares of one worker would give its input away:
    // the survivors must be some of U2, at least the threshold, and
    // this worker among them.
    if u3.len() < t as usize || !u3.contains(&me) || u3.iter().any(|v| !u2.contains(v)) {
        return Err(bad("survivors"));
    }
    // 4. Reveal: a self-mask share for a survivor, a mask-key share for a
    // worker that dropped.
    let mut body = Vec::new();
    let mut count = 0u32;
    for &v in &u2 {
        let Some((s, b)) = held.get(&v) else {
            continue;
        };
        let (kind, share) = if u3.contains(&v) {
            (SELF_MASK, b)
        } else {
            (MASK_KEY, s)
        };
        body.extend_from_slice(&v.to_le_bytes());
        body.push(kind);
        share
            .iter()
            .for_each(|x| body.extend_from_slice(&x.to_le_bytes()));
        count += 1;
    }
    let mut m = count.to_le_bytes().to_vec();
    m.extend_from_slice(&body);
    up(REVEAL, &m)?;
    match down(OUTCOME)? {
        Ok(_) => Err(bad("outcome")),
        Err(outcome) => Ok(outcome),
    }
}
