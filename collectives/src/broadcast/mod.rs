//! broadcast: the root's buffer is copied to every rank.

mod binomial;
mod chain;
mod star;
mod tree;

pub use binomial::broadcast_binomial;
pub use chain::broadcast_chain;
pub use star::broadcast_star;
pub use tree::broadcast_tree;

use crate::all_reduce::seg_elems;
use crate::comm::Comm;
use crate::element::Element;
use crate::select::{Algorithm, CHAIN_SEGMENT_BYTES};

/// Run `algo` (binomial or chain; any other runs the binomial tree).
pub fn broadcast<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    root: usize,
    algo: Algorithm,
) -> Result<(), C::Error> {
    match algo {
        Algorithm::Chain => broadcast_chain(comm, buf, root, seg_elems::<T>(CHAIN_SEGMENT_BYTES)),
        Algorithm::Star => broadcast_star(comm, buf, root, seg_elems::<T>(CHAIN_SEGMENT_BYTES)),
        Algorithm::Tree => broadcast_tree(comm, buf, root, seg_elems::<T>(CHAIN_SEGMENT_BYTES)),
        _ => broadcast_binomial(comm, buf, root),
    }
}
