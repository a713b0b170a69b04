//! The dump on demand: with `FLIGHT_RECORD_DUMP=<file>`, `SIGUSR1`
//! appends every group's record to `<file>`.
//!
//! The handler only wakes a thread through a pipe (`write(2)` is all of
//! the work a signal handler may do here), keeps the interrupted code's
//! `errno`, and then calls the handler `SIGUSR1` had before, so that a
//! job's own use of the signal (Slurm's `--signal=USR1` before a
//! preemption, Python's `signal.signal`) goes on working. Where the
//! signal had its default action (ending the process), the dump takes
//! its place: the variable asks for a record of a running job, which the
//! default action would end. The thread opens the file without following
//! a symbolic link at its last component, creating it readable by this
//! user only, so a link planted in a shared folder does not redirect it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Once;

/// The pipe's write end, for the handler.
static WAKE: AtomicI32 = AtomicI32::new(-1);
static INSTALL: Once = Once::new();

/// The handler `SIGUSR1` had before this one (`SIG_DFL`, `SIG_IGN` or a
/// function), stored before this one is installed, and whether it takes
/// three arguments (`SA_SIGINFO`).
static OLD_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static OLD_SIGINFO: AtomicBool = AtomicBool::new(false);

/// The thread's `errno`, which a signal handler must leave as it found
/// it.
fn errno() -> *mut libc::c_int {
    // SAFETY: __errno_location returns the calling thread's errno, valid
    // for the thread's life; it is async-signal-safe.
    unsafe { libc::__errno_location() }
}

extern "C" fn on_usr1(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: `errno()` points at this thread's errno.
    let saved = unsafe { *errno() };
    let fd = WAKE.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = [1u8];
        // SAFETY: write(2) is async-signal-safe; `b` outlives the call.
        // A full pipe drops the byte, and a dump is already due then.
        unsafe { libc::write(fd, b.as_ptr().cast(), 1) };
    }
    chain(sig, info, ctx);
    // SAFETY: as above.
    unsafe { *errno() = saved };
}

/// Call the handler `SIGUSR1` had before this one was installed, as it
/// asked to be called.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let old = OLD_HANDLER.load(Ordering::Acquire);
    if old == libc::SIG_DFL || old == libc::SIG_IGN {
        return;
    }
    if OLD_SIGINFO.load(Ordering::Acquire) {
        // SAFETY: `old` was installed with SA_SIGINFO, so it is a
        // three-argument handler; it gets the arguments this one got.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(old) };
        f(sig, info, ctx);
    } else {
        // SAFETY: `old` was installed without SA_SIGINFO: a one-argument
        // handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(old) };
        f(sig);
    }
}

/// Install the handler and its thread, once, if the variable is set.
pub(super) fn on_signal_once() {
    INSTALL.call_once(|| {
        let Ok(path) = std::env::var("FLIGHT_RECORD_DUMP") else {
            return;
        };
        if let Err(e) = install(path) {
            tracing::warn!("FLIGHT_RECORD_DUMP: cannot dump on SIGUSR1: {e}");
        }
    });
}

/// Append `text` to the file at `path`: created `0600` if it is not
/// there; never through a symbolic link, and only to a regular file (a
/// FIFO with no reader would hold the thread for ever).
fn append(path: &Path, text: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    f.write_all(text)
}

/// Remember the handler `SIGUSR1` has now, to chain to it (not this
/// one's own: installing twice must not make it call itself).
fn remember(old: &libc::sigaction) {
    let ours =
        on_usr1 as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
    let handler = if old.sa_sigaction == ours {
        libc::SIG_DFL
    } else {
        old.sa_sigaction
    };
    OLD_SIGINFO.store(old.sa_flags & libc::SA_SIGINFO != 0, Ordering::Release);
    OLD_HANDLER.store(handler, Ordering::Release);
}

