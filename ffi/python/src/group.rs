//! `meshwork.ProcessGroup`: one rank's handle on a group. Every method
//! checks its arguments with the GIL held, then releases the GIL for the
//! whole of the blocking call (`ProcessGroup::blocking`), so other Python
//! threads run while it waits, and Ctrl-C stops it (`interrupt.rs`).

use crate::array::{array, numpy_name, Access, Array, DType};
use crate::errors::{invalid, to_py};
use crate::interrupt;
use crate::with_dtype;
use mw::{Buffers, Call, ReduceOp};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::Arc;
use std::time::Duration;

/// The operator named `op`: "sum", "prod", "min", "max" or "avg".
pub(crate) fn reduce_op(py: Python<'_>, op: &str) -> PyResult<ReduceOp> {
    Ok(match op {
        "sum" => ReduceOp::Sum,
        "prod" => ReduceOp::Prod,
        "min" => ReduceOp::Min,
        "max" => ReduceOp::Max,
        "avg" => ReduceOp::Avg,
        other => {
            return Err(invalid(
                py,
                format!("unknown op {other:?}; use \"sum\", \"prod\", \"min\", \"max\" or \"avg\""),
            ))
        }
    })
}

/// The one element type of `send` and `recv`.
pub(crate) fn same_dtype(py: Python<'_>, send: &Array<'_>, recv: &Array<'_>) -> PyResult<DType> {
    let (s, r) = (send.dtype(py)?, recv.dtype(py)?);
    if s != r {
        return Err(invalid(
            py,
            format!(
                "send is {} but recv is {}; give both the same dtype",
                numpy_name(s),
                numpy_name(r)
            ),
        ));
    }
    Ok(s)
}

/// A group of ranks, as seen by one rank: from `meshwork.connect()` or
/// `meshwork.local(n)`.
///
/// Every rank must call a group's collectives in the same order with
/// matching arguments. Arrays are numpy arrays (used in place, no copy) or
/// CPU torch tensors (through a copy, checked unchanged before the result
/// is written back; in place after `meshwork.set_torch_in_place(True)`),
/// C-contiguous, writable where the call writes them.
/// Each call blocks until this rank's part is done, with the GIL released,
/// and fails with a `meshwork.Error` subclass; nothing waits longer than
/// the group's `timeout` without progress. Ctrl-C during a call on the
/// main thread raises `KeyboardInterrupt` at once and revokes the group.
/// A group may be used from several threads at once.
#[pyclass(frozen, module = "meshwork", name = "ProcessGroup")]
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pub(crate) inner: Arc<mw::ProcessGroup>,
}

impl ProcessGroup {
    /// `rank` as a rank of this group, or `InvalidArgument` naming `what`.
    pub(crate) fn rank_arg(&self, py: Python<'_>, rank: i64, what: &str) -> PyResult<u32> {
        let world = self.inner.world_size();
        u32::try_from(rank)
            .ok()
            .filter(|&r| r < world)
            .ok_or_else(|| {
                invalid(
                    py,
                    format!("{what} {rank} is out of range; this group has ranks 0..{world}"),
                )
            })
    }

    /// Run `call` on this group with the GIL released: on the main
    /// thread, Ctrl-C meanwhile revokes the group (every member's pending
    /// and later calls on it fail) and the call raises
    /// `KeyboardInterrupt` (`interrupt.rs`).
    pub(crate) fn blocking<T: Send>(
        &self,
        py: Python<'_>,
        call: impl Send + FnOnce(&mw::ProcessGroup) -> mw::Result<T>,
    ) -> PyResult<T> {
        interrupt::revocable(py, &self.inner, call)
    }

