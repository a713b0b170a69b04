//! Binomial-tree broadcast (Open MPI `bcast_intra_binomial`, MPICH's short
//! message algorithm).
//!
//! # Steps and cost
//!
//! With ranks renumbered so the root is 0, rank `v` receives from `v` minus
//! its lowest set bit, then sends to `v + 2^k` for each `2^k` below that bit,
//! largest first. `⌈log₂ P⌉` steps of the whole buffer: `⌈log₂ P⌉·(α + nβ)`.
//! Best for small buffers; the root sends `⌈log₂ P⌉·n` bytes, so large
//! buffers use the chain.
//!
//! # Trace, P = 4, root 0
//!
//! ```text
//! step 1: 0 → 2
//! step 2: 0 → 1, 2 → 3
//! ```

use crate::comm::{recv_into, send_elems, Comm};
use crate::element::Element;
use crate::topo::{absolute, relative};

/// Binomial broadcast of `buf` from `root`.
pub fn broadcast_binomial<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    root: usize,
) -> Result<(), C::Error> {
    let p = comm.size();
    let vr = relative(comm.rank(), root, p);
    let mut mask = 1;
    while mask < p {
        if vr & mask != 0 {
            recv_into(comm, absolute(vr - mask, root, p), buf)?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if vr + mask < p {
            send_elems(comm, absolute(vr + mask, root, p), buf)?;
        }
        mask >>= 1;
    }
    Ok(())
}
