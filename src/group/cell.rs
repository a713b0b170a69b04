//! The cell a `ProcessGroup` reads its current communicator from, which
//! a shrink after a failure replaces in place.

use super::GroupInner;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};

/// What a `ProcessGroup` holds: its current communicator, which
/// `Recovery::Shrink` replaces in place with the survivors'.
///
/// Every call reads the current communicator, so reading it takes no lock
/// and no reference count: `current` points at the last of `held`, and
/// `held` keeps every communicator the cell ever had until the cell
/// drops (a call may still be running on an earlier one, through a plain
/// reference). It grows by one per replacement: a shrink after a failure,
/// or, under `Recovery::Shrink`, a revocation that found none. Each is a
/// few hundred bytes beside what the communicator shares with the next
/// (its transport, its links).
pub(crate) struct Cell {
    current: AtomicPtr<GroupInner>,
    held: Mutex<Vec<Arc<GroupInner>>>,
    /// Held by the thread that shrinks the group after a failure.
    pub(super) recovering: Mutex<()>,
}

impl Cell {
    pub(super) fn new(inner: Arc<GroupInner>) -> Cell {
        Cell {
            current: AtomicPtr::new(Arc::as_ptr(&inner).cast_mut()),
            held: Mutex::new(vec![inner]),
            recovering: Mutex::new(()),
        }
    }

    /// The current communicator.
    #[inline]
    pub(crate) fn now(&self) -> &GroupInner {
        // SAFETY: `current` always points at a communicator that an `Arc`
        // in `held` owns, and `held` only grows until `self` drops.
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// The current communicator, for a caller that keeps it.
    pub(crate) fn current(&self) -> Arc<GroupInner> {
        let ptr = self.current.load(Ordering::Acquire).cast_const();
        // SAFETY: as in `now`: an `Arc` in `held` owns `ptr` for as long
        // as `self` lives, so its count is above zero and may be raised.
        unsafe {
            Arc::increment_strong_count(ptr);
            Arc::from_raw(ptr)
        }
    }

    pub(super) fn replace(&self, inner: Arc<GroupInner>) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let ptr = Arc::as_ptr(&inner).cast_mut();
        held.push(inner);
        self.current.store(ptr, Ordering::Release);
    }
}
