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

use crate::comm::{recv_into, recv_reduce, send_elems, with_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::ring::PIPELINE_DEPTH;
use crate::topo::{chunk, tree_children, tree_parent};
use std::ops::Range;

/// Tree all_reduce of `buf` in segments of `seg_elems` (`Avg` reduces as
/// Sum), over the tree of the comm's fanout.
pub fn all_reduce_tree<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
    seg_elems: usize,
) -> Result<(), C::Error> {
    all_reduce_tree_turned(comm, &mut InPlace(buf), op, seg_elems)
}

/// What a tree all_reduce sends up, folds, and hands down, and what the
/// root makes of the one for the other. A plain all_reduce is one buffer
/// throughout; a federated average sends each leaf's own f32 values and
/// weight up, folds them at its parent into f64 weighted sums (a product
/// of two f32 is exact in f64), and hands f32 averages down: a leaf's
/// link carries half the bytes of an f64 all_reduce each way. Segment `j`
/// of every buffer covers the same element indices.
pub trait Turn {
    /// What an interior rank folds and sends on.
    type Up: Element;
    /// What a rank without children sends up: its own part.
    type Leaf: Element;
    /// What comes down.
    type Down: Element;
    /// The number of elements (of each buffer).
    fn elements(&self) -> usize;
    /// Before anything moves: whether this rank folds (it has children,
    /// or it is the root); a leaf needs no buffer to fold into.
    fn begin(&mut self, folds: bool);
    /// Elements `r` of the buffer folded going up.
    fn up(&mut self, r: Range<usize>) -> &mut [Self::Up];
    /// Elements `r` of this rank's own part, as a leaf sends it.
    fn leaf(&mut self, r: Range<usize>) -> &[Self::Leaf];
    /// Fold elements `r` of the leaf child in slot `child` (its place
    /// among this rank's children) into [`Turn::up`]'s.
    fn fold_leaf(&mut self, child: usize, r: Range<usize>, x: &[Self::Leaf], op: ReduceOp);
    /// Elements `r` of the buffer coming down.
    fn down(&mut self, r: Range<usize>) -> &mut [Self::Down];
    /// At the root, once elements `r` are folded: make their down part.
    /// Called in order of `r`.
    fn turn(&mut self, r: Range<usize>);
}

/// A plain all_reduce: one buffer, up and down.
struct InPlace<'a, T>(&'a mut [T]);

impl<T: Element> Turn for InPlace<'_, T> {
    type Up = T;
    type Leaf = T;
    type Down = T;
    fn elements(&self) -> usize {
        self.0.len()
    }
    fn begin(&mut self, _: bool) {}
    fn up(&mut self, r: Range<usize>) -> &mut [T] {
        &mut self.0[r]
    }
    fn leaf(&mut self, r: Range<usize>) -> &[T] {
        &self.0[r]
    }
    fn fold_leaf(&mut self, _: usize, r: Range<usize>, x: &[T], op: ReduceOp) {
        T::reduce(op, &mut self.0[r], x);
    }
    fn down(&mut self, r: Range<usize>) -> &mut [T] {
        &mut self.0[r]
    }
    fn turn(&mut self, _: Range<usize>) {}
}

/// [`all_reduce_tree`] with what goes up, is folded and comes down as
/// [`Turn`] says.
pub fn all_reduce_tree_turned<B: Turn, C: Comm>(
    comm: &mut C,
    buf: &mut B,
    op: ReduceOp,
    seg_elems: usize,
) -> Result<(), C::Error> {
    let (p, r, k) = (comm.size(), comm.rank(), comm.fanout());
    let n = buf.elements();
    let nseg = crate::topo::segment_count(n, seg_elems);
    let seg = |j: usize| chunk(n, nseg, j);
    let parent = tree_parent(r, k);
    let children = tree_children(r, k, p);
    let is_leaf = |c: usize| tree_children(c, k, p).is_empty();
    buf.begin(!children.is_empty() || parent.is_none());
    let up = |comm: &mut C, buf: &mut B, j: usize| -> Result<(), C::Error> {
        let r = seg(j);
        for (slot, c) in children.clone().enumerate() {
            if is_leaf(c) {
                let msg = comm.recv(c, r.len() * std::mem::size_of::<B::Leaf>())?;
                with_elems(msg.as_ref(), |x| buf.fold_leaf(slot, r.clone(), x, op));
            } else {
                recv_reduce(comm, c, buf.up(r.clone()), op, false)?;
            }
        }
        match parent {
            Some(parent) if children.is_empty() => send_elems(comm, parent, buf.leaf(r)),
            Some(parent) => send_elems(comm, parent, buf.up(r)),
            None => {
                buf.turn(r);
                Ok(())
            }
        }
    };
    let down = |comm: &mut C, buf: &mut B, j: usize| -> Result<(), C::Error> {
        if let Some(parent) = parent {
            recv_into(comm, parent, buf.down(seg(j)))?;
        }
        for c in children.clone() {
            send_elems(comm, c, buf.down(seg(j)))?;
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
