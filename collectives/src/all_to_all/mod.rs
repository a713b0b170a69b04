//! all_to_all by pairwise exchange (Open MPI `alltoall_intra_pairwise`).
//!
//! # Steps and cost
//!
//! `send` and `recv` hold `P` equal blocks. The own block is copied; at step
//! `s = 1..P−1` rank `r` sends block `r+s` to rank `r+s` and receives block
//! `r−s` from rank `r−s`. `(P−1)·(α + bβ)`; every rank talks to one peer
//! per step, so no link is oversubscribed.
//!
//! # Trace, P = 4, rank 0
//!
//! ```text
//! s=1: send b1 → 1, recv b3 ← 3
//! s=2: send b2 → 2, recv b2 ← 2
//! s=3: send b3 → 3, recv b1 ← 1
//! ```

use crate::comm::{recv_into, send_elems, Comm};
use crate::element::Element;
use crate::select::Algorithm;
use crate::topo::{add_mod, sub_mod};

/// Pairwise all_to_all; `send.len() == recv.len()`, divisible by `P`.
pub fn all_to_all_pairwise<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
) -> Result<(), C::Error> {
    let p = comm.size();
    let r = comm.rank();
    let block = send.len() / p;
    let blk = |i: usize| i * block..(i + 1) * block;
    recv[blk(r)].copy_from_slice(&send[blk(r)]);
    for s in 1..p {
        let to = add_mod(r, s, p);
        let from = sub_mod(r, s, p);
        send_elems(comm, to, &send[blk(to)])?;
        recv_into(comm, from, &mut recv[blk(from)])?;
    }
    Ok(())
}

/// Run `algo` (only pairwise exists).
pub fn all_to_all<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    _algo: Algorithm,
) -> Result<(), C::Error> {
    all_to_all_pairwise(comm, send, recv)
}
