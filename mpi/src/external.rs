//! The portable `external32` representation (MPI-5 §13.5.2):
//! `MPI_Pack_external`, `MPI_Unpack_external`, `MPI_Pack_external_size`
//! and their `_c` forms. Every primitive goes big-endian at its standard
//! size: a C `long` as 4 bytes, a `long double` as an IEEE quad, a pair
//! type (`MPI_DOUBLE_INT`) as its two parts with no padding. A derived
//! type is walked in its type map's order, which its recipe (how it was
//! made) gives, not its memory's.

use crate::consts::*;
use crate::datatype::{predefined_type, type_of, Arg, Type};
use crate::pack::{size_arg, Window};
use crate::state::{entry, Fail, Result};
use crate::{put, Handle};
use std::ffi::{c_char, c_int, CStr};
use std::sync::Arc;

type Count = i64;

const ERR_CONVERSION: c_int = 25;
const ERR_UNSUPPORTED_DATAREP: c_int = 54;

/// How one part of a primitive is written.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// Two's complement, sign-extended when it widens.
    Signed,
    /// Unsigned (or bytes), zero-extended when it widens.
    Unsigned,
    /// IEEE binary floating point, the same size both ways.
    Float,
    /// x86's 80-bit extended `long double` (in 16 bytes), an IEEE quad
    /// outside.
    X87,
}

/// How C's `long double` lies in memory here: x87 extended on x86, an
/// IEEE quad already elsewhere (aarch64, riscv64).
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
const LONG_DOUBLE: Kind = Kind::X87;
#[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
const LONG_DOUBLE: Kind = Kind::Float;

/// One part of a primitive: (offset in memory, bytes in memory, bytes in
/// `external32`, kind).
type Part = (usize, usize, usize, Kind);

/// The parts of predefined type `h`, in order.
fn parts(h: Handle) -> Option<&'static [Part]> {
    use Kind::*;
    const LONG: usize = std::mem::size_of::<std::ffi::c_long>();
    Some(match h {
        // Bytes, characters, booleans: as they are.
        0x207 | 0x21e | 0x238 | 0x239 | 0x241 | 0x245 | 0x247 | 0x2c0 => &[(0, 1, 1, Unsigned)],
        0x240 | 0x243 | 0x244 | 0x2c1 => &[(0, 1, 1, Signed)],
        0x208 | 0x248 | 0x2c9 => &[(0, 2, 2, Signed)],
        0x20c | 0x249 | 0x2c8 => &[(0, 2, 2, Unsigned)],
        0x209 | 0x219 | 0x250 | 0x2d1 => &[(0, 4, 4, Signed)],
        0x20d | 0x251 | 0x218 | 0x2d0 => &[(0, 4, 4, Unsigned)],
        // A wchar_t is 2 bytes in external32 (it must fit them).
        0x23c => &[(0, 4, 2, Unsigned)],
        0x201..=0x203 | 0x20b | 0x258 | 0x2d9 => &[(0, 8, 8, Signed)],
        0x20f | 0x259 | 0x2d8 => &[(0, 8, 8, Unsigned)],
        0x2e1 => &[(0, 16, 16, Signed)],
        0x2e0 => &[(0, 16, 16, Unsigned)],
        // A C long is 4 bytes in external32, whatever it is here.
        0x20a => &[(0, LONG, 4, Signed)],
        0x20e => &[(0, LONG, 4, Unsigned)],
        0x2ca => &[(0, 2, 2, Float)],
        0x210 | 0x21a | 0x2d2 => &[(0, 4, 4, Float)],
        0x214 | 0x21c | 0x2da => &[(0, 8, 8, Float)],
        // Fortran's REAL*16 is a quad already; C's long double is not.
        0x2e2 => &[(0, 16, 16, Float)],
        0x220 => &[(0, 16, 16, LONG_DOUBLE)],
        // Complex numbers: two parts.
        0x2d3 => &[(0, 2, 2, Float), (2, 2, 2, Float)],
        0x212 | 0x213 | 0x21b | 0x2db | 0x230 => &[(0, 4, 4, Float), (4, 4, 4, Float)],
        0x216 | 0x217 | 0x21d | 0x2e3 | 0x231 => &[(0, 8, 8, Float), (8, 8, 8, Float)],
        0x2eb => &[(0, 16, 16, Float), (16, 16, 16, Float)],
        0x224 | 0x225 => &[(0, 16, 16, LONG_DOUBLE), (16, 16, 16, LONG_DOUBLE)],
        // The (value, index) pairs, without their padding.
        0x228 => &[(0, 4, 4, Float), (4, 4, 4, Signed)],
        0x229 => &[(0, 8, 8, Float), (8, 4, 4, Signed)],
        0x22a => &[(0, LONG, 4, Signed), (LONG, 4, 4, Signed)],
        0x22b | 0x232 => &[(0, 4, 4, Signed), (4, 4, 4, Signed)],
        0x22c => &[(0, 2, 2, Signed), (4, 4, 4, Signed)],
        0x22d => &[(0, 16, 16, LONG_DOUBLE), (16, 4, 4, Signed)],
        _ => return None,
    })
}

