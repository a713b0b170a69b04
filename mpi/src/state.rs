//! The library's state: the world formed at `MPI_Init`, the communicators
//! by handle, and error codes with their text. Every exported call runs
//! through [`entry`], which turns a failure into a code, calls the
//! communicator's error handler, and never lets a panic cross into C.

use crate::consts::*;
use crate::p2p::{Matcher, Sender};
use crate::Handle;
use mw::ProcessGroup;
use std::collections::HashMap;
use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A failed call: an MPI error class and what meshwork said. Boxed, so
/// that a `Result` of a word or two (`Result<()>`, `Result<bool>`) comes
/// back in registers: the calls on a ping-pong's path return `Ok` almost
/// always, and a 32-byte error moved through the stack on each return was
/// a tenth of `MPI_Send`'s own instructions.
#[derive(Debug)]
pub(crate) struct Fail(Box<Failure>);

/// What a [`Fail`] holds.
#[derive(Debug)]
pub(crate) struct Failure {
    pub class: c_int,
    pub text: String,
}

impl std::ops::Deref for Fail {
    type Target = Failure;
    fn deref(&self) -> &Failure {
        &self.0
    }
}

impl Fail {
    #[cold]
    pub fn new(class: c_int, text: impl Into<String>) -> Fail {
        Fail(Box::new(Failure {
            class,
            text: text.into(),
        }))
    }

    /// Its text, taken.
    pub fn into_text(self) -> String {
        self.0.text
    }

    pub fn arg(text: impl Into<String>) -> Fail {
        Fail::new(ERR_ARG, text)
    }
}

impl From<mw::Error> for Fail {
    fn from(e: mw::Error) -> Fail {
        use mw::Error as E;
        let class = match &e {
            E::InvalidArgument(_) => ERR_ARG,
            E::MessageTooLarge { .. } => ERR_COUNT,
            E::PeerDisconnected { .. } | E::GroupShrunk { .. } | E::Expelled { .. } => {
                ERR_PROC_ABORTED
            }
            E::Revoked | E::ShutDown => ERR_COMM,
            _ => ERR_OTHER,
        };
        Fail::new(class, e.to_string())
    }
}

pub(crate) type Result<T> = std::result::Result<T, Fail>;

/// A communicator: a meshwork group and what MPI keeps beside it.
pub(crate) struct Comm {
    pub group: Arc<ProcessGroup>,
    pub name: Mutex<String>,
    pub errhandler: AtomicUsize,
    /// Its point-to-point matching (`p2p.rs`).
    pub matcher: Matcher,
    /// Its members' ranks in `MPI_COMM_WORLD`, in its rank order.
    pub members: Vec<u32>,
    /// Its attributes: (keyval, value), `attrs.rs`.
    pub attrs: Mutex<Vec<(c_int, usize)>>,
    /// Its `v` collectives so far (`coll.rs`, `VPlan`).
    pub vseq: AtomicU64,
    /// Its virtual topology, if it was made with one (`topo.rs`).
    pub topo: std::sync::OnceLock<crate::topo::Topo>,
}

impl Comm {
    pub fn new(
        group: Arc<ProcessGroup>,
        name: &str,
        errhandler: Handle,
        members: Vec<u32>,
    ) -> Arc<Comm> {
        Arc::new(Comm {
            group,
            name: Mutex::new(name.to_string()),
            errhandler: AtomicUsize::new(errhandler),
            matcher: Matcher::default(),
            members,
            attrs: Mutex::new(Vec::new()),
            vseq: AtomicU64::new(0),
            topo: std::sync::OnceLock::new(),
        })
    }

    pub fn rank(&self) -> u32 {
        self.group.rank()
    }

    pub fn size(&self) -> u32 {
        self.group.world_size()
    }

