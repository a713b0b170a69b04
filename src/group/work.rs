//! `Work`: the handle of a non-blocking operation.

use crate::error::{Error, Result};
use std::fmt;
use std::sync::{Arc, Condvar, Mutex};

/// The pending result of a non-blocking operation (`all_reduce_nb`, …).
///
/// The operation progresses on the group's own thread whether or not anyone
/// waits; handles may be waited in any order, and an operation whose handle
/// is dropped still completes (its result is discarded). Every operation
/// has the group's deadline, so `wait` always returns.
pub struct Work<R> {
    slot: Arc<Slot<R>>,
}

pub(crate) struct Slot<R> {
    result: Mutex<Option<Result<R>>>,
    done: Condvar,
}

impl<R> Slot<R> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Slot {
            result: Mutex::new(None),
            done: Condvar::new(),
        })
    }

    pub(crate) fn complete(&self, result: Result<R>) {
        *self.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        self.done.notify_all();
    }
}

impl<R> Work<R> {
    pub(crate) fn pending(slot: Arc<Slot<R>>) -> Work<R> {
        Work { slot }
    }

    /// A handle that is already complete (an argument error, a world of one).
    pub(crate) fn ready(result: Result<R>) -> Work<R> {
        let slot = Slot::new();
        slot.complete(result);
        Work { slot }
    }

    /// Block until the operation completes and return what the blocking form
    /// would have written (or its error).
    pub fn wait(self) -> Result<R> {
        let mut result = self.slot.result.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = result.take() {
                return r;
            }
            result = self
                .slot
                .done
                .wait(result)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// [`wait`](Self::wait) at most `timeout`: the result, or the handle
    /// back (`Err`) if the operation has not completed by then (it goes
    /// on; wait again, or drop the handle).
    pub fn wait_timeout(
        self,
        timeout: std::time::Duration,
    ) -> std::result::Result<Result<R>, Work<R>> {
        let until = std::time::Instant::now() + timeout;
        let mut result = self.slot.result.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = result.take() {
                return Ok(r);
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                drop(result);
                return Err(self);
            }
            result = self
                .slot
                .done
                .wait_timeout(result, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Whether the operation has completed; never blocks.
    pub fn is_complete(&self) -> bool {
        self.slot
            .result
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}

impl<R> fmt::Debug for Work<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Work")
            .field("complete", &self.is_complete())
            .finish()
    }
}

/// A panic inside an operation becomes this error rather than a handle that
/// never completes.
pub(crate) fn panicked(op: &str, payload: &(dyn std::any::Any + Send)) -> Error {
    Error::Io(std::io::Error::other(format!(
        "{op} panicked: {}",
        panic_message(payload)
    )))
}

/// The text a panic carried, if it was a string.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the panic carried no message".into())
}
