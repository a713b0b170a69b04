//! scan and exclusive_scan by Hillis–Steele (recursive doubling on prefixes;
//! MPICH's `MPIR_Scan_intra_recursive_doubling`).
//!
//! # Steps and cost
//!
//! At distance `d = 1, 2, 4, … < P`, rank `r` sends its running inclusive
//! prefix to `r + d` and folds the one from `r − d` in on the left. After
//! the step at `d`, rank `r` holds the reduction of ranks
//! `max(0, r−2d+1) ..= r`. `⌈log₂ P⌉·(α + nβ + nγ)`. The exclusive form
//! also folds each received prefix into a second buffer that never contains
//! the own contribution; rank 0 receives nothing and gets the identity.
//!
//! # Trace, P = 4, inclusive
//!
//! ```text
//! d=1: 0→1, 1→2, 2→3   r holds x(r−1)⊕x(r)
//! d=2: 0→2, 1→3        r holds x0⊕…⊕x(r)
//! ```

mod star;

pub use star::scan_star;

use crate::comm::{send_elems, with_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::select::Algorithm;

/// Inclusive (`exclusive = false`) or exclusive prefix reduction in place
/// (`Avg` reduces as Sum).
pub fn scan_hillis_steele<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
    exclusive: bool,
) -> Result<(), C::Error> {
    let (p, r) = (comm.size(), comm.rank());
    let mut excl: Option<Vec<T>> = None;
    let mut d = 1;
    while d < p {
        if r + d < p {
            send_elems(comm, r + d, buf)?;
        }
        if r >= d {
            let msg = comm.recv(r - d, std::mem::size_of_val(buf))?;
            with_elems(msg.as_ref(), |x: &[T]| {
                if exclusive {
                    match excl.as_mut() {
                        Some(e) => T::reduce_from_left(op, e, x),
                        None => excl = Some(x.to_vec()),
                    }
                }
                T::reduce_from_left(op, buf, x);
            });
        }
        d <<= 1;
    }
    if exclusive {
        match excl {
            Some(e) => buf.copy_from_slice(&e),
            None => buf.fill(T::identity(op)),
        }
    }
    Ok(())
}

/// Run `algo` (Hillis–Steele or star), then finish `Avg`: rank `r`'s
/// inclusive prefix covers `r + 1` ranks, its exclusive one `r`.
pub fn scan<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
    exclusive: bool,
    algo: Algorithm,
) -> Result<(), C::Error> {
    match algo {
        Algorithm::Star => scan_star(comm, buf, op, exclusive)?,
        _ => scan_hillis_steele(comm, buf, op, exclusive)?,
    }
    let covered = if exclusive {
        comm.rank()
    } else {
        comm.rank() + 1
    };
    if op == ReduceOp::Avg && covered > 0 {
        T::divide(buf, covered);
    }
    Ok(())
}
