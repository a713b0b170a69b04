//! Arrays from Python, held for the duration of one call.
//!
//! Three ways in, tried in this order:
//! 1. CPU torch tensors (`torch.Tensor` and subclasses such as
//!    `nn.Parameter`), when `torch` is imported: staged (`torch.rs`);
//! 2. the buffer protocol (numpy arrays of standard dtypes, `bytes`,
//!    `bytearray`, `memoryview`, `array.array`): used in place, through
//!    the exporter's own view, held until the call ends;
//! 3. numpy arrays of a dtype the buffer protocol cannot describe
//!    (`ml_dtypes.bfloat16`): through a view of them as unsigned integers
//!    of the same size, made by numpy, then as in 2.
//!
//! Anything else is refused. meshwork takes no address from the object
//! itself (no `__array_interface__`, no `data_ptr` attribute, no
//! `__torch_function__` answer): only from the exporter's C code, so an
//! object cannot point meshwork at memory it does not own.
//!
//! Every way checks the same things, each failure an `InvalidArgument`
//! (a `ValueError`) naming the argument: C-contiguous, writable where the
//! call writes, aligned for its element type, and an element type
//! meshwork reduces (collectives; point-to-point takes any bytes, but no
//! Python object references).
//!
//! # Held for the call
//!
//! The call runs with the GIL released, so other Python threads run
//! meanwhile; the memory must not move or be freed under it.
//! - An exported buffer stays put: `bytearray`, `array.array` and `mmap`
//!   refuse to resize or close while exported, and numpy counts the
//!   export as a reference, so `a.resize(...)` refuses. numpy skips that
//!   count with `refcheck=False`, but never resizes an array that has a
//!   weak reference: the call holds one to every numpy array through
//!   which it reaches the memory, so that resize is refused too.
//! - A torch tensor cannot be held so. `t.resize_()`, `t.set_()`,
//!   `t.share_memory_()` and `t.untyped_storage().resize_()` on another
//!   thread free the tensor's memory at once, whatever references to the
//!   tensor, its storage or a DLPack capsule of it meshwork holds (torch
//!   keeps no count of exports; `t.numpy()` makes a storage non-resizable,
//!   but `set_` and `share_memory_` still free it). So the call works on
//!   meshwork's own copy, the stage (`torch.rs`), and the result is
//!   copied back with the GIL held once the tensor is checked unchanged;
//!   a changed tensor is an `InvalidArgument` and is not written. A numpy
//!   array over a tensor's memory (`t.numpy()`, `np.asarray(t)`) is
//!   staged the same way, checked against that tensor.
//!
//! `meshwork.set_torch_in_place(True)` turns the stage off for the whole
//! process: a torch tensor's memory is then used in place, held only by
//! torch's own contract, which the caller takes on (no resize, `set_` or
//! `share_memory_` while a call uses the tensor). The tensor is still
//! checked unchanged after a call that wrote it, but a change found then
//! may come after meshwork wrote memory the tensor no longer owns
//! (`torch.rs`, "In place, on request").

mod torch;

pub(crate) use torch::{_torch_copies, in_place_from_env, set_torch_in_place, torch_in_place};
pub(crate) use torch::{count_copy, Watched};

use crate::errors::invalid;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyMemoryView, PyType, PyWeakrefReference};
use std::ffi::{c_char, CStr};

/// An element type meshwork reduces: meshwork's own.
pub(crate) use mw::DType;

/// numpy's (and torch's) name for an element type.
pub(crate) fn numpy_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::I8 => "int8",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::I16 => "int16",
        DType::U16 => "uint16",
    }
}

const SUPPORTED: &str =
    "float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64";

/// How a call uses an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read only (a send buffer).
    Read,
    /// Overwritten whole on success, not read (a receive buffer).
    Write,
    /// Read, then written (an in-place collective).
    Update,
}

impl Access {
    fn writes(self) -> bool {
        self != Access::Read
    }

    fn reads(self) -> bool {
        self != Access::Write
    }
}