/// Bytes of one element of predefined type `h` in `external32`.
fn external_size(h: Handle) -> Option<usize> {
    parts(h).map(|p| p.iter().map(|q| q.2).sum())
}

/// A type map in runs: (offset, predefined type, how many in a row).
#[derive(Default)]
struct Map {
    runs: Vec<(isize, Handle, usize)>,
}

impl Map {
    /// Element `h` at `at`, joined to the run before if it follows it.
    fn push(&mut self, at: isize, h: Handle, size: isize) {
        if let Some((off, last, n)) = self.runs.last_mut() {
            if *last == h && *off + *n as isize * size == at {
                *n += 1;
                return;
            }
        }
        self.runs.push((at, h, 1));
    }

    /// Bytes of `count` elements of the mapped type in `external32`.
    fn bytes(&self, count: usize) -> Result<usize> {
        self.runs
            .iter()
            .map(|&(_, h, n)| n * external_size(h).unwrap_or(0))
            .sum::<usize>()
            .checked_mul(count)
            .ok_or_else(|| Fail::new(ERR_COUNT, "the packed size overflows"))
    }
}

/// The numbers of a recipe's arguments.
fn numbers(args: &[Arg]) -> Vec<i64> {
    args.iter()
        .map(|a| match *a {
            Arg::Int(v) => v.into(),
            Arg::Number(v) => v,
            Arg::Address(v) => v as i64,
        })
        .collect()
}

