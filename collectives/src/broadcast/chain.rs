//! Pipelined chain broadcast (Open MPI `bcast_intra_pipeline`).
//!
//! # Steps and cost
//!
//! Ranks form a line starting at the root (relative order). The buffer is
//! cut into `S` segments; each rank receives segment `j` from its
//! predecessor and forwards it at once. Time ≈ `(S + P − 2)·(α + (n/S)β)`,
//! which tends to `nβ` for large `n`: every link, the root's included,
//! carries the buffer exactly once.
//!
//! Before its first segment each rank sends its predecessor an empty
//! message and waits for its successor's: a rank sends nothing of a call
//! before the next in line has entered it. A root calling in a loop then
//! runs at most one call ahead of each hop, and each segment meets a
//! receive that is already waiting, instead of piling up in buffers.
//!
//! # Trace, P = 4, root 0, S = 2
//!
//! ```text
//! t1: 0 →s0→ 1
//! t2: 0 →s1→ 1, 1 →s0→ 2
//! t3: 1 →s1→ 2, 2 →s0→ 3
//! t4: 2 →s1→ 3
//! ```

use crate::comm::{recv_into, send_elems, Comm};
use crate::element::Element;
use crate::topo::{absolute, chunk, relative};

/// Chain broadcast of `buf` from `root` in segments of `seg_elems`.
pub fn broadcast_chain<T: Element, C: Comm>(
    comm: &mut C,
    buf: &mut [T],
    root: usize,
    seg_elems: usize,
) -> Result<(), C::Error> {
    let p = comm.size();
    if p == 1 {
        return Ok(());
    }
    let vr = relative(comm.rank(), root, p);
    let nseg = crate::topo::segment_count(buf.len(), seg_elems);
    let (pred, succ) = (
        (vr > 0).then(|| absolute(vr - 1, root, p)),
        (vr + 1 < p).then(|| absolute(vr + 1, root, p)),
    );
    // Each rank tells its predecessor it has entered this call, and sends
    // nothing before its successor has: a rank calling broadcast in a loop
    // runs at most one call ahead of the next in line, so the segments
    // land in a receive that is already waiting (read into `buf`, no
    // backlog, no fresh buffers) instead of piling up.
    if let Some(pred) = pred {
        comm.send(pred, &[])?;
    }
    if let Some(succ) = succ {
        comm.recv(succ, 0)?;
    }
    for j in 0..nseg {
        let seg = chunk(buf.len(), nseg, j);
        if vr > 0 {
            recv_into(comm, absolute(vr - 1, root, p), &mut buf[seg.clone()])?;
        }
        if vr + 1 < p {
            send_elems(comm, absolute(vr + 1, root, p), &buf[seg])?;
        }
    }
    Ok(())
}
