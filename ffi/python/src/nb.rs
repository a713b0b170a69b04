//! Non-blocking collectives: `g.all_reduce_nb(a)` returns a
//! `meshwork.Work` at once; the operation runs on the group's own thread
//! (Rust's `*_nb`, in issue order with every other call of the group),
//! with no Python and no GIL on the way, and `work.wait()` puts the result
//! into the array the call named and returns it.
//!
//! The input is copied when the call is made, with the GIL held, into
//! memory the operation owns; the result is copied into the named array
//! when it is waited for, again with the GIL held, into wherever that
//! array's memory is then (checked as any call checks it). Nothing of the
//! caller's is touched while the GIL is released, so no array has to be
//! held still meanwhile: resizing one between the call and `wait` is the
//! caller's business, and a result that no longer fits is an
//! `InvalidArgument` at `wait`.
//!
//! Except, with `set_torch_in_place` on, `all_reduce_nb` on memory a
//! torch tensor owns: that memory is lent to the operation
//! (`ProcessGroup::all_reduce_nb_in` over an `array::Lent`), which reduces
//! it in place without the GIL, under torch's contract (the tensor is left
//! alone until `wait`); the `Work` keeps the tensor, and `wait` checks it
//! unchanged instead of copying. The other `_nb` calls copy as above.

use crate::array::{array_now, count_copy, Access, Array, Lent, Watched};
use crate::errors::{invalid, to_py};
use crate::group::{reduce_op, same_dtype, ProcessGroup};
use crate::interrupt;
use crate::with_dtype;
use mw::{Call, OwnedBuffers};
use pyo3::prelude::*;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// A Rust `Work` of any element type: waited for, its result as bytes.
trait Pending: Send {
    fn wait_for(self: Box<Self>, timeout: Duration) -> Waited;
    fn is_complete(&self) -> bool;
}

/// An operation's result, whatever its element type: its bytes.
trait Bytes: Send {
    fn bytes(&self) -> &[u8];
}

impl<T: mw::Element> Bytes for Vec<T> {
    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice::<T, u8>(self)
    }
}

impl Bytes for () {
    fn bytes(&self) -> &[u8] {
        &[]
    }
}

impl<T: Send> Bytes for Lent<T> {
    /// Nothing to copy: the result is in the tensor's memory already
    /// (`Target::Lent`).
    fn bytes(&self) -> &[u8] {
        &[]
    }
}

/// What a wait gives: the result, or the operation's error, or (past the
/// timeout) the operation back.
enum Waited {
    Done(mw::Result<Box<dyn Bytes>>),
    NotYet(Box<dyn Pending>),
}

impl<R: Bytes + 'static> Pending for mw::Work<R> {
    fn wait_for(self: Box<Self>, timeout: Duration) -> Waited {
        match (*self).wait_timeout(timeout) {
            Ok(r) => Waited::Done(r.map(|r| Box::new(r) as Box<dyn Bytes>)),
            Err(work) => Waited::NotYet(Box::new(work)),
        }
    }

    fn is_complete(&self) -> bool {
        mw::Work::is_complete(self)
    }
}

/// Where a work's result goes.
enum Target {
    /// Nowhere: a call without one (`barrier_nb`).
    Nothing,
    /// Copied into this array at `wait`.
    Copy(Py<PyAny>),
    /// Written in place by the operation into this array's memory, lent
    /// by a torch tensor (`set_torch_in_place`): `wait` checks the tensor
    /// unchanged since the call, and keeps it alive till then.
    Lent(Py<PyAny>, Watched),
}

/// Where a work stands.
enum State {
    /// Under way; `None` while a thread waits on it.
    Running(Option<Box<dyn Pending>>),
    /// Waited for: the array the result went into (`None` for a call
    /// with none), or the error it raised.
    Finished(PyResult<Option<Py<PyAny>>>),
}

/// The handle of a non-blocking call (`g.all_reduce_nb(a)`, …).
///
/// `wait()` blocks, with the GIL released, until the operation is done,
/// then writes its result into the array the call named and returns that
/// array (`None` for `barrier_nb`); it raises the `meshwork.Error` the
/// blocking call would have raised, naming the rank. `wait(timeout)`
/// raises `TimeoutError` if the operation is not done within `timeout`
/// seconds (it goes on; wait again). Every operation has the group's
/// deadline, so a plain `wait()` always returns. Waiting again returns
/// the same array (or raises the same error). A work dropped unwaited
/// still completes; its result is discarded.
#[pyclass(frozen, module = "meshwork", name = "Work")]
pub(crate) struct Work {
    state: Mutex<State>,
    /// Signalled when a wait hands the operation back or finishes it.
    turned: Condvar,
    /// Where the result goes.
    target: Target,
    what: &'static str,
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work").field("what", &self.what).finish()
    }
}

