//! What the Rust `ProcessGroup` has beyond the collectives and
//! point-to-point: `split`, RPC, `federated_average`, compressed
//! all_reduce (`meshwork.Compressor`), `stats` and `links`. Written as
//! `group.rs` writes its calls: arguments checked with the GIL held, the
//! blocking part with it released.
//!
//! # RPC handlers
//!
//! A handler registered from Python is a Python callable that Rust calls
//! on the group's RPC worker threads. The Rust closure attaches to the
//! interpreter (takes the GIL), calls it with `(caller rank, bytes)` and
//! copies the bytes it returns. A Python exception travels to the caller
//! the way a Rust handler's panic does (`src/group/rpc.rs` catches it and
//! answers `FAILED` with its message, raised there as `RpcFailed`): the
//! closure leaves through `std::panic::resume_unwind` with the
//! exception's text as a `String` payload, after the GIL is released.
//! `resume_unwind`, unlike `panic!`, skips the panic hook, so an
//! exception prints nothing on the serving rank: the caller gets it.
//! A handler may call meshwork itself (`rpc` to another rank, `send`):
//! those calls release the GIL while they wait, as every call does.

use crate::array::{array, array_now, numpy_name, Access, DType};
use crate::errors::invalid;
use crate::group::{reduce_op, ProcessGroup};
use mw::ReduceOp;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyMemoryView};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// RPC ids from here up are meshwork's own (`ProcessGroup::register_rpc`:
/// `0xFFFF_FFF0` carries the one-sided operations).
const RESERVED_FN_IDS: u32 = 0xFFFF_FF00;

/// `v` as a u32 argument named `what`, else `InvalidArgument`.
fn u32_arg(py: Python<'_>, v: i64, what: &str) -> PyResult<u32> {
    u32::try_from(v).map_err(|_| invalid(py, format!("{what} {v} is not in 0 .. 2**32 - 1")))
}

/// An RPC id a program may use: below the reserved range.
fn fn_id_arg(py: Python<'_>, fn_id: i64) -> PyResult<u32> {
    let id = u32_arg(py, fn_id, "fn_id")?;
    if id >= RESERVED_FN_IDS {
        return Err(invalid(
            py,
            format!(
                "fn_id {id:#x} is reserved for meshwork (ids from {RESERVED_FN_IDS:#x}); use 0 .. {:#x}",
                RESERVED_FN_IDS - 1
            ),
        ));
    }
    Ok(id)
}

/// A deadline in seconds: finite and positive.
pub(crate) fn seconds_arg(py: Python<'_>, seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| {
            invalid(
                py,
                format!("timeout {seconds} is not a positive number of seconds"),
            )
        })
}

/// A weight argument: a finite float32, else `InvalidArgument`.
pub(crate) fn weight_arg(py: Python<'_>, weight: f64, op: &str) -> PyResult<f32> {
    if !weight.is_finite() || !(weight as f32).is_finite() {
        return Err(invalid(
            py,
            format!("{op}: weight {weight} is not a finite float32"),
        ));
    }
    Ok(weight as f32)
}

/// `values` as a float32 numpy array of their own.
pub(crate) fn float32_array<'py>(py: Python<'py>, values: &[f32]) -> PyResult<Bound<'py, PyAny>> {
    let bytes = PyByteArray::new(py, bytemuck::cast_slice(values));
    py.import(intern!(py, "numpy"))?
        .getattr(intern!(py, "frombuffer"))?
        .call1((bytes, intern!(py, "float32")))
}

/// A float32 array argument: `InvalidArgument` for any other dtype.
pub(crate) fn float32(py: Python<'_>, a: &crate::array::Array<'_>, op: &str) -> PyResult<()> {
    match a.dtype(py)? {
        DType::F32 => Ok(()),
        other => Err(invalid(
            py,
            format!(
                "{op}: a is {}; it takes float32 (a.astype(np.float32), then copy back)",
                numpy_name(other)
            ),
        )),
    }
}

/// Call the Python handler `f` for `fn_id` with `(src, args)` and return
/// its bytes, or the text the caller's `RpcFailed` carries.
fn call_handler(py: Python<'_>, f: &Py<PyAny>, src: u32, args: &[u8]) -> Result<Vec<u8>, String> {
    let out = f
        .bind(py)
        .call1((src, PyBytes::new(py, args)))
        .map_err(|e| e.to_string())?;
    if let Ok(b) = out.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(b) = out.cast::<PyByteArray>() {
        return Ok(b.to_vec());
    }
    if out.cast::<PyMemoryView>().is_ok() {
        // Checked as any argument is: C-contiguous, no object references.
        return array_now(&out, "the handler's result", Access::Read)
            .map(|a| a.bytes().to_vec())
            .map_err(|e| e.to_string());
    }
    let type_name = out
        .get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string());
    Err(format!(
        "the handler returned {type_name}; return bytes, bytearray or memoryview"
    ))
}

