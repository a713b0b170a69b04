//! Who keeps a rank's links open: every group over them.
//!
//! A group made from another (`split`, `shrink`, a view of a view) talks
//! over its parent's transport. The natural recovery line
//!
//! ```text
//! g = g.shrink()?;          // the old group is dropped here
//! ```
//!
//! drops the parent while its child is in use, so the links cannot belong
//! to the parent: they belong to every group made over them, counted
//! here, and close when the last of those groups is shut down or dropped
//! (as `MPI_Comm_free` of a parent leaves its children working, and the
//! job ends at `MPI_Finalize`).

use meshwork_transport::Transport;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// One rank's transport (the links, not a view of them), and how many
/// groups over it are still in use.
pub(crate) struct Links {
    transport: Arc<dyn Transport>,
    groups: AtomicUsize,
}

impl Links {
    /// The links under a new world group, held by it.
    pub(crate) fn new(transport: Arc<dyn Transport>) -> Arc<Links> {
        Arc::new(Links {
            transport,
            groups: AtomicUsize::new(1),
        })
    }

    /// One more group over these links (a group made from a group that
    /// holds them, so the count is above zero).
    pub(crate) fn hold(self: &Arc<Self>) -> Arc<Links> {
        self.groups.fetch_add(1, Ordering::AcqRel);
        Arc::clone(self)
    }

    /// A group over these links is done; the last one closes them
    /// (flushing what is queued; peers see this rank leave).
    pub(crate) fn release(&self) {
        if self.groups.fetch_sub(1, Ordering::AcqRel) == 1 {
            tracing::debug!("the last group over this rank's links is done; closing them");
            self.transport.close();
        }
    }

    /// Groups still in use over these links.
    pub(crate) fn groups(&self) -> usize {
        self.groups.load(Ordering::Acquire)
    }
}

impl fmt::Debug for Links {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Links")
            .field("groups", &self.groups())
            .finish()
    }
}

/// Lets go of the links it holds when dropped (work done behind a drop,
/// which must release them even if it never runs).
pub(crate) struct Release(pub(crate) Arc<Links>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.release();
    }
}