impl Work {
    fn new(pending: Box<dyn Pending>, target: Target, what: &'static str) -> Work {
        Work {
            state: Mutex::new(State::Running(Some(pending))),
            turned: Condvar::new(),
            target,
            what,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The result's bytes into the target, now, with the GIL held (for a
    /// lent target: the check that its tensor is unchanged).
    fn deliver(&self, py: Python<'_>, bytes: &[u8]) -> PyResult<Option<Py<PyAny>>> {
        let target = match &self.target {
            Target::Nothing => return Ok(None),
            Target::Lent(target, watched) => {
                watched.bind(py).check_in_place(self.what)?;
                return Ok(Some(target.clone_ref(py)));
            }
            Target::Copy(target) => target,
        };
        let bound = target.bind(py);
        let mut a = array_now(bound, self.what, Access::Write)?;
        if a.torch_owned() {
            count_copy();
        }
        let into = a.bytes_mut();
        if into.len() != bytes.len() {
            return Err(invalid(
                py,
                format!(
                    "{}: {} bytes of result, but the array holds {} now (changed since the call)",
                    self.what,
                    bytes.len(),
                    into.len()
                ),
            ));
        }
        into.copy_from_slice(bytes);
        Ok(Some(target.clone_ref(py)))
    }
}

#[pymethods]
impl Work {
    /// Block until the operation is done (at most `timeout` seconds, if
    /// given), then return the array holding its result (`None` for a
    /// call with none). Raises what the blocking call would have raised.
    /// Ctrl-C raises `KeyboardInterrupt` within 50 ms; the operation goes
    /// on, and may be waited for again.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Py<PyAny>>> {
        let timeout = timeout
            .map(|s| {
                Duration::try_from_secs_f64(s.max(0.0))
                    .map_err(|_| invalid(py, format!("timeout {s} is not a number of seconds")))
            })
            .transpose()?;
        let until = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            // Waited for in slices, between which Python's signal handlers
            // run (`interrupt::SLICE`): the operation needs no Python, and
            // a handler's exception (Ctrl-C) leaves it under way.
            py.check_signals()?;
            let left = until.map(|u| u.saturating_duration_since(std::time::Instant::now()));
            let slice = left.map_or(interrupt::SLICE, |l| l.min(interrupt::SLICE));
            // Never held while the GIL is wanted or a wait blocks.
            let pending = {
                let mut st = self.lock();
                match &mut *st {
                    State::Finished(r) => return clone_result(py, r),
                    State::Running(p) => p.take(),
                }
            };
            let Some(pending) = pending else {
                // Another thread waits on it: wait for its turn.
                if left.is_some_and(|l| l.is_zero()) {
                    return Err(not_done(self.what));
                }
                py.detach(|| {
                    let st = self.lock();
                    if matches!(&*st, State::Running(None)) {
                        drop(self.turned.wait_timeout(st, slice));
                    }
                });
                continue;
            };
            match py.detach(move || pending.wait_for(slice)) {
                Waited::NotYet(p) => {
                    *self.lock() = State::Running(Some(p));
                    self.turned.notify_all();
                    if left.is_some_and(|l| l <= slice) {
                        return Err(not_done(self.what));
                    }
                }
                Waited::Done(r) => {
                    let out = r
                        .map_err(|e| to_py(py, e))
                        .and_then(|result| self.deliver(py, result.bytes()));
                    let ret = clone_result(py, &out);
                    *self.lock() = State::Finished(out);
                    self.turned.notify_all();
                    return ret;
                }
            }
        }
    }

    /// Whether the operation is done (its result may not have been
    /// written yet: `wait()` writes it). Never blocks.
    fn is_completed(&self) -> bool {
        match &*self.lock() {
            State::Finished(_) => true,
            State::Running(Some(p)) => p.is_complete(),
            // Being waited for by another thread right now.
            State::Running(None) => false,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "<meshwork.Work {} {}>",
            self.what,
            if self.is_completed() {
                "done"
            } else {
                "pending"
            }
        )
    }
}

fn clone_result(py: Python<'_>, r: &PyResult<Option<Py<PyAny>>>) -> PyResult<Option<Py<PyAny>>> {
    match r {
        Ok(a) => Ok(a.as_ref().map(|a| a.clone_ref(py))),
        Err(e) => Err(e.clone_ref(py)),
    }
}

fn not_done(what: &str) -> PyErr {
    pyo3::exceptions::PyTimeoutError::new_err(format!(
        "the operation on {what} is not done yet; wait again"
    ))
}

impl ProcessGroup {
    /// An in-place non-blocking call: `a`'s contents now, the result into
    /// `a` at `wait`.
    fn nb_in_place(&self, py: Python<'_>, a: &Bound<'_, PyAny>, call: Call) -> PyResult<Work> {
        let arr = array_now(a, "a", Access::Update)?;
        self.nb_copied(py, a, &arr, call)
    }

