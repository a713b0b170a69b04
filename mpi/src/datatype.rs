//! Datatypes: the predefined ones of the ABI's table, and those made
//! from them (`MPI_Type_contiguous`, `_vector`, `_indexed`). A type is a
//! layout — the byte blocks of one element and its extent — with the
//! meshwork element type it reduces as, when it has one. Messages and
//! collectives move packed bytes: a contiguous type's memory as it is,
//! another's blocks gathered ([`Type::pack`]) and scattered back
//! ([`Type::unpack`]).

use crate::consts::*;
use crate::state::{new_handle, Fail, Result};
use crate::{put, write_string, Handle};
use mw::DType;
use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::sync::{Arc, Mutex, OnceLock};

/// A datatype's layout.
#[derive(Clone, Debug)]
pub(crate) struct Type {
    pub name: String,
    /// Bytes of data in one element.
    pub size: usize,
    /// From one element to the next.
    pub extent: isize,
    /// Where an element's span starts, from its origin (`MPI_Type_get_extent`).
    pub lb: isize,
    /// One element's data: (offset from its start, length), ascending.
    pub blocks: Vec<(isize, usize)>,
    /// The element type it reduces as, if all its data is of one.
    pub dtype: Option<DType>,
    /// Whether `count` elements are `count × size` bytes in a row.
    pub contiguous: bool,
    /// The alignment its widest primitive needs: a struct's extent is
    /// padded to it, as C pads a struct.
    pub align: usize,
    /// How it was made (`MPI_Type_get_envelope`): `None` for a
    /// predefined type.
    pub recipe: Option<Arc<Recipe>>,
}

/// An argument of a derived type's constructor, as
/// `MPI_Type_get_contents` gives it back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Arg {
    /// An int in either form (a subarray's `ndims` and `order`).
    Int(c_int),
    /// A count, block length, stride or displacement in elements: an int,
    /// a count from a `_c` constructor.
    Number(i64),
    /// A displacement in bytes: an address, a count from a `_c`
    /// constructor.
    Address(isize),
}

/// How a derived type was made: its combiner (`MPI_COMBINER_…`), its
/// constructor's arguments in the standard's order (the ints before the
/// addresses), the types it was made from with the handles they had, and
/// whether a `_c` constructor made it (its numbers are then counts).
#[derive(Clone, Debug)]
pub(crate) struct Recipe {
    pub combiner: c_int,
    pub args: Vec<Arg>,
    pub types: Vec<(Handle, Arc<Type>)>,
    pub large: bool,
}

impl Type {
    fn primitive(name: &str, size: usize, dtype: Option<DType>) -> Type {
        Type {
            name: name.into(),
            size,
            extent: size as isize,
            lb: 0,
            blocks: vec![(0, size)],
            dtype,
            contiguous: true,
            align: size.clamp(1, 16),
            recipe: None,
        }
    }

    /// `n` elements of `old`, element `i` at `at(i)` (in bytes), as one
    /// type of extent `extent`.
    fn made(name: String, old: &Type, at: impl Iterator<Item = isize>, extent: isize) -> Type {
        let pieces =
            at.flat_map(|base| old.blocks.iter().map(move |&(off, len)| (base + off, len)));
        Type::of_pieces(name, pieces, extent, old.dtype, old.align)
    }

    /// The type whose data is `pieces` (offset, length), in order, one
    /// element `extent` bytes from the next; adjacent pieces are one block.
    fn of_pieces(
        name: String,
        pieces: impl Iterator<Item = (isize, usize)>,
        extent: isize,
        dtype: Option<DType>,
        align: usize,
    ) -> Type {
        let mut blocks: Vec<(isize, usize)> = Vec::new();
        for (start, len) in pieces {
            match blocks.last_mut() {
                Some((s, l)) if *s + *l as isize == start => *l += len,
                _ => blocks.push((start, len)),
            }
        }
        let size = blocks.iter().map(|b| b.1).sum();
        let contiguous =
            blocks.len() <= 1 && blocks.first().is_none_or(|b| b.0 == 0) && extent == size as isize;
        Type {
            name,
            size,
            extent,
            lb: 0,
            blocks,
            dtype,
            contiguous,
            align,
            recipe: None,
        }
    }

    /// Whether its data lies at absolute addresses (displacements from
    /// `MPI_BOTTOM`, as `MPI_Get_address` gives them): a buffer argument
    /// of NULL is then `MPI_BOTTOM`, not a missing buffer.
    pub(crate) fn absolute(&self) -> bool {
        self.blocks.iter().all(|&(off, _)| off >= 4096)
    }

    /// Bytes of `count` elements' data.
    pub fn bytes(&self, count: usize) -> Result<usize> {
        self.bytes_of(count)
            .ok_or_else(|| Fail::new(ERR_COUNT, format!("{count} × {} overflows", self.name)))
    }

    /// [`bytes`](Self::bytes), `None` where it overflows.
    #[inline]
    pub fn bytes_of(&self, count: usize) -> Option<usize> {
        count
            .checked_mul(self.size)
            .filter(|&n| n <= isize::MAX as usize)
    }