#[pymethods]
impl ProcessGroup {
    /// Split into sub-groups (a collective: every rank calls it): ranks
    /// passing the same `color` form one, numbered by `key`, ties by rank
    /// in this group. Returns this rank's sub-group, which has its own
    /// collectives, tags and RPC handlers and shares this group's links.
    fn split(&self, py: Python<'_>, color: i64, key: i64) -> PyResult<ProcessGroup> {
        let color = u32_arg(py, color, "color")?;
        let key = u32_arg(py, key, "key")?;
        let inner = self.blocking(py, |g| g.split(color, key))?;
        Ok(ProcessGroup { inner })
    }

    /// Serve `fn_id` on this rank with `handler(caller_rank, args: bytes)
    /// -> bytes` (or bytearray, memoryview), replacing an earlier handler.
    /// It runs on the group's RPC threads, taking the GIL; an exception in
    /// it raises `meshwork.RpcFailed` with its text at the caller. It may
    /// itself call meshwork (`rpc` to another rank). Ids from 0xFFFFFF00
    /// are meshwork's.
    fn register_rpc(&self, py: Python<'_>, fn_id: i64, handler: Bound<'_, PyAny>) -> PyResult<()> {
        let fn_id = fn_id_arg(py, fn_id)?;
        if !handler.is_callable() {
            return Err(invalid(
                py,
                format!(
                    "register_rpc: the handler for {fn_id} is not callable; pass a function (caller_rank, args) -> bytes"
                ),
            ));
        }
        let f = handler.unbind();
        let rank = self.inner.rank();
        self.inner.register_rpc(fn_id, move |src, args| {
            let out =
                Python::try_attach(|py| call_handler(py, &f, src, args)).unwrap_or_else(|| {
                    Err(format!(
                        "the Python interpreter of rank {rank} is shutting down"
                    ))
                });
            match out {
                Ok(bytes) => bytes,
                // The GIL is released here. The RPC worker catches this
                // and answers FAILED with the text; `resume_unwind` does
                // not run the panic hook, so nothing is printed.
                Err(reason) => std::panic::resume_unwind(Box::new(reason)),
            }
        });
        Ok(())
    }

    /// Call `fn_id` on rank `dst` with `args` (bytes-like) and return its
    /// result. Waits up to `timeout` seconds, or the group's deadline.
    /// `meshwork.RpcUnknown` if `dst` serves no such id, `RpcFailed` if
    /// its handler raised; both ranks stay usable.
    #[pyo3(signature = (dst, fn_id, args = None, timeout = None))]
    fn rpc<'py>(
        &self,
        py: Python<'py>,
        dst: i64,
        fn_id: i64,
        args: Option<&Bound<'py, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let dst = self.rank_arg(py, dst, "dst")?;
        let fn_id = fn_id_arg(py, fn_id)?;
        let timeout = timeout.map(|s| seconds_arg(py, s)).transpose()?;
        let args = args.map(|a| array(a, "args", Access::Read)).transpose()?;
        let data: &[u8] = args.as_ref().map_or(&[], |a| a.bytes());
        let out = self.blocking(py, |g| match timeout {
            Some(t) => g.rpc_with_timeout(dst, fn_id, data, t),
            None => g.rpc(dst, fn_id, data),
        })?;
        Ok(PyBytes::new(py, &out))
    }

    /// Federated averaging of the float32 array `a`, in place:
    /// `a ← Σ wᵣ·aᵣ / Σ wᵣ` over every rank, with this rank's `weight`
    /// (its sample count, say); computed in float64, rounded once, the
    /// same bits on every rank. The weights must sum to more than 0.
    fn federated_average(&self, py: Python<'_>, a: &Bound<'_, PyAny>, weight: f64) -> PyResult<()> {
        let mut a = array(a, "a", Access::Update)?;
        float32(py, &a, "federated_average")?;
        let weight = weight_arg(py, weight, "federated_average")?;
        let buf = a.slice_mut::<f32>();
        self.blocking(py, |g| g.federated_average(buf, weight))?;
        a.write_back()
    }

    /// All-reduce the float32 array `a` (`op` "sum" or "avg") sending only
    /// part of it, with error feedback through `compressor`: its residual
    /// is added first, the kept entries are reduced and written back with
    /// 0 elsewhere, and what this rank did not send becomes the residual.
    /// Every rank passes the same size and a compressor of the same kind.
    #[pyo3(signature = (a, compressor, op = "sum"))]
    fn all_reduce_compressed(
        &self,
        py: Python<'_>,
        a: &Bound<'_, PyAny>,
        compressor: &Compressor,
        op: &str,
    ) -> PyResult<()> {
        let op = reduce_op(py, op)?;
        if !matches!(op, ReduceOp::Sum | ReduceOp::Avg) {
            return Err(invalid(
                py,
                "all_reduce_compressed: only \"sum\" and \"avg\" are compressed".into(),
            ));
        }
        let mut a = array(a, "a", Access::Update)?;
        float32(py, &a, "all_reduce_compressed")?;
        let buf = a.slice_mut::<f32>();
        // The lock is taken with the GIL released, and nothing holding it
        // ever waits for the GIL.
        self.blocking(py, |g| {
            g.all_reduce_compressed(buf, op, &mut compressor.lock())
        })?;
        a.write_back()
    }

    /// Traffic with each rank, indexed by rank: a dict per rank with
    /// `sent_messages`, `sent_bytes`, `received_messages`,
    /// `received_bytes`, `queued_bytes` (received, not yet taken by a
    /// receive), `max_queued_bytes` and `single_copy_messages`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.inner
            .stats()
            .into_iter()
            .map(|s| {
                // Every field, by name: a new one fails to compile here.
                let mw::PeerStats {
                    sent_messages,
                    sent_bytes,
                    received_messages,
                    received_bytes,
                    queued_bytes,
                    max_queued_bytes,
                    single_copy_messages,
                } = s;
                let d = PyDict::new(py);
                d.set_item("sent_messages", sent_messages)?;
                d.set_item("sent_bytes", sent_bytes)?;
                d.set_item("received_messages", received_messages)?;
                d.set_item("received_bytes", received_bytes)?;
                d.set_item("queued_bytes", queued_bytes)?;
                d.set_item("max_queued_bytes", max_queued_bytes)?;
                d.set_item("single_copy_messages", single_copy_messages)?;
                Ok(d)
            })
            .collect()
    }

    /// What carries this rank's traffic to each rank, indexed by rank:
    /// "Local" (this rank), "Memory" (a `local()` world), "SharedMemory",
    /// "Tcp", "Quic", or "Relayed" (through another rank).
    fn links(&self) -> Vec<String> {
        self.inner
            .links()
            .into_iter()
            .map(|l| {
                use mw::LinkKind as L;
                match l {
                    L::Local => "Local".into(),
                    L::Memory => "Memory".into(),
                    L::SharedMemory => "SharedMemory".into(),
                    L::Tcp => "Tcp".into(),
                    L::Quic => "Quic".into(),
                    L::Relayed => "Relayed".into(),
                    // A kind added to meshwork after this was written.
                    other => format!("{other:?}"),
                }
            })
            .collect()
    }
}

