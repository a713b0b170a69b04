//! What a link's I/O thread is woken for on one socket.
//!
//! Bytes that arrive are read by the link's I/O thread, which mio wakes,
//! or by application threads that read the socket themselves while they
//! wait for a message (caller-driven progress). While any caller polls
//! the socket, the thread's read interest in it is off, so a message that
//! a caller is about to read does not also wake the thread. On a busy
//! machine that wake-up is a context switch in and out, which costs
//! several times what a small message does (measured: about one switch
//! per message on a 2-process ping-pong, most of the 8-byte latency).
//!
//! Read interest stays off for [`QUIET`] after the last poller stops: a
//! rank in a loop of collectives reads each of its links again within
//! microseconds, and turning interest back on and off around every
//! receive cost two `epoll_ctl` calls each, and woke the thread for every
//! message that came on a link nobody was reading at that instant (the
//! next round's, the next call's). Meanwhile what arrives waits in the
//! socket for the next caller. It comes back on at once when a thread
//! parks waiting for what only the I/O thread would read (a receive past
//! its polling window, a sender waiting for credit, a wait on every
//! link), when the process answers requests where they are read (one-sided
//! operations: the thread must see them at once), and otherwise when the
//! thread, which wakes at the end of the quiet period, finds it over.
//! Registering re-checks readiness, so bytes already waiting are reported
//! then and nothing is missed. So what nobody waits for is read at most
//! `QUIET` late — heartbeats, failure notices, credits a sender is not
//! yet waiting for — far inside every deadline.
//!
//! Write interest is on only while the thread has bytes the socket would
//! not take: a writable socket is almost always writable, and every
//! change of interest would otherwise report it, waking the thread.

use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How long read interest stays off after the last caller stopped
/// polling (see the module docs).
pub(crate) const QUIET: Duration = Duration::from_millis(1);

/// See the module docs. One per watched socket.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    registration: OnceLock<Registration>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct Registration {
    registry: mio::Registry,
    token: mio::Token,
    fd: RawFd,
    /// Wakes the I/O thread: read interest went off, and the thread may
    /// be asleep for as long as a heartbeat's interval; it must look again
    /// when the quiet period ends.
    waker: Arc<mio::Waker>,
}

#[derive(Debug, Default)]
struct State {
    /// Callers reading the socket themselves now.
    pollers: usize,
    /// Threads parked on what the I/O thread reads from the socket.
    parked: usize,
    /// After the last poller stopped: read interest stays off until then
    /// (unless a thread parks).
    quiet_until: Option<Instant>,
    /// The thread's last turn found a quiet period: it looks again within
    /// [`QUIET`] (else it may sleep a heartbeat's interval).
    looking: bool,
    /// Requests answered in this process when last looked at (see
    /// [`Watch::end`]).
    answered: u64,
    /// The thread waits for room to write.
    writing: bool,
    /// What the socket is registered for now (`None`: not registered).
    current: Option<mio::Interest>,
}

impl State {
    /// Whether the thread need not be woken by bytes that arrive, at `now`.
    fn quiet(&self, now: Instant) -> bool {
        self.pollers > 0 || (self.parked == 0 && self.quiet_until.is_some_and(|t| now < t))
    }

    fn wanted(&self, now: Instant) -> Option<mio::Interest> {
        let read = (!self.quiet(now)).then_some(mio::Interest::READABLE);
        let write = self.writing.then_some(mio::Interest::WRITABLE);
        match (read, write) {
            (Some(r), Some(w)) => Some(r | w),
            (r, w) => r.or(w),
        }
    }
}

fn reads(i: Option<mio::Interest>) -> bool {
    i.is_some_and(|i| i.is_readable())
}

impl Watch {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register `fd` with the I/O thread's `registry` as `token` (for
    /// reading, unless callers are polling it now); `waker` wakes that
    /// thread.
    pub(crate) fn attach(
        &self,
        registry: &mio::Registry,
        token: mio::Token,
        fd: RawFd,
        waker: Arc<mio::Waker>,
    ) -> std::io::Result<()> {
        let reg = Registration {
            registry: registry.try_clone()?,
            token,
            fd,
            waker,
        };
        let mut st = self.lock();
        let _ = self.registration.set(reg);
        self.apply(&mut st, Instant::now())
    }