    /// `count` elements at `base`, packed.
    ///
    /// # Safety
    /// `base` holds `count` elements of this type.
    pub unsafe fn pack<'a>(&self, base: *const u8, count: usize) -> Result<Cow<'a, [u8]>> {
        let n = self.bytes(count)?;
        if n == 0 {
            return Ok(Cow::Borrowed(&[]));
        }
        if base.is_null() && !self.absolute() {
            return Err(Fail::new(ERR_BUFFER, "buffer is NULL with a nonzero count"));
        }
        if self.contiguous {
            // SAFETY: `count` contiguous elements at `base` (the contract).
            return Ok(Cow::Borrowed(unsafe {
                std::slice::from_raw_parts(base, n)
            }));
        }
        let mut out = Vec::with_capacity(n);
        // SAFETY: the contract.
        for piece in unsafe { self.pieces(base, count) } {
            out.extend_from_slice(piece);
        }
        Ok(Cow::Owned(out))
    }

    /// The data of `count` elements at `base`, block by block in order.
    ///
    /// # Safety
    /// `base` holds `count` elements of this type.
    unsafe fn pieces<'a>(
        &'a self,
        base: *const u8,
        count: usize,
    ) -> impl Iterator<Item = &'a [u8]> + 'a {
        (0..count as isize).flat_map(move |i| {
            self.blocks.iter().map(move |&(off, len)| {
                // SAFETY: the block lies within element `i` (the
                // contract).
                unsafe {
                    std::slice::from_raw_parts(base.wrapping_offset(i * self.extent + off), len)
                }
            })
        })
    }

    /// `count` elements at `base`, packed into `out`, which has room for
    /// exactly their bytes ([`bytes`](Self::bytes)): as [`pack`](Self::pack)
    /// without a copy of its own.
    ///
    /// # Safety
    /// `base` holds `count` elements of this type.
    pub unsafe fn pack_into(&self, base: *const u8, count: usize, out: &mut [u8]) {
        if self.contiguous {
            // SAFETY: `count` contiguous elements, `out.len()` bytes (the
            // contract).
            let data = unsafe { std::slice::from_raw_parts(base, out.len()) };
            out.copy_from_slice(data);
            return;
        }
        let mut at = 0;
        // SAFETY: the contract.
        for piece in unsafe { self.pieces(base, count) } {
            out[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
    }

    /// Scatter packed `data` (at most `count` elements' worth) into the
    /// elements at `base`; a last element in part gets its first blocks.
    ///
    /// # Safety
    /// `base` holds `count` elements of this type, writable.
    pub unsafe fn unpack(&self, data: &[u8], base: *mut u8, count: usize) {
        if data.is_empty() {
            return;
        }
        if self.contiguous {
            let n = data.len().min(self.size * count);
            // SAFETY: `n` bytes fit in `count` elements (the contract).
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base, n) };
            return;
        }
        let mut rest = data;
        'elements: for i in 0..count as isize {
            for &(off, len) in &self.blocks {
                if rest.is_empty() {
                    break 'elements;
                }
                let n = len.min(rest.len());
                // SAFETY: the block lies within element `i` (the contract).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        rest.as_ptr(),
                        base.wrapping_offset(i * self.extent + off),
                        n,
                    )
                };
                rest = &rest[n..];
            }
        }
    }

    /// Whether `count` elements at `base` are one run of bytes there.
    pub fn is_flat(&self) -> bool {
        self.contiguous
    }

    /// Lower bound and extent, as `MPI_Type_get_extent` gives them.
    fn extent_of(&self) -> (isize, isize) {
        (self.lb, self.extent)
    }
}

