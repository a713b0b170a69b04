//! Tree reduce: a segmented reduce up a relay tree to rank 0
//! (`Topology::Tree`): each relay folds its children's segment `j` into
//! its own before it sends it on, so each rank's bytes cross one hop. A
//! root other than rank 0 then receives the result from rank 0.
//!
//! # Steps and cost
//!
//! Depth `d`, `S` segments: `(d + S − 1)` segment times up; each link
//! carries `n` once (plus `n` from 0 to a root other than 0). A relay
//! waits for a segment from each child before it folds: it holds one
//! segment per child at a time, whatever the buffer.
//!
//! # Trace, P = 7, fanout 2, root 0
//!
//! ```text
//! 3,4 → 1: x1⊕x3⊕x4;  5,6 → 2: x2⊕x5⊕x6;  1,2 → 0: the result
//! ```

use crate::comm::{recv_into, recv_reduce, send_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::topo::{chunk, tree_children, tree_parent};

/// Tree reduce of `buf` to `root` in segments of `seg_elems` (`Avg`
/// reduces as Sum); other ranks' `buf` is left unspecified.
pub fn reduce_tree<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
    root: usize,
    seg_elems: usize,
) -> Result<(), C::Error> {
    let (p, r, k) = (comm.size(), comm.rank(), comm.fanout());
    if p == 1 {
        return Ok(());
    }
    let n = buf.len();
    let nseg = crate::topo::segment_count(n, seg_elems);
    let seg = |j: usize| chunk(n, nseg, j);
    let parent = tree_parent(r, k);
    for j in 0..nseg {
        for c in tree_children(r, k, p) {
            recv_reduce(comm, c, &mut buf[seg(j)], op, false)?;
        }
        match parent {
            Some(parent) => send_elems(comm, parent, &buf[seg(j)])?,
            None if root != 0 => send_elems(comm, root, &buf[seg(j)])?,
            None => {}
        }
    }
    if r == root && root != 0 {
        for j in 0..nseg {
            recv_into(comm, 0, &mut buf[seg(j)])?;
        }
    }
    Ok(())
}
