//! Compressed all_reduce for gradients: `Compressor::top_k` and
//! `Compressor::random_k` with error feedback, and
//! `ProcessGroup::all_reduce_compressed`.
//!
//! Each call adds the residual (what earlier calls kept back) to the
//! buffer, keeps k = ⌈fraction·n⌉ entries and reduces only those:
//!
//! - **random-k**: the same k indices on every rank, drawn from the seed
//!   and the call's number on the group (the sequence number of the
//!   collective it runs, the same on every rank; Floyd's sampling,
//!   ascending), so the kept
//!   values are one dense vector of k on every rank: a plain `all_reduce`
//!   of k values, whatever algorithm suits k.
//! - **top-k**: each rank keeps its own k largest |values|; the ranks
//!   all-gather their (index, value) pairs (8 bytes each) and every rank
//!   sums them in rank order, so the result is the same bits everywhere.
//!
//! The buffer then holds the reduced entries and zero elsewhere, and the
//! residual what this rank did not send. At fraction 1 nothing is kept
//! back and the call is `all_reduce` itself: the same bits. The residual
//! changes only when the call succeeds.

use super::ProcessGroup;
use crate::error::{Error, Result};
use meshwork_collectives::ReduceOp;

/// Which entries a [`Compressor`] keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    TopK,
    RandomK { seed: u64 },
}

/// Gradient compression with error feedback for
/// [`ProcessGroup::all_reduce_compressed`]: one per buffer that is
/// reduced again and again (a model's gradient), holding what was not sent
/// until the next call.
#[derive(Clone, Debug)]
pub struct Compressor {
    kind: Kind,
    fraction: f64,
    residual: Vec<f32>,
}

impl Compressor {
    /// Keep each rank's ⌈fraction·n⌉ largest |values|; 0 < `fraction` ≤ 1,
    /// else `InvalidArgument` at first use.
    pub fn top_k(fraction: f64) -> Compressor {
        Compressor {
            kind: Kind::TopK,
            fraction,
            residual: Vec::new(),
        }
    }

    /// Keep ⌈fraction·n⌉ entries at indices drawn from `seed` and the
    /// call's number on the group: the same on every rank that passes the
    /// same seed.
    pub fn random_k(fraction: f64, seed: u64) -> Compressor {
        Compressor {
            kind: Kind::RandomK { seed },
            fraction,
            residual: Vec::new(),
        }
    }

    /// What this rank has not sent yet: added to the buffer on the next
    /// call (empty before the first, and at fraction 1).
    pub fn residual(&self) -> &[f32] {
        &self.residual
    }

    /// The entries kept of `n`, or why the fraction is refused.
    fn kept(&self, n: usize) -> Result<usize> {
        let f = self.fraction;
        if !(f > 0.0 && f <= 1.0) {
            return Err(Error::InvalidArgument(format!(
                "all_reduce_compressed: the fraction kept is {f}; it must be in (0, 1]"
            )));
        }
        Ok(((f * n as f64).ceil() as usize).clamp(usize::from(n > 0), n))
    }
}

/// `k` distinct indices below `n`, ascending, drawn from `seed` and
/// `call` (the same on every rank).
fn sample(n: usize, k: usize, seed: u64, call: u64) -> Vec<u32> {
    let mut rng = SplitMix(seed ^ call.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut taken = std::collections::HashSet::with_capacity(k);
    // Floyd: for j in n-k..n, take a random t ≤ j, or j if t is taken.
    for j in (n - k)..n {
        let t = rng.below(j as u64 + 1) as usize;
        if !taken.insert(t) {
            taken.insert(j);
        }
    }
    let mut out: Vec<u32> = taken.into_iter().map(|i| i as u32).collect();
    out.sort_unstable();
    out
}

/// splitmix64: small, fast and the same everywhere.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform below `bound` (> 0), without modulo bias.
    fn below(&mut self, bound: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % bound;
        loop {
            let v = self.next();
            if v < zone {
                return v % bound;
            }
        }
    }
}

/// The indices of `buf`'s `k` largest |values|, ascending.
fn largest(buf: &[f32], k: usize) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..buf.len() as u32).collect();
    if k < idx.len() {
        let by_magnitude =
            |a: &u32, b: &u32| buf[*b as usize].abs().total_cmp(&buf[*a as usize].abs());
        idx.select_nth_unstable_by(k, by_magnitude);
        idx.truncate(k);
    }
    idx.sort_unstable();
    idx
}

