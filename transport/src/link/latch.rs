//! A latch: set once by a link's I/O thread ("the goodbye is written",
//! "the connection is done with"), waited on by the thread that closes
//! the link, always with a deadline.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub(crate) struct Latch {
    set: Mutex<bool>,
    changed: Condvar,
}

impl Latch {
    /// Set it, waking every waiter.
    pub(crate) fn set(&self) {
        *self.set.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.changed.notify_all();
    }

    /// Whether it is set.
    #[cfg(test)]
    pub(crate) fn is_set(&self) -> bool {
        *self.set.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait until it is set or `deadline()` passes; `deadline` is asked
    /// again at least every 50 ms (it may move). Whether it was set.
    pub(crate) fn wait(&self, deadline: impl Fn() -> Instant) -> bool {
        loop {
            // Asked with no lock of ours held: it may take others.
            let until = deadline();
            let set = self.set.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            if *set || now >= until {
                return *set;
            }
            let nap = (until - now).min(Duration::from_millis(50));
            let (set, _) = self
                .changed
                .wait_timeout(set, nap)
                .unwrap_or_else(|e| e.into_inner());
            if *set {
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_waiter_sees_the_latch_set_or_its_deadline() {
        let latch = Arc::new(Latch::default());
        let end = Instant::now() + Duration::from_millis(20);
        assert!(!latch.wait(|| end), "not set: the deadline ends the wait");
        assert!(Instant::now() >= end);
        let l2 = Arc::clone(&latch);
        let setter = std::thread::spawn(move || l2.set());
        let far = Instant::now() + Duration::from_secs(30);
        assert!(latch.wait(|| far));
        setter.join().unwrap();
    }
}