    /// [`ProcessGroup::nb_in_place`] with `a` taken as `arr`.
    fn nb_copied(
        &self,
        py: Python<'_>,
        a: &Bound<'_, PyAny>,
        arr: &Array<'_>,
        call: Call,
    ) -> PyResult<Work> {
        let g = &*self.inner;
        if arr.torch_owned() {
            count_copy();
        }
        let pending = with_dtype!(arr.dtype(py)?, T => {
            start(g, call, OwnedBuffers::InPlace(arr.slice::<T>().to_vec()))
        });
        Ok(Work::new(pending, Target::Copy(a.clone().unbind()), "a"))
    }

    /// `all_reduce_nb` on `a`, taken as `arr`, if a torch tensor owns its
    /// memory and `set_torch_in_place` is on: the memory is lent to the
    /// operation, no copy. `None` (nothing started) otherwise.
    fn all_reduce_nb_lent(
        &self,
        py: Python<'_>,
        a: &Bound<'_, PyAny>,
        arr: &Array<'_>,
        op: mw::ReduceOp,
    ) -> PyResult<Option<Work>> {
        let g = &*self.inner;
        let call = Call::AllReduce { op };
        let started = with_dtype!(arr.dtype(py)?, T => arr.lend::<T>()?.map(|(lent, watched)| {
            (start(g, call, OwnedBuffers::InPlace(lent)), watched)
        }));
        Ok(started.map(|(pending, watched)| {
            Work::new(pending, Target::Lent(a.clone().unbind(), watched), "a")
        }))
    }

    /// A non-blocking call from `send` into `recv` (`None` where this rank
    /// does not use it): `send` copied now, the result copied into `recv`
    /// at `wait`.
    fn nb_send_recv(
        &self,
        py: Python<'_>,
        send: Option<&Bound<'_, PyAny>>,
        recv: Option<&Bound<'_, PyAny>>,
        call: Call,
    ) -> PyResult<Work> {
        let g = &*self.inner;
        let pending = {
            let s = send
                .map(|s| array_now(s, "send", Access::Read))
                .transpose()?;
            let r = recv
                .map(|r| array_now(r, "recv", Access::Write))
                .transpose()?;
            let (dtype, want) = match (&s, &r) {
                (Some(s), Some(r)) => (same_dtype(py, s, r)?, r.bytes().len()),
                (Some(a), None) => (a.dtype(py)?, 0),
                (None, Some(a)) => (a.dtype(py)?, a.bytes().len()),
                (None, None) => return Err(invalid(py, "send and recv are both None".into())),
            };
            if s.as_ref().is_some_and(|s| s.torch_owned()) {
                count_copy();
            }
            with_dtype!(dtype, T => {
                let send: Vec<T> = s.as_ref().map_or_else(Vec::new, |s| s.slice::<T>().to_vec());
                // As large as the array the result goes into.
                let recv = vec![<T as bytemuck::Zeroable>::zeroed(); want / std::mem::size_of::<T>()];
                start(g, call, OwnedBuffers::SendRecv { send, recv })
            })
        };
        let target = recv.map_or(Target::Nothing, |r| Target::Copy(r.clone().unbind()));
        Ok(Work::new(pending, target, "recv"))
    }
}

/// Start `call` on `bufs` through meshwork's one entry.
fn start<T, B>(g: &mw::ProcessGroup, call: Call, bufs: OwnedBuffers<B>) -> Box<dyn Pending>
where
    T: mw::Element,
    B: AsMut<[T]> + Bytes + 'static,
{
    Box::new(g.call_nb(call, bufs))
}

#[pymethods]
impl ProcessGroup {
    /// `all_reduce`, non-blocking: returns a `meshwork.Work` at once;
    /// `work.wait()` puts the result into `a` and returns it. `a` is read
    /// now, so it may be reused before `wait` — except a torch tensor with
    /// `meshwork.set_torch_in_place(True)`: that one is reduced in place,
    /// no copy, and must be left alone (not resized, re-pointed, read or
    /// written) until `wait`, which checks it unchanged.
    #[pyo3(signature = (a, op = "sum"))]
    fn all_reduce_nb(&self, py: Python<'_>, a: &Bound<'_, PyAny>, op: &str) -> PyResult<Work> {
        let op = reduce_op(py, op)?;
        let arr = array_now(a, "a", Access::Update)?;
        if let Some(work) = self.all_reduce_nb_lent(py, a, &arr, op)? {
            return Ok(work);
        }
        self.nb_copied(py, a, &arr, Call::AllReduce { op })
    }

