//! Star reduce_scatter: workers send their whole `send` (block by block) to
//! the coordinator (rank 0), which folds each block in rank order and sends
//! block `b` to rank `b`. Worker links carry `P·block` up and `block` down;
//! the reduction has to happen somewhere, and in a star every byte meets at
//! the coordinator anyway.

use crate::comm::{recv_into, recv_reduce, send_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;

/// Star reduce_scatter; `send.len() == P · recv.len()` (`Avg` reduces as Sum).
pub fn reduce_scatter_star<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    op: ReduceOp,
) -> Result<(), C::Error> {
    let (p, r, block) = (comm.size(), comm.rank(), recv.len());
    let blk = |b: usize| b * block..(b + 1) * block;
    if r == 0 {
        let mut acc = vec![T::zeroed(); block];
        for b in 0..p {
            let dst: &mut [T] = if b == 0 { &mut *recv } else { &mut acc };
            dst.copy_from_slice(&send[blk(b)]);
            for w in 1..p {
                recv_reduce(comm, w, dst, op, false)?;
            }
            if b != 0 {
                send_elems(comm, b, &acc)?;
            }
        }
    } else {
        for b in 0..p {
            send_elems(comm, 0, &send[blk(b)])?;
        }
        recv_into(comm, 0, recv)?;
    }
    Ok(())
}
