//! reduce as a ring reduce-scatter followed by a gather of the chunks at the
//! root (Rabenseifner's reduce with a ring first phase).
//!
//! # Steps and cost
//!
//! `P − 1` ring steps leave rank `r` with chunk `r` reduced (see
//! [`crate::ring`]); every rank then sends its chunk to the root. Each rank
//! sends `(P−1)/P·n` bytes in the ring; the root receives another
//! `(P−1)/P·n`. The binomial tree makes the root receive `⌈log₂ P⌉·n`, so
//! this wins for large buffers.
//!
//! # Trace, P = 4, root 0
//!
//! ```text
//! ring: 3 steps, rank r ends with chunk r reduced
//! gather: 1 →c1→ 0, 2 →c2→ 0, 3 →c3→ 0
//! ```

use crate::all_reduce::seg_elems;
use crate::comm::{recv_into, send_elems, Comm};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::ring::{ring, Phases};
use crate::select::RING_SEGMENT_BYTES;
use crate::topo::chunk;

/// Reduce-scatter + gather of `buf` to `root` (`Avg` reduces as Sum).
pub fn reduce_reduce_scatter_gather<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    op: ReduceOp,
    root: usize,
) -> Result<(), C::Error> {
    let p = comm.size();
    let r = comm.rank();
    ring(
        comm,
        buf,
        op,
        Phases::ReduceScatter,
        seg_elems::<T>(RING_SEGMENT_BYTES),
    )?;
    let count = buf.len();
    if r == root {
        for i in (0..p).filter(|&i| i != root) {
            recv_into(comm, i, &mut buf[chunk(count, p, i)])?;
        }
    } else {
        send_elems(comm, root, &buf[chunk(count, p, r)])?;
    }
    Ok(())
}