impl ProcessGroup {
    /// All-reduce `buf` (`Sum` or `Avg`) sending only a fraction of it,
    /// with error feedback through `c`: the residual is added first, then
    /// ⌈fraction·n⌉ entries are kept (`Compressor::top_k`: this rank's
    /// largest |values|; `Compressor::random_k`: the same indices on every
    /// rank), reduced, and written back with zero elsewhere; what this rank
    /// did not send becomes the residual. The result is the same on every
    /// rank; at fraction 1 it is `all_reduce`'s, bit for bit. Every rank
    /// passes a buffer of the same length and a compressor of the same
    /// kind, fraction (and seed).
    pub fn all_reduce_compressed(
        &self,
        buf: &mut [f32],
        op: ReduceOp,
        c: &mut Compressor,
    ) -> Result<()> {
        if !matches!(op, ReduceOp::Sum | ReduceOp::Avg) {
            return Err(Error::InvalidArgument(format!(
                "all_reduce_compressed: {op:?}; only Sum and Avg are compressed"
            )));
        }
        let n = buf.len();
        if u32::try_from(n).is_err() {
            return Err(Error::InvalidArgument(format!(
                "all_reduce_compressed: a buffer of {n} values; at most {} (indices travel as 32 bits)",
                u32::MAX
            )));
        }
        let k = c.kept(n)?;
        if !c.residual.is_empty() && c.residual.len() != n {
            return Err(Error::InvalidArgument(format!(
                "all_reduce_compressed: a buffer of {n} values, but this compressor's residual holds {}; use one compressor per buffer",
                c.residual.len()
            )));
        }
        // Error feedback (a zero residual adds nothing: -0.0 stays -0.0).
        for (b, r) in buf.iter_mut().zip(&c.residual) {
            if *r != 0.0 {
                *b += *r;
            }
        }
        if k == n {
            self.all_reduce(buf, op)?;
            c.residual.clear();
            return Ok(());
        }
        let kept = match c.kind {
            Kind::RandomK { seed } => {
                // The collective about to run: its number is the same on
                // every rank, whatever failed on one of them before.
                let call = self
                    .inner()
                    .next_seq
                    .load(std::sync::atomic::Ordering::Acquire);
                sample(n, k, seed, call)
            }
            Kind::TopK => largest(buf, k),
        };
        // What is not sent stays here; what is sent leaves the residual.
        let mut residual = buf.to_vec();
        for &i in &kept {
            residual[i as usize] = 0.0;
        }
        match c.kind {
            Kind::RandomK { .. } => {
                let mut values: Vec<f32> = kept.iter().map(|&i| buf[i as usize]).collect();
                self.all_reduce(&mut values, op)?;
                buf.fill(0.0);
                for (&i, v) in kept.iter().zip(values) {
                    buf[i as usize] = v;
                }
            }
            Kind::TopK => self.sum_pairs(buf, &kept, op)?,
        }
        c.residual = residual;
        Ok(())
    }

    /// Top-k's exchange: every rank's (index, value) pairs of `kept` to
    /// every rank, summed in rank order into `buf` (zero elsewhere).
    fn sum_pairs(&self, buf: &mut [f32], kept: &[u32], op: ReduceOp) -> Result<()> {
        let mine: Vec<u64> = kept
            .iter()
            .map(|&i| u64::from(i) << 32 | u64::from(buf[i as usize].to_bits()))
            .collect();
        let world = self.world_size() as usize;
        let mut all = vec![0u64; mine.len() * world];
        self.all_gather(&mine, &mut all)?;
        let n = buf.len();
        buf.fill(0.0);
        for (r, pairs) in all.chunks(mine.len().max(1)).enumerate() {
            for &p in pairs {
                let i = (p >> 32) as usize;
                if i >= n {
                    return Err(Error::InvalidArgument(format!(
                        "all_reduce_compressed: rank {r} sent index {i} for a buffer of {n}"
                    )));
                }
                buf[i] += f32::from_bits(p as u32);
            }
        }
        if op == ReduceOp::Avg {
            let w = world as f32;
            for b in buf.iter_mut() {
                *b /= w;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_distinct_sorted_and_the_same_for_the_same_seed() {
        for (n, k) in [(10, 1), (10, 10), (1000, 50), (7, 6)] {
            let a = sample(n, k, 42, 3);
            assert_eq!(a.len(), k);
            assert!(a.windows(2).all(|w| w[0] < w[1]));
            assert!(a.iter().all(|&i| (i as usize) < n));
            assert_eq!(a, sample(n, k, 42, 3));
        }
        assert_ne!(sample(1000, 50, 42, 3), sample(1000, 50, 42, 4));
        assert_ne!(sample(1000, 50, 42, 3), sample(1000, 50, 43, 3));
    }

    #[test]
    fn the_largest_magnitudes_are_kept() {
        let buf = [0.5, -9.0, 3.0, 0.0, 8.0, -0.1];
        assert_eq!(largest(&buf, 2), [1, 4]);
        assert_eq!(largest(&buf, 3), [1, 2, 4]);
        assert_eq!(largest(&buf, 6), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn fractions_outside_zero_to_one_are_refused() {
        for f in [0.0, -0.5, 1.5, f64::NAN] {
            assert!(Compressor::top_k(f).kept(10).is_err(), "{f}");
        }
        assert_eq!(Compressor::top_k(0.05).kept(100).unwrap(), 5);
        assert_eq!(Compressor::top_k(0.05).kept(101).unwrap(), 6);
        assert_eq!(Compressor::top_k(1e-9).kept(10).unwrap(), 1);
        assert_eq!(Compressor::top_k(1.0).kept(0).unwrap(), 0);
    }
}