/// What keeps an array's memory alive and in place during a call.
struct Hold<'py> {
    /// A buffer-protocol view, released on drop (the exporter cannot
    /// resize or free the memory until then). Boxed: the view must not
    /// move while exported.
    view: Option<Box<ffi::Py_buffer>>,
    /// Weak references to the numpy arrays through which the memory is
    /// reached: numpy refuses to resize an array that has one, even with
    /// `refcheck=False`.
    #[allow(dead_code, reason = "held for their effect on numpy only")]
    pins: Vec<Bound<'py, PyAny>>,
    /// The torch tensor that owns the memory, until staged or lent.
    owner: Option<Bound<'py, PyAny>>,
    /// meshwork's copy of memory a torch tensor owns.
    stage: Option<torch::Stage<'py>>,
    /// The torch tensor whose memory the call uses in place
    /// (`set_torch_in_place`), as it was on entry.
    lent: Option<torch::Watch<'py>>,
}

/// One argument's memory for the duration of a call.
pub(crate) struct Array<'py> {
    /// What the call reads and writes: the caller's memory, or the stage.
    ptr: *mut u8,
    bytes: usize,
    /// The caller's memory (`ptr`, unless staged).
    target: *mut u8,
    /// The element type, or a description of the unsupported one.
    dtype: Result<DType, String>,
    what: &'static str,
    writable: bool,
    access: Access,
    hold: Hold<'py>,
}

impl std::fmt::Debug for Array<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Array")
            .field("what", &self.what)
            .field("bytes", &self.bytes)
            .field("dtype", &self.dtype)
            .field("staged", &self.hold.stage.is_some())
            .field("lent", &self.hold.lent.is_some())
            .finish()
    }
}

impl Drop for Array<'_> {
    fn drop(&mut self) {
        if let Some(view) = &mut self.hold.view {
            // SAFETY: the view was filled by a successful PyObject_GetBuffer
            // and is released once; an Array lives only while the GIL is
            // held (it is !Send and bound to 'py), so this runs attached.
            unsafe { ffi::PyBuffer_Release(&mut **view) };
        }
    }
}

impl<'py> Array<'py> {
    /// The element type, or `InvalidArgument` naming the unsupported one.
    pub(crate) fn dtype(&self, py: Python<'_>) -> PyResult<DType> {
        self.dtype.clone().map_err(|d| {
            invalid(
                py,
                format!(
                    "{}: dtype {d} is not supported; meshwork reduces {SUPPORTED}",
                    self.what
                ),
            )
        })
    }

    /// The memory as elements of `T`, which must be the type of
    /// [`Array::dtype`] (checked: size and alignment).
    pub(crate) fn slice<T: mw::Element>(&self) -> &[T] {
        let (ptr, len) = self.parts::<T>();
        // SAFETY: `ptr` is non-null and aligned for `T` (`parts`). It is
        // either the stage, owned by `hold`; or memory whose exporter keeps
        // `bytes` bytes alive and in place while its view in `hold` lives
        // (see the module's docs); or, with `set_torch_in_place` on
        // (`hold.lent`), a torch tensor's memory, which `hold` keeps
        // referenced and which the caller promised, by turning the switch
        // on, not to resize, re-point or free while the call runs (torch's
        // own contract for collectives). `hold` outlives the borrow of
        // `self`. Every bit pattern is a valid `T` (`Element: Pod`). Other
        // Python threads writing the same array during the call is the
        // caller's race, as with any C library.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }

    /// The memory as elements of `T`, writable (the array was taken with
    /// an access that writes, so it is checked writable).
    pub(crate) fn slice_mut<T: mw::Element>(&mut self) -> &mut [T] {
        assert!(
            self.writable && self.access.writes(),
            "{}: taken read-only",
            self.what
        );
        let (ptr, len) = self.parts::<T>();
        // SAFETY: as in `slice`; exclusive because `&mut self` is, and
        // `disjoint` refuses two arguments over the same bytes.
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }

    /// The raw bytes (point-to-point takes any element type).
    pub(crate) fn bytes(&self) -> &[u8] {
        self.slice::<u8>()
    }

    /// The raw bytes, writable.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        self.slice_mut::<u8>()
    }

    fn parts<T>(&self) -> (*mut T, usize) {
        let size = std::mem::size_of::<T>();
        assert!(
            self.bytes.is_multiple_of(size)
                && (self.ptr as usize).is_multiple_of(std::mem::align_of::<T>()),
            "{}: checked on entry",
            self.what
        );
        let ptr = if self.bytes == 0 {
            // An empty export may carry a null or dangling pointer.
            std::ptr::NonNull::<T>::dangling().as_ptr()
        } else {
            self.ptr.cast::<T>()
        };
        (ptr, self.bytes / size)
    }

