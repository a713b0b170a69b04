//! Star barrier: every worker tells the coordinator (rank 0) it arrived; the
//! coordinator releases them all once everyone has. Two hops, `2(P−1)`
//! messages, all on star edges.

use crate::comm::Comm;

/// Star barrier.
pub fn barrier_star<C: Comm>(comm: &mut C) -> Result<(), C::Error> {
    let p = comm.size();
    if comm.rank() == 0 {
        for w in 1..p {
            comm.recv(w, 0)?;
        }
        for w in 1..p {
            comm.send(w, &[])?;
        }
        Ok(())
    } else {
        comm.send(0, &[])?;
        comm.recv(0, 0).map(|_| ())
    }
}
