//! Tree broadcast: down a relay tree from rank 0, segmented so that a
//! relay passes segment `j` on while `j + 1` arrives (`Topology::Tree`).
//! A root other than rank 0 first sends its buffer up to rank 0 (the
//! tree's root) directly; it then receives it back in its place in the
//! tree, as every rank does.
//!
//! # Steps and cost
//!
//! Depth `d`, `S` segments: `(d + S − 1)` segment times; each link
//! carries `n` once (twice along the way from a root other than 0).
//!
//! # Trace, P = 7, fanout 2, root 0
//!
//! ```text
//! 0 → 1, 2;  1 → 3, 4;  2 → 5, 6   (each segment in turn)
//! ```

use crate::comm::{recv_into, send_elems, Comm};
use crate::element::Element;
use crate::topo::{chunk, tree_children, tree_parent};

/// Tree broadcast of `root`'s `buf` in segments of `seg_elems`.
pub fn broadcast_tree<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
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
    if root != 0 {
        if r == root {
            for j in 0..nseg {
                send_elems(comm, 0, &buf[seg(j)])?;
            }
        } else if r == 0 {
            for j in 0..nseg {
                recv_into(comm, root, &mut buf[seg(j)])?;
            }
        }
    }
    let parent = tree_parent(r, k);
    for j in 0..nseg {
        if let Some(parent) = parent {
            recv_into(comm, parent, &mut buf[seg(j)])?;
        }
        for c in tree_children(r, k, p) {
            send_elems(comm, c, &buf[seg(j)])?;
        }
    }
    Ok(())
}
