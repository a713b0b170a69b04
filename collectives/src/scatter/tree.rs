//! Tree scatter, the mirror of tree gather (`Topology::Tree`): rank 0
//! sends each child its subtree's blocks in one message (preorder: the
//! child's own block first), and each relay keeps its block and passes
//! each of its children theirs. A root other than rank 0 first sends
//! rank 0 the whole.
//!
//! # Trace, P = 7, fanout 2, root 0
//!
//! ```text
//! 0 → 1 (x1 x3 x4), 0 → 2 (x2 x5 x6);  1 → 3, 1 → 4;  2 → 5, 2 → 6
//! ```

use crate::comm::{recv_into, send_elems, Comm};
use crate::element::Element;
use crate::topo::{tree_children, tree_parent, tree_preorder, tree_subtree_len};

/// Tree scatter: rank `r` receives block `r` of `root`'s `send`.
pub fn scatter_tree<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    root: usize,
) -> Result<(), C::Error> {
    let (p, r, k, block) = (comm.size(), comm.rank(), comm.fanout(), recv.len());
    if r == root && root != 0 {
        send_elems(comm, 0, send)?;
    }
    // This rank's subtree's blocks, in preorder.
    let mine: Vec<T> = match tree_parent(r, k) {
        Some(parent) => {
            let mut mine = vec![T::zeroed(); tree_subtree_len(r, k, p) * block];
            recv_into(comm, parent, &mut mine)?;
            mine
        }
        None => {
            let mut whole = Vec::new();
            let by_rank = if root == 0 {
                send
            } else {
                whole.resize(p * block, T::zeroed());
                recv_into(comm, root, &mut whole)?;
                &whole[..]
            };
            tree_preorder(0, k, p)
                .into_iter()
                .flat_map(|q| by_rank[q * block..(q + 1) * block].iter().copied())
                .collect()
        }
    };
    recv.copy_from_slice(&mine[..block]);
    let mut at = block;
    for c in tree_children(r, k, p) {
        let len = tree_subtree_len(c, k, p) * block;
        send_elems(comm, c, &mine[at..at + len])?;
        at += len;
    }
    Ok(())
}