/// The predefined types: handle, name, size, meshwork element type.
fn predefined() -> &'static HashMap<Handle, Arc<Type>> {
    static TABLE: OnceLock<HashMap<Handle, Arc<Type>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let c_long = std::mem::size_of::<std::ffi::c_long>();
        let long = if c_long == 8 { DType::I64 } else { DType::I32 };
        let ulong = if c_long == 8 { DType::U64 } else { DType::U32 };
        let rows: &[(Handle, &str, usize, Option<DType>)] = &[
            (0x201, "MPI_AINT", 8, Some(DType::I64)),
            (0x202, "MPI_COUNT", 8, Some(DType::I64)),
            (0x203, "MPI_OFFSET", 8, Some(DType::I64)),
            (0x207, "MPI_PACKED", 1, None),
            (0x208, "MPI_SHORT", 2, Some(DType::I16)),
            (0x209, "MPI_INT", 4, Some(DType::I32)),
            (0x20a, "MPI_LONG", c_long, Some(long)),
            (0x20b, "MPI_LONG_LONG", 8, Some(DType::I64)),
            (0x20c, "MPI_UNSIGNED_SHORT", 2, Some(DType::U16)),
            (0x20d, "MPI_UNSIGNED", 4, Some(DType::U32)),
            (0x20e, "MPI_UNSIGNED_LONG", c_long, Some(ulong)),
            (0x20f, "MPI_UNSIGNED_LONG_LONG", 8, Some(DType::U64)),
            (0x210, "MPI_FLOAT", 4, Some(DType::F32)),
            (0x212, "MPI_C_FLOAT_COMPLEX", 8, None),
            (0x213, "MPI_CXX_FLOAT_COMPLEX", 8, None),
            (0x214, "MPI_DOUBLE", 8, Some(DType::F64)),
            (0x216, "MPI_C_DOUBLE_COMPLEX", 16, None),
            (0x217, "MPI_CXX_DOUBLE_COMPLEX", 16, None),
            (0x218, "MPI_LOGICAL", 4, None),
            (0x219, "MPI_INTEGER", 4, Some(DType::I32)),
            (0x21a, "MPI_REAL", 4, Some(DType::F32)),
            (0x21b, "MPI_COMPLEX", 8, None),
            (0x21c, "MPI_DOUBLE_PRECISION", 8, Some(DType::F64)),
            (0x21d, "MPI_DOUBLE_COMPLEX", 16, None),
            (0x21e, "MPI_CHARACTER", 1, None),
            (0x220, "MPI_LONG_DOUBLE", 16, None),
            (0x224, "MPI_C_LONG_DOUBLE_COMPLEX", 32, None),
            (0x225, "MPI_CXX_LONG_DOUBLE_COMPLEX", 32, None),
            (0x228, "MPI_FLOAT_INT", 8, None),
            (0x229, "MPI_DOUBLE_INT", 16, None),
            (0x22a, "MPI_LONG_INT", 16, None),
            (0x22b, "MPI_2INT", 8, None),
            (0x22c, "MPI_SHORT_INT", 8, None),
            (0x22d, "MPI_LONG_DOUBLE_INT", 32, None),
            (0x230, "MPI_2REAL", 8, None),
            (0x231, "MPI_2DOUBLE_PRECISION", 16, None),
            (0x232, "MPI_2INTEGER", 8, None),
            (0x238, "MPI_C_BOOL", 1, None),
            (0x239, "MPI_CXX_BOOL", 1, None),
            (0x23c, "MPI_WCHAR", 4, None),
            (0x240, "MPI_INT8_T", 1, Some(DType::I8)),
            (0x241, "MPI_UINT8_T", 1, Some(DType::U8)),
            (0x243, "MPI_CHAR", 1, Some(DType::I8)),
            (0x244, "MPI_SIGNED_CHAR", 1, Some(DType::I8)),
            (0x245, "MPI_UNSIGNED_CHAR", 1, Some(DType::U8)),
            (0x247, "MPI_BYTE", 1, Some(DType::U8)),
            (0x248, "MPI_INT16_T", 2, Some(DType::I16)),
            (0x249, "MPI_UINT16_T", 2, Some(DType::U16)),
            (0x250, "MPI_INT32_T", 4, Some(DType::I32)),
            (0x251, "MPI_UINT32_T", 4, Some(DType::U32)),
            (0x258, "MPI_INT64_T", 8, Some(DType::I64)),
            (0x259, "MPI_UINT64_T", 8, Some(DType::U64)),
            (0x2c0, "MPI_LOGICAL1", 1, None),
            (0x2c1, "MPI_INTEGER1", 1, Some(DType::I8)),
            (0x2c8, "MPI_LOGICAL2", 2, None),
            (0x2c9, "MPI_INTEGER2", 2, Some(DType::I16)),
            (0x2ca, "MPI_REAL2", 2, Some(DType::F16)),
            (0x2d0, "MPI_LOGICAL4", 4, None),
            (0x2d1, "MPI_INTEGER4", 4, Some(DType::I32)),
            (0x2d2, "MPI_REAL4", 4, Some(DType::F32)),
            (0x2d3, "MPI_COMPLEX4", 4, None),
            (0x2d8, "MPI_LOGICAL8", 8, None),
            (0x2d9, "MPI_INTEGER8", 8, Some(DType::I64)),
            (0x2da, "MPI_REAL8", 8, Some(DType::F64)),
            (0x2db, "MPI_COMPLEX8", 8, None),
            (0x2e0, "MPI_LOGICAL16", 16, None),
            (0x2e1, "MPI_INTEGER16", 16, None),
            (0x2e2, "MPI_REAL16", 16, None),
            (0x2e3, "MPI_COMPLEX16", 16, None),
            (0x2eb, "MPI_COMPLEX32", 32, None),
        ];
        rows.iter()
            .map(|&(h, name, size, dtype)| (h, Arc::new(Type::primitive(name, size, dtype))))
            .collect()
    })
}

/// The predefined types by `handle - 0x200` (their range), for the
/// lookup every call makes.
fn by_index() -> &'static [Option<Arc<Type>>] {
    static TABLE: OnceLock<Vec<Option<Arc<Type>>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut v = vec![None; 0x100];
        for (&h, t) in predefined() {
            v[h - 0x200] = Some(t.clone());
        }
        v
    })
}

/// Types made by this library, by handle (`None` until committed is not
/// tracked: MPI lets an uncommitted type build others, and this library
/// lets it be used too).
static MADE: Mutex<Option<HashMap<Handle, Arc<Type>>>> = Mutex::new(None);

