//! Dissemination barrier (Hensgen, Finkel & Manber 1988; Open MPI
//! `barrier_intra_bruck`).
//!
//! # Steps and cost
//!
//! At distance `d = 1, 2, 4, … < P`, rank `r` sends an empty message to
//! `r + d` and waits for one from `r − d` (mod P). After `⌈log₂ P⌉` rounds
//! every rank has heard, transitively, from every other: `⌈log₂ P⌉·α`, for
//! any P (no power-of-two fix-up).
//!
//! # Trace, P = 4
//!
//! ```text
//! d=1: 0→1, 1→2, 2→3, 3→0
//! d=2: 0→2, 1→3, 2→0, 3→1
//! ```

mod star;
mod tree;

pub use star::barrier_star;
pub use tree::barrier_tree;

use crate::comm::Comm;
use crate::select::Algorithm;
use crate::topo::{add_mod, sub_mod};

/// Dissemination barrier.
pub fn barrier_dissemination<C: Comm>(comm: &mut C) -> Result<(), C::Error> {
    let (p, r) = (comm.size(), comm.rank());
    let mut d = 1;
    while d < p {
        comm.send(add_mod(r, d, p), &[])?;
        comm.recv(sub_mod(r, d, p), 0)?;
        d <<= 1;
    }
    Ok(())
}

/// Run `algo` (dissemination or star).
pub fn barrier<C: Comm>(comm: &mut C, algo: Algorithm) -> Result<(), C::Error> {
    match algo {
        Algorithm::Star => barrier_star(comm),
        Algorithm::Tree => barrier_tree(comm),
        _ => barrier_dissemination(comm),
    }
}
