//! CPU torch tensors, staged: the call reads and writes meshwork's own
//! copy, never the tensor's memory while the GIL is released.
//!
//! Why: no reference meshwork can hold keeps a tensor's memory where it
//! is. Another thread's `t.resize_(n)` (growing), `t.set_(...)`,
//! `t.share_memory_()` or `t.untyped_storage().resize_(...)` frees it at
//! once, even while meshwork holds the tensor, its storage or a DLPack
//! capsule of it (torch keeps no count of exports). Writing there from a
//! call that released the GIL would be a write into freed memory.
//!
//! How, with the GIL held throughout (so no Python code runs meanwhile):
//! 1. on entry, torch's own C code answers where the tensor's bytes are
//!    and which storage holds them ([`TensorState`]), with
//!    `__torch_function__` off so that no subclass or mode answers
//!    instead; the bytes must lie inside that storage;
//! 2. the stage is filled from them (skipped for a receive buffer, which
//!    the call overwrites whole);
//! 3. the call runs on the stage with the GIL released;
//! 4. on success, torch is asked again; only if the tensor still has the
//!    same bytes in the same storage, of the same size, at the same
//!    version (so neither resized, nor given other storage, nor written
//!    in place by another thread), is the stage copied back. Otherwise
//!    `InvalidArgument`, and the tensor is not written.
//!
//! The copies happen with the GIL held, as torch's own `copy_` would run;
//! torch itself does not guard a tensor against a resize by a thread
//! already inside a torch call, and neither can meshwork.
//!
//! The cost: one copy in and one copy out of the tensor's bytes, at
//! memory speed (docs/python.md has the measurement).
//!
//! # In place, on request
//!
//! `meshwork.set_torch_in_place(True)` (or `MESHWORK_TORCH_IN_PLACE=1`
//! at import) trades that safety for the copies, process-wide: every
//! call then uses a tensor's memory in place, as gloo and NCCL do, and
//! relies on torch's own contract for collectives, which the caller
//! accepts by turning it on: a tensor is not resized, given other storage
//! or freed while a call on it is in flight (until it returns, or its
//! `Work` is waited for). Steps 1 and 4 above still run ([`Watch`]): a
//! tensor found changed after a call that wrote it is an
//! `InvalidArgument`, but by then meshwork may have written memory the
//! tensor no longer owns. The default is off.

use super::{not_contiguous, numpy_name, Access, Array, DType, Hold};
use crate::errors::invalid;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyType};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Whether calls use torch tensors in place (`set_torch_in_place`).
static IN_PLACE: AtomicBool = AtomicBool::new(false);

/// How many times a call copied memory a torch tensor owns into or out
/// of memory meshwork owns (`_torch_copies`, for tests).
static COPIES: AtomicU64 = AtomicU64::new(0);

/// Whether calls use torch tensors in place; read once per call.
pub(crate) fn in_place() -> bool {
    IN_PLACE.load(Ordering::Relaxed)
}

/// Count one copy of memory a torch tensor owns.
pub(crate) fn count_copy() {
    COPIES.fetch_add(1, Ordering::Relaxed);
}

/// The switch's value from `MESHWORK_TORCH_IN_PLACE`, read at import:
/// `1` on, unset, empty or `0` off; anything else is refused, so that a
/// misspelt value does not silently leave the copies on (or off).
pub(crate) fn in_place_from_env(py: Python<'_>) -> PyResult<()> {
    let on = match std::env::var("MESHWORK_TORCH_IN_PLACE").as_deref() {
        Ok("1") => true,
        Ok("" | "0") | Err(std::env::VarError::NotPresent) => false,
        Ok(other) => {
            return Err(invalid(
                py,
                format!("MESHWORK_TORCH_IN_PLACE={other:?}: use 1 (in place) or 0 (copies)"),
            ))
        }
        Err(e) => return Err(invalid(py, format!("MESHWORK_TORCH_IN_PLACE: {e}"))),
    };
    IN_PLACE.store(on, Ordering::Relaxed);
    Ok(())
}