    /// `r` as a rank of this communicator, or `ERR_RANK`.
    pub fn peer(&self, r: c_int, what: &str) -> Result<u32> {
        u32::try_from(r)
            .ok()
            .filter(|&r| r < self.size())
            .ok_or_else(|| {
                Fail::new(
                    ERR_RANK,
                    format!(
                        "{what} {r} is not a rank of this communicator (0..{})",
                        self.size()
                    ),
                )
            })
    }
}

/// The running library.
pub(crate) struct Mpi {
    pub world: Arc<Comm>,
    pub selfc: Arc<Comm>,
    pub comms: Mutex<HashMap<Handle, Arc<Comm>>>,
    pub sender: Sender,
    pub thread_level: c_int,
}

pub(crate) enum Phase {
    Fresh,
    Running(Arc<Mpi>),
    Finalized,
}

static STATE: Mutex<Phase> = Mutex::new(Phase::Fresh);
/// The running library without the lock, for every call between
/// `MPI_Init` and `MPI_Finalize` (see [`set_running`]).
static RUNNING: std::sync::OnceLock<Arc<Mpi>> = std::sync::OnceLock::new();
/// `RUNNING`'s library while it runs, NULL before and after: one load
/// on every call's path.
static LIVE: std::sync::atomic::AtomicPtr<Mpi> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// Enter phase `p` (with the lock held by the caller, as `ph`).
pub(crate) fn set_running(ph: &mut Phase, p: Phase) {
    match &p {
        Phase::Running(m) => {
            let kept = RUNNING.get_or_init(|| m.clone());
            LIVE.store(Arc::as_ptr(kept).cast_mut(), Ordering::Release);
        }
        _ => LIVE.store(std::ptr::null_mut(), Ordering::Release),
    }
    *ph = p;
}
/// Handles this library hands out start here, clear of every predefined
/// constant of the ABI (all below 0x400), and step by 16.
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(0x1_0000);

pub(crate) fn new_handle() -> Handle {
    NEXT_HANDLE.fetch_add(16, Ordering::Relaxed)
}

pub(crate) fn phase() -> MutexGuard<'static, Phase> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The running library, or `ERR_OTHER` before `MPI_Init` or after
/// `MPI_Finalize`.
/// Borrowed, not counted: every call takes it, and a count shared by the
/// threads of a `MPI_THREAD_MULTIPLE` program is a cache line they fight
/// over.
#[inline]
pub(crate) fn mpi() -> Result<&'static Mpi> {
    match running() {
        Some(m) => Ok(m),
        None => not_running(),
    }
}

/// The running library, if `MPI_Init` has run and `MPI_Finalize` has not.
#[inline]
pub(crate) fn running() -> Option<&'static Mpi> {
    let m = LIVE.load(Ordering::Acquire);
    if m.is_null() {
        None
    } else {
        // SAFETY: non-NULL, it points into `RUNNING`'s library, which
        // the static keeps for the life of the process.
        Some(unsafe { &*m })
    }
}

#[cold]
fn not_running() -> Result<&'static Mpi> {
    match &*phase() {
        Phase::Running(_) => Err(Fail::new(ERR_OTHER, "MPI is being initialised")),
        Phase::Fresh => Err(Fail::new(ERR_OTHER, "MPI_Init has not been called")),
        Phase::Finalized => Err(Fail::new(ERR_OTHER, "MPI_Finalize has been called")),
    }
}

impl Mpi {
    /// Below `MPI_THREAD_MULTIPLE` the program makes one MPI call at a
    /// time: no two threads pull messages at once, and the puller lock
    /// (an atomic exchange each way) is not taken.
    #[inline]
    pub fn serial(&self) -> bool {
        self.thread_level < THREAD_MULTIPLE
    }

    /// `MPI_COMM_WORLD` or `MPI_COMM_SELF`, if `h` names one.
    #[inline]
    pub fn builtin(&self, h: Handle) -> Option<&Arc<Comm>> {
        match h {
            COMM_WORLD => Some(&self.world),
            COMM_SELF => Some(&self.selfc),
            _ => None,
        }
    }

