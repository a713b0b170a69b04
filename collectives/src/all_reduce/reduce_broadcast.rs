//! all_reduce as a binomial reduce to rank 0 followed by a binomial
//! broadcast: `2⌈log₂ P⌉` steps of the whole buffer. Slower than the others
//! on a mesh, but it only ever uses tree edges, which suits a star whose
//! coordinator is rank 0; kept for that and as a reference.

use crate::broadcast::broadcast_binomial;
use crate::comm::Comm;
use crate::element::Element;
use crate::op::ReduceOp;
use crate::reduce::reduce_binomial;

/// Reduce to rank 0, broadcast from it (`Avg` reduces as Sum).
pub fn all_reduce_reduce_broadcast<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
) -> Result<(), C::Error> {
    reduce_binomial(comm, buf, op, 0)?;
    broadcast_binomial(comm, buf, 0)
}