/// Use CPU torch tensors in place (`True`) or through meshwork's own copy
/// (`False`, the default), in every call of this process from now on
/// (calls under way keep the way they started with). Also set at import
/// by `MESHWORK_TORCH_IN_PLACE=1`.
///
/// In place, no copy is made, and the caller promises torch's own
/// contract for collectives: a tensor is not resized (`resize_`), given
/// other storage (`set_`, `share_memory_`) or freed
/// (`untyped_storage().resize_(0)`) while a call uses it, that is until
/// the call returns, or until its `Work` is waited for (non-blocking
/// calls: `all_reduce_nb` uses the tensor in place; the other `_nb` calls
/// still copy). After a call that wrote a tensor, meshwork still checks
/// it unchanged (data pointer, size, storage, version) and raises
/// `meshwork.InvalidArgument` if it changed; but unlike the default, the
/// call may already have written the result into memory the tensor no
/// longer owns — freed memory, or memory since given to another tensor or
/// object — which can corrupt other data or crash the process. Without
/// the switch such a change is caught before anything is written.
#[pyfunction]
pub(crate) fn set_torch_in_place(on: bool) {
    IN_PLACE.store(on, Ordering::Relaxed);
}

/// Whether calls use CPU torch tensors in place (`set_torch_in_place`).
#[pyfunction]
pub(crate) fn torch_in_place() -> bool {
    in_place()
}

/// How many times a call of this process copied memory a torch tensor
/// owns into or out of memory meshwork owns (a stage made, a non-blocking
/// call's input read or result written): for tests.
#[pyfunction]
pub(crate) fn _torch_copies() -> u64 {
    COPIES.load(Ordering::Relaxed)
}

/// What meshwork needs of `torch`, looked up once torch is imported. The
/// tensor attributes are `torch._C.TensorBase`'s own descriptors, called
/// with the tensor as argument, so that a subclass's attributes of the
/// same name are not consulted.
struct Torch {
    tensor_base: Py<PyType>,
    strided: Py<PyAny>,
    is_grad_enabled: Py<PyAny>,
    /// `torch._C.DisableTorchFunction`.
    disable_torch_function: Py<PyAny>,
    dtypes: Vec<(Py<PyAny>, DType)>,
    // Getters (`__get__(t)`).
    device: Py<PyAny>,
    layout: Py<PyAny>,
    dtype: Py<PyAny>,
    requires_grad: Py<PyAny>,
    version: Py<PyAny>,
    // Methods (`m(t)`).
    is_contiguous: Py<PyAny>,
    is_conj: Py<PyAny>,
    data_ptr: Py<PyAny>,
    numel: Py<PyAny>,
    element_size: Py<PyAny>,
    untyped_storage: Py<PyAny>,
    storage_data_ptr: Py<PyAny>,
    storage_nbytes: Py<PyAny>,
    names: Names,
}

/// The attribute names used on a tensor's way in and back, interned when
/// torch is first seen rather than by `intern!`: that (as any
/// `PyOnceLock`) releases the GIL the first time it runs, and the stage
/// relies on no release between asking torch where a tensor's bytes are
/// and copying them.
struct Names {
    get: Py<PyString>,
    enter: Py<PyString>,
    exit: Py<PyString>,
    type_: Py<PyString>,
    is_complex: Py<PyString>,
}

static TORCH: PyOnceLock<Torch> = PyOnceLock::new();