    /// A call that a revocation does not end (`agree`, `shrink`, `grow`,
    /// `shutdown`), with the GIL released: on the main thread, Ctrl-C
    /// raises `KeyboardInterrupt` at once and the call runs on to its end
    /// (`interrupt.rs`).
    fn abandonable<T: Send + 'static>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&mw::ProcessGroup) -> mw::Result<T> + Send + 'static,
    ) -> PyResult<T> {
        let g = Arc::clone(&self.inner);
        interrupt::abandonable(py, move || call(&g))
    }

    /// An in-place collective on one array, through meshwork's one entry
    /// (`blocking`).
    fn in_place(&self, py: Python<'_>, a: &Bound<'_, PyAny>, call: Call) -> PyResult<()> {
        let mut a = array(a, "a", Access::Update)?;
        let dtype = a.dtype(py)?;
        let buf = a.bytes_mut();
        self.blocking(py, |g| g.call_bytes(call, dtype, Buffers::InPlace(buf)))?;
        a.write_back()
    }

    /// A collective from `send` into `recv`; either may be `None` where
    /// the call does not use it on this rank (then it is empty).
    fn send_recv(
        &self,
        py: Python<'_>,
        send: Option<&Bound<'_, PyAny>>,
        recv: Option<&Bound<'_, PyAny>>,
        call: Call,
    ) -> PyResult<()> {
        let send = send.map(|s| array(s, "send", Access::Read)).transpose()?;
        let mut recv = recv.map(|r| array(r, "recv", Access::Write)).transpose()?;
        let dtype = match (&send, &recv) {
            (Some(s), Some(r)) => {
                s.disjoint(r, py)?;
                same_dtype(py, s, r)?
            }
            (Some(a), None) | (None, Some(a)) => a.dtype(py)?,
            (None, None) => return Err(invalid(py, "send and recv are both None".into())),
        };
        let s: &[u8] = send.as_ref().map_or(&[], |s| s.bytes());
        let r: &mut [u8] = match recv.as_mut() {
            Some(r) => r.bytes_mut(),
            None => &mut [],
        };
        self.blocking(py, |g| {
            g.call_bytes(call, dtype, Buffers::SendRecv { send: s, recv: r })
        })?;
        recv.map_or(Ok(()), Array::write_back)
    }
}

#[pymethods]
impl ProcessGroup {
    /// This rank's number, 0 .. world_size - 1.
    #[getter]
    fn rank(&self) -> u32 {
        self.inner.rank()
    }

    /// The number of ranks in the group.
    #[getter]
    fn world_size(&self) -> u32 {
        self.inner.world_size()
    }

    /// The deadline of every blocking call, in seconds: a call fails with
    /// `meshwork.Timeout` when the ranks it waits on make no progress for
    /// that long (default 60, or `TIMEOUT_S`).
    #[getter]
    fn timeout(&self) -> f64 {
        self.inner.timeout().as_secs_f64()
    }

    /// Set the deadline of every blocking call, in seconds (> 0).
    fn set_timeout(&self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        let t = Duration::try_from_secs_f64(seconds)
            .ok()
            .filter(|t| !t.is_zero())
            .ok_or_else(|| {
                invalid(
                    py,
                    format!("timeout {seconds} is not a positive number of seconds"),
                )
            })?;
        self.inner.set_timeout(t);
        Ok(())
    }

    /// Reduce `a` over every rank with `op` ("sum", "prod", "min", "max",
    /// "avg" — avg for float dtypes only); every rank receives the result
    /// in `a`, in place. Float results are bitwise identical on every rank.
    #[pyo3(signature = (a, op = "sum"))]
    fn all_reduce(&self, py: Python<'_>, a: &Bound<'_, PyAny>, op: &str) -> PyResult<()> {
        let op = reduce_op(py, op)?;
        self.in_place(py, a, Call::AllReduce { op })
    }

    /// Copy `root`'s `a` into every rank's `a` (same size everywhere).
    #[pyo3(signature = (a, root = 0))]
    fn broadcast(&self, py: Python<'_>, a: &Bound<'_, PyAny>, root: i64) -> PyResult<()> {
        let root = self.rank_arg(py, root, "root")?;
        self.in_place(py, a, Call::Broadcast { root })
    }

    /// Every rank's `send`, concatenated in rank order, into every rank's
    /// `recv` (world_size × send.size elements).
    fn all_gather(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.send_recv(py, Some(send), Some(recv), Call::AllGather)
    }

