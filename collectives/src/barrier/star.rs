//! Star barrier: every worker tells the coordinator (rank 0) it arrived; the
//! coordinator releases them all once everyone has. Two hops, `2(P−1)`
//! messages, all on star edges.
//!
//! A release is 8 bytes: `0` when everyone arrived; otherwise the worker
//! whose arrival the coordinator could not receive (gone, or silent for
//! the deadline). A worker released that way waits on that rank itself,
//! so its barrier ends with its own transport's word on it: at once when
//! the rank is known gone, a timeout naming it otherwise. Without this,
//! one worker's departure would be the coordinator's error alone, and
//! every other worker would wait out its deadline on a coordinator that
//! is alive.

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
        let Some((gone, e)) = missing else {
            for w in 1..p {
                comm.send(w, &ALL_ARRIVED.to_le_bytes())?;
            }
            return Ok(());
        };
        // Best effort: the barrier has failed here whatever these do.
        for w in (1..p).filter(|&w| w != gone) {
            let _ = comm.send(w, &(gone as u64).to_le_bytes());
        }
        return Err(e);
    }
    comm.send(0, &[])?;
    let release = comm.recv(0, 8)?;
    let word = u64::from_le_bytes(release.as_ref().try_into().unwrap_or([0xff; 8]));
    if word == ALL_ARRIVED {
        return Ok(());
    }
    // A rank the coordinator did not hear from; anything else from it is
    // not a release either, so this waits on the coordinator again.
    let suspect = usize::try_from(word)
        .ok()
        .filter(|&w| w < p && w != me)
        .unwrap_or(0);
    // Nobody sends to a worker in a star barrier, so this ends in the
    // suspect's error; a message that came anyway changes nothing.
    loop {
        comm.recv(suspect, 0)?;
    }
}
