//! Star barrier: every worker tells the coordinator (rank 0) it arrived; the
//! coordinator releases them all once everyone has. Two hops, `2(P−1)`
//! messages, all on star edges.
//!
//! A release is 8 bytes: `0` when everyone arrived; otherwise a worker
//! that rank 0 could not hear from because it is gone (left or failed). A
//! worker released that way waits on that rank itself, so its barrier ends
//! with its own transport's word on it: at once, the rank being gone.
//! Without this, one worker's departure would be rank 0's error alone, and
//! every other worker would wait out its deadline on a rank 0 that is
//! alive. A worker that is merely silent gets no such release: the others
//! time out on their own deadline, as in any collective, and the
//! transport's notices cover a rank it knows failed.

use crate::comm::Comm;

/// The release that says everyone arrived.
const ALL_ARRIVED: u64 = 0;

/// Star barrier.
pub fn barrier_star<C: Comm>(comm: &mut C) -> Result<(), C::Error> {
    let (p, me) = (comm.size(), comm.rank());
    if me == 0 {
        let mut missing = None;
        for w in 1..p {
            if let Err(e) = comm.recv(w, 0) {
                missing = Some((w, e));
                break;
            }
        }
        let Some((unheard, e)) = missing else {
            // Every worker is released, whichever sends fail.
            let sent: Vec<_> = (1..p)
                .map(|w| comm.send(w, &ALL_ARRIVED.to_le_bytes()))
                .collect();
            return sent.into_iter().collect();
        };
        if comm.is_gone(unheard) {
            // Best effort: the barrier has failed here whatever these do.
            for w in (1..p).filter(|&w| w != unheard) {
                let _ = comm.send(w, &(unheard as u64).to_le_bytes());
            }
        }
        return Err(e);
    }
    comm.send(0, &[])?;
    let release = comm.recv(0, 8)?;
    let word = u64::from_le_bytes(release.as_ref().try_into().unwrap_or([0xff; 8]));
    if word == ALL_ARRIVED {
        return Ok(());
    }
    // A rank gone before it arrived; anything else from rank 0 is not a
    // release either, so this waits on rank 0 again.
    let mut suspect = usize::try_from(word)
        .ok()
        .filter(|&w| w < p && w != me)
        .unwrap_or(0);
    // Nobody sends to a worker in a star barrier, so this ends in the
    // suspect's error (at once if it is gone; a deadline if rank 0 named a
    // rank that is not). A message that came anyway is no release: the
    // wait goes back to rank 0, which sends nothing more in this call.
    loop {
        comm.recv(suspect, 0)?;
        suspect = 0;
    }
}
