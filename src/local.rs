//! In-process worlds: every rank a `ProcessGroup` in this process.

use crate::error::{Error, Result};
use crate::group::{ProcessGroup, DEFAULT_TIMEOUT};
use meshwork_collectives::Topology;
use meshwork_transport::mem::MemHub;
use std::sync::Arc;

/// A world of `world` ranks in this process, connected by the in-memory
/// transport; element `r` is rank `r`. Give each to its own thread: like
/// ranks in separate processes, they must issue collectives concurrently.
///
/// ```
/// let world = meshwork::local(2)?;
/// let handles: Vec<_> = world
///     .into_iter()
///     .map(|g| std::thread::spawn(move || {
///         let mut x = [g.rank() as f32 + 1.0; 3];
///         g.all_reduce(&mut x, meshwork::ReduceOp::Sum).map(|()| x)
///     }))
///     .collect();
/// for h in handles {
///     assert_eq!(h.join().unwrap()?, [3.0; 3]);
/// }
/// # Ok::<(), meshwork::Error>(())
/// ```
pub fn local(world: u32) -> Result<Vec<Arc<ProcessGroup>>> {
    if world == 0 {
        return Err(Error::InvalidArgument(
            "local: a world needs at least one rank".into(),
        ));
    }
    Ok(MemHub::world(world)
        .into_iter()
        .map(|t| {
            Arc::new(ProcessGroup::new(
                Arc::new(t),
                0,
                DEFAULT_TIMEOUT,
                Topology::Mesh,
            ))
        })
        .collect())
}

/// An in-process world shaped as `topology`: [`local`] for a mesh;
/// otherwise every rank runs the link core over in-memory links to its
/// neighbours only, and traffic between other ranks is relayed as it
/// would be between processes (`links()` says `Memory` for a neighbour,
/// `Relayed` for the rest). `InvalidArgument` for a shape the world
/// cannot take (an odd degree, a hypercube of 12).
///
/// ```
/// use meshwork::{ReduceOp, Topology};
/// let world = meshwork::local_with(8, Topology::Hypercube)?;
/// let handles: Vec<_> = world
///     .into_iter()
///     .map(|g| std::thread::spawn(move || {
///         let mut x = [g.rank() as u64; 2];
///         g.all_reduce(&mut x, ReduceOp::Sum).map(|()| x)
///     }))
///     .collect();
/// for h in handles {
///     assert_eq!(h.join().unwrap()?, [28; 2]);
/// }
/// # Ok::<(), meshwork::Error>(())
/// ```
pub fn local_with(world: u32, topology: Topology) -> Result<Vec<Arc<ProcessGroup>>> {
    if topology == Topology::Mesh {
        return local(world);
    }
    let ranks = meshwork_transport::pipe_world(world, crate::shape::shape_of(topology))
        .map_err(|e| Error::InvalidArgument(format!("local_with: {e}")))?;
    Ok(ranks
        .into_iter()
        .map(|t| Arc::new(ProcessGroup::new(Arc::new(t), 0, DEFAULT_TIMEOUT, topology)))
        .collect())
}

/// Runs `f` on every rank of a fresh in-process world of `world` ranks,
/// each on its own thread; the results in rank order (the unit tests'
/// way to run a collective scenario).
#[cfg(test)]
pub(crate) fn on_world<R: Send>(world: u32, f: impl Fn(&ProcessGroup) -> R + Sync) -> Vec<R> {
    let groups = local(world).expect("a local world");
    std::thread::scope(|s| {
        let handles: Vec<_> = groups.iter().map(|g| s.spawn(|| f(g))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a rank's thread"))
            .collect()
    })
}
