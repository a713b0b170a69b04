//! reduce_scatter: `send` holds `P` equal blocks; rank `r` receives block
//! `r` reduced over all ranks.
//!
//! # Steps and cost (ring, pipelined)
//!
//! At step `t = 0..P−2` rank `r` sends its partial of block `r−t−1` to
//! `r+1` and receives the partial of block `r−t−2` from `r−1`, which it
//! folds with its own contribution `send[r−t−2]`; the last step's block is
//! `r`, reduced by everyone, and is folded straight into `recv`. Each rank
//! sends and receives `(P−1)·block` bytes, the lower bound. Blocks are cut
//! into segments forwarded as soon as they are folded (see
//! [`crate::ring`]); the partials live in one block of scratch, and `send`
//! is never copied whole.
//!
//! # Trace, P = 3, rank 0 (blocks b0..b2)
//!
//! ```text
//! t=0: send b2 (own) → 1; recv b1 partial from 2; scratch = x2[b1] ⊕ x0[b1]
//! t=1: send scratch (b1) → 1; recv b0 partial from 2; recv = (x1⊕x2)[b0] ⊕ x0[b0]
//! ```

mod star;

pub use star::reduce_scatter_star;

use crate::all_reduce::seg_elems;
use crate::comm::{send_elems, with_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::ring::PIPELINE_DEPTH;
use crate::select::{Algorithm, RING_SEGMENT_BYTES};
use crate::topo::{chunk, sub_mod};

/// Ring reduce-scatter in segments of `seg_elems`; `recv.len() · P ==
/// send.len()` (`Avg` reduces as Sum).
pub fn reduce_scatter_ring<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    op: ReduceOp,
    seg_elems: usize,
) -> Result<(), C::Error> {
    let (p, r) = (comm.size(), comm.rank());
    let block = recv.len();
    let blk = |b: usize| b * block..(b + 1) * block;
    if p == 1 {
        recv.copy_from_slice(send);
        return Ok(());
    }
    let (right, left) = ((r + 1) % p, sub_mod(r, 1, p));
    let nseg = crate::topo::segment_count(block, seg_elems);
    let seg = |j: usize| chunk(block, nseg, j);
    let steps = p - 1;
    let total = steps * nseg;
    let depth = nseg.min(PIPELINE_DEPTH);
    let mut scratch = vec![T::zeroed(); if steps > 1 { block } else { 0 }];

    // Send number k: step t = k / nseg, segment j = k % nseg, block r−t−1;
    // step 0 sends own data, later steps the partial folded one step before.
    let send_k = |comm: &mut C, scratch: &[T], k: usize| {
        let (t, j) = (k / nseg, k % nseg);
        if t == 0 {
            let b = sub_mod(r, 1, p);
            send_elems(comm, right, &send[blk(b)][seg(j)])
        } else {
            send_elems(comm, right, &scratch[seg(j)])
        }
    };
    for k in 0..depth.min(total) {
        send_k(comm, &scratch, k)?;
    }
    for k in 0..total {
        let (t, j) = (k / nseg, k % nseg);
        let b = sub_mod(r, t + 2, p);
        let dst = if t + 1 == steps {
            &mut recv[seg(j)]
        } else {
            &mut scratch[seg(j)]
        };
        dst.copy_from_slice(&send[blk(b)][seg(j)]);
        let msg = comm.recv(left, std::mem::size_of_val(dst))?;
        with_elems(msg.as_ref(), |x: &[T]| T::reduce_from_left(op, dst, x));
        if k + depth < total {
            send_k(comm, &scratch, k + depth)?;
        }
    }
    Ok(())
}

/// Run `algo` (ring or star; any other runs the ring), then finish `Avg`.
pub fn reduce_scatter<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    op: ReduceOp,
    algo: Algorithm,
) -> Result<(), C::Error> {
    match algo {
        Algorithm::Star => reduce_scatter_star(comm, send, recv, op)?,
        _ => reduce_scatter_ring(comm, send, recv, op, seg_elems::<T>(RING_SEGMENT_BYTES))?,
    }
    if op == ReduceOp::Avg {
        T::divide(recv, comm.size());
    }
    Ok(())
}