    /// A caller starts reading the socket itself.
    pub(crate) fn begin(&self) {
        let mut st = self.lock();
        st.pollers += 1;
        let was = st.current;
        self.apply_logged(&mut st, Instant::now());
        if reads(was) && !reads(st.current) && !st.looking {
            // The thread may sleep long: it must wake when the quiet
            // period ends to turn reading back on.
            st.looking = true;
            if let Some(r) = self.registration.get() {
                if let Err(e) = r.waker.wake() {
                    tracing::warn!("cannot wake a link's thread: {e}");
                }
            }
        }
    }

    /// A caller stops reading the socket itself (one `end` per `begin`).
    /// `answered`: requests answered in this process so far — when that
    /// moved since last looked at, read interest comes back now, not after
    /// [`QUIET`] (requests come in runs, and the thread answers them as
    /// they are read).
    pub(crate) fn end(&self, answered: u64) {
        let mut st = self.lock();
        st.pollers = st.pollers.saturating_sub(1);
        let now = Instant::now();
        if std::mem::replace(&mut st.answered, answered) != answered {
            st.quiet_until = None;
            self.apply_logged(&mut st, now);
        } else {
            // Nothing to change now: interest is off while polled.
            st.quiet_until = Some(now + QUIET);
        }
    }

    /// A thread parks (`on`) until the I/O thread reads what it waits
    /// for, or is done waiting. Parking, returns whether read interest was
    /// off (the parking thread reads what came meanwhile itself: a socket
    /// registered again reports only what arrives after, on some systems).
    pub(crate) fn park(&self, on: bool) -> bool {
        let mut st = self.lock();
        if on {
            st.parked += 1;
            let was = st.current;
            self.apply_logged(&mut st, Instant::now());
            !reads(was)
        } else {
            // Left as it is: the thread settles it on its next turn.
            st.parked = st.parked.saturating_sub(1);
            false
        }
    }

    /// The thread has bytes the socket would not take (`true`), or none.
    pub(crate) fn writing(&self, on: bool) {
        let mut st = self.lock();
        if st.writing != on {
            st.writing = on;
            self.apply_logged(&mut st, Instant::now());
        }
    }

    /// The I/O thread's turn: read interest back on if the quiet period
    /// is over (or requests were answered since last looked at, as in
    /// [`Watch::end`]); how long until the thread must look again, if it
    /// is not over.
    pub(crate) fn settle(&self, answered: u64) -> Option<Duration> {
        let mut st = self.lock();
        let now = Instant::now();
        if std::mem::replace(&mut st.answered, answered) != answered {
            st.quiet_until = None;
        }
        self.apply_logged(&mut st, now);
        let due = if st.pollers > 0 {
            Some(QUIET)
        } else {
            match st.quiet_until {
                Some(t) if now < t && st.parked == 0 => Some(t - now),
                _ => {
                    st.quiet_until = None;
                    None
                }
            }
        };
        st.looking = due.is_some();
        due
    }

    fn apply_logged(&self, st: &mut State, now: Instant) {
        if let Err(e) = self.apply(st, now) {
            // Left as it was: a wake-up too many, or one too few until a
            // caller or the thread's next turn changes it again — the
            // link's silence check bounds how long that can last.
            tracing::warn!("cannot change what a link's thread is woken for: {e}");
        }
    }

    /// Register the socket for what `st` wants at `now`, if that changed.
    /// Before the thread registered it there is nothing to change
    /// (`attach` looks at the state then).
    fn apply(&self, st: &mut State, now: Instant) -> std::io::Result<()> {
        let Some(r) = self.registration.get() else {
            return Ok(());
        };
        let wanted = st.wanted(now);
        if wanted == st.current {
            return Ok(());
        }
        let mut fd = mio::unix::SourceFd(&r.fd);
        match (st.current, wanted) {
            (None, Some(i)) => r.registry.register(&mut fd, r.token, i)?,
            (Some(_), Some(i)) => r.registry.reregister(&mut fd, r.token, i)?,
            (Some(_), None) => r.registry.deregister(&mut fd)?,
            (None, None) => {}
        }
        st.current = wanted;
        Ok(())
    }
}
