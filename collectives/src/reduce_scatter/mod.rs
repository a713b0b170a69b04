//! reduce_scatter: `send` holds `P` equal blocks; rank `r` receives block
//! `r` reduced over all ranks.
//!
//! One algorithm, the ring's reduce-scatter phase ([`crate::ring`]): `P − 1`
//! steps, `(P−1)/P` of the send buffer sent and received per rank, pipelined
//! in segments. The send buffer is copied once into scratch space because
//! the ring reduces in place and `send` is borrowed immutably.

use crate::all_reduce::seg_elems;
use crate::element::Element;
use crate::op::ReduceOp;
use crate::ring::{ring, Phases};
use crate::select::{Algorithm, RING_SEGMENT_BYTES};
use crate::{topo::chunk, Comm};

/// Ring reduce-scatter; `recv.len() · P == send.len()`.
pub fn reduce_scatter_ring<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    op: ReduceOp,
) -> Result<(), C::Error> {
    let p = comm.size();
    let mut work = send.to_vec();
    ring(
        comm,
        &mut work,
        op,
        Phases::ReduceScatter,
        seg_elems::<T>(RING_SEGMENT_BYTES),
    )?;
    recv.copy_from_slice(&work[chunk(work.len(), p, comm.rank())]);
    Ok(())
}

/// Run `algo` (only the ring exists), then finish `Avg`.
pub fn reduce_scatter<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    op: ReduceOp,
    _algo: Algorithm,
) -> Result<(), C::Error> {
    reduce_scatter_ring(comm, send, recv, op)?;
    if op == ReduceOp::Avg {
        T::divide(recv, comm.size());
    }
    Ok(())
}
