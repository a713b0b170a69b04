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
//! Read interest stays off for a quiet period after the last poller
//! stops: [`QUIET_MIN`] at first, doubling up to [`QUIET_MAX`] while
//! callers keep coming back within one (or within `QUIET_MAX` of the last
//! one's end); `QUIET_MAX` at once after a wait for a large message. A
//! rank in a loop of collectives reads each of its links again within
//! microseconds; turning interest back on and off around
//! every receive cost two `epoll_ctl` calls, and woke the thread for every
//! message that came on a link nobody was reading at that instant (the
//! next round's, the next call's). Meanwhile what arrives waits in the
//! socket for the next caller. Interest comes back on at once when a
//! thread parks waiting for what only the I/O thread would read (a receive
//! past its polling window, an RPC response, a sender waiting for credit,
//! a wait on every link; not the RPC server's standing wait, see
//! [`Watch::park`]), or when the process has answered requests where they
//! are read (RPC and one-sided operations come in runs: the thread must
//! see them as they come); otherwise when the thread, which looks at the
//! end of the quiet period, finds it over. Registering re-checks
//! readiness, so bytes already waiting are reported then and nothing is
//! missed. So what nobody waits for is read at most `QUIET_MAX` late —
//! heartbeats, failure notices, credits a sender is not yet waiting for —
//! far inside every deadline; and a link's thread is woken once per quiet
//! period, not once per message.
//!
//! Write interest is on only while the thread has bytes the socket would
//! not take: a writable socket is almost always writable, and every
//! change of interest would otherwise report it, waking the thread.

use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The first quiet period after a caller stops polling (see the module
/// docs).
pub(crate) const QUIET_MIN: Duration = Duration::from_millis(1);
/// The longest: periods double while callers keep coming back within them.
pub(crate) const QUIET_MAX: Duration = Duration::from_millis(8);

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
    /// Wakes the I/O thread when a quiet period begins: it may be asleep
    /// for as long as a heartbeat's interval, and must look when the
    /// period ends.
    waker: Arc<mio::Waker>,
}

#[derive(Debug, Default)]
struct State {
    /// Callers reading the socket themselves now.
    pollers: usize,
    /// Threads parked on what the I/O thread reads from the socket.
    parked: usize,
    /// The quiet period under way, if any (the thread looks at its end).
    quiet: Option<Quiet>,
    /// When the last one ended, and its length.
    last: Option<(Instant, Duration)>,
    /// Requests answered in this process when last looked at.
    answered: u64,
    /// The thread waits for room to write.
    writing: bool,
    /// What the socket is registered for now (`None`: not registered).
    current: Option<mio::Interest>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Quiet {
    /// It ends then, unless a caller polls again before.
    until: Instant,
    /// Its length from a caller's stop.
    len: Duration,
    /// A caller stopped since the thread last looked.
    extended: bool,
}

impl State {
    fn wanted(&self) -> Option<mio::Interest> {
        let quiet = self.pollers > 0 || (self.parked == 0 && self.quiet.is_some());
        let read = (!quiet).then_some(mio::Interest::READABLE);
        let write = self.writing.then_some(mio::Interest::WRITABLE);
        match (read, write) {
            (Some(r), Some(w)) => Some(r | w),
            (r, w) => r.or(w),
        }
    }

    /// A caller starts polling at `now` (`bulk`: for a large message, see
    /// [`Watch::end`]); whether a quiet period began (the thread must be
    /// woken to look at its end).
    fn begin(&mut self, now: Instant, bulk: bool) -> bool {
        self.pollers += 1;
        if self.quiet.is_some() || bulk {
            return false;
        }
        // A caller back soon after the last period ended: a longer one
        // (a link read once per call of a slow loop).
        let len = match self.last {
            Some((ended, len)) if now.saturating_duration_since(ended) < QUIET_MAX => {
                (len * 2).min(QUIET_MAX)
            }
            _ => QUIET_MIN,
        };
        self.quiet = Some(Quiet {
            until: now + len,
            len,
            extended: false,
        });
        true
    }

    /// Whether requests were answered since last looked at (`answered`:
    /// so far in the process); remembers the count.
    fn answered_since(&mut self, answered: u64) -> bool {
        std::mem::replace(&mut self.answered, answered) != answered
    }

    /// A caller stops polling at `now`, `answered` requests answered in
    /// the process so far (when that moved, the quiet period ends now;
    /// after a `bulk` wait, the longest one begins). Whether a period
    /// began (the thread must be woken to look at its end).
    fn end(&mut self, now: Instant, answered: u64, bulk: bool) -> bool {
        self.pollers = self.pollers.saturating_sub(1);
        if self.answered_since(answered) {
            self.quiet = None;
        } else if bulk {
            // The longest period at once: a caller in a loop of large
            // receives is back within it (even descheduled for a time
            // slice on a busy host) and reads the next one straight into
            // its buffers; one that works on what came for longer leaves
            // the stream to the thread after it, which the socket's
            // buffer absorbs off loopback (8 ms at 1 Gbit/s: 1 MB).
            let began = self.quiet.is_none();
            self.quiet = Some(Quiet {
                until: now + QUIET_MAX,
                len: QUIET_MAX,
                extended: false,
            });
            return began;
        } else if let Some(q) = &mut self.quiet {
            q.until = now + q.len;
            q.extended = true;
        }
        false
    }