/// torch's types, if torch is imported (meshwork never imports it).
fn torch(py: Python<'_>) -> PyResult<Option<&Torch>> {
    if let Some(t) = TORCH.get(py) {
        return Ok(Some(t));
    }
    let modules = py.import("sys")?.getattr("modules")?;
    let Some(torch) = modules.cast::<PyDict>()?.get_item("torch")? else {
        return Ok(None);
    };
    let mut dtypes = Vec::new();
    // torch names its dtypes as numpy does.
    for d in DType::ALL {
        // uint32/uint64 came in torch 2.3; older versions lack them.
        if let Ok(t) = torch.getattr(numpy_name(d)) {
            dtypes.push((t.unbind(), d));
        }
    }
    let c = torch.getattr("_C")?;
    // `_TensorBase` before torch 2.1.
    let base = c
        .getattr("TensorBase")
        .or_else(|_| c.getattr("_TensorBase"))?
        .cast_into::<PyType>()?;
    let storage = c.getattr("StorageBase")?;
    let of = |name: &str| base.getattr(name).map(Bound::unbind);
    let name = |n: &str| PyString::intern(py, n).unbind();
    let t = Torch {
        strided: torch.getattr("strided")?.unbind(),
        is_grad_enabled: torch.getattr("is_grad_enabled")?.unbind(),
        disable_torch_function: c.getattr("DisableTorchFunction")?.unbind(),
        dtypes,
        device: of("device")?,
        layout: of("layout")?,
        dtype: of("dtype")?,
        requires_grad: of("requires_grad")?,
        version: of("_version")?,
        is_contiguous: of("is_contiguous")?,
        is_conj: of("is_conj")?,
        data_ptr: of("data_ptr")?,
        numel: of("numel")?,
        element_size: of("element_size")?,
        untyped_storage: of("untyped_storage")?,
        storage_data_ptr: storage.getattr("data_ptr")?.unbind(),
        storage_nbytes: storage.getattr("nbytes")?.unbind(),
        tensor_base: base.unbind(),
        names: Names {
            get: name("__get__"),
            enter: name("__enter__"),
            exit: name("__exit__"),
            type_: name("type"),
            is_complex: name("is_complex"),
        },
    };
    Ok(Some(TORCH.get_or_init(py, || t)))
}

impl Torch {
    /// The getter `desc` of `t`.
    fn get<'py>(&self, desc: &Py<PyAny>, t: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = t.py();
        desc.bind(py).call_method1(self.names.get.bind(py), (t,))
    }

    /// The method `m` of `t`, without arguments.
    fn call<'py>(&self, m: &Py<PyAny>, t: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        m.bind(t.py()).call1((t,))
    }

    /// Whether `obj` is a tensor by its type (not by what `obj.__class__`
    /// claims).
    fn is_tensor(&self, obj: &Bound<'_, PyAny>) -> PyResult<bool> {
        obj.get_type().is_subclass(self.tensor_base.bind(obj.py()))
    }
}

/// Whether `obj` is a torch tensor (false when torch is not imported).
pub(super) fn is_tensor(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    match torch(obj.py())? {
        Some(torch) => torch.is_tensor(obj),
        None => Ok(false),
    }
}

/// `torch._C.DisableTorchFunction()`, entered until dropped: torch calls
/// on this thread meanwhile skip `__torch_function__` overrides, of
/// tensor subclasses and of modes, which could answer anything (a
/// `data_ptr` of 8). Thread-local, and the GIL is held throughout.
struct TorchFunctionOff<'py> {
    ctx: Bound<'py, PyAny>,
    exit: &'py Py<PyString>,
}

impl<'py> TorchFunctionOff<'py> {
    fn enter(py: Python<'py>, torch: &'py Torch) -> PyResult<Self> {
        let ctx = torch.disable_torch_function.bind(py).call0()?;
        ctx.call_method0(torch.names.enter.bind(py))?;
        Ok(TorchFunctionOff {
            ctx,
            exit: &torch.names.exit,
        })
    }
}

impl Drop for TorchFunctionOff<'_> {
    fn drop(&mut self) {
        let py = self.ctx.py();
        let none = py.None();
        if let Err(e) = self
            .ctx
            .call_method1(self.exit.bind(py), (&none, &none, &none))
        {
            // It does not fail; if it ever did, say so rather than lose it.
            e.write_unraisable(py, Some(&self.ctx));
        }
    }
}