    /// After the call that wrote this array succeeded: the stage's
    /// contents into the caller's memory, once its torch tensor is checked
    /// unchanged (else `InvalidArgument`, and nothing is written); a torch
    /// tensor used in place is checked unchanged all the same (else
    /// `InvalidArgument`, the result written already). Nothing to do for
    /// other memory used in place, or for an array the call only read.
    pub(crate) fn write_back(mut self) -> PyResult<()> {
        if !self.access.writes() {
            return Ok(());
        }
        if let Some(stage) = self.hold.stage.take() {
            return stage.write_back(self.target, self.bytes, self.what);
        }
        match &self.hold.lent {
            Some(watch) => watch.check_in_place(self.what),
            None => Ok(()),
        }
    }

    /// Whether a torch tensor owns this memory (taken by [`array_now`]):
    /// a copy of it counts for `_torch_copies`.
    pub(crate) fn torch_owned(&self) -> bool {
        self.hold.owner.is_some()
    }

    /// With `set_torch_in_place` on, for a non-blocking call: this array's
    /// memory, when a torch tensor owns it, lent to the operation as a
    /// [`Lent`], and the tensor as it is now, to be checked unchanged at
    /// `wait`. `None` when the switch is off or no torch tensor owns the
    /// memory: then the call copies. `T` must be the type of
    /// [`Array::dtype`]. For an array from [`array_now`].
    pub(crate) fn lend<T: mw::Element>(&self) -> PyResult<Option<(Lent<T>, Watched)>> {
        let Some(tensor) = self.hold.owner.as_ref().filter(|_| torch::in_place()) else {
            return Ok(None);
        };
        assert!(self.hold.stage.is_none(), "{}: lent, not staged", self.what);
        let watch = torch::Watch::new(tensor, self.target, self.bytes, self.what)?;
        let (ptr, len) = self.parts::<T>();
        let lent = Lent {
            ptr,
            len,
            _tensor: tensor.clone().unbind(),
        };
        Ok(Some((lent, watch.unbind())))
    }

    /// `InvalidArgument` when `self` and `other` share bytes (a `&` and a
    /// `&mut` slice over the same memory would be undefined behaviour, and
    /// the result would be garbage anyway).
    pub(crate) fn disjoint(&self, other: &Array<'_>, py: Python<'_>) -> PyResult<()> {
        let (a, b) = (self.target as usize, other.target as usize);
        if self.bytes > 0 && other.bytes > 0 && a < b + other.bytes && b < a + self.bytes {
            return Err(invalid(
                py,
                format!(
                    "{} and {} share memory; give separate arrays",
                    self.what, other.what
                ),
            ));
        }
        Ok(())
    }

    /// Check what every way in checks: writable if written, aligned and a
    /// whole number of elements for a known dtype.
    fn checked(self, py: Python<'_>) -> PyResult<Self> {
        if self.access.writes() && !self.writable {
            return Err(invalid(
                py,
                format!(
                    "{} is read-only and this call writes it; pass a writable array (a.copy())",
                    self.what
                ),
            ));
        }
        if let Ok(d) = self.dtype {
            if !self.bytes.is_multiple_of(d.size())
                || !(self.target as usize).is_multiple_of(d.size())
            {
                return Err(invalid(
                    py,
                    format!(
                        "{} is not aligned to its {}-byte elements; pass a copy (a.copy())",
                        self.what,
                        d.size()
                    ),
                ));
            }
        }
        Ok(self)
    }

    /// Memory a torch tensor owns is copied into a stage: the call works
    /// on that. With `set_torch_in_place` on, it is used in place instead,
    /// and the tensor's state noted.
    fn staged(mut self) -> PyResult<Self> {
        if let Some(tensor) = self.hold.owner.take() {
            if torch::in_place() {
                let watch = torch::Watch::new(&tensor, self.target, self.bytes, self.what)?;
                self.hold.lent = Some(watch);
            } else {
                let mut stage =
                    torch::Stage::new(&tensor, self.target, self.bytes, self.access, self.what)?;
                self.ptr = stage.ptr();
                self.hold.stage = Some(stage);
            }
        }
        Ok(self)
    }
}

