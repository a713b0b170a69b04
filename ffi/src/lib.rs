//! meshwork's C ABI: `libmeshwork` (shared and static) and the header
//! `ffi/include/meshwork.h`, generated from this crate by cbindgen and
//! checked in (the test `header_is_fresh` fails when it is stale).
//!
//! Every entry point catches panics (a panic never crosses the boundary:
//! it becomes `MW_INTERNAL`), checks its pointers, counts, dtype and op
//! (`MW_INVALID_ARGUMENT` with a message, never a crash) and records the
//! message of every failure in a thread-local string, [`mw_last_error`].
//! A group may be used from several threads at once, like
//! `meshwork::ProcessGroup`.
//!
//! `mw_dtype`, `mw_op` and `mw_status` are integer types with named
//! constants, so a value from C that is out of range is a checked error,
//! never undefined behaviour.

// The C names are the contract (DESIGN.md, "C ABI and Python").
#![allow(non_camel_case_types)]

mod calls;
mod status;

pub use calls::*;
pub use status::*;

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// A group of ranks: one rank's handle, from `mw_connect_from_env` or
/// `mw_local`; free it with `mw_free`.
#[derive(Debug)]
pub struct mw_group {
    inner: Arc<mw::ProcessGroup>,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Record `msg` as this thread's last error.
pub(crate) fn set_last_error(msg: &str) {
    // A message with an interior NUL is cut there rather than lost.
    let bytes: Vec<u8> = msg.bytes().take_while(|&b| b != 0).collect();
    let c = CString::new(bytes).unwrap_or_default();
    // During thread teardown the slot may be gone; the message is then lost.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

/// A failure of one call: its status and message.
pub(crate) struct Failure {
    pub(crate) status: mw_status,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn invalid(message: String) -> Failure {
        Failure {
            status: MW_INVALID_ARGUMENT,
            message,
        }
    }
}

impl From<mw::Error> for Failure {
    fn from(e: mw::Error) -> Failure {
        Failure {
            status: status_of(&e),
            message: e.to_string(),
        }
    }
}

/// Run `f` with panics caught; map its outcome to a status, recording the
/// message of a failure.
pub(crate) fn guard(op: &str, f: impl FnOnce() -> Result<(), Failure>) -> mw_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => MW_OK,
        Ok(Err(fail)) => {
            set_last_error(&format!("{op}: {}", fail.message));
            fail.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            set_last_error(&format!("{op}: internal error: {what}"));
            MW_INTERNAL
        }
    }
}

/// The group behind `g`, or `MW_INVALID_ARGUMENT` for NULL.
///
/// # Safety
/// `g` is NULL or a pointer from `mw_connect_from_env`/`mw_local` not yet
/// freed.
pub(crate) unsafe fn group<'a>(g: *const mw_group) -> Result<&'a mw::ProcessGroup, Failure> {
    // SAFETY: the caller passes NULL or a live group (this function's contract).
    match unsafe { g.as_ref() } {
        Some(g) => Ok(&*g.inner),
        None => Err(Failure::invalid("the group is NULL".into())),
    }
}

/// Join a group formed from the environment (`RANK`, `WORLD`, `PEERS`,
/// `SEED`, `CLUSTER_TOKEN`, …, as `meshrun` sets them): `*out` receives the
/// group. Blocks until every rank has joined or the formation deadline.
///
/// # Safety
/// `out` is NULL (`MW_INVALID_ARGUMENT`) or valid for one pointer write.
#[no_mangle]
pub unsafe extern "C" fn mw_connect_from_env(out: *mut *mut mw_group) -> mw_status {
    guard("mw_connect_from_env", || {
        if out.is_null() {
            return Err(Failure::invalid("out is NULL".into()));
        }
        let inner = mw::Node::from_env()?.connect()?;
        let g = Box::into_raw(Box::new(mw_group { inner }));
        // SAFETY: `out` is non-NULL and valid for a write (the contract).
        unsafe { out.write(g) };
        Ok(())
    })
}

/// A world of `n` ranks inside this process (`meshwork::local`): `out[r]`
/// receives rank `r`'s group. Each rank must be driven by its own thread,
/// like ranks in separate processes. Free each with `mw_free`.
///
/// # Safety
/// `out` is NULL (`MW_INVALID_ARGUMENT`) or valid for `n` pointer writes.
#[no_mangle]
pub unsafe extern "C" fn mw_local(n: u32, out: *mut *mut mw_group) -> mw_status {
    guard("mw_local", || {
        if out.is_null() {
            return Err(Failure::invalid("out is NULL".into()));
        }
        let world = mw::local(n)?;
        for (r, inner) in world.into_iter().enumerate() {
            let g = Box::into_raw(Box::new(mw_group { inner }));
            // SAFETY: `out` is valid for `n` writes and `r < n`.
            unsafe { out.add(r).write(g) };
        }
        Ok(())
    })
}

/// This rank's number in `g` (0-based); `UINT32_MAX` for NULL.
///
/// # Safety
/// `g` is NULL or a live group.
#[no_mangle]
pub unsafe extern "C" fn mw_rank(g: *const mw_group) -> u32 {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller passes NULL or a live group.
        unsafe { g.as_ref() }.map_or(u32::MAX, |g| g.inner.rank())
    }))
    .unwrap_or(u32::MAX)
}