/// Way 1: a torch tensor, to be staged. `None` when `obj` is not one.
pub(super) fn from_tensor<'py>(
    obj: &Bound<'py, PyAny>,
    what: &'static str,
    access: Access,
) -> PyResult<Option<Array<'py>>> {
    let py = obj.py();
    let Some(torch) = torch(py)? else {
        return Ok(None);
    };
    if !torch.is_tensor(obj)? {
        return Ok(None);
    }
    let _off = TorchFunctionOff::enter(py, torch)?;
    let device = torch.get(&torch.device, obj)?;
    let kind = device.getattr(torch.names.type_.bind(py))?;
    if kind.extract::<&str>().ok() != Some("cpu") {
        return Err(invalid(
            py,
            format!("{what} is a torch tensor on {device}; meshwork takes CPU tensors (t.cpu())"),
        ));
    }
    if !torch.get(&torch.layout, obj)?.is(torch.strided.bind(py)) {
        return Err(invalid(
            py,
            format!("{what} is a sparse torch tensor; pass a dense one (t.to_dense())"),
        ));
    }
    if !torch.call(&torch.is_contiguous, obj)?.extract::<bool>()? {
        return Err(not_contiguous(py, what));
    }
    if access != Access::Read
        && torch.get(&torch.requires_grad, obj)?.extract::<bool>()?
        && torch.is_grad_enabled.bind(py).call0()?.extract::<bool>()?
    {
        // As torch refuses an in-place op on a leaf that requires grad:
        // autograd would not see the write.
        return Err(invalid(
            py,
            format!(
                "{what} requires grad and this call writes it; call it under torch.no_grad() \
                 or pass t.detach() (gradients: p.grad)"
            ),
        ));
    }
    let dtype_obj = torch.get(&torch.dtype, obj)?;
    // Only a complex tensor can be a conjugate view, and `is_conj` may
    // release the GIL (which the tests' timing relies on it not doing).
    if dtype_obj
        .getattr(torch.names.is_complex.bind(py))?
        .extract::<bool>()?
        && torch.call(&torch.is_conj, obj)?.extract::<bool>()?
    {
        // Its memory holds the values before conjugation.
        return Err(invalid(
            py,
            format!("{what} is a conjugate view; pass t.resolve_conj()"),
        ));
    }
    let dtype = torch
        .dtypes
        .iter()
        .find(|(t, _)| dtype_obj.is(t.bind(py)))
        .map(|&(_, d)| d)
        .ok_or_else(|| dtype_obj.to_string());
    let state = TensorState::of(torch, obj, what)?;
    let hold = Hold {
        view: None,
        pins: Vec::new(),
        owner: Some(obj.clone()),
        stage: None,
        lent: None,
    };
    Ok(Some(Array {
        ptr: state.data as *mut u8,
        bytes: state.bytes,
        target: state.data as *mut u8,
        dtype,
        what,
        writable: true,
        access,
        hold,
    }))
}

/// Where a tensor's bytes are, as torch's C code says: what the stage is
/// checked against before it is copied back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TensorState {
    data: usize,
    bytes: usize,
    storage: usize,
    storage_bytes: usize,
    /// The version counter, bumped by every in-place op (`resize_` and
    /// `set_` included); `None` for inference tensors, which have none.
    version: Option<u64>,
}