/// Memory a torch tensor owns, lent to a non-blocking operation
/// (`ProcessGroup::all_reduce_nb_in`) with `set_torch_in_place` on: the
/// operation reads and writes it on the group's thread, without the GIL,
/// until it completes; then the `Lent` is dropped (on whatever thread:
/// PyO3 defers the tensor's decref until a thread next holds the GIL).
pub(crate) struct Lent<T> {
    /// Non-null and aligned for `T`; `len` elements.
    ptr: *mut T,
    len: usize,
    /// The tensor, kept alive as long as the operation can use its memory,
    /// even if the `meshwork.Work` is dropped unwaited.
    _tensor: Py<PyAny>,
}

// SAFETY: a `Lent` is the only Rust handle on its memory, and that
// memory is not tied to a thread (a CPU tensor's storage, from torch's
// allocator), so the operation may use it from the group's thread. The
// operation uses it (through `as_mut`) only until it completes, and it
// stays valid that long because (1) `_tensor` keeps the tensor, and so its
// storage, from being freed by its last reference going — the Lent lives
// in the operation until it completes, then in its result until `wait`,
// or is dropped unwaited with it — and (2) the caller promised, by turning
// `set_torch_in_place` on, torch's own contract for a collective in
// flight: the tensor is not resized, given other storage (`set_`,
// `share_memory_`) or freed (`untyped_storage().resize_(0)`) until its
// `Work` is waited for, and `wait` returns only once the operation has
// completed. A promise broken is caught at `wait` (the tensor is checked
// unchanged), but only after the fact, as the switch's docs say. Python
// code reading or writing the tensor meanwhile is the caller's race, as
// with any C library.
unsafe impl<T: Send> Send for Lent<T> {}

impl<T> AsMut<[T]> for Lent<T> {
    fn as_mut(&mut self) -> &mut [T] {
        // SAFETY: `ptr` is non-null and aligned for `T` and the `len`
        // elements lie inside the tensor's storage (`Array::parts`, checked
        // on entry, and `Watch::new`), valid while the Lent lives (see its
        // `Send`); exclusive because `&mut self` is. Every bit pattern is a
        // valid `T` (`lend` takes `T: Element`, which is `Pod`).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// `obj`'s memory for one call: `what` names the argument in messages.
pub(crate) fn array<'py>(
    obj: &Bound<'py, PyAny>,
    what: &'static str,
    access: Access,
) -> PyResult<Array<'py>> {
    array_now(obj, what, access)?.staged()
}

/// `obj`'s memory as it is now, not staged: for a copy made at once, with
/// the GIL held from here to the copy and nothing on the way that could
/// release it (a non-blocking call's input, copied into memory the call
/// owns; its result, copied back when it is waited for). Checked as
/// [`array`] checks.
pub(crate) fn array_now<'py>(
    obj: &Bound<'py, PyAny>,
    what: &'static str,
    access: Access,
) -> PyResult<Array<'py>> {
    let py = obj.py();
    let arr = if let Some(a) = torch::from_tensor(obj, what, access)? {
        a
    } else if let Some(a) = from_buffer(obj, what, access)? {
        a
    } else if let Some(a) = from_numpy_view(obj, what, access)? {
        a
    } else {
        return Err(invalid(
            py,
            format!(
                "{what}: expected a numpy array, a CPU torch tensor or another buffer \
                 (bytes, bytearray, memoryview, array.array); got {}",
                type_name(obj)
            ),
        ));
    };
    arr.checked(py)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "an unknown type".into())
}

fn not_contiguous(py: Python<'_>, what: &str) -> PyErr {
    invalid(
        py,
        format!(
            "{what} is not C-contiguous; pass a contiguous array (np.ascontiguousarray(a), \
             t.contiguous()) and copy results back"
        ),
    )
}

fn holds_objects(py: Python<'_>, what: &str, dtype: &str) -> PyErr {
    invalid(
        py,
        format!(
            "{what}: dtype {dtype} is not supported: its elements are references to Python \
             objects, not data"
        ),
    )
}

