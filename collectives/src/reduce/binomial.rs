//! Binomial-tree reduce (Open MPI `reduce_intra_binomial`).
//!
//! # Steps and cost
//!
//! Ranks renumbered so the root is 0. At step `k`, a rank whose bit `k` is
//! set sends its partial result to the rank with that bit cleared and stops;
//! the others fold in what they receive. `⌈log₂ P⌉·(α + nβ + nγ)`.
//!
//! # Trace, P = 4, root 0
//!
//! ```text
//! step 1: 1 → 0, 3 → 2   (0 holds x0⊕x1, 2 holds x2⊕x3)
//! step 2: 2 → 0          (0 holds the result)
//! ```

use crate::comm::{recv_reduce, send_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::topo::{absolute, relative};

/// Binomial reduce of `buf` to `root` (`Avg` reduces as Sum).
pub fn reduce_binomial<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
    root: usize,
) -> Result<(), C::Error> {
    let p = comm.size();
    let vr = relative(comm.rank(), root, p);
    let mut mask = 1;
    while mask < p {
        if vr & mask == 0 {
            let child = vr | mask;
            if child < p {
                recv_reduce(comm, absolute(child, root, p), buf, op, false)?;
            }
        } else {
            send_elems(comm, absolute(vr & !mask, root, p), buf)?;
            break;
        }
        mask <<= 1;
    }
    Ok(())
}
