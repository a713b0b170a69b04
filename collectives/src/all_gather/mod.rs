//! all_gather: every rank ends with all ranks' blocks in rank order
//! (`recv.len() == P · send.len()`).
//!
//! One algorithm, the ring's all-gather phase ([`crate::ring`]): the own
//! block is copied into place, then `P − 1` steps pass blocks to the right,
//! pipelined in segments; each rank sends and receives `(P−1)·block` bytes,
//! the lower bound.

mod bruck;
mod star;

pub use bruck::all_gather_bruck;
pub use star::all_gather_star;

use crate::all_reduce::seg_elems;
use crate::element::Element;
use crate::op::ReduceOp;
use crate::ring::{ring, Phases};
use crate::select::{Algorithm, RING_SEGMENT_BYTES};
use crate::Comm;

/// Ring all_gather.
pub fn all_gather_ring<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
) -> Result<(), C::Error> {
    let r = comm.rank();
    let block = send.len();
    recv[r * block..(r + 1) * block].copy_from_slice(send);
    ring(
        comm,
        recv,
        ReduceOp::Sum,
        Phases::AllGather,
        seg_elems::<T>(RING_SEGMENT_BYTES),
    )
}

/// Run `algo` (ring, bruck or star; any other runs the ring).
pub fn all_gather<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    algo: Algorithm,
) -> Result<(), C::Error> {
    match algo {
        Algorithm::Star => all_gather_star(comm, send, recv),
        Algorithm::Bruck => all_gather_bruck(comm, send, recv),
        // Up a relay tree to rank 0, and the whole back down.
        Algorithm::Tree => {
            crate::gather::gather_tree(comm, send, recv, 0)?;
            crate::broadcast::broadcast_tree(comm, recv, 0, seg_elems::<T>(RING_SEGMENT_BYTES))
        }
        _ => all_gather_ring(comm, send, recv),
    }
}