    /// Reduce `send` (world_size × recv.size elements) over every rank with
    /// `op`; rank r receives block r of the result in `recv`.
    #[pyo3(signature = (send, recv, op = "sum"))]
    fn reduce_scatter(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        op: &str,
    ) -> PyResult<()> {
        let op = reduce_op(py, op)?;
        self.send_recv(py, Some(send), Some(recv), Call::ReduceScatter { op })
    }

    /// Reduce `a` over every rank with `op` into `root`'s `a`; the other
    /// ranks' `a` may be overwritten with partial results.
    #[pyo3(signature = (a, op = "sum", root = 0))]
    fn reduce(&self, py: Python<'_>, a: &Bound<'_, PyAny>, op: &str, root: i64) -> PyResult<()> {
        let op = reduce_op(py, op)?;
        let root = self.rank_arg(py, root, "root")?;
        self.in_place(py, a, Call::Reduce { op, root })
    }

    /// Block j of rank i's `send` into block i of rank j's `recv`; both
    /// hold world_size equal blocks.
    fn all_to_all(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.send_recv(py, Some(send), Some(recv), Call::AllToAll)
    }

    /// Every rank's `send`, concatenated in rank order, into `root`'s
    /// `recv` (world_size × send.size elements). `recv` is not used on the
    /// other ranks and may be None there.
    #[pyo3(signature = (send, recv = None, root = 0))]
    fn gather(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: Option<&Bound<'_, PyAny>>,
        root: i64,
    ) -> PyResult<()> {
        let root = self.rank_arg(py, root, "root")?;
        let recv = recv.filter(|_| self.inner.rank() == root);
        if self.inner.rank() == root && recv.is_none() {
            return Err(invalid(py, "gather: the root needs a recv array".into()));
        }
        self.send_recv(py, Some(send), recv, Call::Gather { root })
    }

    /// Block r of `root`'s `send` (world_size equal blocks) into rank r's
    /// `recv`. `send` is not used on the other ranks and may be None there.
    #[pyo3(signature = (send, recv, root = 0))]
    fn scatter(
        &self,
        py: Python<'_>,
        send: Option<&Bound<'_, PyAny>>,
        recv: &Bound<'_, PyAny>,
        root: i64,
    ) -> PyResult<()> {
        let root = self.rank_arg(py, root, "root")?;
        let send = send.filter(|_| self.inner.rank() == root);
        if self.inner.rank() == root && send.is_none() {
            return Err(invalid(py, "scatter: the root needs a send array".into()));
        }
        self.send_recv(py, send, Some(recv), Call::Scatter { root })
    }

    /// Inclusive prefix reduction in place: rank r's `a` becomes the
    /// reduction with `op` of ranks 0..=r's.
    #[pyo3(signature = (a, op = "sum"))]
    fn scan(&self, py: Python<'_>, a: &Bound<'_, PyAny>, op: &str) -> PyResult<()> {
        let op = reduce_op(py, op)?;
        self.in_place(py, a, Call::Scan { op })
    }

    /// Exclusive prefix reduction in place: rank r's `a` becomes the
    /// reduction with `op` of ranks 0..r's; rank 0's becomes the
    /// operator's identity.
    #[pyo3(signature = (a, op = "sum"))]
    fn exclusive_scan(&self, py: Python<'_>, a: &Bound<'_, PyAny>, op: &str) -> PyResult<()> {
        let op = reduce_op(py, op)?;
        self.in_place(py, a, Call::ExclusiveScan { op })
    }