/// Append the type map of `ty` (handle `h`) at `base` to `out`.
fn map_into(h: Handle, ty: &Type, base: isize, out: &mut Map) -> Result<()> {
    let Some(recipe) = &ty.recipe else {
        let size = ty.size as isize;
        return match external_size(h) {
            Some(_) => {
                out.push(base, h, size);
                Ok(())
            }
            None => Err(Fail::new(
                ERR_TYPE,
                format!("{} has no external32 form", ty.name),
            )),
        };
    };
    let a = numbers(&recipe.args);
    let old =
        |k: usize| -> Result<(Handle, Arc<Type>)> {
            recipe.types.get(k).cloned().ok_or_else(|| {
                Fail::new(ERR_INTERN, format!("{}: its recipe lacks a type", ty.name))
            })
        };
    let each = |out: &mut Map, at: &mut dyn Iterator<Item = isize>, k: usize| -> Result<()> {
        let (oh, old) = old(k)?;
        for off in at {
            map_into(oh, &old, base + off, out)?;
        }
        Ok(())
    };
    let ext = |k: usize| old(k).map(|(_, t)| t.extent);
    let n = |i: usize| a.get(i).copied().unwrap_or(0).max(0) as isize;
    match recipe.combiner {
        COMBINER_DUP | COMBINER_RESIZED => each(out, &mut std::iter::once(0), 0),
        COMBINER_F90_REAL | COMBINER_F90_COMPLEX | COMBINER_F90_INTEGER => {
            // A Fortran kind is a predefined type under another handle.
            let base_h = crate::decode::f90_base(h)
                .ok_or_else(|| Fail::new(ERR_INTERN, "a Fortran kind without its type"))?;
            out.push(base, base_h, ty.size as isize);
            Ok(())
        }
        COMBINER_CONTIGUOUS => {
            let e = ext(0)?;
            each(out, &mut (0..n(0)).map(|i| i * e), 0)
        }
        COMBINER_VECTOR | COMBINER_HVECTOR => {
            let e = ext(0)?;
            let (count, len, stride) = (n(0), n(1), a.get(2).copied().unwrap_or(0) as isize);
            let step = if recipe.combiner == COMBINER_VECTOR {
                stride * e
            } else {
                stride
            };
            each(
                out,
                &mut (0..count).flat_map(|i| (0..len).map(move |j| i * step + j * e)),
                0,
            )
        }
        COMBINER_INDEXED | COMBINER_HINDEXED => {
            let e = ext(0)?;
            let count = n(0) as usize;
            let (lens, displs) = (&a[1..1 + count], &a[1 + count..1 + 2 * count]);
            let scale = if recipe.combiner == COMBINER_INDEXED {
                e
            } else {
                1
            };
            each(
                out,
                &mut lens.iter().zip(displs).flat_map(|(&len, &d)| {
                    (0..len.max(0) as isize).map(move |j| d as isize * scale + j * e)
                }),
                0,
            )
        }
        COMBINER_INDEXED_BLOCK | COMBINER_HINDEXED_BLOCK => {
            let e = ext(0)?;
            let (count, len) = (n(0) as usize, n(1));
            let scale = if recipe.combiner == COMBINER_INDEXED_BLOCK {
                e
            } else {
                1
            };
            each(
                out,
                &mut a[2..2 + count]
                    .iter()
                    .flat_map(|&d| (0..len).map(move |j| d as isize * scale + j * e)),
                0,
            )
        }
        COMBINER_STRUCT => {
            let count = n(0) as usize;
            for k in 0..count {
                let (len, d) = (a[1 + k].max(0) as isize, a[1 + count + k] as isize);
                let e = ext(k)?;
                each(out, &mut (0..len).map(|j| d + j * e), k)?;
            }
            Ok(())
        }
        COMBINER_SUBARRAY => {
            let e = ext(0)?;
            let nd = n(0) as usize;
            let (sizes, subs, starts) = (
                &a[1..1 + nd],
                &a[1 + nd..1 + 2 * nd],
                &a[1 + 2 * nd..1 + 3 * nd],
            );
            let fortran = a.get(1 + 3 * nd).copied() == Some(ORDER_FORTRAN.into());
            // Dimensions from the slowest to the fastest, with the bytes
            // one step along each takes.
            let mut dims: Vec<usize> = (0..nd).collect();
            if fortran {
                dims.reverse();
            }
            let mut step = vec![0isize; nd];
            let mut s = e;
            for &d in dims.iter().rev() {
                step[d] = s;
                s *= sizes[d] as isize;
            }
            // The block's index tuples in memory order, one at a time
            // (an odometer, the fastest dimension last): no list of them,
            // however large the array.
            let (oh, old) = old(0)?;
            let mut idx: Vec<i64> = dims.iter().map(|&d| starts[d]).collect();
            if dims.iter().any(|&d| subs[d] <= 0) {
                return Ok(());
            }
            loop {
                let off: isize = dims
                    .iter()
                    .zip(&idx)
                    .map(|(&d, &i)| i as isize * step[d])
                    .sum();
                map_into(oh, &old, base + off, out)?;
                // The next tuple: the fastest dimension first.
                let mut k = nd;
                loop {
                    if k == 0 {
                        return Ok(());
                    }
                    k -= 1;
                    let d = dims[k];
                    idx[k] += 1;
                    if idx[k] < starts[d] + subs[d] {
                        break;
                    }
                    idx[k] = starts[d];
                }
            }
        }
        c => Err(Fail::new(
            ERR_TYPE,
            format!("{}: combiner {c} has no external32 form here", ty.name),
        )),
    }
}

/// The type map of type `h`.
fn map_of(h: Handle) -> Result<Map> {
    let mut m = Map::default();
    let ty = type_of(h)?;
    map_into(h, &ty, 0, &mut m)?;
    Ok(m)
}

