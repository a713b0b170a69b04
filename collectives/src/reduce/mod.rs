//! reduce: the root ends with the element-wise reduction of all buffers;
//! other ranks' buffers are left unspecified (they are used as scratch).

mod binomial;
mod reduce_scatter_gather;
mod star;
mod tree;

pub use binomial::reduce_binomial;
pub use reduce_scatter_gather::reduce_reduce_scatter_gather;
pub use star::reduce_star;
pub use tree::reduce_tree;

use crate::all_reduce::seg_elems;
use crate::comm::Comm;
use crate::element::Element;
use crate::op::ReduceOp;
use crate::select::{Algorithm, RING_SEGMENT_BYTES};

/// Run `algo` (binomial or reduce_scatter_gather; any other runs the
/// binomial tree), then finish `Avg` at the root.
pub fn reduce<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
    root: usize,
    algo: Algorithm,
) -> Result<(), C::Error> {
    match algo {
        Algorithm::ReduceScatterGather => reduce_reduce_scatter_gather(comm, buf, op, root)?,
        Algorithm::Star => reduce_star(comm, buf, op, root, seg_elems::<T>(RING_SEGMENT_BYTES))?,
        Algorithm::Tree => reduce_tree(comm, buf, op, root, seg_elems::<T>(RING_SEGMENT_BYTES))?,
        _ => reduce_binomial(comm, buf, op, root)?,
    }
    if op == ReduceOp::Avg && comm.rank() == root {
        T::divide(buf, comm.size());
    }
    Ok(())
}
