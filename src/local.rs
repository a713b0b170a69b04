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
