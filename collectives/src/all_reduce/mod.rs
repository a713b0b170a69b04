//! all_reduce: every rank ends with the element-wise reduction of all
//! ranks' buffers, bitwise identical everywhere.

mod recursive_doubling;
mod recursive_halving;
mod reduce_broadcast;
mod star;
mod tree;

pub use recursive_doubling::all_reduce_recursive_doubling;
pub use recursive_halving::all_reduce_recursive_halving;
pub use reduce_broadcast::all_reduce_reduce_broadcast;
pub use star::all_reduce_star;
pub use tree::{all_reduce_tree, all_reduce_tree_turned, Turn};

use crate::comm::Comm;
use crate::element::Element;
use crate::op::ReduceOp;
use crate::ring::{ring, Phases};
use crate::select::{Algorithm, RING_SEGMENT_BYTES};

/// Ring all_reduce (see [`crate::ring`]); `seg_elems = usize::MAX` sends one
/// message per chunk and step, anything smaller pipelines.
pub fn all_reduce_ring<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
    seg_elems: usize,
) -> Result<(), C::Error> {
    ring(comm, buf, op, Phases::Both, seg_elems)
}

/// Run `algo` (one of [`crate::Collective::AllReduce`]'s; any other runs the
/// pipelined ring), then finish `Avg`.
pub fn all_reduce<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
    algo: Algorithm,
) -> Result<(), C::Error> {
    match algo {
        Algorithm::Ring => all_reduce_ring(comm, buf, op, usize::MAX)?,
        Algorithm::RecursiveDoubling => all_reduce_recursive_doubling(comm, buf, op)?,
        Algorithm::RecursiveHalving => all_reduce_recursive_halving(comm, buf, op)?,
        Algorithm::ReduceBroadcast => all_reduce_reduce_broadcast(comm, buf, op)?,
        Algorithm::Star => all_reduce_star(comm, buf, op, seg_elems::<T>(RING_SEGMENT_BYTES))?,
        Algorithm::Tree => all_reduce_tree(comm, buf, op, seg_elems::<T>(RING_SEGMENT_BYTES))?,
        _ => all_reduce_ring(comm, buf, op, seg_elems::<T>(RING_SEGMENT_BYTES))?,
    }
    if op == ReduceOp::Avg {
        T::divide(buf, comm.size());
    }
    Ok(())
}

/// A byte size in whole elements, at least one.
pub fn seg_elems<T>(bytes: usize) -> usize {
    (bytes / std::mem::size_of::<T>()).max(1)
}
