//! Star scan: workers send their buffers to the coordinator (rank 0), which
//! folds them in rank order and returns each worker its prefix. Worker links
//! carry `n` each way.

use crate::comm::{recv_into, send_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;

/// Inclusive or exclusive star scan of `buf` (`Avg` reduces as Sum).
pub fn scan_star<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
    exclusive: bool,
) -> Result<(), C::Error> {
    let (p, r) = (comm.size(), comm.rank());
    if r != 0 {
        send_elems(comm, 0, buf)?;
        return recv_into(comm, 0, buf);
    }
    // `running` holds ranks 0..w reduced.
    let mut running = buf.to_vec();
    let mut x = vec![T::zeroed(); buf.len()];
    for w in 1..p {
        recv_into(comm, w, &mut x)?;
        if exclusive {
            send_elems(comm, w, &running)?;
        }
        T::reduce_from_left(op, &mut x, &running);
        std::mem::swap(&mut running, &mut x);
        if !exclusive {
            send_elems(comm, w, &running)?;
        }
    }
    if exclusive {
        buf.fill(T::identity(op));
    }
    Ok(())
}
