//! Tree all_reduce: a segmented reduce up a relay tree to rank 0,
//! pipelined with the broadcast back down — the algorithm of a relay tree
//! (`Topology::Tree`), where every rank's bytes would otherwise climb to
//! the root whole. With the fanout `P − 1` it is the star's.
//!
//! # Steps and cost
//!
//! The buffer is cut into `S` segments. Going up, a rank folds segment
//! `j` of each child (in rank order) into its own and sends the result to
//! its parent; the root's fold is the result, which goes back down: a
//! rank takes segment `j` from its parent and passes it to its children.
//! Every rank keeps at most `PIPELINE_DEPTH` segments going up ahead of
//! those coming down, so a relay holds a window of `PIPELINE_DEPTH`
//! segments per child, whatever the buffer. Each link carries `n` up and
//! `n` down: each child's bytes cross one hop, once. Depth `d`:
//! `2d·α + 2n·β` pipelined; every rank ends with the root's bits.
//!
//! # Trace, P = 7, fanout 2 (0; 1 2; 3 4 under 1, 5 6 under 2), S = 1
//!
//! ```text
//! up:   3,4 → 1: x1⊕x3⊕x4;  5,6 → 2: x2⊕x5⊕x6;  1,2 → 0: x0⊕(…)⊕(…)
//! down: 0 → 1, 2;  1 → 3, 4;  2 → 5, 6
//! ```

use crate::comm::{recv_into, recv_reduce, send_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::ring::PIPELINE_DEPTH;
use crate::topo::{chunk, tree_children, tree_parent};

/// Tree all_reduce of `buf` in segments of `seg_elems` (`Avg` reduces as
/// Sum), over the tree of the comm's fanout.
pub fn all_reduce_tree<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
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
    let children = tree_children(r, k, p);
    let up = |comm: &mut C, buf: &mut [T], j: usize| -> Result<(), C::Error> {
        for c in children.clone() {
            recv_reduce(comm, c, &mut buf[seg(j)], op, false)?;
        }
        if let Some(parent) = parent {
            send_elems(comm, parent, &buf[seg(j)])?;
        }
        Ok(())
    };
    let down = |comm: &mut C, buf: &mut [T], j: usize| -> Result<(), C::Error> {
        if let Some(parent) = parent {
            recv_into(comm, parent, &mut buf[seg(j)])?;
        }
        for c in children.clone() {
            send_elems(comm, c, &buf[seg(j)])?;
        }
        Ok(())
    };
    // The root turns each segment round at once; every other rank keeps
    // `depth` segments going up ahead of those coming down.
    let depth = if parent.is_none() {
        1
    } else {
        nseg.min(PIPELINE_DEPTH)
    };
    for j in 0..nseg {
        up(comm, buf, j)?;
        if j + 1 >= depth {
            down(comm, buf, j + 1 - depth)?;
        }
    }
    for j in nseg + 1 - depth..nseg {
        down(comm, buf, j)?;
    }
    Ok(())
}