/// `datarep` checked: only `"external32"` is known.
///
/// # Safety
/// `datarep` is NULL or a C string.
unsafe fn external32(datarep: *const c_char) -> Result<()> {
    if datarep.is_null() {
        return Err(Fail::arg("datarep is NULL"));
    }
    // SAFETY: a C string (the contract).
    let name = unsafe { CStr::from_ptr(datarep) };
    match name.to_bytes() {
        b"external32" => Ok(()),
        other => Err(Fail::new(
            ERR_UNSUPPORTED_DATAREP,
            format!(
                "data representation {:?}: only \"external32\" is known",
                String::from_utf8_lossy(other)
            ),
        )),
    }
}

/// The x87 extended value in `x` (16 bytes, as it lies in memory) as an
/// IEEE quad, big-endian.
fn x87_to_quad(x: &[u8]) -> [u8; 16] {
    let sig = u64::from_le_bytes(x[..8].try_into().expect("8 bytes"));
    let se = u16::from_le_bytes([x[8], x[9]]);
    // The same sign and biased exponent; the significand less its
    // explicit leading bit heads the quad's 112-bit fraction.
    let frac = u128::from(sig & !(1 << 63)) << 49;
    (u128::from(se) << 112 | frac).to_be_bytes()
}

/// An IEEE quad (big-endian) as x87 extended, in 16 bytes as it lies in
/// memory: the fraction's top 63 bits kept (a quad made from a `long
/// double` comes back exactly), a NaN kept a NaN.
fn quad_to_x87(q: &[u8]) -> [u8; 16] {
    let v = u128::from_be_bytes(q.try_into().expect("16 bytes"));
    let se = (v >> 112) as u16;
    let frac = v & ((1u128 << 112) - 1);
    let exp = se & 0x7fff;
    let mut top = (frac >> 49) as u64;
    if exp == 0x7fff && frac != 0 && top == 0 {
        top = 1 << 62;
    }
    let sig = top | if exp != 0 { 1 << 63 } else { 0 };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&sig.to_le_bytes());
    out[8..10].copy_from_slice(&se.to_le_bytes());
    out
}

/// One part from memory `m` into `external32` bytes `e`.
fn write_part(m: &[u8], e: &mut [u8], kind: Kind) -> Result<()> {
    match kind {
        Kind::X87 => e.copy_from_slice(&x87_to_quad(m)),
        _ if m.len() == e.len() => {
            e.copy_from_slice(m);
            e.reverse();
        }
        // A wider integer here than there (a C long): it must fit.
        _ => {
            let v = i128::from_le_bytes(widen(m, kind == Kind::Signed));
            let bits = 8 * e.len() as u32;
            let fits = if kind == Kind::Signed {
                v >= -(1i128 << (bits - 1)) && v < 1i128 << (bits - 1)
            } else {
                v < 1i128 << bits
            };
            if !fits {
                return Err(Fail::new(
                    ERR_CONVERSION,
                    format!("{v} does not fit the {} bytes external32 gives it", e.len()),
                ));
            }
            e.copy_from_slice(&v.to_be_bytes()[16 - e.len()..]);
        }
    }
    Ok(())
}

/// One part from `external32` bytes `e` into memory `m`.
fn read_part(e: &[u8], m: &mut [u8], kind: Kind) {
    match kind {
        Kind::X87 => m.copy_from_slice(&quad_to_x87(e)),
        _ => {
            let mut le: Vec<u8> = e.iter().rev().copied().collect();
            // Narrower there than here: sign- or zero-extended.
            let fill = if kind == Kind::Signed && le.last().is_some_and(|b| b & 0x80 != 0) {
                0xff
            } else {
                0
            };
            le.resize(m.len(), fill);
            m.copy_from_slice(&le);
        }
    }
}

/// Little-endian `m`, extended to 16 bytes.
fn widen(m: &[u8], signed: bool) -> [u8; 16] {
    let fill = if signed && m.last().is_some_and(|b| b & 0x80 != 0) {
        0xff
    } else {
        0
    };
    let mut out = [fill; 16];
    out[..m.len()].copy_from_slice(m);
    out
}