impl TensorState {
    /// `t`'s state; to be called with `__torch_function__` off.
    fn of(torch: &Torch, t: &Bound<'_, PyAny>, what: &str) -> PyResult<Self> {
        let py = t.py();
        // A tensor subclass without storage (a wrapper subclass) fails
        // here: say so in meshwork's terms.
        let no_memory = |e: PyErr| {
            invalid(
                py,
                format!(
                    "{what}: torch cannot give this tensor's memory ({e}); pass a plain tensor"
                ),
            )
        };
        let data: usize = torch
            .call(&torch.data_ptr, t)
            .map_err(no_memory)?
            .extract()?;
        let numel: usize = torch.call(&torch.numel, t)?.extract()?;
        let size: usize = torch.call(&torch.element_size, t)?.extract()?;
        let bytes = numel
            .checked_mul(size)
            .ok_or_else(|| invalid(py, format!("{what}: {numel} elements overflow")))?;
        let storage = torch.call(&torch.untyped_storage, t).map_err(no_memory)?;
        let storage_bytes: usize = torch.call(&torch.storage_nbytes, &storage)?.extract()?;
        let storage: usize = torch.call(&torch.storage_data_ptr, &storage)?.extract()?;
        let version = torch
            .get(&torch.version, t)
            .and_then(|v| v.extract::<u64>())
            .ok();
        Ok(TensorState {
            data,
            bytes,
            storage,
            storage_bytes,
            version,
        })
    }

    /// Whether `len` bytes at `at` lie inside the storage.
    fn holds(&self, at: usize, len: usize) -> bool {
        len == 0
            || (at >= self.storage
                && at
                    .checked_add(len)
                    .is_some_and(|end| end <= self.storage.saturating_add(self.storage_bytes)))
    }
}

/// A torch tensor as it was when a call took its memory: what the tensor
/// is checked against when the call is done.
pub(crate) struct Watch<'py> {
    tensor: Bound<'py, PyAny>,
    entry: TensorState,
}

impl<'py> Watch<'py> {
    /// `tensor`'s state now, for `bytes` bytes at `target` (the tensor's
    /// own memory, or a numpy view of it); `InvalidArgument` unless they
    /// lie inside its storage. To be called with `__torch_function__` off.
    fn take(
        torch: &Torch,
        tensor: &Bound<'py, PyAny>,
        target: *mut u8,
        bytes: usize,
        what: &str,
    ) -> PyResult<Self> {
        let py = tensor.py();
        let entry = TensorState::of(torch, tensor, what)?;
        if !entry.holds(target as usize, bytes) {
            return Err(invalid(
                py,
                format!(
                    "{what} is not inside the memory of the torch tensor it views (was the \
                     tensor resized or given other storage since?)"
                ),
            ));
        }
        Ok(Watch {
            tensor: tensor.clone(),
            entry,
        })
    }

    /// [`Watch::take`] for a call that uses the memory in place.
    pub(crate) fn new(
        tensor: &Bound<'py, PyAny>,
        target: *mut u8,
        bytes: usize,
        what: &str,
    ) -> PyResult<Self> {
        let py = tensor.py();
        let torch = torch(py)?.expect("a tensor was seen, so torch is imported");
        let _off = TorchFunctionOff::enter(py, torch)?;
        Watch::take(torch, tensor, target, bytes, what)
    }

    /// Whether torch says now that the tensor has the same bytes in the
    /// same storage, of the same size, at the same version as on entry. To
    /// be called with `__torch_function__` off.
    fn unchanged(&self, torch: &Torch, what: &str) -> bool {
        // A tensor whose storage was emptied under it may have no data
        // pointer to give: changed, too.
        TensorState::of(torch, &self.tensor, what).ok() == Some(self.entry)
    }

    /// After a call that wrote the tensor's memory in place: `Ok` if the
    /// tensor is unchanged, else `InvalidArgument`, saying that the
    /// result may have gone into memory the tensor no longer owns.
    pub(crate) fn check_in_place(&self, what: &str) -> PyResult<()> {
        let py = self.tensor.py();
        let torch = torch(py)?.expect("a tensor was seen, so torch is imported");
        let _off = TorchFunctionOff::enter(py, torch)?;
        if self.unchanged(torch, what) {
            return Ok(());
        }
        Err(invalid(
            py,
            format!(
                "{what}: its torch tensor changed while a call used its memory in place \
                 (resized, given other storage by set_ or share_memory_, or written by \
                 another thread) before the call returned or its Work was waited for. With \
                 set_torch_in_place(True) meshwork may have written the result into memory \
                 the tensor no longer owns: leave a tensor alone until its call is done"
            ),
        ))
    }

