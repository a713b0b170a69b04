//! Recursive-doubling all_reduce (Thakur, Rabenseifner & Gropp 2005), the
//! latency-optimal choice for small buffers.
//!
//! # Steps and cost
//!
//! Let `P' = 2^⌊log₂ P⌋` and `rem = P − P'`. Ranks `0..2·rem` pair up: each
//! even rank sends its buffer to the odd one above it and sits out. The
//! remaining `P'` ranks exchange whole buffers with partners at distance 1,
//! 2, 4, … (`⌈log₂ P'⌉` steps), then the odd ranks hand the result back.
//! Time ≈ `(log₂ P' + 2·[rem>0]) · (α + nβ)`; each rank sends `n·log₂ P'`
//! bytes, so it loses to the ring once `n` is large.
//!
//! Both partners compute `lower ⊕ higher` with the same operands, so float
//! results are bitwise identical on every rank.
//!
//! # Trace, P = 4 (no folding)
//!
//! ```text
//! step 1: 0↔1, 2↔3     each holds x0⊕x1 or x2⊕x3
//! step 2: 0↔2, 1↔3     each holds (x0⊕x1)⊕(x2⊕x3)
//! ```

use crate::comm::{recv_into, recv_reduce, send_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::topo::pow2_floor;

/// Recursive-doubling all_reduce over `buf` in place (`Avg` reduces as Sum).
pub fn all_reduce_recursive_doubling<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
) -> Result<(), C::Error> {
    let p = comm.size();
    if p == 1 {
        return Ok(());
    }
    let fold = Fold::new(p, comm.rank());
    if let Some(me) = fold.fold_in(comm, buf, op)? {
        let mut mask = 1;
        while mask < fold.p2 {
            let partner = me ^ mask;
            let peer = fold.real(partner);
            send_elems(comm, peer, buf)?;
            recv_reduce(comm, peer, buf, op, partner < me)?;
            mask <<= 1;
        }
    }
    fold.hand_back(comm, buf)
}

/// The power-of-two core of a world of `P` ranks that recursive doubling
/// and halving run on: ranks `0..2·rem` pair up, each even rank folding
/// its buffer into the odd one above it and sitting out.
pub(super) struct Fold {
    /// `P' = 2^⌊log₂ P⌋`, the ranks that take part.
    pub p2: usize,
    rem: usize,
    rank: usize,
}

impl Fold {
    pub fn new(p: usize, rank: usize) -> Fold {
        let p2 = pow2_floor(p);
        Fold {
            p2,
            rem: p - p2,
            rank,
        }
    }

    /// The real rank of core rank `n`.
    pub fn real(&self, n: usize) -> usize {
        if n < self.rem {
            2 * n + 1
        } else {
            n + self.rem
        }
    }

    /// Fold the surplus ranks into their odd neighbours: this rank's core
    /// rank, or `None` if it sits out.
    pub fn fold_in<T: Element, C: Comm>(
        &self,
        comm: &mut C,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<Option<usize>, C::Error> {
        let r = self.rank;
        if r >= 2 * self.rem {
            return Ok(Some(r - self.rem));
        }
        if r.is_multiple_of(2) {
            send_elems(comm, r + 1, buf)?;
            Ok(None)
        } else {
            recv_reduce(comm, r - 1, buf, op, true)?;
            Ok(Some(r / 2))
        }
    }

    /// Hand the result back to the ranks that sat out.
    pub fn hand_back<T: Element, C: Comm>(
        &self,
        comm: &mut C,
        buf: &mut [T],
    ) -> Result<(), C::Error> {
        let r = self.rank;
        if r < 2 * self.rem {
            if r.is_multiple_of(2) {
                recv_into(comm, r + 1, buf)?;
            } else {
                send_elems(comm, r - 1, buf)?;
            }
        }
        Ok(())
    }
}