/// Way 2: the buffer protocol. `None` when `obj` does not export a buffer
/// (or cannot describe its dtype in one, as numpy with bfloat16).
fn from_buffer<'py>(
    obj: &Bound<'py, PyAny>,
    what: &'static str,
    access: Access,
) -> PyResult<Option<Array<'py>>> {
    let py = obj.py();
    // Pinned before the export: from then on numpy refuses to resize any
    // array on the way, even if the GIL is released before the view is
    // read (a `PyOnceLock` or `intern!` does that the first time).
    let (pins, owner) = owners(obj)?;
    let mut view = Box::new(ffi::Py_buffer::new());
    // Ask for strides and format, not for contiguity or writability: the
    // checks below give meshwork's own messages.
    // SAFETY: `obj` is a live object (we hold a reference) and `view` a
    // zeroed, writable Py_buffer; the GIL is held.
    let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_RECORDS_RO) };
    if rc != 0 {
        // Not a buffer exporter (a TypeError) or a dtype the protocol
        // cannot carry (a ValueError): let the other ways try.
        drop(PyErr::take(py));
        return Ok(None);
    }
    let (ptr, bytes, readonly, itemsize) = (view.buf, view.len, view.readonly, view.itemsize);
    // SAFETY: the view is filled; PyBuffer_IsContiguous only reads it.
    let contiguous = unsafe { ffi::PyBuffer_IsContiguous(&*view, b'C' as c_char) } == 1;
    let format = if view.format.is_null() {
        // NULL means unsigned bytes.
        b"B".to_vec()
    } else {
        // SAFETY: a non-null format is a NUL-terminated string owned by
        // the exporter for the life of the view.
        unsafe { CStr::from_ptr(view.format) }.to_bytes().to_vec()
    };
    // From here on, dropping `hold` releases the view.
    let hold = Hold {
        view: Some(view),
        pins,
        owner,
        stage: None,
        lent: None,
    };
    // numpy's name for the dtype reads better than a format code.
    let numpy_name = || {
        obj.getattr(intern!(py, "dtype"))
            .and_then(|t| t.str().map(|s| s.to_string()))
    };
    if format_has_objects(&format) {
        let name = numpy_name().unwrap_or_else(|_| String::from_utf8_lossy(&format).into());
        return Err(holds_objects(py, what, &name));
    }
    if !contiguous {
        return Err(not_contiguous(py, what));
    }
    let dtype = dtype_of_format(&format, itemsize as usize).map_err(|d| numpy_name().unwrap_or(d));
    Ok(Some(Array {
        ptr: ptr.cast(),
        bytes: bytes as usize,
        target: ptr.cast(),
        dtype,
        what,
        writable: readonly == 0,
        access,
        hold,
    }))
}

/// Whether a buffer format has Python object references (numpy's `O`
/// code) outside the field names of a struct format (`T{O:name:f:x:}`).
fn format_has_objects(format: &[u8]) -> bool {
    let mut in_name = false;
    for &c in format {
        match c {
            b':' => in_name = !in_name,
            b'O' if !in_name => return true,
            _ => {}
        }
    }
    false
}

/// What meshwork needs of `numpy`: its own attributes, looked up on
/// `numpy.ndarray` itself so that a subclass cannot answer instead.
struct Numpy {
    ndarray: Py<PyType>,
    dtype_of: Py<PyAny>,
    base_of: Py<PyAny>,
    view_of: Py<PyAny>,
    dtype: Py<PyAny>,
}

static NUMPY: PyOnceLock<Numpy> = PyOnceLock::new();

/// numpy, if it is imported (without it there is no numpy array).
fn numpy(py: Python<'_>) -> PyResult<Option<&Numpy>> {
    if let Some(np) = NUMPY.get(py) {
        return Ok(Some(np));
    }
    let modules = py.import("sys")?.getattr("modules")?;
    let Some(np) = modules.cast::<PyDict>()?.get_item("numpy")? else {
        return Ok(None);
    };
    let ndarray = np.getattr("ndarray")?.cast_into::<PyType>()?;
    let found = Numpy {
        dtype_of: ndarray.getattr("dtype")?.unbind(),
        base_of: ndarray.getattr("base")?.unbind(),
        view_of: ndarray.getattr("view")?.unbind(),
        dtype: np.getattr("dtype")?.unbind(),
        ndarray: ndarray.unbind(),
    };
    Ok(Some(NUMPY.get_or_init(py, || found)))
}

/// Whether `obj`'s type is `ndarray` or a subclass (by its type, not by
/// what `obj.__class__` claims).
fn is_ndarray(np: &Numpy, obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    obj.get_type().is_subclass(np.ndarray.bind(obj.py()))
}

/// The numpy arrays (and memoryviews) through which `obj` reaches its
/// memory, each numpy array pinned by a weak reference, and the torch
/// tensor that owns the memory, if one does (`t.numpy()`, `np.asarray(t)`
/// and views of them).
type Owners<'py> = (Vec<Bound<'py, PyAny>>, Option<Bound<'py, PyAny>>);