    /// Wait until every rank has called it.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        self.blocking(py, |g| g.barrier())
    }

    /// Send the bytes of `a` (any dtype, C-contiguous) to rank `dst` under
    /// `tag` (0 .. 2**64 - 1). Returns once they are buffered: `a` may be
    /// reused at once. Messages on one (sender, tag) arrive in order.
    #[pyo3(signature = (a, dst, tag = 0))]
    fn send(&self, py: Python<'_>, a: &Bound<'_, PyAny>, dst: i64, tag: i128) -> PyResult<()> {
        let dst = self.rank_arg(py, dst, "dst")?;
        let tag = tag_arg(py, tag)?;
        let a = array(a, "a", Access::Read)?;
        let data = a.bytes();
        self.blocking(py, |g| g.send_bytes(data, dst, tag))
    }

    /// Receive the next message from rank `src` under `tag` into `a`
    /// (writable, C-contiguous), whose size in bytes must be the message's:
    /// a message of another length raises `InvalidArgument` and stays
    /// queued for a receive with the right size.
    #[pyo3(signature = (a, src, tag = 0))]
    fn recv(&self, py: Python<'_>, a: &Bound<'_, PyAny>, src: i64, tag: i128) -> PyResult<()> {
        let src = self.rank_arg(py, src, "src")?;
        let tag = tag_arg(py, tag)?;
        let mut a = array(a, "a", Access::Write)?;
        let buf = a.bytes_mut();
        self.blocking(py, |g| g.recv(buf, src, tag))?;
        a.write_back()
    }

    /// The size of every rank's symmetric heap in bytes (`HEAP_MB`; 0:
    /// none).
    #[getter]
    fn heap_bytes(&self) -> usize {
        self.inner.heap_bytes()
    }

    /// Write the bytes of `a` into rank `dst`'s heap at `offset`; returns
    /// once they are there (`dst` calls nothing).
    fn put(&self, py: Python<'_>, dst: i64, offset: i64, a: &Bound<'_, PyAny>) -> PyResult<()> {
        let dst = self.rank_arg(py, dst, "dst")?;
        let offset = offset_arg(py, offset)?;
        let a = array(a, "a", Access::Read)?;
        let data = a.bytes();
        self.blocking(py, |g| g.put(dst, offset, data))
    }

    /// Read `a`'s size in bytes of rank `src`'s heap at `offset` into `a`.
    fn get(&self, py: Python<'_>, src: i64, offset: i64, a: &Bound<'_, PyAny>) -> PyResult<()> {
        let src = self.rank_arg(py, src, "src")?;
        let offset = offset_arg(py, offset)?;
        let mut a = array(a, "a", Access::Write)?;
        let buf = a.bytes_mut();
        self.blocking(py, |g| g.get(src, offset, buf))?;
        a.write_back()
    }

    /// Add `value` to the 8-byte word at `offset` of `dst`'s heap; the
    /// previous value.
    fn fetch_add(&self, py: Python<'_>, dst: i64, offset: i64, value: u64) -> PyResult<u64> {
        let dst = self.rank_arg(py, dst, "dst")?;
        let offset = offset_arg(py, offset)?;
        self.blocking(py, |g| g.fetch_add(dst, offset, value))
    }

    /// Set the word at `offset` of `dst`'s heap to `new` if it holds
    /// `expected`; the previous value either way.
    fn compare_swap(
        &self,
        py: Python<'_>,
        dst: i64,
        offset: i64,
        expected: u64,
        new: u64,
    ) -> PyResult<u64> {
        let dst = self.rank_arg(py, dst, "dst")?;
        let offset = offset_arg(py, offset)?;
        self.blocking(py, |g| g.compare_swap(dst, offset, expected, new))
    }

    /// The word at `offset` of this rank's heap, read atomically.
    fn atomic_load(&self, py: Python<'_>, offset: i64) -> PyResult<u64> {
        let offset = offset_arg(py, offset)?;
        self.inner.atomic_load(offset).map_err(|e| to_py(py, e))
    }

    /// Write the bytes of `a` into this rank's own heap at `offset`.
    fn heap_write(&self, py: Python<'_>, offset: i64, a: &Bound<'_, PyAny>) -> PyResult<()> {
        let offset = offset_arg(py, offset)?;
        let a = array(a, "a", Access::Read)?;
        self.inner
            .heap_write(offset, a.bytes())
            .map_err(|e| to_py(py, e))
    }

    /// Read this rank's own heap at `offset` into `a`.
    fn heap_read(&self, py: Python<'_>, offset: i64, a: &Bound<'_, PyAny>) -> PyResult<()> {
        let offset = offset_arg(py, offset)?;
        let mut a = array(a, "a", Access::Write)?;
        self.inner
            .heap_read(offset, a.bytes_mut())
            .map_err(|e| to_py(py, e))?;
        a.write_back()
    }

    /// The ranks this rank knows have failed, ascending: gone without a
    /// goodbye, silent for a whole deadline, or a stopped process here.
    fn failed(&self) -> Vec<u32> {
        self.inner.failed()
    }

    /// Revoke the group: every member's pending and later calls raise
    /// `meshwork.Revoked`.
    fn revoke(&self) {
        self.inner.revoke();
    }

    /// Fault-tolerant agreement: every live member calls it and gets the
    /// same `(AND of the survivors' flags, failed ranks)`, even if members
    /// fail during it; works on a revoked group.
    #[pyo3(signature = (flags = u64::MAX))]
    fn agree(&self, py: Python<'_>, flags: u64) -> PyResult<(u64, Vec<u32>)> {
        self.abandonable(py, move |g| g.agree(flags))
    }

    /// A new group of the survivors (agreed failed ranks left out, the rest
    /// renumbered in order); every live member calls it.
    fn shrink(&self, py: Python<'_>) -> PyResult<ProcessGroup> {
        let inner = self.abandonable(py, |g| g.shrink())?;
        Ok(ProcessGroup { inner })
    }

    /// A larger group: every member calls it; this group's ranks keep
    /// their numbers and `joiners` new processes (`meshwork.join_running()`)
    /// take the next ones, through the job's seed. This group stays usable.
    fn grow(&self, py: Python<'_>, joiners: u32) -> PyResult<ProcessGroup> {
        let inner = self.abandonable(py, move |g| g.grow(joiners))?;
        Ok(ProcessGroup { inner })
    }

    /// Back into the job from a stale group (`meshwork.NoQuorum`,
    /// `meshwork.Expelled`: the network cut this rank off and the others
    /// went on): joins the job's seed as a new process would and returns
    /// the grown group once the members call `grow`.
    fn rejoin(&self, py: Python<'_>) -> PyResult<ProcessGroup> {
        let inner = self.abandonable(py, |g| g.rejoin())?;
        Ok(ProcessGroup { inner })
    }

    /// Whether the group is stale: an agreement here ended without quorum,
    /// or the others went on without this rank.
    #[getter]
    fn is_stale(&self) -> bool {
        self.inner.is_stale()
    }

    /// Flush, confirm with every peer and close; every rank calls it.
    /// Afterwards every call raises `meshwork.ShutDown`. Idempotent.
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        self.abandonable(py, |g| g.shutdown())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving a `with` block shuts the group down (exceptions propagate).
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.shutdown(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<meshwork.ProcessGroup rank {} of {}>",
            self.inner.rank(),
            self.inner.world_size()
        )
    }
}

