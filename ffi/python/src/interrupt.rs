//! Ctrl-C while a call blocks.
//!
//! Python runs signal handlers on its main thread, between bytecodes: a
//! call that blocks in Rust with the GIL released would see Ctrl-C only
//! when it returns, at the latest at its deadline (60 s by default). So
//! a call made on the main thread while SIGINT's handler is Python's own
//! (the one that raises `KeyboardInterrupt`) is watched:
//!
//! - A call on a group ([`revocable`]: collectives, point-to-point,
//!   one-sided, `split`, `rpc`) runs on the calling thread as before.
//!   SIGINT's C-level handler is a small one of ours in front of
//!   Python's: it writes a byte to a socket and passes the signal on, so
//!   Python sees it as ever. A watcher thread reading that socket
//!   revokes the group the main thread blocks in (`ProcessGroup.revoke()`):
//!   the call, and every other member's pending and later calls on the
//!   group, fail at once; back on the main thread Python's handler runs
//!   and the call raises `KeyboardInterrupt`. Nothing crosses threads on
//!   the way: a watched call costs one `sigaction` query (to see that
//!   ours is still in front) and two uncontended locks.
//! - A call that revocation does not end ([`abandonable`]: forming a
//!   group, `agree`, `shrink`, `grow`, `shutdown`), which owns all it
//!   uses, runs on a thread of its own while the caller runs Python's
//!   handlers every [`SLICE`]; an exception from one is raised at once,
//!   and the call runs on to its end or deadline, its result dropped.
//!
//! Ours is put in front of Python's handler by the first call on the
//! main thread, and again whenever `signal.signal` has replaced it
//! since; it stays there between calls, where it only passes the signal
//! on. Not watched:
//! calls on other threads (Python never interrupts them), and calls
//! while SIGINT's handler is the program's own (it may not mean to stop
//! the call: it runs when the call returns) or not Python's at all
//! (ignored, default).

use crate::errors::to_py;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use std::io::Read;
use std::os::raw::{c_int, c_ulong};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How often a caller waiting for an [`abandonable`] call (or a
/// `Work.wait`) runs Python's signal handlers.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// Run `call` on `group` with the GIL released; on the main thread, a
/// Ctrl-C meanwhile revokes the group and the call raises
/// `KeyboardInterrupt` (see the module's notes).
pub(crate) fn revocable<T: Send>(
    py: Python<'_>,
    group: &Arc<mw::ProcessGroup>,
    call: impl Send + FnOnce(&mw::ProcessGroup) -> mw::Result<T>,
) -> PyResult<T> {
    let armed = Armed::new(py, group);
    let g = &**group;
    let result = py.detach(|| call(g));
    if armed.is_some_and(Armed::fired) {
        // The handler raises KeyboardInterrupt here, not later.
        py.check_signals()?;
    }
    result.map_err(|e| to_py(py, e))
}

/// Run `call` with the GIL released; on the main thread it runs on a
/// thread of its own, and an exception from a signal handler (Ctrl-C's
/// `KeyboardInterrupt`) is raised within [`SLICE`], leaving `call` to run
/// on to its end.
pub(crate) fn abandonable<T: Send + 'static>(
    py: Python<'_>,
    call: impl FnOnce() -> mw::Result<T> + Send + 'static,
) -> PyResult<T> {
    if !on_main_thread(py) {
        return py.detach(call).map_err(|e| to_py(py, e));
    }
    let (tx, rx) = mpsc::sync_channel(1);
    let run = move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)));
    };
    if let Err(e) = std::thread::Builder::new()
        .name("meshwork-call".into())
        .spawn(run)
    {
        return Err(to_py(py, mw::Error::Io(e)));
    }
    let mut rx = rx;
    loop {
        let (got, back) = py.detach(move || (rx.recv_timeout(SLICE), rx));
        rx = back;
        match got {
            Ok(Ok(result)) => return result.map_err(|e| to_py(py, e)),
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(mpsc::RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                unreachable!("the call's thread sends before it ends")
            }
        }
    }
}

/// Whether this is Python's main thread, where signal handlers run.
pub(crate) fn on_main_thread(py: Python<'_>) -> bool {
    // SAFETY: reads the calling thread's id; no other effect.
    let me = unsafe { ffi::PyThread_get_thread_ident() };
    main_thread(py) == Some(me)
}

/// Python's main thread in this process (`threading.main_thread()`,
/// another after a fork), or `None` if Python cannot say.
fn main_thread(py: Python<'_>) -> Option<c_ulong> {
    static MAIN: Mutex<Option<(u32, c_ulong)>> = Mutex::new(None);
    let forks = forks();
    let known = *MAIN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((f, main)) = known {
        if f == forks {
            return Some(main);
        }
    }
    // Asked with no lock held: Python may switch threads meanwhile.
    let main: c_ulong = py
        .import("threading")
        .and_then(|t| t.call_method0("main_thread"))
        .and_then(|m| m.getattr("ident"))
        .and_then(|i| i.extract())
        .ok()?;
    *MAIN.lock().unwrap_or_else(|e| e.into_inner()) = Some((forks, main));
    Some(main)
}

