//! Tree barrier: an empty message up a relay tree to rank 0 and back down
//! (`Topology::Tree`). No rank leaves before every rank has arrived: the
//! root hears from all (through the relays) before it answers.
//!
//! # Steps and cost
//!
//! Depth `d`: `2d` message times; each link carries one message each way.
//!
//! # Trace, P = 7, fanout 2
//!
//! ```text
//! up:   3,4 → 1;  5,6 → 2;  1,2 → 0
//! down: 0 → 1, 2;  1 → 3, 4;  2 → 5, 6
//! ```

use crate::comm::Comm;
use crate::topo::{tree_children, tree_parent};

/// Tree barrier.
pub fn barrier_tree<C: Comm>(comm: &mut C) -> Result<(), C::Error> {
    let (p, r, k) = (comm.size(), comm.rank(), comm.fanout());
    if p == 1 {
        return Ok(());
    }
    let parent = tree_parent(r, k);
    for c in tree_children(r, k, p) {
        comm.recv(c, 0)?;
    }
    if let Some(parent) = parent {
        comm.send(parent, &[])?;
        comm.recv(parent, 0)?;
    }
    for c in tree_children(r, k, p) {
        comm.send(c, &[])?;
    }
    Ok(())
}
