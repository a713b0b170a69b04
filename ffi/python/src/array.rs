//! Arrays from Python, used in place: their memory is read or written
//! directly, never copied.
//!
//! Three ways in, tried in this order:
//! 1. the buffer protocol (numpy arrays of standard dtypes, `bytes`,
//!    `bytearray`, `memoryview`, `array.array`): the exporter's own view,
//!    released when the call ends;
//! 2. CPU torch tensors (`torch.Tensor` and subclasses such as
//!    `nn.Parameter`), by `data_ptr()`, when `torch` is imported;
//! 3. `__array_interface__`, for numpy dtypes that the buffer protocol
//!    cannot describe (`ml_dtypes.bfloat16`).
//!
//! Every way checks the same things, each failure an `InvalidArgument`
//! (a `ValueError`) naming the argument: C-contiguous, writable where the
//! call writes, aligned for its element type, and an element type
//! meshwork reduces (collectives; point-to-point takes any bytes).

use crate::errors::invalid;
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use std::ffi::{c_char, CStr};

/// An element type meshwork reduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DType {
    F32,
    F64,
    F16,
    BF16,
    I8,
    I32,
    I64,
    U8,
    U32,
    U64,
}

impl DType {
    /// Every type.
    const ALL: [DType; 10] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
        DType::U64,
    ];

    /// numpy's name for it.
    pub(crate) fn name(self) -> &'static str {
        match self {
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
        }
    }

    fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }
}

const SUPPORTED: &str =
    "float16, bfloat16, float32, float64, int8, int32, int64, uint8, uint32, uint64";

/// Whether a call reads an array or writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

/// What keeps an array's memory alive and pinned during a call.
enum Hold<'py> {
    /// A buffer-protocol view, released on drop (the exporter cannot
    /// resize or free the memory until then). Boxed: the view must not
    /// move while exported.
    Buffer(Box<ffi::Py_buffer>),
    /// A reference to the object (torch tensor, `__array_interface__`
    /// exporter) that owns the memory.
    Object(#[allow(dead_code, reason = "held for its reference only")] Bound<'py, PyAny>),
}

/// One argument's memory for the duration of a call.
pub(crate) struct Array<'py> {
    ptr: *mut u8,
    bytes: usize,
    /// The element type, or a description of the unsupported one.
    dtype: Result<DType, String>,
    what: &'static str,
    writable: bool,
    hold: Hold<'py>,
}

impl std::fmt::Debug for Array<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Array")
            .field("what", &self.what)
            .field("bytes", &self.bytes)
            .field("dtype", &self.dtype)
            .finish()
    }
}