    /// The thread looks at `now`: the quiet period ends if it is over (or
    /// requests were answered since); how long until it must look again.
    fn settle(&mut self, now: Instant, answered: u64) -> Option<Duration> {
        if self.answered_since(answered) {
            self.quiet = None;
        }
        let q = self.quiet.as_mut()?;
        if self.pollers > 0 {
            return Some(q.len);
        }
        if now >= q.until {
            self.last = Some((now, q.len));
            self.quiet = None;
            return None;
        }
        if std::mem::take(&mut q.extended) {
            // Callers keep coming back: look less often.
            q.len = (q.len * 2).min(QUIET_MAX);
        }
        Some(q.until - now)
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
        self.apply(&mut st)
    }

    /// A caller starts reading the socket itself (`bulk`: as in
    /// [`Watch::end`]).
    pub(crate) fn begin(&self, bulk: bool) {
        let mut st = self.lock();
        let began = st.begin(Instant::now(), bulk);
        self.apply_logged(&mut st);
        if began {
            self.wake();
        }
    }

    /// Wake the thread to look at a quiet period that began.
    fn wake(&self) {
        if let Some(r) = self.registration.get() {
            if let Err(e) = r.waker.wake() {
                tracing::warn!("cannot wake a link's thread: {e}");
            }
        }
    }

    /// A caller stops reading the socket itself (one `end` per `begin`);
    /// `answered`: requests answered in this process so far; `bulk`: it
    /// waited for a large message, part of a stream the thread must keep
    /// reading (no quiet period follows).
    pub(crate) fn end(&self, answered: u64, bulk: bool) {
        let mut st = self.lock();
        let began = st.end(Instant::now(), answered, bulk);
        self.apply_logged(&mut st);
        if began {
            self.wake();
        }
    }

    /// A thread parks (`on`) until the I/O thread reads what it waits
    /// for, or is done waiting. Parking, returns whether read interest was
    /// off: the parking thread then reads what came meanwhile itself, at
    /// once. Not for the RPC server's standing wait for requests
    /// (`Link::want_standing`): it would keep every link out of quiet
    /// periods for the group's life, and requests reach it within one
    /// anyway — at once when a caller reads the link, and with no quiet
    /// periods once the process is answering them.
    pub(crate) fn park(&self, on: bool) -> bool {
        let mut st = self.lock();
        if on {
            st.parked += 1;
        } else {
            st.parked = st.parked.saturating_sub(1);
        }
        let was = st.current;
        self.apply_logged(&mut st);
        on && !reads(was)
    }

    /// The thread has bytes the socket would not take (`true`), or none.
    pub(crate) fn writing(&self, on: bool) {
        let mut st = self.lock();
        if st.writing != on {
            st.writing = on;
            self.apply_logged(&mut st);
        }
    }

    /// The I/O thread's turn (`answered`: requests answered in this
    /// process so far): read interest back on if the quiet period is over;
    /// how long until the thread must look again, if it is not.
    pub(crate) fn settle(&self, answered: u64) -> Option<Duration> {
        let mut st = self.lock();
        let due = st.settle(Instant::now(), answered);
        self.apply_logged(&mut st);
        due
    }

    fn apply_logged(&self, st: &mut State) {
        if let Err(e) = self.apply(st) {
            // Left as it was: a wake-up too many, or one too few until a
            // caller or the thread's next turn changes it again — the
            // link's silence check bounds how long that can last.
            tracing::warn!("cannot change what a link's thread is woken for: {e}");
        }
    }

    /// Register the socket for what `st` wants, if that changed. Before
    /// the thread registered it there is nothing to change (`attach`
    /// looks at the state then).
    fn apply(&self, st: &mut State) -> std::io::Result<()> {
        let Some(r) = self.registration.get() else {
            return Ok(());
        };
        let wanted = st.wanted();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(st: &State) -> bool {
        reads(st.wanted())
    }

    #[test]
    fn a_quiet_period_follows_the_last_poller_and_ends_when_the_thread_finds_it_over() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut st = State::default();
        assert!(reading(&st));
        assert!(
            st.begin(t0, false),
            "the first poll begins a period: wake the thread"
        );
        assert!(!reading(&st));
        assert!(!st.begin(t0, false), "a second poller begins nothing");
        assert_eq!(
            st.settle(t0, 0),
            Some(QUIET_MIN),
            "pollers: look again later"
        );
        st.end(t0, 0, false);
        st.end(t0 + ms(1) / 2, 0, false);
        assert!(!reading(&st), "stays off after the last poller");
        let due = st.settle(t0 + ms(1), 0).expect("not over yet");
        assert_eq!(due, QUIET_MIN / 2);
        assert_eq!(
            st.settle(t0 + ms(2), 0),
            None,
            "over: the thread reads again"
        );
        assert!(reading(&st));
        assert!(
            st.begin(t0 + ms(3), false),
            "a new period wakes the thread again"
        );
    }