    /// `broadcast`, non-blocking (see `all_reduce_nb`).
    #[pyo3(signature = (a, root = 0))]
    fn broadcast_nb(&self, py: Python<'_>, a: &Bound<'_, PyAny>, root: i64) -> PyResult<Work> {
        let root = self.rank_arg(py, root, "root")?;
        self.nb_in_place(py, a, Call::Broadcast { root })
    }

    /// `reduce`, non-blocking (see `all_reduce_nb`).
    #[pyo3(signature = (a, op = "sum", root = 0))]
    fn reduce_nb(
        &self,
        py: Python<'_>,
        a: &Bound<'_, PyAny>,
        op: &str,
        root: i64,
    ) -> PyResult<Work> {
        let op = reduce_op(py, op)?;
        let root = self.rank_arg(py, root, "root")?;
        self.nb_in_place(py, a, Call::Reduce { op, root })
    }

    /// `scan`, non-blocking (see `all_reduce_nb`).
    #[pyo3(signature = (a, op = "sum"))]
    fn scan_nb(&self, py: Python<'_>, a: &Bound<'_, PyAny>, op: &str) -> PyResult<Work> {
        let op = reduce_op(py, op)?;
        self.nb_in_place(py, a, Call::Scan { op })
    }

    /// `exclusive_scan`, non-blocking (see `all_reduce_nb`).
    #[pyo3(signature = (a, op = "sum"))]
    fn exclusive_scan_nb(&self, py: Python<'_>, a: &Bound<'_, PyAny>, op: &str) -> PyResult<Work> {
        let op = reduce_op(py, op)?;
        self.nb_in_place(py, a, Call::ExclusiveScan { op })
    }

    /// `all_gather`, non-blocking: `send` is read now; `wait()` fills
    /// `recv` and returns it.
    fn all_gather_nb(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
    ) -> PyResult<Work> {
        self.nb_send_recv(py, Some(send), Some(recv), Call::AllGather)
    }

    /// `reduce_scatter`, non-blocking (see `all_gather_nb`).
    #[pyo3(signature = (send, recv, op = "sum"))]
    fn reduce_scatter_nb(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        op: &str,
    ) -> PyResult<Work> {
        let op = reduce_op(py, op)?;
        self.nb_send_recv(py, Some(send), Some(recv), Call::ReduceScatter { op })
    }

    /// `all_to_all`, non-blocking (see `all_gather_nb`).
    fn all_to_all_nb(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
    ) -> PyResult<Work> {
        self.nb_send_recv(py, Some(send), Some(recv), Call::AllToAll)
    }

    /// `gather`, non-blocking (see `all_gather_nb`); `recv` at the root
    /// only.
    #[pyo3(signature = (send, recv = None, root = 0))]
    fn gather_nb(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: Option<&Bound<'_, PyAny>>,
        root: i64,
    ) -> PyResult<Work> {
        let root = self.rank_arg(py, root, "root")?;
        let here = self.inner.rank() == root;
        let recv = recv.filter(|_| here);
        if here && recv.is_none() {
            return Err(invalid(py, "gather_nb: the root needs a recv array".into()));
        }
        self.nb_send_recv(py, Some(send), recv, Call::Gather { root })
    }

    /// `scatter`, non-blocking (see `all_gather_nb`); `send` at the root
    /// only.
    #[pyo3(signature = (send, recv, root = 0))]
    fn scatter_nb(
        &self,
        py: Python<'_>,
        send: Option<&Bound<'_, PyAny>>,
        recv: &Bound<'_, PyAny>,
        root: i64,
    ) -> PyResult<Work> {
        let root = self.rank_arg(py, root, "root")?;
        let here = self.inner.rank() == root;
        let send = send.filter(|_| here);
        if here && send.is_none() {
            return Err(invalid(
                py,
                "scatter_nb: the root needs a send array".into(),
            ));
        }
        self.nb_send_recv(py, send, Some(recv), Call::Scatter { root })
    }

    /// `barrier`, non-blocking: `wait()` returns None once every rank has
    /// called it.
    fn barrier_nb(&self) -> Work {
        Work::new(
            Box::new(self.inner.barrier_nb()),
            Target::Nothing,
            "barrier",
        )
    }

    /// A group of `ranks` (ranks of this group; `ranks[i]` becomes its
    /// rank `i`) over this group's links, made without a collective:
    /// every member calls it with the same `ranks` and `key`, and the
    /// other ranks call nothing (`torch.distributed.new_group`'s shape).
    /// Use each `key` once per group. `InvalidArgument` if this rank is
    /// not among `ranks` or a rank is out of range or listed twice.
    fn subgroup(&self, py: Python<'_>, ranks: Vec<u32>, key: u64) -> PyResult<ProcessGroup> {
        let inner = self.inner.subgroup(&ranks, key).map_err(|e| to_py(py, e))?;
        Ok(ProcessGroup { inner })
    }
}
