//! Byte budgets: what one sender may have queued on a link, or at a
//! receiver (credits). A sender past its budget waits, within the
//! deadline, for the bytes to drain or be credited back.

use crate::TransportError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bytes reserved and not yet released, bounded: a sender past the bound
/// waits (with the deadline) for releases.
#[derive(Debug)]
pub(crate) struct Budget {
    queued: Mutex<usize>,
    drained: Condvar,
    /// Threads waiting on `drained` (counted under `queued`'s lock), so a
    /// release nobody waits for costs no futex call.
    waiting: AtomicUsize,
    max: usize,
}

impl Budget {
    pub(crate) fn new(max: usize) -> Budget {
        Budget {
            queued: Mutex::new(0),
            drained: Condvar::new(),
            waiting: AtomicUsize::new(0),
            max,
        }
    }

    /// Reserve `n` bytes; waits while over budget (one message is always
    /// admitted when nothing is reserved, whatever its size).
    pub(crate) fn acquire(
        &self,
        n: usize,
        timeout: Duration,
        dst: u32,
    ) -> Result<(), TransportError> {
        self.acquire_asking(n, timeout, dst, || {}, || None)
    }

    /// [`acquire`](Self::acquire), calling `ask` (with no lock held)
    /// each time before it waits: a sender of credited bytes asks the
    /// receiver for what it owes. `stop`, asked each time too, ends the
    /// wait with its error (the call's communicator was revoked; whoever
    /// revokes it wakes the wait: [`wake`](Self::wake)).
    pub(crate) fn acquire_asking(
        &self,
        n: usize,
        timeout: Duration,
        dst: u32,
        ask: impl Fn(),
        stop: impl Fn() -> Option<TransportError>,
    ) -> Result<(), TransportError> {
        let deadline = Instant::now() + timeout;
        let lock = || self.queued.lock().unwrap_or_else(|e| e.into_inner());
        let fits = |q: usize| self.fits(q, n);
        let mut q = lock();
        while !fits(*q) {
            let now = Instant::now();
            if now >= deadline {
                return Err(TransportError::Timeout { waiting_on: dst });
            }
            if let Some(e) = stop() {
                return Err(e);
            }
            drop(q);
            ask();
            q = lock();
            if fits(*q) {
                break;
            }
            self.waiting.fetch_add(1, Ordering::SeqCst);
            q = self
                .drained
                .wait_timeout(q, deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|e| e.into_inner())
                .0;
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        *q = q.saturating_add(n);
        Ok(())
    }

    /// Reserve `n` bytes if they fit now (as [`acquire`](Self::acquire)
    /// would admit them); never waits.
    pub(crate) fn try_acquire(&self, n: usize) -> bool {
        let mut q = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        let fits = self.fits(*q, n);
        if fits {
            *q = q.saturating_add(n);
        }
        fits
    }

    /// Whether `n` more bytes are admitted with `q` reserved: one message
    /// always is when nothing is.
    fn fits(&self, q: usize, n: usize) -> bool {
        q == 0 || q.saturating_add(n) <= self.max
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Wake every waiting sender to look at its `stop` again.
    pub(crate) fn wake(&self) {
        let _q = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.drained.notify_all();
        }
    }

    /// Bytes reserved now.
    #[cfg(test)]
    pub(crate) fn reserved(&self) -> usize {
        *self.queued.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Nothing reserved any more: what was reserved for a link that
    /// ended will never be released (a fleet's peer back on a new link).
    pub(crate) fn reset(&self) {
        *self.queued.lock().unwrap_or_else(|e| e.into_inner()) = 0;
        self.wake();
    }

    /// Give back `n` bytes (more than reserved clamps at zero).
    pub(crate) fn release(&self, n: usize) {
        let mut q = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        *q = q.saturating_sub(n);
        drop(q);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.drained.notify_all();
        }
    }
}

/// Heartbeat period for a liveness of `liveness`: four beats in it, so
/// that one or two lost or late beats are not a silence.
pub(crate) fn heartbeat_interval(liveness: Duration) -> Duration {
    (liveness / 4).clamp(Duration::from_millis(5), Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_budget_admits_one_message_of_any_size() {
        let b = Budget::new(10);
        b.acquire(100, Duration::ZERO, 1).unwrap();
        assert_eq!(b.reserved(), 100);
        assert_eq!(
            b.acquire(1, Duration::from_millis(1), 1),
            Err(TransportError::Timeout { waiting_on: 1 })
        );
        b.release(100);
        b.acquire(6, Duration::ZERO, 1).unwrap();
        b.acquire(4, Duration::ZERO, 1).unwrap();
        assert!(b.acquire(1, Duration::ZERO, 1).is_err());
        b.release(1000);
        assert_eq!(b.reserved(), 0, "over-release clamps");
    }

    /// Credit for more than was ever reserved (a member's forged credit)
    /// returns what was reserved and no more: room never exceeds the
    /// budget's maximum.
    #[test]
    fn an_over_release_never_raises_room_above_the_maximum() {
        let b = Budget::new(10);
        assert!(b.try_acquire(4));
        b.release(usize::MAX);
        b.release(1 << 40);
        assert_eq!(b.reserved(), 0);
        assert!(b.try_acquire(10));
        assert!(!b.try_acquire(1), "no more than the maximum");
    }

    #[test]
    fn a_waiting_sender_goes_on_when_bytes_are_released() {
        let b = std::sync::Arc::new(Budget::new(10));
        b.acquire(10, Duration::ZERO, 3).unwrap();
        let b2 = std::sync::Arc::clone(&b);
        let waiter = std::thread::spawn(move || b2.acquire(5, Duration::from_secs(30), 3));
        // Released while (or before) the waiter waits: either way it goes on.
        b.release(10);
        waiter.join().unwrap().unwrap();
        assert_eq!(b.reserved(), 5);
    }

    #[test]
    fn a_waiting_sender_asks_before_it_waits() {
        let b = std::sync::Arc::new(Budget::new(10));
        b.acquire(10, Duration::ZERO, 3).unwrap();
        let (asked_tx, asked) = std::sync::mpsc::channel();
        let b2 = std::sync::Arc::clone(&b);
        let waiter = std::thread::spawn(move || {
            b2.acquire_asking(
                5,
                Duration::from_secs(30),
                3,
                || {
                    let _ = asked_tx.send(());
                },
                || None,
            )
        });
        asked.recv().unwrap();
        b.release(10);
        waiter.join().unwrap().unwrap();
        assert_eq!(b.reserved(), 5);
        // Room at once: nobody is asked.
        b.acquire_asking(5, Duration::ZERO, 3, || panic!("asked"), || None)
            .unwrap();
    }
}
