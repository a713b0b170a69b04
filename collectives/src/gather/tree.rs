//! Tree gather: up a relay tree to rank 0 (`Topology::Tree`), each rank
//! sending its parent its subtree's blocks in one message (own block
//! first, then each child's subtree in turn: preorder), so the root takes
//! one message per child, not one per rank. A root other than rank 0 then
//! receives the whole from rank 0.
//!
//! # Steps and cost
//!
//! Depth `d`: `d` message times; a rank's link to its parent carries its
//! subtree's blocks once; a relay holds its subtree's blocks (a window is
//! not possible: each block is wanted whole at the root).
//!
//! # Trace, P = 7, fanout 2 (0; 1 2; 3 4 under 1, 5 6 under 2), root 0
//!
//! ```text
//! 3 → 1, 4 → 1;  5 → 2, 6 → 2;  1 (x1 x3 x4) → 0, 2 (x2 x5 x6) → 0
//! ```

use crate::comm::{recv_into, send_elems, Comm};
use crate::element::Element;
use crate::topo::{tree_children, tree_parent, tree_preorder, tree_subtree_len};

/// Tree gather of every rank's `send` into `root`'s `recv` (rank order).
pub fn gather_tree<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    root: usize,
) -> Result<(), C::Error> {
    let (p, r, k, block) = (comm.size(), comm.rank(), comm.fanout(), send.len());
    let mine = gather_subtree(comm, send)?;
    match tree_parent(r, k) {
        Some(parent) => send_elems(comm, parent, &mine)?,
        None => {
            // Rank 0: the blocks in preorder, to rank order.
            let mut ordered = Vec::new();
            let out = if root == 0 {
                &mut *recv
            } else {
                ordered.resize(p * block, T::zeroed());
                &mut ordered[..]
            };
            for (i, q) in tree_preorder(0, k, p).into_iter().enumerate() {
                out[q * block..(q + 1) * block].copy_from_slice(&mine[i * block..(i + 1) * block]);
            }
            if root != 0 {
                send_elems(comm, root, &ordered)?;
            }
        }
    }
    if r == root && root != 0 {
        recv_into(comm, 0, recv)?;
    }
    Ok(())
}

/// This rank's subtree's blocks, in preorder: its own, then each child's
/// subtree as the child sent it.
fn gather_subtree<T: Element, C: Comm>(comm: &mut C, send: &[T]) -> Result<Vec<T>, C::Error> {
    let (p, r, k, block) = (comm.size(), comm.rank(), comm.fanout(), send.len());
    let mut mine = Vec::with_capacity(tree_subtree_len(r, k, p) * block);
    mine.extend_from_slice(send);
    for c in tree_children(r, k, p) {
        let at = mine.len();
        mine.resize(at + tree_subtree_len(c, k, p) * block, T::zeroed());
        recv_into(comm, c, &mut mine[at..])?;
    }
    Ok(mine)
}