/// Gradient compression with error feedback for
/// `ProcessGroup.all_reduce_compressed`: one per array that is reduced
/// again and again (a model's gradient), holding what was not sent until
/// the next call. Made by `Compressor.top_k(fraction)` or
/// `Compressor.random_k(fraction, seed)`.
#[pyclass(frozen, module = "meshwork", name = "Compressor")]
#[derive(Debug)]
pub(crate) struct Compressor {
    inner: Mutex<mw::Compressor>,
    /// How it was made, for `repr`.
    made: String,
}

impl Compressor {
    fn new(py: Python<'_>, fraction: f64, inner: mw::Compressor, made: String) -> PyResult<Self> {
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(invalid(
                py,
                format!("Compressor: fraction {fraction} is not in (0, 1]"),
            ));
        }
        Ok(Compressor {
            inner: Mutex::new(inner),
            made,
        })
    }

    /// The Rust compressor; call with the GIL released (a call using it
    /// may hold it for a whole collective).
    fn lock(&self) -> MutexGuard<'_, mw::Compressor> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl Compressor {
    /// Keep each rank's ⌈fraction·n⌉ largest |values| (0 < fraction ≤ 1);
    /// the ranks exchange (index, value) pairs.
    #[staticmethod]
    fn top_k(py: Python<'_>, fraction: f64) -> PyResult<Compressor> {
        let made = format!("top_k({fraction})");
        Compressor::new(py, fraction, mw::Compressor::top_k(fraction), made)
    }

    /// Keep ⌈fraction·n⌉ entries at indices drawn from `seed` and the
    /// call's number on the group: the same indices on every rank that
    /// passes the same seed, reduced as one dense array.
    #[staticmethod]
    fn random_k(py: Python<'_>, fraction: f64, seed: i128) -> PyResult<Compressor> {
        let seed = u64::try_from(seed).map_err(|_| {
            invalid(
                py,
                format!("Compressor: seed {seed} is not in 0 .. 2**64 - 1"),
            )
        })?;
        let made = format!("random_k({fraction}, {seed})");
        Compressor::new(py, fraction, mw::Compressor::random_k(fraction, seed), made)
    }

    /// What this rank has not sent yet, added to the array on the next
    /// call: a float32 numpy copy (empty before the first call, and at
    /// fraction 1).
    #[getter]
    fn residual<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let residual: Vec<f32> = py.detach(|| self.lock().residual().to_vec());
        float32_array(py, &residual)
    }

    fn __repr__(&self) -> String {
        format!("<meshwork.Compressor {}>", self.made)
    }
}