/// The number of ranks in `g`; 0 for NULL.
///
/// # Safety
/// `g` is NULL or a live group.
#[no_mangle]
pub unsafe extern "C" fn mw_world_size(g: *const mw_group) -> u32 {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller passes NULL or a live group.
        unsafe { g.as_ref() }.map_or(0, |g| g.inner.world_size())
    }))
    .unwrap_or(0)
}

/// Flush, confirm with every peer and close (every rank calls it);
/// idempotent. Afterwards every call but `mw_free` is `MW_SHUT_DOWN`.
///
/// # Safety
/// `g` is NULL (`MW_INVALID_ARGUMENT`) or a live group.
#[no_mangle]
pub unsafe extern "C" fn mw_shutdown(g: *mut mw_group) -> mw_status {
    guard("mw_shutdown", || {
        // SAFETY: the caller passes NULL or a live group.
        Ok(unsafe { group(g) }?.shutdown()?)
    })
}

/// Release `g` (without the confirmation of `mw_shutdown`). NULL: no-op.
///
/// # Safety
/// `g` is NULL or a live group, not used again afterwards by any thread.
#[no_mangle]
pub unsafe extern "C" fn mw_free(g: *mut mw_group) {
    if g.is_null() {
        return;
    }
    // SAFETY: `g` came from Box::into_raw in mw_connect_from_env/mw_local
    // and is freed once (the contract).
    let boxed = unsafe { Box::from_raw(g) };
    // Dropping a group closes its links; a panic there must not unwind
    // into C, and there is no status to report it with.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(boxed)));
}

/// This thread's last failure message, `""` if no call on this thread has
/// failed. The string stays valid until the next failing call on this
/// thread.
#[no_mangle]
pub extern "C" fn mw_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// A static, NUL-terminated name for `s` (`"MW_TIMEOUT"`, …);
/// `"MW_UNKNOWN_STATUS"` for a value that is no status.
#[no_mangle]
pub extern "C" fn mw_status_string(s: mw_status) -> *const c_char {
    status_name(s).as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last_error() -> String {
        // SAFETY: mw_last_error returns a NUL-terminated string that lives
        // until the next failure on this thread.
        unsafe { CStr::from_ptr(mw_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_mw_internal_with_its_message() {
        assert_eq!(last_error(), "");
        let s = guard("mw_test", || panic!("boom {}", 42));
        assert_eq!(s, MW_INTERNAL);
        assert_eq!(last_error(), "mw_test: internal error: boom 42");
        // A success leaves the last failure in place.
        assert_eq!(guard("mw_test", || Ok(())), MW_OK);
        assert_eq!(last_error(), "mw_test: internal error: boom 42");
    }

    #[test]
    fn every_status_has_its_own_name_and_every_variant_its_own_status() {
        let names: std::collections::HashSet<_> = (MW_OK..=MW_EXPELLED).map(status_name).collect();
        assert_eq!(names.len(), (MW_EXPELLED + 1) as usize);
        assert!(!names.contains(c"MW_UNKNOWN_STATUS"));
        assert_eq!(status_name(MW_EXPELLED + 1), c"MW_UNKNOWN_STATUS");
        let errors = [
            mw::Error::InvalidArgument(String::new()),
            mw::Error::Timeout {
                op: String::new(),
                waiting_on: vec![],
                detail: String::new(),
            },
            mw::Error::PeerDisconnected { rank: 1 },
            mw::Error::RankConflict { rank: 1 },
            mw::Error::ClusterTokenMismatch,
            mw::Error::TokenRequired,
            mw::Error::TokenTooShort { len: 3 },
            mw::Error::ProtocolMismatch { ours: 1, theirs: 2 },
            mw::Error::WorldMismatch { ours: 1, theirs: 2 },
            mw::Error::FormationTimeout { missing: vec![] },
            mw::Error::ConnectionFailed {
                rank: 1,
                reason: String::new(),
            },
            mw::Error::CollectiveMismatch {
                op: String::new(),
                ours: String::new(),
                theirs: String::new(),
                rank: 1,
            },
            mw::Error::MessageTooLarge { len: 2, max: 1 },
            mw::Error::RpcUnknown { fn_id: 1, rank: 1 },
            mw::Error::RpcFailed {
                fn_id: 1,
                rank: 1,
                reason: String::new(),
            },
            mw::Error::ShutdownIncomplete { ranks: vec![] },
            mw::Error::ShutDown,
            mw::Error::Io(std::io::Error::other("x")),
            mw::Error::Revoked,
            mw::Error::GroupShrunk { failed: vec![] },
            mw::Error::NoQuorum {
                reachable: vec![],
                needed: 2,
            },
            mw::Error::Expelled { rank: 1 },
        ];
        let codes: Vec<mw_status> = errors.iter().map(status_of).collect();
        // MW_INTERNAL (19) is for panics and unknown errors; Revoked came
        // later and took the next code.
        let want: Vec<mw_status> = (MW_INVALID_ARGUMENT..MW_INTERNAL)
            .chain([MW_REVOKED, MW_GROUP_SHRUNK, MW_NO_QUORUM, MW_EXPELLED])
            .collect();
        assert_eq!(codes, want);
    }
}