fn made() -> std::sync::MutexGuard<'static, Option<HashMap<Handle, Arc<Type>>>> {
    MADE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The predefined type `h` names, if it names one: borrowed, with no
/// count taken (the calls on every message's path).
#[inline]
pub(crate) fn predefined_type(h: Handle) -> Option<&'static Type> {
    by_index()
        .get(h.wrapping_sub(0x200))
        .and_then(Option::as_deref)
}

/// `f` of the type `h` names (a predefined one borrowed).
pub(crate) fn with_type<R>(h: Handle, f: impl FnOnce(&Type) -> Result<R>) -> Result<R> {
    match predefined_type(h) {
        Some(t) => f(t),
        None => f(&*type_of(h)?),
    }
}

/// The type `h` names.
pub(crate) fn type_of(h: Handle) -> Result<Arc<Type>> {
    if let Some(t) = by_index()
        .get(h.wrapping_sub(0x200))
        .and_then(Option::as_ref)
    {
        return Ok(t.clone());
    }
    made()
        .as_ref()
        .and_then(|m| m.get(&h).cloned())
        .ok_or_else(|| Fail::new(ERR_TYPE, format!("{h:#x} is not a datatype")))
}

/// The meshwork element type `t` reduces as, or `ERR_TYPE`.
pub(crate) fn reduces_as(t: &Type) -> Result<DType> {
    t.dtype.ok_or_else(|| {
        Fail::new(
            ERR_TYPE,
            format!(
                "{} cannot be reduced by meshwork (its reductions take float, double, half, 8/32/64-bit integers)",
                t.name
            ),
        )
    })
}

fn count_arg(count: c_int, what: &str) -> Result<usize> {
    usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, format!("{what} {count} is negative")))
}

pub(crate) fn register(t: Type) -> Handle {
    let h = new_handle();
    made()
        .get_or_insert_with(HashMap::new)
        .insert(h, Arc::new(t));
    h
}

/// Mark derived type `h` as a `_c` constructor's (its `int` form made
/// it): its recipe's numbers and addresses are counts.
pub(crate) fn mark_large(h: Handle) {
    if let Some(t) = made().as_mut().and_then(|m| m.get_mut(&h)) {
        if let Some(r) = Arc::make_mut(t).recipe.as_mut() {
            Arc::make_mut(r).large = true;
        }
    }
}

