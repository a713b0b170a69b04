//! The pipelined ring: the bandwidth-optimal engine behind ring all_reduce,
//! reduce_scatter and all_gather (after Patarasuk & Yuan, and gloo's
//! `allreduce_ring_chunked`).
//!
//! # Steps and cost
//!
//! The buffer is cut into `P` chunks (sizes differ by at most one element)
//! and each chunk into `S` segments. A full all_reduce takes `2(P−1)` steps:
//!
//! * reduce-scatter step `t` (`0 ≤ t < P−1`): rank `r` sends chunk
//!   `r−t−1` to `r+1` and folds chunk `r−t−2` from `r−1` into its buffer;
//!   after the last one rank `r` holds chunk `r` fully reduced;
//! * all-gather step `s` (`0 ≤ s < P−1`): rank `r` sends chunk `r−s` and
//!   stores chunk `r−s−1` from `r−1`.
//!
//! Each rank sends and receives `2(P−1)/P × n` bytes: the lower bound. With
//! `S > 1` segments a segment is forwarded the moment it is reduced, while the
//! next one is still on the wire, so reduction overlaps transfer; at most
//! `PIPELINE_DEPTH` segments are in flight per link, which bounds the
//! transport's buffering. Every chunk is reduced in one fixed rank order and
//! then copied, so all ranks end bitwise identical.
//!
//! # Trace, P = 4, rank 0 (chunks c0..c3)
//!
//! ```text
//! RS t=0: send c3 → 1, recv c2 from 3, c2 = x3 ⊕ x0... (fold)
//! RS t=1: send c2 → 1, recv c1 from 3, fold
//! RS t=2: send c1 → 1, recv c0 from 3, fold     (c0 complete at rank 0)
//! AG s=0: send c0 → 1, recv c3 from 3
//! AG s=1: send c3 → 1, recv c2 from 3
//! AG s=2: send c2 → 1, recv c1 from 3            (all chunks complete)
//! ```

use crate::comm::{recv_into, recv_reduce, send_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::topo::{chunk, sub_mod};
use std::ops::Range;

/// Segments in flight per link in the pipelined ring.
pub const PIPELINE_DEPTH: usize = 4;

/// Which steps of the ring to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phases {
    /// Reduce-scatter then all-gather: all_reduce.
    Both,
    /// Reduce-scatter only: rank `r` ends with chunk `r` reduced.
    ReduceScatter,
    /// All-gather only: rank `r` starts holding chunk `r`.
    AllGather,
}

/// Run the ring over `buf` in place. `seg_elems` is the segment size in
/// elements (`usize::MAX`: one segment per chunk, no pipelining). `op` is
/// unused when only all-gathering.
pub fn ring<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
    phases: Phases,
    seg_elems: usize,
) -> Result<(), C::Error> {
    let p = comm.size();
    let r = comm.rank();
    if p == 1 {
        return Ok(());
    }
    let right = (r + 1) % p;
    let left = sub_mod(r, 1, p);
    let count = buf.len();
    let max_chunk = count.div_ceil(p);
    let nseg = crate::topo::segment_count(max_chunk, seg_elems);
    let segment = |c: usize, j: usize| -> Range<usize> {
        let ch = chunk(count, p, c);
        let s = chunk(ch.len(), nseg, j);
        ch.start + s.start..ch.start + s.end
    };
    let (first_step, last_step) = match phases {
        Phases::Both => (0, 2 * (p - 1)),
        Phases::ReduceScatter => (0, p - 1),
        Phases::AllGather => (p - 1, 2 * (p - 1)),
    };
    // Chunk sent / received at global step t (see the module docs).
    let sent_chunk = |t: usize| {
        if t < p - 1 {
            sub_mod(r, t + 1, p)
        } else {
            sub_mod(r, t - (p - 1), p)
        }
    };
    let recv_chunk = |t: usize| sub_mod(sent_chunk(t), 1, p);

    let total = (last_step - first_step) * nseg;
    let depth = nseg.min(PIPELINE_DEPTH);
    let send_k = |comm: &mut C, buf: &[T], k: usize| {
        let (t, j) = (first_step + k / nseg, k % nseg);
        send_elems(comm, right, &buf[segment(sent_chunk(t), j)])
    };
    for k in 0..depth.min(total) {
        send_k(comm, buf, k)?;
    }
    for k in 0..total {
        let (t, j) = (first_step + k / nseg, k % nseg);
        let dst = &mut buf[segment(recv_chunk(t), j)];
        if t < p - 1 {
            // The partial sum from the left covers lower positions of this
            // chunk's fixed reduction order.
            recv_reduce(comm, left, dst, op, true)?;
        } else {
            recv_into(comm, left, dst)?;
        }
        // Segment k+depth depends at most on segment k+depth−nseg ≤ k.
        if k + depth < total {
            send_k(comm, buf, k + depth)?;
        }
    }
    Ok(())
}