    /// The communicator `h` names.
    pub fn comm(&self, h: Handle) -> Result<Arc<Comm>> {
        match h {
            COMM_WORLD => Ok(self.world.clone()),
            COMM_SELF => Ok(self.selfc.clone()),
            COMM_NULL => Err(Fail::new(ERR_COMM, "MPI_COMM_NULL is not a communicator")),
            h => self
                .comms
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&h)
                .cloned()
                .ok_or_else(|| Fail::new(ERR_COMM, format!("{h:#x} is not a communicator"))),
        }
    }

    /// Register `c`; its new handle.
    pub fn add_comm(&self, c: Arc<Comm>) -> Handle {
        let h = new_handle();
        self.comms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(h, c);
        h
    }
}

/// The communicator `h` names, in the running library.
pub(crate) fn comm(h: Handle) -> Result<Arc<Comm>> {
    mpi()?.comm(h)
}

/// `f` of the communicator `h` names: `MPI_COMM_WORLD` and
/// `MPI_COMM_SELF` borrowed, with no count taken (the calls on every
/// message's path).
pub(crate) fn with_comm<R>(h: Handle, f: impl FnOnce(&Arc<Comm>) -> Result<R>) -> Result<R> {
    let m = mpi()?;
    match m.builtin(h) {
        Some(c) => f(c),
        None => f(&m.comm(h)?),
    }
}

// ------------------------------------------------------------ error codes

/// Codes above the classes carry meshwork's text: a ring of the latest
/// ones, so a long run allocates nothing more.
const FIRST_CODE: c_int = 1024;
const KEPT: usize = 256;

struct Codes {
    next: usize,
    texts: Vec<(c_int, String)>,
}

static CODES: Mutex<Codes> = Mutex::new(Codes {
    next: 0,
    texts: Vec::new(),
});

fn codes() -> MutexGuard<'static, Codes> {
    CODES.lock().unwrap_or_else(|e| e.into_inner())
}

/// A code for `f`: its class and its text, for `MPI_Error_string`.
pub(crate) fn code_of(f: &Fail) -> c_int {
    let mut c = codes();
    let slot = c.next % KEPT;
    c.next += 1;
    if c.texts.len() <= slot {
        c.texts.push((f.class, f.text.clone()));
    } else {
        c.texts[slot] = (f.class, f.text.clone());
    }
    FIRST_CODE + slot as c_int
}

/// The class and text of `code`, if it is one this library gave.
pub(crate) fn describe(code: c_int) -> Option<(c_int, String)> {
    if code > ERR_LASTCODE {
        return crate::errcodes::describe(code);
    }
    if (0..FIRST_CODE).contains(&code) {
        return Some((code, class_text(code).to_string()));
    }
    let slot = usize::try_from(code - FIRST_CODE)
        .ok()
        .filter(|&s| s < KEPT)?;
    codes().texts.get(slot).cloned()
}

pub(crate) fn class_text(class: c_int) -> &'static str {
    match class {
        SUCCESS => "MPI_SUCCESS: no error",
        ERR_BUFFER => "MPI_ERR_BUFFER: invalid buffer pointer",
        ERR_COUNT => "MPI_ERR_COUNT: invalid count",
        ERR_TYPE => "MPI_ERR_TYPE: invalid datatype",
        ERR_TAG => "MPI_ERR_TAG: invalid tag",
        ERR_COMM => "MPI_ERR_COMM: invalid communicator",
        ERR_RANK => "MPI_ERR_RANK: invalid rank",
        ERR_REQUEST => "MPI_ERR_REQUEST: invalid request",
        ERR_ROOT => "MPI_ERR_ROOT: invalid root",
        ERR_OP => "MPI_ERR_OP: invalid reduction",
        ERR_ARG => "MPI_ERR_ARG: invalid argument",
        ERR_TRUNCATE => "MPI_ERR_TRUNCATE: message truncated",
        ERR_OTHER => "MPI_ERR_OTHER: other error",
        ERR_INTERN => "MPI_ERR_INTERN: internal error",
        ERR_IN_STATUS => "MPI_ERR_IN_STATUS: error code is in status",
        ERR_UNSUPPORTED_OPERATION => "MPI_ERR_UNSUPPORTED_OPERATION: not supported by meshwork",
        ERR_PROC_ABORTED => "MPI_ERR_PROC_ABORTED: a peer process failed",
        _ => "MPI error",
    }
}