/// How many forks this process descends through since this module
/// first looked (a count the child of each fork raises): what this
/// module keeps per process (the main thread, the watcher) is kept with
/// the count it was made under.
fn forks() -> u32 {
    static FORKS: AtomicU32 = AtomicU32::new(0);
    static COUNTED: std::sync::Once = std::sync::Once::new();
    extern "C" fn in_child() {
        FORKS.fetch_add(1, Ordering::AcqRel);
    }
    COUNTED.call_once(|| {
        // SAFETY: registers a handler that only adds to an atomic (safe
        // in a fork's child); the function lives as long as the process.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
    FORKS.load(Ordering::Acquire)
}

/// Whether SIGINT's handler is Python's own, which raises
/// `KeyboardInterrupt` (`signal.default_int_handler`).
fn sigint_raises(py: Python<'_>) -> bool {
    static SIGNAL: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();
    let Ok((getsignal, default)) = SIGNAL.get_or_try_init(py, || {
        let signal = py.import("signal")?;
        PyResult::Ok((
            signal.getattr("getsignal")?.unbind(),
            signal.getattr("default_int_handler")?.unbind(),
        ))
    }) else {
        return false;
    };
    getsignal
        .call1(py, (libc::SIGINT,))
        .is_ok_and(|h| h.is(default))
}

/// The handler ours passes every SIGINT on to (Python's), as set by
/// `watched`.
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// The watcher's socket, for the handler; -1 while there is none.
static WAKE: AtomicI32 = AtomicI32::new(-1);
/// The process `WAKE` belongs to: a child forked since writes nothing
/// to its parent's watcher (`getpid` is what a handler may call).
static WAKE_PID: AtomicU32 = AtomicU32::new(0);

/// SIGINT's handler while ours is in front: tell the watcher, then run
/// the handler that was there (Python's). Async-signal-safe: atomics,
/// `getpid`, `write`, and Python's handler, which is one itself.
extern "C" fn on_sigint(sig: c_int) {
    // SAFETY: the calling thread's errno, saved and put back so that the
    // interrupted code sees its own.
    let errno = unsafe { *libc::__errno_location() };
    let fd = WAKE.load(Ordering::Acquire);
    // SAFETY: getpid(2) has no preconditions.
    if fd >= 0 && WAKE_PID.load(Ordering::Acquire) == unsafe { libc::getpid() } as u32 {
        let b = [1u8];
        // SAFETY: write(2) from a live buffer; the socket is
        // non-blocking (a full one drops the byte: one is pending).
        unsafe { libc::write(fd, b.as_ptr().cast(), 1) };
    }
    let next = NEXT.load(Ordering::Acquire);
    if next != 0 {
        // SAFETY: `watched` stores only a plain handler's address (not
        // SIG_DFL, SIG_IGN or an SA_SIGINFO one), taken from sigaction.
        let next: extern "C" fn(c_int) = unsafe { std::mem::transmute(next) };
        next(sig);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Whether the handler behind ours raises `KeyboardInterrupt`, as
/// found when ours was put in front of it.
static RAISES: AtomicBool = AtomicBool::new(false);

/// Whether a call now is to be watched: ours is in front of SIGINT's
/// handler (put there if it is not, in front of any of Python's: a
/// C-level handler that is not SIG_DFL or SIG_IGN), and the handler
/// behind it is `signal.default_int_handler`. Python changes its handler
/// only through `signal.signal`, which replaces ours: while ours is in
/// front, what was found behind it holds, and a watched call costs one
/// `sigaction` query.
fn watched(py: Python<'_>) -> bool {
    let ours = on_sigint as extern "C" fn(c_int) as usize;
    // SAFETY: all-zero bytes are a valid `sigaction` (an out-parameter).
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a query (no new action) into `now`, which lives to the end.
    if unsafe { libc::sigaction(libc::SIGINT, std::ptr::null(), &mut now) } != 0 {
        return false;
    }
    if now.sa_sigaction == ours {
        return RAISES.load(Ordering::Acquire);
    }
    if now.sa_sigaction == libc::SIG_DFL
        || now.sa_sigaction == libc::SIG_IGN
        || now.sa_flags & libc::SA_SIGINFO != 0
    {
        return false;
    }
    let raises = sigint_raises(py);
    RAISES.store(raises, Ordering::Release);
    NEXT.store(now.sa_sigaction, Ordering::Release);
    // Python's flags and mask, ours in its place: no SA_RESTART, as
    // Python relies on EINTR to see signals during its own waits.
    let mut act = now;
    act.sa_sigaction = ours;
    // SAFETY: `act` is the action that was there with our handler, which
    // passes every signal on to that one's (stored above).
    let put = unsafe { libc::sigaction(libc::SIGINT, &act, std::ptr::null_mut()) } == 0;
    put && raises
}

/// The watcher of this process: the group the main thread blocks in,
/// and whether a SIGINT revoked it.
struct Watch {
    /// `forks()` when it was made: a child forked since makes its own.
    forks: u32,
    /// Python's main thread here.
    main: c_ulong,
    /// The end the handler writes to (non-blocking); never closed, as
    /// the watch is never dropped.
    wakeup: UnixStream,
    /// The group the main thread blocks in, while armed.
    blocked: Mutex<Option<Arc<mw::ProcessGroup>>>,
    /// Set when a SIGINT revoked `blocked`.
    fired: AtomicBool,
}

impl Watch {
    /// This process's watcher, started on first use (again in a child
    /// forked since: the watcher thread does not survive a fork), and
    /// never dropped (one a fork left behind may be named by `WAKE` in a
    /// handler running now); `None` if it cannot be started.
    fn here(py: Python<'_>) -> Option<&'static Watch> {
        static WATCH: AtomicPtr<Watch> = AtomicPtr::new(std::ptr::null_mut());
        static STARTING: Mutex<()> = Mutex::new(());
        let forks = forks();
        let current = || {
            // SAFETY: non-null, it is a leaked `Box<Watch>`, never freed.
            unsafe { WATCH.load(Ordering::Acquire).as_ref() }.filter(|w| w.forks == forks)
        };
        if let Some(watch) = current() {
            return Some(watch);
        }
        // Asked with no lock held: Python may switch threads meanwhile.
        let main = main_thread(py)?;
        let _one = STARTING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(watch) = current() {
            return Some(watch);
        }
        let (watch, read) = Watch::new(forks, main).ok()?;
        let watch: &'static Watch = Box::leak(Box::new(watch));
        watch.watch(read).ok()?;
        WATCH.store(std::ptr::from_ref(watch).cast_mut(), Ordering::Release);
        Some(watch)
    }

    /// A watch, and the end of its socket its thread is to read.
    fn new(forks: u32, main: c_ulong) -> std::io::Result<(Watch, UnixStream)> {
        let (wakeup, read) = UnixStream::pair()?;
        wakeup.set_nonblocking(true)?;
        let watch = Watch {
            forks,
            main,
            wakeup,
            blocked: Mutex::new(None),
            fired: AtomicBool::new(false),
        };
        Ok((watch, read))
    }

    /// Start the thread that reads `read`; tell the handler of the
    /// socket.
    fn watch(&'static self, mut read: UnixStream) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("meshwork-sigint".into())
            .spawn(move || {
                let mut buf = [0u8; 64];
                loop {
                    match read.read(&mut buf) {
                        Ok(0) => return,
                        Ok(_) => self.interrupt(),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => return,
                    }
                }
            })?;
        WAKE.store(self.wakeup.as_raw_fd(), Ordering::Release);
        WAKE_PID.store(std::process::id(), Ordering::Release);
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Option<Arc<mw::ProcessGroup>>> {
        self.blocked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A SIGINT arrived: revoke the group the main thread blocks in, if
    /// it still does (under the lock `Armed`'s drop takes, so a call
    /// that has returned is never revoked after the fact).
    fn interrupt(&self) {
        let blocked = self.lock();
        if let Some(group) = blocked.as_ref() {
            self.fired.store(true, Ordering::SeqCst);
            group.revoke();
        }
    }
}

/// A call on the main thread, watched until this is dropped.
struct Armed {
    watch: &'static Watch,
}

impl Armed {
    /// Watch a call on `group`, if this is the main thread and SIGINT's
    /// handler is Python's own.
    fn new(py: Python<'_>, group: &Arc<mw::ProcessGroup>) -> Option<Armed> {
        let watch = Watch::here(py)?;
        // SAFETY: reads the calling thread's id; no other effect.
        if unsafe { ffi::PyThread_get_thread_ident() } != watch.main || !watched(py) {
            return None;
        }
        watch.fired.store(false, Ordering::SeqCst);
        *watch.lock() = Some(Arc::clone(group));
        Some(Armed { watch })
    }

    /// Whether a SIGINT revoked the group during the call (unarming it).
    fn fired(self) -> bool {
        let watch = self.watch;
        drop(self);
        watch.fired.load(Ordering::SeqCst)
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        *self.watch.lock() = None;
    }
}
