//! What the inbox tells without its lock: whether any lane holds a
//! message, whether it is closed, whether any communicator is revoked,
//! whether any peer was ever gone or silent. Every receive and send asks
//! these first; most of the time the answer is "no", and a look at an
//! atomic costs a fraction of a lock taken and given back (two atomic
//! read-modify-writes on a line other threads also write).
//!
//! The state is still the truth: each guard of it stores these words as
//! it lets the lock go ([`Locked`]'s `Drop`), so a reader that saw a
//! delivery (`Inbox::deliveries`, bumped after the lock is let go) sees
//! the lane it filled.

use super::State;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::MutexGuard;

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct Glance {
    /// Lanes that hold a message (an empty lane is removed).
    held: AtomicUsize,
    closed: AtomicBool,
    /// Communicators revoked.
    revoked: AtomicUsize,
    /// Some peer has been gone or silent (set once, never cleared: only
    /// a peerless past lets a sender skip the lock).
    trouble: AtomicBool,
}

impl Glance {
    /// Whether no lane holds a message (as of the last unlock).
    pub(super) fn nothing_held(&self) -> bool {
        self.held.load(Ordering::Acquire) == 0
    }

    pub(super) fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether no communicator is revoked (as of the last unlock).
    pub(super) fn none_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire) == 0
    }

    /// Whether no peer has ever been gone or silent.
    pub(super) fn untroubled(&self) -> bool {
        !self.trouble.load(Ordering::Acquire)
    }

    /// A peer is gone or silent (called under the lock).
    pub(super) fn troubled(&self) {
        self.trouble.store(true, Ordering::Release);
    }

    fn store(&self, st: &State) {
        self.held.store(st.lanes.len(), Ordering::Release);
        self.closed.store(st.closed, Ordering::Release);
        self.revoked.store(st.revoked.len(), Ordering::Release);
    }
}

/// The inbox's state, locked; letting it go updates the [`Glance`].
pub(super) struct Locked<'a> {
    guard: MutexGuard<'a, State>,
    glance: &'a Glance,
}

impl<'a> Locked<'a> {
    pub(super) fn new(guard: MutexGuard<'a, State>, glance: &'a Glance) -> Locked<'a> {
        Locked { guard, glance }
    }
}

impl Deref for Locked<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        &self.guard
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.glance.store(&self.guard);
    }
}