/// Walk `n` elements of `ty` (mapped as `map`) from `base`, one extent
/// apart, and for each primitive part call `f(memory address, memory
/// bytes, external32 bytes, kind)`.
fn walk(
    ty: &Type,
    map: &Map,
    n: usize,
    base: usize,
    mut f: impl FnMut(usize, usize, usize, Kind) -> Result<()>,
) -> Result<()> {
    for i in 0..n as isize {
        for &(off, h, count) in &map.runs {
            let size = predefined_type(h).map_or(0, |t| t.size) as isize;
            let parts = parts(h).unwrap_or(&[]);
            for j in 0..count as isize {
                let at = base.wrapping_add_signed(i * ty.extent + off + j * size);
                for &(po, mlen, elen, kind) in parts {
                    f(at + po, mlen, elen, kind)?;
                }
            }
        }
    }
    Ok(())
}

/// `MPI_Pack_external_c`'s body.
///
/// # Safety
/// MPI's contract for `MPI_Pack_external`.
unsafe fn pack(
    datarep: *const c_char,
    inbuf: *const u8,
    incount: Count,
    dt: Handle,
    outbuf: *mut u8,
    outsize: Count,
    position: *mut Count,
) -> Result<()> {
    // SAFETY: the contract.
    unsafe { external32(datarep) }?;
    let (ty, map) = (type_of(dt)?, map_of(dt)?);
    // SAFETY: the contract.
    let w = unsafe {
        Window::at((incount, "incount"), (outsize, "outsize"), position, |n| {
            map.bytes(n)
        })
    }?;
    if w.len == 0 {
        return Ok(());
    }
    if outbuf.is_null() || inbuf.is_null() && !ty.absolute() {
        return Err(Fail::arg("inbuf or outbuf is NULL"));
    }
    // SAFETY: `outsize` bytes at `outbuf`, the window's within them.
    let out = unsafe { std::slice::from_raw_parts_mut(outbuf.add(w.at), w.len) };
    let mut o = 0;
    walk(&ty, &map, w.n, inbuf as usize, |addr, mlen, elen, kind| {
        // SAFETY: the element's part lies in the caller's buffer (the
        // contract).
        let m = unsafe { std::slice::from_raw_parts(addr as *const u8, mlen) };
        write_part(m, &mut out[o..o + elen], kind)?;
        o += elen;
        Ok(())
    })?;
    // SAFETY: as `Window::at` checked it.
    unsafe { w.move_past(position) };
    Ok(())
}

/// `MPI_Unpack_external_c`'s body.
///
/// # Safety
/// MPI's contract for `MPI_Unpack_external`.
unsafe fn unpack(
    datarep: *const c_char,
    inbuf: *const u8,
    insize: Count,
    position: *mut Count,
    outbuf: *mut u8,
    outcount: Count,
    dt: Handle,
) -> Result<()> {
    // SAFETY: the contract.
    unsafe { external32(datarep) }?;
    let (ty, map) = (type_of(dt)?, map_of(dt)?);
    // SAFETY: the contract.
    let w = unsafe {
        Window::at((outcount, "outcount"), (insize, "insize"), position, |n| {
            map.bytes(n)
        })
    }?;
    if w.len == 0 {
        return Ok(());
    }
    if inbuf.is_null() || outbuf.is_null() && !ty.absolute() {
        return Err(Fail::arg("inbuf or outbuf is NULL"));
    }
    // SAFETY: `insize` bytes at `inbuf`, the window's within them.
    let data = unsafe { std::slice::from_raw_parts(inbuf.add(w.at), w.len) };
    let mut r = 0;
    walk(&ty, &map, w.n, outbuf as usize, |addr, mlen, elen, kind| {
        // SAFETY: the element's part lies in the caller's buffer (the
        // contract).
        let m = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, mlen) };
        read_part(&data[r..r + elen], m, kind);
        r += elen;
        Ok(())
    })?;
    // SAFETY: as `Window::at` checked it.
    unsafe { w.move_past(position) };
    Ok(())
}