    /// The same, held without the GIL (in a non-blocking call's `Work`).
    pub(crate) fn unbind(self) -> Watched {
        Watched {
            tensor: self.tensor.unbind(),
            entry: self.entry,
        }
    }
}

/// A [`Watch`] held without the GIL.
pub(crate) struct Watched {
    tensor: Py<PyAny>,
    entry: TensorState,
}

impl Watched {
    /// The watch, with the GIL held.
    pub(crate) fn bind<'py>(&self, py: Python<'py>) -> Watch<'py> {
        Watch {
            tensor: self.tensor.bind(py).clone(),
            entry: self.entry,
        }
    }
}

/// meshwork's copy of memory that a torch tensor owns, for one call.
pub(super) struct Stage<'py> {
    /// Eight-byte words: aligned for every element type.
    words: Vec<u64>,
    watch: Watch<'py>,
}

impl<'py> Stage<'py> {
    /// A stage for `bytes` bytes at `target`, memory `tensor` owns (the
    /// tensor's own, or a numpy view of it), filled from there when the
    /// call reads it.
    pub(super) fn new(
        tensor: &Bound<'py, PyAny>,
        target: *mut u8,
        bytes: usize,
        access: Access,
        what: &str,
    ) -> PyResult<Self> {
        let py = tensor.py();
        let torch = torch(py)?.expect("a tensor was seen, so torch is imported");
        // Nothing from here to the copy releases the GIL (`Names`).
        let _off = TorchFunctionOff::enter(py, torch)?;
        let watch = Watch::take(torch, tensor, target, bytes, what)?;
        count_copy();
        let n = bytes.div_ceil(8);
        let words = if access.reads() && bytes > 0 {
            // Filled by the copy, not zeroed first: one pass over the
            // memory, not two.
            let mut words: Vec<u64> = Vec::with_capacity(n);
            // SAFETY: torch said, with the GIL held, that its storage holds
            // these bytes (`Watch::take`), and the GIL has stayed held since
            // and until the copy is done, so no Python code resized or freed
            // them. The stage has room for `n * 8 >= bytes` bytes; no
            // overlap. The last word's bytes past `bytes` (at most 7) are
            // zeroed before `set_len`, so all `n` words are initialised.
            unsafe {
                let dst = words.as_mut_ptr().cast::<u8>();
                std::ptr::copy_nonoverlapping(target, dst, bytes);
                std::ptr::write_bytes(dst.add(bytes), 0, n * 8 - bytes);
                words.set_len(n);
            }
            words
        } else {
            vec![0u64; n]
        };
        Ok(Stage { words, watch })
    }

    /// Where the call reads and writes. The words do not move when the
    /// stage does.
    pub(super) fn ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr().cast()
    }

    /// The stage into `bytes` bytes at `target` if the tensor still is as
    /// it was on entry; else `InvalidArgument` and nothing is written.
    pub(super) fn write_back(self, target: *mut u8, bytes: usize, what: &str) -> PyResult<()> {
        let py = self.watch.tensor.py();
        let torch = torch(py)?.expect("a tensor was seen, so torch is imported");
        // Nothing from here to the copy releases the GIL (`Names`).
        let _off = TorchFunctionOff::enter(py, torch)?;
        if !self.watch.unchanged(torch, what) {
            return Err(invalid(
                py,
                format!(
                    "{what}: its torch tensor changed during the call (resized, given other \
                     storage by set_ or share_memory_, or written by another thread); the \
                     result was not written into it. Leave a tensor alone while a call uses it"
                ),
            ));
        }
        if bytes > 0 {
            // SAFETY: torch said just now, with the GIL held since, that the
            // storage is where it was on entry and of the same size
            // (`unchanged`), and it held the target then (`Watch::take`).
            // The stage holds `bytes` bytes; no overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(self.words.as_ptr().cast::<u8>(), target, bytes)
            };
        }
        Ok(())
    }
}
