//! gather: the root receives every rank's block in rank order
//! (`recv.len() == P · send.len()` at the root; `recv` unused elsewhere).
//!
//! * linear — every rank sends straight to the root: `P − 1` messages into
//!   one link, no forwarding; best for large blocks.
//! * binomial — ranks renumbered with the root at 0; rank `v` collects its
//!   subtree (`v .. v + lowbit(v)`) and forwards it to `v − lowbit(v)`:
//!   `⌈log₂ P⌉` steps, but blocks are forwarded up to `log₂ P` times; best
//!   for small blocks. Trace, P = 4, root 0: `1→0, 3→2; 2(2,3)→0`.

mod tree;

pub use tree::gather_tree;

use crate::comm::{recv_into, send_elems, Comm};
use crate::element::Element;
use crate::select::Algorithm;
use crate::topo::{absolute, relative};

/// Number of ranks in relative rank `vr`'s binomial subtree.
pub(crate) fn subtree(vr: usize, p: usize) -> usize {
    if vr == 0 {
        p
    } else {
        (vr & vr.wrapping_neg()).min(p - vr)
    }
}

/// Linear gather.
pub fn gather_linear<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    root: usize,
) -> Result<(), C::Error> {
    let (p, r, block) = (comm.size(), comm.rank(), send.len());
    if r != root {
        return send_elems(comm, root, send);
    }
    for i in 0..p {
        let dst = &mut recv[i * block..(i + 1) * block];
        if i == root {
            dst.copy_from_slice(send);
        } else {
            recv_into(comm, i, dst)?;
        }
    }
    Ok(())
}

/// Binomial gather.
pub fn gather_binomial<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    root: usize,
) -> Result<(), C::Error> {
    let (p, block) = (comm.size(), send.len());
    let vr = relative(comm.rank(), root, p);
    // Blocks of the subtree, in relative order; the own block first.
    let mut tmp = Vec::with_capacity(subtree(vr, p) * block);
    tmp.extend_from_slice(send);
    tmp.resize(subtree(vr, p) * block, T::zeroed());
    let mut mask = 1;
    while mask < p {
        if vr & mask == 0 {
            let child = vr | mask;
            if child < p {
                let n = subtree(child, p);
                recv_into(
                    comm,
                    absolute(child, root, p),
                    &mut tmp[mask * block..(mask + n) * block],
                )?;
            }
        } else {
            return send_elems(comm, absolute(vr & !mask, root, p), &tmp);
        }
        mask <<= 1;
    }
    // Only the root gets here: rotate relative order into rank order.
    for v in 0..p {
        let a = absolute(v, root, p);
        recv[a * block..(a + 1) * block].copy_from_slice(&tmp[v * block..(v + 1) * block]);
    }
    Ok(())
}

/// Run `algo` (linear, binomial or tree; any other runs linear).
pub fn gather<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    root: usize,
    algo: Algorithm,
) -> Result<(), C::Error> {
    match algo {
        Algorithm::Binomial => gather_binomial(comm, send, recv, root),
        Algorithm::Tree => gather_tree(comm, send, recv, root),
        _ => gather_linear(comm, send, recv, root),
    }
}