/// `*out` = a new type that `build` makes from type `old`, with the
/// constructor's arguments it also gives: the call `name` of combiner
/// `combiner`.
fn new_type(
    out: *mut Handle,
    name: &str,
    combiner: c_int,
    old: Handle,
    build: impl FnOnce(&Type) -> Result<(Type, Vec<Arg>)>,
) -> c_int {
    crate::state::entry(COMM_WORLD, name, || {
        if out.is_null() {
            return Err(Fail::arg("newtype is NULL"));
        }
        let from = type_of(old)?;
        let (mut t, args) = build(&from)?;
        t.recipe = Some(Arc::new(Recipe {
            combiner,
            args,
            types: vec![(old, from)],
            large: false,
        }));
        // SAFETY: non-NULL, valid (the contract).
        unsafe { put(out, register(t)) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_contiguous(count: c_int, old: Handle, out: *mut Handle) -> c_int {
    new_type(
        out,
        "MPI_Type_contiguous",
        COMBINER_CONTIGUOUS,
        old,
        |old| {
            let n = count_arg(count, "count")? as isize;
            let name = format!("contiguous({count}, {})", old.name);
            let t = Type::made(name, old, (0..n).map(|i| i * old.extent), n * old.extent);
            Ok((t, vec![Arg::Number(count.into())]))
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    old: Handle,
    out: *mut Handle,
) -> c_int {
    new_type(out, "MPI_Type_vector", COMBINER_VECTOR, old, |old| {
        let n = count_arg(count, "count")? as isize;
        let b = count_arg(blocklength, "blocklength")? as isize;
        let s = stride as isize;
        let name = format!("vector({count}, {blocklength}, {stride}, {})", old.name);
        let at = (0..n).flat_map(move |i| (0..b).map(move |j| (i * s + j) * old.extent));
        let extent = if n == 0 {
            0
        } else {
            ((n - 1) * s.abs() + b) * old.extent
        };
        let args = [count, blocklength, stride]
            .map(|v| Arg::Number(v.into()))
            .to_vec();
        Ok((Type::made(name, old, at, extent), args))
    })
}

/// The block lengths of an indexed type: one each, or one for all (the
/// `_block` forms).
#[derive(Clone, Copy)]
enum Lens {
    Each(*const c_int),
    All(c_int),
}

/// A displacement of an indexed type: in elements of the old type
/// (`int`) or in bytes (`MPI_Aint`).
trait Displacement: Copy {
    /// From the type's start, in bytes.
    fn bytes(self, old: &Type) -> isize;
    /// As `MPI_Type_get_contents` gives it back.
    fn arg(self) -> Arg;
}

impl Displacement for c_int {
    fn bytes(self, old: &Type) -> isize {
        self as isize * old.extent
    }
    fn arg(self) -> Arg {
        Arg::Number(self.into())
    }
}

impl Displacement for isize {
    fn bytes(self, _: &Type) -> isize {
        self
    }
    fn arg(self) -> Arg {
        Arg::Address(self)
    }
}

/// `MPI_Type_indexed`, `MPI_Type_create_hindexed` and their `_block`
/// forms (`combiner` says which): block `i` is `lens` elements of `old`
/// at `displacements[i]`, in elements of `old` or in bytes.
///
/// # Safety
/// The arrays hold `count` entries (MPI's contract).
unsafe fn indexed_type<D: Displacement>(
    call: &str,
    combiner: c_int,
    count: c_int,
    lens: Lens,
    displacements: *const D,
    old: Handle,
    out: *mut Handle,
) -> c_int {
    new_type(out, call, combiner, old, |old| {
        let n = count_arg(count, "count")?;
        let no_lens = matches!(lens, Lens::Each(p) if p.is_null());
        if n > 0 && (no_lens || displacements.is_null()) {
            return Err(Fail::arg(
                "array_of_blocklengths or array_of_displacements is NULL",
            ));
        }
        let displs: &[D] = if n == 0 {
            &[]
        } else {
            // SAFETY: `count` entries (the contract).
            unsafe { std::slice::from_raw_parts(displacements, n) }
        };
        let len = |i: usize| match lens {
            // SAFETY: as above.
            Lens::Each(p) => unsafe { *p.add(i) },
            Lens::All(b) => b,
        };
        let kind = call.trim_start_matches("MPI_Type_");
        let name = format!("{kind}({count}, {})", old.name);
        let blocks = displs
            .iter()
            .enumerate()
            .map(|(i, &d)| (len(i), d.bytes(old)));
        let t = hindexed(name, old, blocks)?;
        // count, the block length(s), then the displacements.
        let mut args = vec![Arg::Number(count.into())];
        match lens {
            Lens::Each(_) => args.extend((0..n).map(|i| Arg::Number(len(i).into()))),
            Lens::All(b) => args.push(Arg::Number(b.into())),
        }
        args.extend(displs.iter().map(|d| d.arg()));
        Ok((t, args))
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_indexed(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const c_int,
    old: Handle,
    out: *mut Handle,
) -> c_int {
    let (call, lens) = ("MPI_Type_indexed", Lens::Each(blocklengths));
    // SAFETY: the contract.
    unsafe { indexed_type(call, COMBINER_INDEXED, count, lens, displacements, old, out) }
}

/// `MPI_Type_create_indexed_block`: `MPI_Type_indexed` with one block
/// length for every block.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_indexed_block(
    count: c_int,
    blocklength: c_int,
    displacements: *const c_int,
    old: Handle,
    out: *mut Handle,
) -> c_int {
    let (call, lens) = ("MPI_Type_create_indexed_block", Lens::All(blocklength));
    let combiner = COMBINER_INDEXED_BLOCK;
    // SAFETY: the contract.
    unsafe { indexed_type(call, combiner, count, lens, displacements, old, out) }
}

/// `MPI_Type_create_hvector`: `MPI_Type_vector` with its stride in bytes.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_hvector(
    count: c_int,
    blocklength: c_int,
    stride: isize,
    old: Handle,
    out: *mut Handle,
) -> c_int {
    new_type(
        out,
        "MPI_Type_create_hvector",
        COMBINER_HVECTOR,
        old,
        |old| {
            let n = count_arg(count, "count")?;
            let name = format!("hvector({count}, {blocklength}, {stride}, {})", old.name);
            let blocks = (0..n as isize).map(|i| (blocklength, i * stride));
            let args = vec![
                Arg::Number(count.into()),
                Arg::Number(blocklength.into()),
                Arg::Address(stride),
            ];
            Ok((hindexed(name, old, blocks)?, args))
        },
    )
}

/// `MPI_Type_create_hindexed`: `MPI_Type_indexed` with its displacements
/// in bytes.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_hindexed(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const isize,
    old: Handle,
    out: *mut Handle,
) -> c_int {
    let (call, lens) = ("MPI_Type_create_hindexed", Lens::Each(blocklengths));
    // SAFETY: the contract.
    unsafe {
        indexed_type(
            call,
            COMBINER_HINDEXED,
            count,
            lens,
            displacements,
            old,
            out,
        )
    }
}

/// `MPI_Type_create_hindexed_block`: one block length, displacements in
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_hindexed_block(
    count: c_int,
    blocklength: c_int,
    displacements: *const isize,
    old: Handle,
    out: *mut Handle,
) -> c_int {
    let (call, lens) = ("MPI_Type_create_hindexed_block", Lens::All(blocklength));
    let combiner = COMBINER_HINDEXED_BLOCK;
    // SAFETY: the contract.
    unsafe { indexed_type(call, combiner, count, lens, displacements, old, out) }
}

/// `MPI_Type_create_resized`: `old`'s data with lower bound `lb` and
/// extent `extent` (the next element starts `extent` bytes on).
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_resized(
    old: Handle,
    lb: isize,
    extent: isize,
    out: *mut Handle,
) -> c_int {
    new_type(
        out,
        "MPI_Type_create_resized",
        COMBINER_RESIZED,
        old,
        |old| {
            let name = format!("resized({}, {lb}, {extent})", old.name);
            let mut t = Type::of_pieces(
                name,
                old.blocks.iter().copied(),
                extent,
                old.dtype,
                old.align,
            );
            t.lb = lb;
            t.contiguous &= lb == 0;
            Ok((t, vec![Arg::Address(lb), Arg::Address(extent)]))
        },
    )
}

/// `MPI_Type_dup`: the same layout under a new handle.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_dup(old: Handle, out: *mut Handle) -> c_int {
    new_type(out, "MPI_Type_dup", COMBINER_DUP, old, |old| {
        Ok((old.clone(), Vec::new()))
    })
}

/// `MPI_Type_create_subarray`: the block `subsizes` at `starts` of an
/// `ndims`-dimensional array of `sizes` elements of `old`, in C order
/// (the last index runs fastest) or Fortran's (the first). Its lower
/// bound is 0 and its extent the whole array's, so that consecutive
/// elements are consecutive arrays.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_subarray(
    ndims: c_int,
    sizes: *const c_int,
    subsizes: *const c_int,
    starts: *const c_int,
    order: c_int,
    old: Handle,
    out: *mut Handle,
) -> c_int {
    new_type(
        out,
        "MPI_Type_create_subarray",
        COMBINER_SUBARRAY,
        old,
        |old| {
            let n = usize::try_from(ndims)
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| Fail::arg(format!("ndims is {ndims}: at least 1")))?;
            if sizes.is_null() || subsizes.is_null() || starts.is_null() {
                return Err(Fail::arg("an array of sizes, subsizes or starts is NULL"));
            }
            // SAFETY: `ndims` entries each (the contract).
            let (sz, sub, at) = unsafe {
                (
                    std::slice::from_raw_parts(sizes, n),
                    std::slice::from_raw_parts(subsizes, n),
                    std::slice::from_raw_parts(starts, n),
                )
            };
            for d in 0..n {
                let fits = sz[d] >= 1
                    && (0..=sz[d]).contains(&sub[d])
                    && at[d] >= 0
                    && at[d] <= sz[d] - sub[d];
                if !fits {
                    return Err(Fail::arg(format!(
                        "dimension {d}: a block of {} at {} does not fit in {}",
                        sub[d], at[d], sz[d]
                    )));
                }
            }
            // Dimensions from the slowest to the fastest.
            let dims: Vec<(isize, isize, isize)> = match order {
                ORDER_C => (0..n)
                    .map(|d| (sz[d] as isize, sub[d] as isize, at[d] as isize))
                    .collect(),
                ORDER_FORTRAN => (0..n)
                    .rev()
                    .map(|d| (sz[d] as isize, sub[d] as isize, at[d] as isize))
                    .collect(),
                _ => {
                    return Err(Fail::arg(format!(
                        "order {order} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN"
                    )))
                }
            };
            let too_large = || Fail::new(ERR_COUNT, "the array's extent overflows an address");
            let whole = dims
                .iter()
                .try_fold(old.extent, |e, &(size, _, _)| e.checked_mul(size))
                .ok_or_else(too_large)?;
            // One block per row of the fastest dimension: the rows are the
            // index tuples of the other dimensions, each a byte offset.
            let (&(_, row, first), outer) = dims.split_last().expect("ndims is at least 1");
            let mut stride = old.extent * dims.last().map_or(1, |d| d.0);
            let mut rows = vec![first * old.extent];
            for &(size, sub, start) in outer.iter().rev() {
                rows = (start..start + sub)
                    .flat_map(|i| rows.iter().map(move |&r| r + i * stride))
                    .collect();
                stride *= size;
            }
            rows.sort_unstable();
            let row = c_int::try_from(row).map_err(|_| too_large())?;
            let name = format!("subarray({ndims}, {})", old.name);
            let t = hindexed(name, old, rows.into_iter().map(|r| (row, r)))?;
            let t = Type::of_pieces(t.name, t.blocks.into_iter(), whole, t.dtype, t.align);
            // ndims, the sizes, subsizes and starts, then the order.
            let mut args = vec![Arg::Int(ndims)];
            for a in [sz, sub, at] {
                args.extend(a.iter().map(|&v| Arg::Number(v.into())));
            }
            args.push(Arg::Int(order));
            Ok((t, args))
        },
    )
}

/// A type of blocks of `old`: (length in elements of `old`, displacement
/// in bytes).
fn hindexed(
    name: String,
    old: &Type,
    blocks: impl Iterator<Item = (c_int, isize)>,
) -> Result<Type> {
    let mut at = Vec::new();
    let (mut lo, mut hi) = (isize::MAX, isize::MIN);
    for (len, d) in blocks {
        let len = count_arg(len, "a block length")? as isize;
        for j in 0..len {
            at.push(d + j * old.extent);
        }
        if len > 0 {
            lo = lo.min(d);
            hi = hi.max(d + len * old.extent);
        }
    }
    if lo > hi {
        (lo, hi) = (0, 0);
    }
    // The span from the lowest block to the end of the highest: the
    // next element starts that far on.
    let mut t = Type::made(name, old, at.into_iter(), hi - lo);
    t.lb = lo;
    Ok(t)
}

/// `MPI_Type_create_struct`: block `i` is `blocklengths[i]` elements of
/// `types[i]` at byte displacement `displacements[i]`; the extent runs
/// from the lowest byte to the highest, padded to the widest alignment
/// (as a C struct's). It reduces as an element type only when every
/// block is of that one.
///
/// # Safety
/// Each array holds `count` entries (MPI's contract).
pub(crate) unsafe fn create_struct(
    name: &str,
    blocks: &[(usize, isize, Handle)],
    out: *mut Handle,
) -> c_int {
    crate::state::entry(COMM_WORLD, name, || {
        if out.is_null() {
            return Err(Fail::arg("newtype is NULL"));
        }
        let mut at = Vec::new();
        let (mut lo, mut hi, mut align) = (isize::MAX, isize::MIN, 1);
        let mut dtype = None;
        let mut names = Vec::new();
        let mut types = Vec::with_capacity(blocks.len());
        for (k, &(len, d, h)) in blocks.iter().enumerate() {
            let ty = type_of(h)?;
            names.push(ty.name.clone());
            types.push((h, ty.clone()));
            dtype = if k == 0 {
                ty.dtype
            } else {
                dtype.filter(|x| Some(*x) == ty.dtype)
            };
            align = align.max(ty.align);
            for j in 0..len as isize {
                let base = d + j * ty.extent;
                at.extend(ty.blocks.iter().map(|&(off, n)| (base + off, n)));
            }
            if len > 0 {
                lo = lo.min(d + ty.lb);
                hi = hi.max(d + ty.lb + len as isize * ty.extent);
            }
        }
        if lo > hi {
            (lo, hi) = (0, 0);
        }
        let span = hi - lo;
        let extent = (span + align as isize - 1) / align as isize * align as isize;
        let name = format!("struct({})", names.join(", "));
        let mut t = Type::of_pieces(name, at.into_iter(), extent, dtype, align);
        t.lb = lo;
        // count, the block lengths, then the displacements.
        let count = Arg::Number(blocks.len() as i64);
        let lens = blocks.iter().map(|&(len, _, _)| Arg::Number(len as i64));
        let displs = blocks.iter().map(|&(_, d, _)| Arg::Address(d));
        t.recipe = Some(Arc::new(Recipe {
            combiner: COMBINER_STRUCT,
            args: std::iter::once(count).chain(lens).chain(displs).collect(),
            types,
            large: false,
        }));
        // SAFETY: non-NULL, valid (the contract).
        unsafe { put(out, register(t)) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_struct(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const isize,
    types: *const Handle,
    out: *mut Handle,
) -> c_int {
    let Ok(n) = usize::try_from(count) else {
        return crate::state::raise(
            COMM_WORLD,
            "MPI_Type_create_struct",
            Fail::new(ERR_COUNT, "count is negative"),
        );
    };
    if n > 0 && (blocklengths.is_null() || displacements.is_null() || types.is_null()) {
        return crate::state::raise(
            COMM_WORLD,
            "MPI_Type_create_struct",
            Fail::arg("an array is NULL"),
        );
    }
    let mut blocks = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: `count` entries each (the contract).
        let (len, d, t) = unsafe { (*blocklengths.add(i), *displacements.add(i), *types.add(i)) };
        let Ok(len) = usize::try_from(len) else {
            return crate::state::raise(
                COMM_WORLD,
                "MPI_Type_create_struct",
                Fail::new(ERR_COUNT, "a block length is negative"),
            );
        };
        blocks.push((len, d, t));
    }
    // SAFETY: the contract.
    unsafe { create_struct("MPI_Type_create_struct", &blocks, out) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_commit(t: *mut Handle) -> c_int {
    crate::state::entry(COMM_WORLD, "MPI_Type_commit", || {
        if t.is_null() {
            return Err(Fail::arg("datatype is NULL"));
        }
        // SAFETY: non-NULL, valid (the contract).
        type_of(unsafe { *t }).map(drop)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_free(t: *mut Handle) -> c_int {
    crate::state::entry(COMM_WORLD, "MPI_Type_free", || {
        if t.is_null() {
            return Err(Fail::arg("datatype is NULL"));
        }
        // SAFETY: non-NULL, valid (the contract).
        let h = unsafe { *t };
        if predefined().contains_key(&h) || crate::decode::is_kind(h) {
            return Err(Fail::new(ERR_TYPE, "a predefined datatype cannot be freed"));
        }
        made()
            .as_mut()
            .and_then(|m| m.remove(&h))
            .ok_or_else(|| Fail::new(ERR_TYPE, format!("{h:#x} is not a datatype")))?;
        if let Some(m) = names().as_mut() {
            m.remove(&h);
        }
        // SAFETY: as above.
        unsafe { *t = DATATYPE_NULL };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_size(t: Handle, size: *mut c_int) -> c_int {
    crate::state::entry(COMM_WORLD, "MPI_Type_size", || {
        let t = type_of(t)?;
        let n = c_int::try_from(t.size)
            .map_err(|_| Fail::new(ERR_ARG, format!("{} is larger than an int", t.name)))?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(size, n) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_extent(
    t: Handle,
    lb: *mut isize,
    extent: *mut isize,
) -> c_int {
    crate::state::entry(COMM_WORLD, "MPI_Type_get_extent", || {
        let (l, e) = type_of(t)?.extent_of();
        // SAFETY: NULL or valid (the contract).
        unsafe {
            put(lb, l);
            put(extent, e);
        }
        Ok(())
    })
}

/// `MPI_Type_get_true_extent`: where the type's data starts and how far
/// it spans, whatever its bounds say.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_true_extent(
    t: Handle,
    true_lb: *mut isize,
    true_extent: *mut isize,
) -> c_int {
    crate::state::entry(COMM_WORLD, "MPI_Type_get_true_extent", || {
        let t = type_of(t)?;
        let lo = t.blocks.iter().map(|b| b.0).min().unwrap_or(0);
        let hi = t
            .blocks
            .iter()
            .map(|b| b.0 + b.1 as isize)
            .max()
            .unwrap_or(0);
        // SAFETY: NULL or valid (the contract).
        unsafe {
            put(true_lb, lo);
            put(true_extent, hi - lo);
        }
        Ok(())
    })
}

/// The names programs gave types (`MPI_Type_set_name`), predefined ones
/// included.
static NAMES: Mutex<Option<HashMap<Handle, String>>> = Mutex::new(None);

fn names() -> std::sync::MutexGuard<'static, Option<HashMap<Handle, String>>> {
    NAMES.lock().unwrap_or_else(|e| e.into_inner())
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_set_name(t: Handle, name: *const c_char) -> c_int {
    crate::state::entry(COMM_WORLD, "MPI_Type_set_name", || {
        type_of(t)?;
        if name.is_null() {
            return Err(Fail::arg("type_name is NULL"));
        }
        // SAFETY: NUL-terminated (the contract).
        let given = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
        // As MPI_Comm_set_name: cut to what MPI_Type_get_name returns.
        let kept: String = given.chars().take(MAX_OBJECT_NAME - 1).collect();
        names().get_or_insert_with(HashMap::new).insert(t, kept);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_name(t: Handle, name: *mut c_char, len: *mut c_int) -> c_int {
    crate::state::entry(COMM_WORLD, "MPI_Type_get_name", || {
        // The null handle has a name too (MPI 4.1, §7.8).
        if t == DATATYPE_NULL {
            // SAFETY: MPI_MAX_OBJECT_NAME bytes (the contract).
            unsafe { write_string("MPI_DATATYPE_NULL", name, MAX_OBJECT_NAME, len) };
            return Ok(());
        }
        let ty = type_of(t)?;
        let given = names().as_ref().and_then(|m| m.get(&t).cloned());
        let shown = match given {
            Some(g) => g,
            None if predefined().values().any(|p| Arc::ptr_eq(p, &ty)) => ty.name.clone(),
            None => String::new(),
        };
        // SAFETY: MPI_MAX_OBJECT_NAME bytes (the contract).
        unsafe { write_string(&shown, name, MAX_OBJECT_NAME, len) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Get_address(location: *const u8, address: *mut isize) -> c_int {
    // SAFETY: NULL or valid (the contract).
    unsafe { put(address, location as isize) };
    SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_packs_and_unpacks_its_strided_blocks() {
        let int = type_of(0x209).unwrap();
        let at = (0..3isize).flat_map(|i| (0..2isize).map(move |j| (i * 4 + j) * 4));
        let v = Type::made("v".into(), &int, at, (2 * 4 + 2) * 4);
        assert_eq!(v.size, 24);
        assert!(!v.contiguous);
        let src: Vec<i32> = (0..10).collect();
        // SAFETY: 10 ints hold one element of extent 40 bytes.
        let packed = unsafe { v.pack(src.as_ptr().cast(), 1) }.unwrap();
        let got: Vec<i32> = packed
            .chunks(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, [0, 1, 4, 5, 8, 9]);
        let mut back = [0i32; 10];
        // SAFETY: as above, writable.
        unsafe { v.unpack(&packed, back.as_mut_ptr().cast(), 1) };
        assert_eq!(back, [0, 1, 0, 0, 4, 5, 0, 0, 8, 9]);
    }

    #[test]
    fn a_contiguous_type_of_a_primitive_is_contiguous() {
        let d = type_of(0x214).unwrap();
        let c = Type::made("c".into(), &d, (0..4).map(|i| i * 8), 32);
        assert!(c.contiguous);
        assert_eq!(c.dtype, Some(DType::F64));
    }
}