    #[test]
    fn periods_double_while_callers_come_back_up_to_the_longest() {
        let t0 = Instant::now();
        let mut st = State::default();
        let mut now = t0;
        st.begin(now, false);
        let mut lens = Vec::new();
        for _ in 0..8 {
            st.end(now, 0, false);
            // The thread looks just before the end, finds it extended.
            let due = st.settle(now, 0).expect("quiet");
            lens.push(due);
            now += due / 2;
            st.begin(now, false);
        }
        assert_eq!(lens[0], QUIET_MIN);
        assert!(lens.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*lens.last().unwrap(), QUIET_MAX);
    }

    #[test]
    fn a_caller_back_soon_after_a_period_ended_begins_a_longer_one() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut st = State::default();
        // A caller polls briefly every 3 ms; the thread looks when due.
        let mut look: Option<Instant> = None;
        let mut began = Vec::new();
        for k in 0..12 {
            let poll = t0 + ms(3) * k;
            while let Some(t) = look.filter(|&t| t <= poll) {
                look = st.settle(t, 0).map(|due| t + due);
            }
            if st.begin(poll, false) {
                began.push(k);
            }
            st.end(poll, 0, false);
            // Woken for a new period, or looking already.
            look = look.or_else(|| st.settle(poll, 0).map(|due| poll + due));
        }
        assert_eq!(
            began,
            [0, 1],
            "a 1 ms period, then longer ones that cover the gaps"
        );
        assert!(!reading(&st));
        // After a long idle, a fresh period is the shortest again.
        let idle = t0 + ms(3) * 12 + QUIET_MAX * 3;
        while let Some(t) = look {
            look = st.settle(t, 0).map(|due| t + due);
        }
        assert!(reading(&st));
        assert!(st.begin(idle, false));
        assert_eq!(st.quiet.map(|q| q.len), Some(QUIET_MIN));
    }

    #[test]
    fn a_parked_thread_or_an_answered_request_turns_reading_back_on() {
        let t0 = Instant::now();
        let mut st = State::default();
        st.begin(t0, false);
        st.end(t0, 0, false);
        assert!(!reading(&st));
        st.parked += 1;
        assert!(reading(&st), "a parked thread needs the I/O thread");
        st.parked -= 1;
        assert!(!reading(&st));
        st.begin(t0, false);
        st.end(t0, 1, false);
        assert!(reading(&st), "requests were answered: no quiet period");
        st.begin(t0, false);
        st.end(t0, 1, false);
        assert!(!reading(&st));
        assert_eq!(st.settle(t0, 2), None);
        assert!(reading(&st));
    }

    #[test]
    fn a_wait_for_a_large_message_leaves_the_longest_quiet_period() {
        let t0 = Instant::now();
        let mut st = State::default();
        assert!(
            !st.begin(t0, true),
            "no period while polled: nothing for the thread to look at"
        );
        assert!(!reading(&st), "off while polled");
        assert!(st.end(t0, 0, true), "a period began: wake the thread");
        assert!(!reading(&st), "off: the caller's next receive comes");
        assert_eq!(st.settle(t0, 0), Some(QUIET_MAX));
        // Back within it: the next bulk wait restarts it, and the thread
        // already has one to look at.
        st.begin(t0 + QUIET_MIN, true);
        assert!(!st.end(t0 + QUIET_MIN, 0, true));
        assert!(st.settle(t0 + QUIET_MAX, 0).is_some());
        // Not back: the thread reads the stream at its end.
        assert_eq!(st.settle(t0 + QUIET_MIN + QUIET_MAX, 0), None);
        assert!(reading(&st));
        // After a small wait's doubled period too, a bulk wait's is the
        // longest, and an answered request still ends it at once.
        st.begin(t0, false);
        st.end(t0, 0, false);
        st.begin(t0, true);
        st.end(t0, 0, true);
        assert_eq!(st.settle(t0, 0), Some(QUIET_MAX));
        st.begin(t0, true);
        st.end(t0, 1, true);
        assert!(reading(&st));
    }

    #[test]
    fn writing_interest_is_kept_through_quiet_periods() {
        let t0 = Instant::now();
        let mut st = State {
            writing: true,
            ..State::default()
        };
        st.begin(t0, false);
        assert_eq!(st.wanted(), Some(mio::Interest::WRITABLE));
        st.end(t0, 0, false);
        assert_eq!(st.wanted(), Some(mio::Interest::WRITABLE));
        st.settle(t0 + QUIET_MAX, 0);
        assert_eq!(
            st.wanted(),
            Some(mio::Interest::READABLE | mio::Interest::WRITABLE)
        );
    }
}