impl Drop for Array<'_> {
    fn drop(&mut self) {
        if let Hold::Buffer(view) = &mut self.hold {
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
        // SAFETY: `ptr` is non-null and aligned for `T` (`parts`); the
        // exporter keeps `bytes` bytes alive while `hold` lives, which
        // outlives the borrow of `self`; every bit pattern is a valid `T`
        // (`Element: Pod`). Other Python threads writing the same array
        // during the call is the caller's race, as with any C library.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }

    /// The memory as elements of `T`, writable (the array was taken with
    /// `Access::Write`, so it is checked writable).
    pub(crate) fn slice_mut<T: mw::Element>(&mut self) -> &mut [T] {
        assert!(self.writable, "{}: taken read-only", self.what);
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

    /// `InvalidArgument` when `self` and `other` share bytes (a `&` and a
    /// `&mut` slice over the same memory would be undefined behaviour, and
    /// the result would be garbage anyway).
    pub(crate) fn disjoint(&self, other: &Array<'_>, py: Python<'_>) -> PyResult<()> {
        let (a, b) = (self.ptr as usize, other.ptr as usize);
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
    fn checked(self, py: Python<'_>, access: Access) -> PyResult<Self> {
        if access == Access::Write && !self.writable {
            return Err(invalid(
                py,
                format!(
                    "{} is read-only and this call writes it; pass a writable array (a.copy())",
                    self.what
                ),
            ));
        }
        if let Ok(d) = self.dtype {
            if !self.bytes.is_multiple_of(d.size()) || !(self.ptr as usize).is_multiple_of(d.size())
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
}

/// `obj`'s memory for one call: `what` names the argument in messages.
pub(crate) fn array<'py>(
    obj: &Bound<'py, PyAny>,
    what: &'static str,
    access: Access,
) -> PyResult<Array<'py>> {
    let py = obj.py();
    let arr = if let Some(a) = from_buffer(obj, what)? {
        a
    } else if let Some(a) = from_torch(obj, what, access)? {
        a
    } else if let Some(a) = from_array_interface(obj, what)? {
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
    arr.checked(py, access)
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

/// Way 1: the buffer protocol. `None` when `obj` does not export a buffer
/// (or cannot describe its dtype in one, as numpy with bfloat16).
fn from_buffer<'py>(obj: &Bound<'py, PyAny>, what: &'static str) -> PyResult<Option<Array<'py>>> {
    let py = obj.py();
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
    // SAFETY: the view is filled; PyBuffer_IsContiguous only reads it.
    let contiguous = unsafe { ffi::PyBuffer_IsContiguous(&*view, b'C' as c_char) } == 1;
    let format = if view.format.is_null() {
        // NULL means unsigned bytes.
        b"B".as_slice()
    } else {
        // SAFETY: a non-null format is a NUL-terminated string owned by
        // the exporter for the life of the view.
        unsafe { CStr::from_ptr(view.format) }.to_bytes()
    };
    let dtype = dtype_of_format(format, view.itemsize as usize).map_err(|d| {
        // numpy's name for it reads better than a format code.
        obj.getattr(intern!(py, "dtype"))
            .and_then(|t| t.str().map(|s| s.to_string()))
            .unwrap_or(d)
    });
    let arr = Array {
        ptr: view.buf.cast(),
        bytes: view.len as usize,
        dtype,
        what,
        writable: view.readonly == 0,
        hold: Hold::Buffer(view),
    };
    if !contiguous {
        return Err(not_contiguous(py, what));
    }
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
        (b"i" | b"l" | b"q" | b"n", 4) => DType::I32,
        (b"i" | b"l" | b"q" | b"n", 8) => DType::I64,
        (b"I" | b"L" | b"Q" | b"N", 4) => DType::U32,
        (b"I" | b"L" | b"Q" | b"N", 8) => DType::U64,
        _ => return Err(describe()),
    };
    Ok(d)
}

/// What meshwork needs of `torch`, looked up once torch is imported.
struct Torch {
    tensor: Py<PyType>,
    strided: Py<PyAny>,
    is_grad_enabled: Py<PyAny>,
    dtypes: Vec<(Py<PyAny>, DType)>,
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
        if let Ok(t) = torch.getattr(d.name()) {
            dtypes.push((t.unbind(), d));
        }
    }
    let t = Torch {
        tensor: torch.getattr("Tensor")?.cast_into::<PyType>()?.unbind(),
        strided: torch.getattr("strided")?.unbind(),
        is_grad_enabled: torch.getattr("is_grad_enabled")?.unbind(),
        dtypes,
    };
    Ok(Some(TORCH.get_or_init(py, || t)))
}

/// Way 2: a torch tensor. `None` when `obj` is not one.
fn from_torch<'py>(
    obj: &Bound<'py, PyAny>,
    what: &'static str,
    access: Access,
) -> PyResult<Option<Array<'py>>> {
    let py = obj.py();
    let Some(torch) = torch(py)? else {
        return Ok(None);
    };
    if !obj.is_instance(torch.tensor.bind(py))? {
        return Ok(None);
    }
    let device = obj.getattr(intern!(py, "device"))?;
    let kind = device.getattr(intern!(py, "type"))?;
    if kind.extract::<&str>().ok() != Some("cpu") {
        return Err(invalid(
            py,
            format!("{what} is a torch tensor on {device}; meshwork takes CPU tensors (t.cpu())"),
        ));
    }
    if !obj
        .getattr(intern!(py, "layout"))?
        .is(torch.strided.bind(py))
    {
        return Err(invalid(
            py,
            format!("{what} is a sparse torch tensor; pass a dense one (t.to_dense())"),
        ));
    }
    if !obj
        .call_method0(intern!(py, "is_contiguous"))?
        .extract::<bool>()?
    {
        return Err(not_contiguous(py, what));
    }
    if access == Access::Write
        && obj
            .getattr(intern!(py, "requires_grad"))?
            .extract::<bool>()?
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
    let dtype_obj = obj.getattr(intern!(py, "dtype"))?;
    let dtype = torch
        .dtypes
        .iter()
        .find(|(t, _)| dtype_obj.is(t.bind(py)))
        .map(|&(_, d)| d)
        .ok_or_else(|| dtype_obj.to_string());
    let ptr: usize = obj.call_method0(intern!(py, "data_ptr"))?.extract()?;
    let numel: usize = obj.call_method0(intern!(py, "numel"))?.extract()?;
    let size: usize = obj.call_method0(intern!(py, "element_size"))?.extract()?;
    let bytes = numel
        .checked_mul(size)
        .ok_or_else(|| invalid(py, format!("{what}: {numel} elements overflow")))?;
    Ok(Some(Array {
        ptr: ptr as *mut u8,
        bytes,
        dtype,
        what,
        writable: true,
        hold: Hold::Object(obj.clone()),
    }))
}

/// Way 3: `__array_interface__` (numpy arrays whose dtype the buffer
/// protocol cannot describe). `None` when `obj` has none.
fn from_array_interface<'py>(
    obj: &Bound<'py, PyAny>,
    what: &'static str,
) -> PyResult<Option<Array<'py>>> {
    let py = obj.py();
    let Ok(interface) = obj.getattr(intern!(py, "__array_interface__")) else {
        return Ok(None);
    };
    let interface = interface.cast_into::<PyDict>()?;
    let get = |key: &str| -> PyResult<Bound<'py, PyAny>> {
        interface.get_item(key)?.ok_or_else(|| {
            PyTypeError::new_err(format!("{what}: __array_interface__ has no {key:?}"))
        })
    };
    let data = get("data")?;
    let Ok(data) = data.cast_into::<PyTuple>() else {
        return Err(invalid(
            py,
            format!("{what}: an __array_interface__ without a data pointer is not supported"),
        ));
    };
    let (ptr, readonly): (usize, bool) = data.extract()?;
    let typestr: String = get("typestr")?.extract()?;
    let itemsize: usize = typestr
        .get(2..)
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| PyTypeError::new_err(format!("{what}: bad typestr {typestr:?}")))?;
    let shape: Vec<usize> = get("shape")?.extract()?;
    let strides: Option<Vec<isize>> = get("strides")?.extract()?;
    let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    let bytes = count
        .and_then(|n| n.checked_mul(itemsize))
        .ok_or_else(|| invalid(py, format!("{what}: its shape overflows")))?;
    if let Some(strides) = strides {
        if !c_contiguous(&shape, &strides, itemsize) {
            return Err(not_contiguous(py, what));
        }
    }
    // bfloat16 and friends are "V2" (raw bytes) here; the dtype says what
    // they are.
    let name = obj
        .getattr(intern!(py, "dtype"))
        .and_then(|d| d.getattr(intern!(py, "name")))
        .and_then(|n| n.extract::<String>())
        .unwrap_or_else(|_| typestr.clone());
    let dtype = match (name.as_str(), itemsize) {
        ("bfloat16", 2) => Ok(DType::BF16),
        _ => {
            let code = typestr.as_bytes().get(1).copied().unwrap_or(b'?');
            let order = typestr.as_bytes().first().copied().unwrap_or(b'|');
            match (code, itemsize) {
                (b'f', 2) => Ok(DType::F16),
                (b'f', 4) => Ok(DType::F32),
                (b'f', 8) => Ok(DType::F64),
                (b'i', 1) => Ok(DType::I8),
                (b'i', 4) => Ok(DType::I32),
                (b'i', 8) => Ok(DType::I64),
                (b'u', 1) => Ok(DType::U8),
                (b'u', 4) => Ok(DType::U32),
                (b'u', 8) => Ok(DType::U64),
                _ => Err(name.clone()),
            }
            .and_then(|d| {
                let foreign = (order == b'>' && cfg!(target_endian = "little"))
                    || (order == b'<' && cfg!(target_endian = "big"));
                if foreign && itemsize > 1 {
                    Err(format!("{name} (non-native byte order)"))
                } else {
                    Ok(d)
                }
            })
        }
    };
    Ok(Some(Array {
        ptr: ptr as *mut u8,
        bytes,
        dtype,
        what,
        writable: !readonly,
        hold: Hold::Object(obj.clone()),
    }))
}

/// Whether `strides` (bytes) walk `shape` in C order without gaps.
fn c_contiguous(shape: &[usize], strides: &[isize], itemsize: usize) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expected = itemsize as isize;
    for (&dim, &stride) in shape.iter().zip(strides).rev() {
        if dim != 1 && stride != expected {
            return false;
        }
        expected *= dim as isize;
    }
    shape.len() == strides.len()
}
