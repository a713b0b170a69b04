//! What the inbox tells without its lock: whether any lane holds a
//! message, whether it is closed, whether any communicator is revoked,
//! whether any peer was ever gone or silent, what each sender is owed. Every receive and send asks
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
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::MutexGuard;

/// See the module docs.
#[derive(Debug)]
pub(super) struct Glance {
    /// Lanes that hold a message (an empty lane is removed).
    held: AtomicUsize,
    closed: AtomicBool,
    /// Communicators revoked.
    revoked: AtomicUsize,
    /// Some peer has been gone or silent (set once, never cleared: only
    /// a peerless past lets a sender skip the lock).
    trouble: AtomicBool,
    /// Per sender: what it is owed, as of the last unlock that changed it.
    owed: Box<[Owed]>,
}

/// A sender's credit as the state last had it.
#[derive(Debug, Default)]
struct Owed {
    bytes: AtomicU64,
    most_on_a_lane: AtomicU32,
    wanted: AtomicBool,
}

impl Glance {
    pub(super) fn new(world: usize) -> Glance {
        Glance {
            held: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            revoked: AtomicUsize::new(0),
            trouble: AtomicBool::new(false),
            owed: (0..world).map(|_| Owed::default()).collect(),
        }
    }

    /// Whether `src` may be owed a credit by the rule of
    /// `Inbox::take_credit` (bytes, any lane's count, or its asking). A
    /// thread sees what its own last unlock stored, so a receive that
    /// made a credit due finds it here.
    pub(super) fn may_owe(&self, src: u32, at_least: u64, depth: u32) -> bool {
        self.owed.get(src as usize).is_none_or(|o| {
            o.bytes.load(Ordering::Acquire) >= at_least
                || o.most_on_a_lane.load(Ordering::Acquire) >= depth / 2
                || o.wanted.load(Ordering::Acquire)
        })
    }

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

    fn store(&self, st: &mut State) {
        // Each sender is listed once (`Peer::owed_listed`): at most the
        // world, whatever the peers send.
        let State {
            owed_changed,
            peers,
            ..
        } = st;
        for src in owed_changed.drain(..) {
            if let (Some(o), Some(p)) = (self.owed.get(src as usize), peers.get_mut(src as usize)) {
                p.owed_listed = false;
                o.bytes.store(p.credit_due, Ordering::Release);
                o.most_on_a_lane.store(p.most_lane_due, Ordering::Release);
                o.wanted.store(p.credit_wanted, Ordering::Release);
            }
        }
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
        self.glance.store(&mut self.guard);
    }
}
