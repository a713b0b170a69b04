//! Generalized requests (MPI-5 §13.2): a request whose operation the
//! program runs itself — on a thread of its own, or in a library layered
//! on MPI — and ends with `MPI_Grequest_complete`. Its waits and tests
//! are MPI's: once it is complete, a wait calls the program's query
//! function for the status, then its free function, and gives the
//! status; `MPI_Cancel` calls its cancel function; `MPI_Request_free`
//! before completion leaves the free function to `MPI_Grequest_complete`.
//! A wait on one never completed ends at meshwork's deadline, as every
//! wait here does.

use super::{lock, Request, Status, REQUESTS};
use crate::consts::*;
use crate::state::{entry, mpi, Fail, Result};
use crate::Handle;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Condvar, Mutex};

/// The generalized requests not yet completed, by handle: a wait takes
/// its request out of the table while it waits (its entry held, so the
/// handle names no other), and `MPI_Grequest_complete` must still find
/// it.
static OPEN: Mutex<Option<HashMap<Handle, Arc<Greq>>>> = Mutex::new(None);

type Query = Option<unsafe extern "C" fn(*mut c_void, *mut Status) -> c_int>;
type Free = Option<unsafe extern "C" fn(*mut c_void) -> c_int>;
type Cancel = Option<unsafe extern "C" fn(*mut c_void, c_int) -> c_int>;

/// A generalized request: the program's functions and state, and where
/// it stands.
pub(crate) struct Greq {
    query: Query,
    free: Free,
    cancel: Cancel,
    state: usize,
    /// (completed, given up: freed by `MPI_Request_free`, or left by a
    /// wait that timed out; `MPI_Grequest_complete` then ends it).
    flags: Mutex<(bool, bool)>,
    completed: Condvar,
}

// SAFETY: the program's functions and state are the program's to make
// safe from any thread; MPI says they may be called from any.
unsafe impl Send for Greq {}
// SAFETY: as above; the flags are behind a lock.
unsafe impl Sync for Greq {}

/// A failure of a function of the program's: its error code, which the
/// call that ran it returns.
fn failed(what: &str, rc: c_int) -> Fail {
    let class = crate::state::describe(rc).map_or(ERR_OTHER, |(c, _)| c);
    Fail::new(
        class,
        format!("the generalized request's {what} function returned {rc}"),
    )
}

impl Greq {
    pub fn is_complete(&self) -> bool {
        lock(&self.flags).0
    }

    /// The status the query function gives (empty if it has none).
    pub fn query(&self) -> Result<Status> {
        let mut s = Status::new(ANY_SOURCE, ANY_TAG, 0);
        if let Some(q) = self.query {
            // SAFETY: the program's function, on its state and a status.
            let rc = unsafe { q(self.state as *mut c_void, &mut s) };
            if rc != SUCCESS {
                return Err(failed("query", rc));
            }
        }
        Ok(s)
    }

    /// Run the free function (once, when the request goes).
    fn free(&self) -> Result<()> {
        if let Some(f) = self.free {
            // SAFETY: the program's function, on its state.
            let rc = unsafe { f(self.state as *mut c_void) };
            if rc != SUCCESS {
                return Err(failed("free", rc));
            }
        }
        Ok(())
    }

    /// Wait for completion (up to meshwork's deadline), then the status
    /// from the query function, and the free function run; and whether
    /// the caller lets its handle's entry go. A wait that times out
    /// leaves the request to `MPI_Grequest_complete`, which runs the free
    /// function and lets the entry go.
    pub fn finish(&self) -> (Result<Status>, bool) {
        let deadline = match mpi() {
            Ok(m) => m.world.group.timeout(),
            Err(e) => return (Err(e), true),
        };
        let flags = lock(&self.flags);
        let (mut flags, _) = self
            .completed
            .wait_timeout_while(flags, deadline, |f| !f.0)
            .unwrap_or_else(|e| e.into_inner());
        if !flags.0 {
            flags.1 = true;
            let late = format!("the generalized request was not completed within {deadline:?}");
            return (Err(Fail::new(ERR_OTHER, late)), false);
        }
        drop(flags);
        let status = self.query();
        let freed = self.free();
        (status.and_then(|s| freed.map(|()| s)), true)
    }

    /// `MPI_Cancel`: the cancel function, told whether it completed.
    pub fn cancel(&self) -> Result<()> {
        if let Some(c) = self.cancel {
            let complete = c_int::from(self.is_complete());
            // SAFETY: the program's function, on its state.
            let rc = unsafe { c(self.state as *mut c_void, complete) };
            if rc != SUCCESS {
                return Err(failed("cancel", rc));
            }
        }
        Ok(())
    }

    /// `MPI_Request_free` (its entry held): the free function now if it
    /// is complete, and `true` (the caller lets the entry go); else
    /// `false`, and `MPI_Grequest_complete` does both.
    fn let_go(&self) -> (Result<()>, bool) {
        let mut flags = lock(&self.flags);
        if flags.0 {
            drop(flags);
            (self.free(), true)
        } else {
            flags.1 = true;
            (Ok(()), false)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Grequest_start(
    query: Query,
    free: Free,
    cancel: Cancel,
    state: *mut c_void,
    request: *mut Handle,
) -> c_int {
    entry(COMM_WORLD, "MPI_Grequest_start", || {
        mpi()?;
        super::start_request(request, || {
            let g = Arc::new(Greq {
                query,
                free,
                cancel,
                state: state as usize,
                flags: Mutex::new((false, false)),
                completed: Condvar::new(),
            });
            let h = super::add_request(Request::Gen(g.clone()))?;
            lock(&OPEN).get_or_insert_with(HashMap::new).insert(h, g);
            Ok(h)
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Grequest_complete(request: Handle) -> c_int {
    entry(COMM_WORLD, "MPI_Grequest_complete", || {
        let g = lock(&OPEN)
            .as_mut()
            .and_then(|open| open.remove(&request))
            .ok_or_else(|| {
                Fail::new(
                    ERR_REQUEST,
                    format!("{request:#x} is not a generalized request still open"),
                )
            })?;
        let left = {
            let mut flags = lock(&g.flags);
            flags.0 = true;
            flags.1
        };
        g.completed.notify_all();
        if left {
            // Freed, or given up by a wait, before it completed: its
            // handle goes now, and its free function runs.
            lock(&REQUESTS).release(request);
            g.free()?;
        }
        Ok(())
    })
}

/// `MPI_Request_free` of request `h` if it is a generalized one
/// (`None` if not): its free function now if it is complete (and its
/// handle gone), else its handle held for `MPI_Grequest_complete`, which
/// runs it.
pub(crate) fn free_request(h: Handle) -> Option<Result<()>> {
    let g = {
        let mut table = lock(&REQUESTS);
        let g = match table.get(h) {
            Some(Request::Gen(g)) => g.clone(),
            _ => return None,
        };
        // Out of the table (no wait finds it), its entry held.
        drop(table.take(h));
        g
    };
    let (freed, done) = g.let_go();
    if done {
        lock(&REQUESTS).release(h);
    }
    Some(freed)
}
