//! Recursive halving, then recursive doubling (Rabenseifner's all_reduce,
//! after Thakur, Rabenseifner & Gropp 2005): the bandwidth-optimal
//! all_reduce whose every exchange is with `r xor 2^i`, so on a hypercube
//! every step is one link and nothing is relayed.
//!
//! # Steps and cost
//!
//! Surplus ranks fold in as in recursive doubling (see there). The `P'`
//! remaining ranks cut the buffer into `P'` chunks. Halving: at distances
//! `P'/2, …, 2, 1`, partners split the range both still hold; each keeps
//! one half (the lower rank the lower half), sends the other and reduces
//! the partner's copy of its half into its own, so after `log₂ P'` steps
//! each rank holds one chunk fully reduced. Doubling: at distances `1, 2,
//! …, P'/2`, partners swap what they hold until everyone holds everything.
//! Time ≈ `2·log₂ P'·α + 2·(P'−1)/P'·nβ`: the ring's bytes in
//! `2·log₂ P'` steps instead of `2·(P−1)`.
//!
//! Each element is reduced on one rank only, lower rank's operand on the
//! left, then copied: the result is bitwise identical everywhere.

use super::recursive_doubling::Fold;
use crate::comm::{recv_into, recv_reduce, send_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::topo::chunk;
use std::ops::Range;

/// Recursive-halving reduce-scatter, then recursive-doubling all-gather,
/// over `buf` in place (`Avg` reduces as Sum).
pub fn all_reduce_recursive_halving<T: Element, C: Comm>(
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
        let (p2, real) = (fold.p2, |n: usize| fold.real(n));
        let n = buf.len();
        // Elements of chunks `c.start..c.end`.
        let elems = |c: &Range<usize>| chunk(n, p2, c.start).start..chunk(n, p2, c.end - 1).end;
        // Halving: the chunks this rank still holds, halved each step.
        let mut held = 0..p2;
        let mut mask = p2 / 2;
        while mask >= 1 {
            let partner = me ^ mask;
            let mid = held.start + (held.end - held.start) / 2;
            let (keep, give) = if me & mask == 0 {
                (held.start..mid, mid..held.end)
            } else {
                (mid..held.end, held.start..mid)
            };
            let peer = real(partner);
            send_elems(comm, peer, &buf[elems(&give)])?;
            let kept = elems(&keep);
            recv_reduce(comm, peer, &mut buf[kept], op, partner < me)?;
            held = keep;
            mask /= 2;
        }
        // Doubling: swap what each holds with partners ever farther.
        let mut mask = 1;
        while mask < p2 {
            let partner = me ^ mask;
            let width = held.end - held.start;
            let theirs = if me & mask == 0 {
                held.end..held.end + width
            } else {
                held.start - width..held.start
            };
            let peer = real(partner);
            send_elems(comm, peer, &buf[elems(&held)])?;
            recv_into(comm, peer, &mut buf[elems(&theirs)])?;
            held = held.start.min(theirs.start)..held.end.max(theirs.end);
            mask *= 2;
        }
    }

    fold.hand_back(comm, buf)
}
