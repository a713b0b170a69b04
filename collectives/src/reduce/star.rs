//! Star reduce: every worker sends its buffer to the coordinator (rank 0) in
//! segments; the coordinator folds them in rank order and, if the root is a
//! worker, sends each reduced segment on to it. Worker links carry `n`
//! (the root's `2n` if it is a worker: up and back).

use crate::comm::{recv_into, recv_reduce, send_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::topo::chunk;

/// Star reduce of `buf` to `root` in segments of `seg_elems` (`Avg`
/// reduces as Sum).
pub fn reduce_star<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
    root: usize,
    seg_elems: usize,
) -> Result<(), C::Error> {
    let (p, r) = (comm.size(), comm.rank());
    if p == 1 {
        return Ok(());
    }
    let n = buf.len();
    let nseg = crate::topo::segment_count(n, seg_elems);
    for j in 0..nseg {
        let s = chunk(n, nseg, j);
        if r == 0 {
            for w in 1..p {
                recv_reduce(comm, w, &mut buf[s.clone()], op, false)?;
            }
            if root != 0 {
                send_elems(comm, root, &buf[s])?;
            }
        } else {
            send_elems(comm, 0, &buf[s.clone()])?;
        }
    }
    if r == root && r != 0 {
        for j in 0..nseg {
            recv_into(comm, 0, &mut buf[chunk(n, nseg, j)])?;
        }
    }
    Ok(())
}
