//! Star broadcast: through the coordinator (rank 0), segment by segment.
//!
//! # Steps and cost
//!
//! A root other than 0 sends each segment to the coordinator; the
//! coordinator forwards every segment to every rank but the root as soon as
//! it has it. Each worker link carries `n` once (the root's up, the others'
//! down); the coordinator's links carry `(P−1)·n`, as any star must.
//!
//! # Trace, P = 3, root 2
//!
//! ```text
//! 2 →s0→ 0 →s0→ 1;  2 →s1→ 0 →s1→ 1
//! ```

use crate::comm::{recv_into, send_elems, Comm};
use crate::element::Element;
use crate::topo::chunk;

/// Star broadcast of `buf` from `root` in segments of `seg_elems`.
pub fn broadcast_star<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    root: usize,
    seg_elems: usize,
) -> Result<(), C::Error> {
    let (p, r) = (comm.size(), comm.rank());
    if p == 1 {
        return Ok(());
    }
    let n = buf.len();
    let nseg = crate::topo::segment_count(n, seg_elems);
    for j in 0..nseg {
        let s = chunk(n, nseg, j);
        if r == 0 {
            if root != 0 {
                recv_into(comm, root, &mut buf[s.clone()])?;
            }
            for w in (1..p).filter(|&w| w != root) {
                send_elems(comm, w, &buf[s.clone()])?;
            }
        } else if r == root {
            send_elems(comm, 0, &buf[s])?;
        } else {
            recv_into(comm, 0, &mut buf[s])?;
        }
    }
    Ok(())
}