/// `MPI_Pack_external_size_c`'s body.
///
/// # Safety
/// `datarep` is a C string; `size` is NULL or valid.
unsafe fn pack_size(
    datarep: *const c_char,
    incount: Count,
    dt: Handle,
    size: *mut Count,
) -> Result<()> {
    // SAFETY: the contract.
    unsafe { external32(datarep) }?;
    let n = size_arg(incount, "incount")?;
    if size.is_null() {
        return Err(Fail::arg("size is NULL"));
    }
    let bytes = Count::try_from(map_of(dt)?.bytes(n)?)
        .map_err(|_| Fail::new(ERR_COUNT, "the packed size overflows"))?;
    // SAFETY: non-NULL, valid (the contract).
    unsafe { put(size, bytes) };
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_external(
    datarep: *const c_char,
    inbuf: *const u8,
    incount: c_int,
    dt: Handle,
    outbuf: *mut u8,
    outsize: isize,
    position: *mut isize,
) -> c_int {
    entry(COMM_WORLD, "MPI_Pack_external", || {
        // SAFETY: MPI_Aint and MPI_Count are both 64-bit here; the rest
        // is the contract.
        unsafe {
            pack(
                datarep,
                inbuf,
                incount.into(),
                dt,
                outbuf,
                outsize as Count,
                position.cast(),
            )
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_external_c(
    datarep: *const c_char,
    inbuf: *const u8,
    incount: Count,
    dt: Handle,
    outbuf: *mut u8,
    outsize: Count,
    position: *mut Count,
) -> c_int {
    entry(COMM_WORLD, "MPI_Pack_external_c", || {
        // SAFETY: the contract.
        unsafe { pack(datarep, inbuf, incount, dt, outbuf, outsize, position) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Unpack_external(
    datarep: *const c_char,
    inbuf: *const u8,
    insize: isize,
    position: *mut isize,
    outbuf: *mut u8,
    outcount: c_int,
    dt: Handle,
) -> c_int {
    entry(COMM_WORLD, "MPI_Unpack_external", || {
        // SAFETY: as `MPI_Pack_external`.
        unsafe {
            unpack(
                datarep,
                inbuf,
                insize as Count,
                position.cast(),
                outbuf,
                outcount.into(),
                dt,
            )
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Unpack_external_c(
    datarep: *const c_char,
    inbuf: *const u8,
    insize: Count,
    position: *mut Count,
    outbuf: *mut u8,
    outcount: Count,
    dt: Handle,
) -> c_int {
    entry(COMM_WORLD, "MPI_Unpack_external_c", || {
        // SAFETY: the contract.
        unsafe { unpack(datarep, inbuf, insize, position, outbuf, outcount, dt) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_external_size(
    datarep: *const c_char,
    incount: c_int,
    dt: Handle,
    size: *mut isize,
) -> c_int {
    entry(COMM_WORLD, "MPI_Pack_external_size", || {
        // SAFETY: as `MPI_Pack_external`.
        unsafe { pack_size(datarep, incount.into(), dt, size.cast()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_external_size_c(
    datarep: *const c_char,
    incount: Count,
    dt: Handle,
    size: *mut Count,
) -> c_int {
    entry(COMM_WORLD, "MPI_Pack_external_size_c", || {
        // SAFETY: the contract.
        unsafe { pack_size(datarep, incount, dt, size) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_double_goes_out_as_an_ieee_quad_and_comes_back() {
        // 1.5 as x87 extended: significand 0xC000…, exponent 0x3FFF.
        let mut x = [0u8; 16];
        x[..8].copy_from_slice(&0xC000_0000_0000_0000u64.to_le_bytes());
        x[8..10].copy_from_slice(&0x3fffu16.to_le_bytes());
        let q = x87_to_quad(&x);
        // 1.5 as a quad: 0x3FFF8000…0.
        assert_eq!(q[..3], [0x3f, 0xff, 0x80]);
        assert!(q[3..].iter().all(|&b| b == 0));
        assert_eq!(quad_to_x87(&q), x);
    }

    #[test]
    fn a_long_that_does_not_fit_four_bytes_is_refused() {
        let mut e = [0u8; 4];
        write_part(&(-2i64).to_le_bytes(), &mut e, Kind::Signed).unwrap();
        assert_eq!(e, [0xff, 0xff, 0xff, 0xfe]);
        let mut back = [0u8; 8];
        read_part(&e, &mut back, Kind::Signed);
        assert_eq!(i64::from_le_bytes(back), -2);
        let err = write_part(&(1i64 << 40).to_le_bytes(), &mut e, Kind::Signed).unwrap_err();
        assert_eq!(err.class, ERR_CONVERSION);
    }
}
