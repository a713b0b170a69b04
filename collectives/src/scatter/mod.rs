//! scatter: rank `r` receives block `r` of the root's `send`
//! (`send.len() == P · recv.len()` at the root; `send` unused elsewhere).
//!
//! * linear — the root sends each block straight to its rank.
//! * binomial — the mirror of binomial gather: relative rank `v` receives
//!   its whole subtree's blocks from `v − lowbit(v)` and hands the upper
//!   halves down, largest first. Trace, P = 4, root 0: `0(2,3)→2; 0→1, 2→3`.

mod tree;

pub use tree::scatter_tree;

use crate::comm::{recv_into, send_elems, Comm};
use crate::element::Element;
use crate::gather::subtree;
use crate::select::Algorithm;
use crate::topo::{absolute, pow2_floor, relative};

/// Linear scatter.
pub fn scatter_linear<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    root: usize,
) -> Result<(), C::Error> {
    let (p, r, block) = (comm.size(), comm.rank(), recv.len());
    if r != root {
        return recv_into(comm, root, recv);
    }
    for i in 0..p {
        let src = &send[i * block..(i + 1) * block];
        if i == root {
            recv.copy_from_slice(src);
        } else {
            send_elems(comm, i, src)?;
        }
    }
    Ok(())
}

/// Binomial scatter.
pub fn scatter_binomial<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    root: usize,
) -> Result<(), C::Error> {
    let (p, block) = (comm.size(), recv.len());
    let vr = relative(comm.rank(), root, p);
    let mut tmp = Vec::with_capacity(subtree(vr, p) * block);
    let mut mask;
    if vr == 0 {
        for v in 0..p {
            let a = absolute(v, root, p);
            tmp.extend_from_slice(&send[a * block..(a + 1) * block]);
        }
        mask = if p > 1 { pow2_floor(p - 1) } else { 0 };
    } else {
        let low = vr & vr.wrapping_neg();
        tmp.resize(subtree(vr, p) * block, T::zeroed());
        recv_into(comm, absolute(vr - low, root, p), &mut tmp)?;
        mask = low >> 1;
    }
    while mask > 0 {
        let child = vr + mask;
        if child < p {
            let n = subtree(child, p);
            send_elems(
                comm,
                absolute(child, root, p),
                &tmp[mask * block..(mask + n) * block],
            )?;
        }
        mask >>= 1;
    }
    recv.copy_from_slice(&tmp[..block]);
    Ok(())
}

/// Run `algo` (linear or binomial; any other runs linear).
pub fn scatter<T: Element, C: Comm>(
    comm: &mut C,
    send: &[T],
    recv: &mut [T],
    root: usize,
    algo: Algorithm,
) -> Result<(), C::Error> {
    match algo {
        Algorithm::Binomial => scatter_binomial(comm, send, recv, root),
        Algorithm::Tree => scatter_tree(comm, send, recv, root),
        _ => scatter_linear(comm, send, recv, root),
    }
}
