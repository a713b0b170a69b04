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
//! Read interest comes back when the last poller stops; registering
//! re-checks readiness, so bytes already waiting are reported then and
//! nothing is missed.
//!
//! Write interest is on only while the thread has bytes the socket would
//! not take: a writable socket is almost always writable, and every
//! change of interest would otherwise report it, waking the thread.

use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard, OnceLock};

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
}

#[derive(Debug, Default)]
struct State {
    /// Callers reading the socket themselves now.
    pollers: usize,
    /// The thread waits for room to write.
    writing: bool,
    /// What the socket is registered for now (`None`: not registered).
    current: Option<mio::Interest>,
}

impl State {
    fn wanted(&self) -> Option<mio::Interest> {
        let read = (self.pollers == 0).then_some(mio::Interest::READABLE);
        let write = self.writing.then_some(mio::Interest::WRITABLE);
        match (read, write) {
            (Some(r), Some(w)) => Some(r | w),
            (r, w) => r.or(w),
        }
    }
}

impl Watch {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register `fd` with the I/O thread's `registry` as `token` (for
    /// reading, unless callers are polling it now).
    pub(crate) fn attach(
        &self,
        registry: &mio::Registry,
        token: mio::Token,
        fd: RawFd,
    ) -> std::io::Result<()> {
        let reg = Registration {
            registry: registry.try_clone()?,
            token,
            fd,
        };
        let mut st = self.lock();
        let _ = self.registration.set(reg);
        self.apply(&mut st)
    }

    /// A caller starts reading the socket itself.
    pub(crate) fn begin(&self) {
        let mut st = self.lock();
        st.pollers += 1;
        self.apply_logged(&mut st);
    }

    /// A caller stops reading the socket itself (one `end` per `begin`).
    pub(crate) fn end(&self) {
        let mut st = self.lock();
        st.pollers = st.pollers.saturating_sub(1);
        self.apply_logged(&mut st);
    }

    /// The thread has bytes the socket would not take (`true`), or none.
    pub(crate) fn writing(&self, on: bool) {
        let mut st = self.lock();
        if st.writing != on {
            st.writing = on;
            self.apply_logged(&mut st);
        }
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
