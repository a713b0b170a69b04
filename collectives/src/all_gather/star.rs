//! Star all_gather: every worker sends its block to the coordinator (rank
//! 0), which sends each worker every block but its own. Worker links carry
//! `block` up and `(P−1)·block` down, the least a star allows.

use crate::comm::{recv_into, send_elems, Comm};
use crate::element::Element;

/// Star all_gather; `recv.len() == P · send.len()`.
pub fn all_gather_star<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
) -> Result<(), C::Error> {
    let (p, r, block) = (comm.size(), comm.rank(), send.len());
    let blk = |b: usize| b * block..(b + 1) * block;
    recv[blk(r)].copy_from_slice(send);
    if r == 0 {
        for w in 1..p {
            recv_into(comm, w, &mut recv[blk(w)])?;
        }
        for w in 1..p {
            for b in (0..p).filter(|&b| b != w) {
                send_elems(comm, w, &recv[blk(b)])?;
            }
        }
    } else {
        send_elems(comm, 0, send)?;
        for b in (0..p).filter(|&b| b != r) {
            recv_into(comm, 0, &mut recv[blk(b)])?;
        }
    }
    Ok(())
}
