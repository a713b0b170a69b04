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
    let r = comm.rank();
    if p == 1 {
        return Ok(());
    }
    let p2 = pow2_floor(p);
    let rem = p - p2;

    // Fold the surplus ranks into their odd neighbours.
    let new_rank = if r < 2 * rem {
        if r.is_multiple_of(2) {
            send_elems(comm, r + 1, buf)?;
            None
        } else {
            recv_reduce(comm, r - 1, buf, op, true)?;
            Some(r / 2)
        }
    } else {
        Some(r - rem)
    };

    if let Some(me) = new_rank {
        let real = |n: usize| if n < rem { 2 * n + 1 } else { n + rem };
        let mut mask = 1;
        while mask < p2 {
            let partner = me ^ mask;
            let peer = real(partner);
            send_elems(comm, peer, buf)?;
            recv_reduce(comm, peer, buf, op, partner < me)?;
            mask <<= 1;
        }
    }

    // Hand the result back to the ranks that sat out.
    if r < 2 * rem {
        if r.is_multiple_of(2) {
            recv_into(comm, r + 1, buf)?;
        } else {
            send_elems(comm, r - 1, buf)?;
        }
    }
    Ok(())
}