/// A tag: an int in 0 .. 2**64 - 1, else `InvalidArgument`.
fn tag_arg(py: Python<'_>, tag: i128) -> PyResult<u64> {
    u64::try_from(tag).map_err(|_| invalid(py, format!("tag {tag} is not in 0 .. 2**64 - 1")))
}

/// Time `iters` calls of `all_reduce(a, op)` made from Rust on `group`'s
/// rank: the very call `ProcessGroup.all_reduce` makes, without Python
/// between calls. Returns the seconds they took. Every rank calls it with
/// the same arguments. For `examples/python/bench.py`, which compares it
/// with the same loop written in Python in the same run.
#[pyfunction]
#[pyo3(signature = (group, a, iters, op = "sum"))]
pub(crate) fn _rust_all_reduce_loop(
    py: Python<'_>,
    group: &ProcessGroup,
    a: &Bound<'_, PyAny>,
    iters: u32,
    op: &str,
) -> PyResult<f64> {
    let op = reduce_op(py, op)?;
    let mut a = array(a, "a", Access::Update)?;
    let seconds = with_dtype!(a.dtype(py)?, T => {
        let buf = a.slice_mut::<T>();
        group.blocking(py, |g| {
            let start = std::time::Instant::now();
            for _ in 0..iters {
                g.all_reduce(buf, op)?;
            }
            Ok(start.elapsed().as_secs_f64())
        })
    })?;
    a.write_back()?;
    Ok(seconds)
}

/// A heap offset from Python: not negative.
fn offset_arg(py: Python<'_>, offset: i64) -> PyResult<usize> {
    usize::try_from(offset).map_err(|_| invalid(py, format!("offset {offset} is negative")))
}