fn owners<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Owners<'py>> {
    let py = obj.py();
    let mut pins = Vec::new();
    let Some(np) = numpy(py)? else {
        return Ok((pins, None));
    };
    let mut at = obj.clone();
    // numpy keeps a view's base at the owner of the memory, so chains are
    // short; the bound is against a cycle.
    for _ in 0..32 {
        if torch::is_tensor(&at)? {
            return Ok((pins, Some(at)));
        }
        let next = if is_ndarray(np, &at)? {
            if let Ok(weak) = PyWeakrefReference::new(&at) {
                pins.push(weak.into_any());
            }
            np.base_of
                .bind(py)
                .call_method1(intern!(py, "__get__"), (&at,))?
        } else if at.is_exact_instance_of::<PyMemoryView>() {
            at.getattr(intern!(py, "obj"))?
        } else {
            break;
        };
        if next.is_none() {
            break;
        }
        at = next;
    }
    Ok((pins, None))
}

/// Way 3: a numpy array whose dtype the buffer protocol cannot carry
/// (`ml_dtypes.bfloat16`): a view of it as unsigned integers of the same
/// size, made by numpy, taken as a buffer. `None` when `obj` is not a
/// numpy array.
fn from_numpy_view<'py>(
    obj: &Bound<'py, PyAny>,
    what: &'static str,
    access: Access,
) -> PyResult<Option<Array<'py>>> {
    let py = obj.py();
    let Some(np) = numpy(py)? else {
        return Ok(None);
    };
    if !is_ndarray(np, obj)? {
        return Ok(None);
    }
    let dtype = np
        .dtype_of
        .bind(py)
        .call_method1(intern!(py, "__get__"), (obj,))?;
    let name: String = dtype.getattr(intern!(py, "name"))?.extract()?;
    if dtype.getattr(intern!(py, "hasobject"))?.extract::<bool>()? {
        return Err(holds_objects(py, what, &name));
    }
    let itemsize: usize = dtype.getattr(intern!(py, "itemsize"))?.extract()?;
    if ![1, 2, 4, 8].contains(&itemsize) {
        return Err(invalid(
            py,
            format!(
                "{what}: dtype {name} is not supported: numpy cannot share its memory as a \
                 buffer (a.view(np.uint8) can be sent as bytes)"
            ),
        ));
    }
    let unsigned = np.dtype.bind(py).call1((format!("u{itemsize}"),))?;
    let view = np
        .view_of
        .bind(py)
        .call1((obj, unsigned, np.ndarray.bind(py)))?;
    let Some(mut arr) = from_buffer(&view, what, access)? else {
        return Err(invalid(
            py,
            format!("{what}: numpy did not export a view of it as a buffer"),
        ));
    };
    arr.dtype = if name == "bfloat16" && itemsize == 2 {
        Ok(DType::BF16)
    } else {
        Err(name)
    };
    Ok(Some(arr))
}

/// The element type of a buffer-protocol format (`struct` module syntax)
/// with `itemsize`, or a description of it.
fn dtype_of_format(format: &[u8], itemsize: usize) -> Result<DType, String> {
    let describe = || {
        format!(
            "with buffer format {:?}",
            String::from_utf8_lossy(format).into_owned()
        )
    };
    let (order, code) = match format {
        [o @ (b'@' | b'=' | b'<' | b'>' | b'!'), rest @ ..] => (Some(*o), rest),
        rest => (None, rest),
    };
    let foreign_order = match order {
        Some(b'<') => cfg!(target_endian = "big"),
        Some(b'>' | b'!') => cfg!(target_endian = "little"),
        _ => false,
    };
    if foreign_order && itemsize > 1 {
        return Err(format!("{} (non-native byte order)", describe()));
    }
    let d = match (code, itemsize) {
        (b"f", 4) => DType::F32,
        (b"d", 8) => DType::F64,
        (b"e", 2) => DType::F16,
        (b"b", 1) => DType::I8,
        (b"B", 1) => DType::U8,
        (b"h", 2) => DType::I16,
        (b"H", 2) => DType::U16,
        (b"i" | b"l" | b"q" | b"n", 4) => DType::I32,
        (b"i" | b"l" | b"q" | b"n", 8) => DType::I64,
        (b"I" | b"L" | b"Q" | b"N", 4) => DType::U32,
        (b"I" | b"L" | b"Q" | b"N", 8) => DType::U64,
        _ => return Err(describe()),
    };
    Ok(d)
}