// ------------------------------------------------------------ the entry

/// An error handler of the program's (`MPI_Comm_create_errhandler`):
/// called with the communicator and the error code (C's `...` after
/// them carries nothing here).
pub(crate) type UserHandler = unsafe extern "C" fn(*mut Handle, *mut c_int, ...);

/// The program's handlers, by handle (kept once made: a communicator may
/// hold one after `MPI_Errhandler_free`).
static HANDLERS: Mutex<Vec<(Handle, UserHandler)>> = Mutex::new(Vec::new());

pub(crate) fn add_user_handler(f: UserHandler) -> Handle {
    let h = new_handle();
    HANDLERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((h, f));
    h
}

pub(crate) fn user_handler(h: Handle) -> Option<UserHandler> {
    HANDLERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|&&(k, _)| k == h)
        .map(|&(_, f)| f)
}

/// Call communicator `comm`'s handler with `code` if it is one of the
/// program's (no lock held: it may call MPI); whether it was.
pub(crate) fn call_user_handler(comm: Handle, code: c_int) -> bool {
    let h = match &*phase() {
        Phase::Running(m) => m
            .comm(comm)
            .unwrap_or_else(|_| m.world.clone())
            .errhandler
            .load(Ordering::Relaxed),
        _ => return false,
    };
    let Some(f) = user_handler(h) else {
        return false;
    };
    let (mut c, mut code) = (comm, code);
    // SAFETY: the program's function, on a communicator and a code of its
    // own to read (and, as MPI allows, to change).
    unsafe { f(&mut c, &mut code) };
    true
}

/// Raise `f` from `name` on the communicator `comm`: its error handler
/// decides (the program's: called, then the code goes back to the
/// caller; fatal: the message on stderr and the process exits with the
/// class; return: the code goes back to the caller).
pub(crate) fn raise(comm: Handle, name: &str, f: Fail) -> c_int {
    let f = Fail::new(f.class, format!("{name}: {}", f.text));
    let code = code_of(&f);
    if call_user_handler(comm, code) {
        return code;
    }
    let handler = match &*phase() {
        Phase::Running(m) => m
            .comm(comm)
            .unwrap_or_else(|_| m.world.clone())
            .errhandler
            .load(Ordering::Relaxed),
        _ => ERRORS_ARE_FATAL,
    };
    if handler == ERRORS_RETURN {
        return code;
    }
    let rank = match &*phase() {
        Phase::Running(m) => m.world.rank().to_string(),
        _ => "?".into(),
    };
    eprintln!(
        "meshwork MPI (rank {rank}): {}\n  ({}; the error handler is MPI_ERRORS_ARE_FATAL: exiting)",
        f.text,
        class_text(f.class)
    );
    std::process::exit(f.class.clamp(1, 255));
}

/// Run the body of exported call `name` on communicator `comm` (the one
/// whose error handler a failure goes to): success is `MPI_SUCCESS`; a
/// failure, or a panic, goes through [`raise`]. Inlined into every
/// exported call, its failures handled out of line: a call that succeeds
/// costs no frame of its own.
#[inline(always)]
pub(crate) fn entry(comm: Handle, name: &str, body: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => SUCCESS,
        failed => failure(comm, name, failed),
    }
}

#[cold]
#[inline(never)]
fn failure(comm: Handle, name: &str, failed: std::thread::Result<Result<()>>) -> c_int {
    match failed {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(f)) => raise(comm, name, f),
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            raise(
                comm,
                name,
                Fail::new(ERR_INTERN, format!("internal error: {what}")),
            )
        }
    }
}
