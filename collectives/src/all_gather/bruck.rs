//! Bruck all_gather (Bruck et al. 1997; Open MPI `allgather_intra_bruck`),
//! the latency-optimal choice for small blocks, for any P.
//!
//! # Steps and cost
//!
//! Each rank keeps a scratch buffer whose slot `i` will hold the block of
//! rank `r + i`; it starts with its own block in slot 0. At distance
//! `d = 1, 2, 4, …`, rank `r` sends its first `min(d, P − d)` slots to rank
//! `r − d` and receives as many from rank `r + d` into slots `d ..`. After
//! `⌈log₂ P⌉` steps the scratch holds all `P` blocks, rotated by `r`; one
//! local copy puts them in rank order. Each rank sends `(P−1)·block` bytes,
//! like the ring, in `⌈log₂ P⌉` steps instead of `P − 1`.
//!
//! # Trace, P = 4, rank 0 (slot i = block of rank i here)
//!
//! ```text
//! d=1: send [b0] → 3, recv [b1] ← 1        scratch b0 b1
//! d=2: send [b0 b1] → 2, recv [b2 b3] ← 2  scratch b0 b1 b2 b3
//! ```

use crate::comm::{recv_into, send_elems, Comm};
use crate::element::Element;
use crate::topo::{add_mod, sub_mod};

/// Bruck all_gather; `recv.len() == P · send.len()`.
pub fn all_gather_bruck<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
) -> Result<(), C::Error> {
    let (p, r, block) = (comm.size(), comm.rank(), send.len());
    let mut scratch = vec![T::zeroed(); p * block];
    scratch[..block].copy_from_slice(send);
    let mut d = 1;
    while d < p {
        let n = d.min(p - d);
        send_elems(comm, sub_mod(r, d, p), &scratch[..n * block])?;
        recv_into(
            comm,
            add_mod(r, d, p),
            &mut scratch[d * block..(d + n) * block],
        )?;
        d <<= 1;
    }
    for i in 0..p {
        let owner = add_mod(r, i, p);
        recv[owner * block..(owner + 1) * block]
            .copy_from_slice(&scratch[i * block..(i + 1) * block]);
    }
    Ok(())
}