fn install(path: String) -> std::io::Result<()> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let (read_fd, write_fd) = (fds[0], fds[1]);
    // The reader blocks: clear O_NONBLOCK on its end.
    // SAFETY: fcntl on a descriptor pipe2 just returned.
    unsafe { libc::fcntl(read_fd, libc::F_SETFL, 0) };
    WAKE.store(write_fd, Ordering::Relaxed);
    tracing::info!("flight record: SIGUSR1 appends every group's record to {path}");
    std::thread::Builder::new()
        .name("meshwork-flight-dump".into())
        .spawn(move || {
            let mut b = [0u8; 64];
            // SAFETY: read(2) into `b`, of its length, on our pipe.
            while unsafe { libc::read(read_fd, b.as_mut_ptr().cast(), b.len()) } > 0 {
                let text = super::dump_all();
                if let Err(e) = append(Path::new(&path), text.as_bytes()) {
                    tracing::warn!("FLIGHT_RECORD_DUMP: cannot write {path}: {e}");
                }
            }
        })?;
    // SAFETY: sigaction reads and writes the structs it is given; ours
    // has a three-argument handler (SA_SIGINFO) that only writes to a
    // pipe, keeps errno, and calls the handler it replaced.
    unsafe {
        // What is there now is stored before ours goes in, so a signal
        // that comes as it does finds it; what was there when ours went
        // in (if it changed meanwhile) replaces it.
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGUSR1, std::ptr::null(), &mut old) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        remember(&old);
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction =
            on_usr1 as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
        // SA_ONSTACK as a handler of a Go runtime in the process needs;
        // the old handler runs with the signals it asked to block.
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        act.sa_mask = old.sa_mask;
        let mut was: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGUSR1, &act, &mut was) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if was.sa_sigaction != old.sa_sigaction {
            remember(&was);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    /// The tests install handlers of one process-wide signal: one at a
    /// time.
    static SERIAL: Mutex<()> = Mutex::new(());

    static PLAIN_CALLS: AtomicU32 = AtomicU32::new(0);
    static INFO_CALLS: AtomicU32 = AtomicU32::new(0);

    extern "C" fn plain(_: libc::c_int) {
        PLAIN_CALLS.fetch_add(1, Ordering::SeqCst);
        // A careless handler: it changes errno.
        // SAFETY: this thread's errno.
        unsafe { *errno() = libc::EINTR };
    }

    extern "C" fn with_info(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY: the kernel's siginfo for this delivery, passed on.
        if sig == libc::SIGUSR1 && !info.is_null() && unsafe { (*info).si_signo } == sig {
            INFO_CALLS.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn set_handler(handler: usize, flags: libc::c_int) {
        // SAFETY: a zeroed sigaction with a handler of the kind `flags`
        // says; only these tests' counters are touched by it.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = handler;
            act.sa_flags = flags;
            libc::sigemptyset(&mut act.sa_mask);
            assert_eq!(
                libc::sigaction(libc::SIGUSR1, &act, std::ptr::null_mut()),
                0
            );
        }
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "meshwork-flight-{}-{name}-{:?}",
            std::process::id(),
            Instant::now()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn wait_for(what: impl Fn() -> bool) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if what() {
                return true;
            }
            #[allow(
                clippy::disallowed_methods,
                reason = "polling a file another thread writes"
            )]
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// A job that handles SIGUSR1 itself (a Slurm preemption handler, a
    /// Python `signal.signal`) and sets `FLIGHT_RECORD_DUMP`: both its
    /// handler and the dump run on the signal, and the interrupted code
    /// finds its errno as it left it, whatever the handlers did.
    #[test]
    fn a_sigusr1_handler_installed_before_still_runs_and_errno_is_kept() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = scratch("chain");
        for (handler, flags, calls) in [
            (
                plain as extern "C" fn(libc::c_int) as usize,
                0,
                &PLAIN_CALLS,
            ),
            (
                with_info as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
                    as usize,
                libc::SA_SIGINFO,
                &INFO_CALLS,
            ),
        ] {
            set_handler(handler, flags);
            let path = dir.join(format!("dump-{flags}"));
            install(path.to_string_lossy().into_owned()).unwrap();
            let before = calls.load(Ordering::SeqCst);
            // SAFETY: this thread's errno; raise(3) runs the handler on
            // this thread before it returns.
            unsafe {
                *errno() = 4242;
                assert_eq!(libc::raise(libc::SIGUSR1), 0);
                assert_eq!(*errno(), 4242, "errno of the interrupted code");
            }
            assert_eq!(calls.load(Ordering::SeqCst), before + 1, "flags {flags}");
            assert!(
                wait_for(|| std::fs::metadata(&path).is_ok_and(|m| m.len() > 0)),
                "the dump was written too"
            );
        }
        set_handler(libc::SIG_IGN, 0);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A full pipe (a dump already due): the handler's write fails with
    /// EAGAIN, and the interrupted code's errno is still its own.
    #[test]
    fn the_handler_keeps_errno_when_its_write_fails() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors.
        let made = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
        assert_eq!(made, 0);
        let chunk = [0u8; 4096];
        // SAFETY: writes of `chunk` to the pipe's write end until full.
        while unsafe { libc::write(fds[1], chunk.as_ptr().cast(), chunk.len()) } > 0 {}
        let was = WAKE.swap(fds[1], Ordering::Relaxed);
        OLD_HANDLER.store(libc::SIG_DFL, Ordering::Release);
        // SAFETY: this thread's errno; the handler called as a function.
        unsafe {
            *errno() = 4242;
            on_usr1(libc::SIGUSR1, std::ptr::null_mut(), std::ptr::null_mut());
            assert_eq!(*errno(), 4242);
        }
        WAKE.store(was, Ordering::Relaxed);
        // SAFETY: the pipe's descriptors, closed once.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }

    /// A symbolic link planted at the dump's path (in a folder others can
    /// write): the dump is refused, and the file it points at is left as
    /// it was. A new dump file is readable by this user only.
    #[test]
    fn the_dump_never_writes_through_a_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("symlink");
        let target = dir.join("victim");
        std::fs::write(&target, b"precious\n").unwrap();
        let link = dir.join("dump");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(append(&link, b"flight record\n").is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"precious\n");
        let fresh = dir.join("fresh");
        append(&fresh, b"one\n").unwrap();
        append(&fresh, b"two\n").unwrap();
        assert_eq!(std::fs::read(&fresh).unwrap(), b"one\ntwo\n");
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
