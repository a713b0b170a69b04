//! Star all_reduce: a segmented reduce to the coordinator (rank 0),
//! pipelined with the broadcast back — the algorithm for a star topology,
//! where every byte between workers crosses the coordinator anyway.
//!
//! # Steps and cost
//!
//! The buffer is cut into `S` segments. Each worker sends segment `j` up and
//! receives the reduced segment `j` back, with up to `PIPELINE_DEPTH`
//! segments outstanding; the coordinator folds segment `j` from workers
//! `1..P` in rank order and sends the result to every worker. Each worker
//! link carries `n` up and `n` down, the least a star allows (a ring over a
//! star would carry `2(P−1)/P·n` each way through the coordinator's links
//! *and* relay them). Every rank ends with the coordinator's bits.
//!
//! # Trace, P = 3, S = 2
//!
//! ```text
//! 1 →s0,s1→ 0, 2 →s0,s1→ 0
//! 0: s0 = x0⊕x1⊕x2 → 1, 2;  s1 = … → 1, 2
//! ```

use crate::comm::{recv_into, recv_reduce, send_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::ring::PIPELINE_DEPTH;
use crate::topo::chunk;

/// Star all_reduce of `buf` in segments of `seg_elems` (`Avg` reduces as Sum).
pub fn all_reduce_star<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
    seg_elems: usize,
) -> Result<(), C::Error> {
    let p = comm.size();
    if p == 1 {
        return Ok(());
    }
    let n = buf.len();
    let nseg = crate::topo::segment_count(n, seg_elems);
    let seg = |j: usize| chunk(n, nseg, j);
    if comm.rank() == 0 {
        for j in 0..nseg {
            for w in 1..p {
                recv_reduce(comm, w, &mut buf[seg(j)], op, false)?;
            }
            for w in 1..p {
                send_elems(comm, w, &buf[seg(j)])?;
            }
        }
    } else {
        let depth = nseg.min(PIPELINE_DEPTH);
        for j in 0..depth {
            send_elems(comm, 0, &buf[seg(j)])?;
        }
        for j in 0..nseg {
            recv_into(comm, 0, &mut buf[seg(j)])?;
            if j + depth < nseg {
                send_elems(comm, 0, &buf[seg(j + depth)])?;
            }
        }
    }
    Ok(())
}
