//! `MPI_Pack`, `MPI_Unpack` and `MPI_Pack_size`, and their `_c` forms: a
//! program packs typed data into a byte buffer of its own, sends it as
//! `MPI_PACKED`, and unpacks it on the other side. The representation is
//! this library's native one, the one a message of the type carries: each
//! element's data as it lies in memory, block after block. (The portable
//! `external32` representation is `external.rs`'s.)

use crate::consts::*;
use crate::datatype::type_of;
use crate::state::{comm, entry, Fail, Result};
use crate::{put, Handle};
use std::ffi::c_int;

type Count = i64;

/// A non-negative count or size, as a `usize`.
pub(crate) fn size_arg(n: Count, what: &str) -> Result<usize> {
    usize::try_from(n).map_err(|_| Fail::new(ERR_COUNT, format!("{what} {n} is negative")))
}

/// `*position` checked against a buffer of `size` bytes: where the next
/// bytes go (or come from).
///
/// # Safety
/// `position` is NULL or valid.
unsafe fn position_in(position: *const Count, size: usize) -> Result<usize> {
    if position.is_null() {
        return Err(Fail::arg("position is NULL"));
    }
    // SAFETY: non-NULL, valid (the contract).
    let at = unsafe { *position };
    usize::try_from(at)
        .ok()
        .filter(|&at| at <= size)
        .ok_or_else(|| {
            Fail::arg(format!(
                "position {at} is outside the buffer of {size} bytes"
            ))
        })
}

/// Where a pack or an unpack goes in a packed buffer: `n` elements,
/// `len` bytes of the buffer from `at` (`external.rs` packs through it
/// too).
pub(crate) struct Window {
    pub n: usize,
    pub at: usize,
    pub len: usize,
}

impl Window {
    /// `count` elements, `bytes(count)` of them packed, at `*position` in
    /// a packed buffer of `size` bytes: refused (`MPI_ERR_TRUNCATE`) if
    /// they do not fit.
    ///
    /// # Safety
    /// `position` is NULL or valid.
    pub(crate) unsafe fn at(
        count: (Count, &str),
        size: (Count, &str),
        position: *const Count,
        bytes: impl FnOnce(usize) -> Result<usize>,
    ) -> Result<Window> {
        let (n, size) = (size_arg(count.0, count.1)?, size_arg(size.0, size.1)?);
        // SAFETY: the contract.
        let at = unsafe { position_in(position, size) }?;
        let len = bytes(n)?;
        if len > size - at {
            return Err(Fail::new(
                ERR_TRUNCATE,
                format!("{len} packed bytes at {at} of a buffer of {size}"),
            ));
        }
        Ok(Window { n, at, len })
    }

    /// Move `*position` past the window.
    ///
    /// # Safety
    /// `position` is the one [`Window::at`] checked.
    pub(crate) unsafe fn move_past(&self, position: *mut Count) {
        // SAFETY: non-NULL, valid (checked by `at`).
        unsafe { *position = (self.at + self.len) as Count };
    }
}

/// `MPI_Pack_c`'s body: `incount` elements of `dt` at `inbuf` into
/// `outbuf` (of `outsize` bytes) at `*position`, which moves past them.
///
/// # Safety
/// MPI's contract for `MPI_Pack`.
unsafe fn pack(
    inbuf: *const u8,
    incount: Count,
    dt: Handle,
    outbuf: *mut u8,
    outsize: Count,
    position: *mut Count,
    ch: Handle,
) -> Result<()> {
    comm(ch)?;
    let ty = type_of(dt)?;
    // SAFETY: the contract.
    let w = unsafe {
        Window::at((incount, "incount"), (outsize, "outsize"), position, |n| {
            ty.bytes(n)
        })
    }?;
    if w.len > 0 {
        if outbuf.is_null() || (inbuf.is_null() && !ty.absolute()) {
            return Err(Fail::new(ERR_BUFFER, "inbuf or outbuf is NULL"));
        }
        // SAFETY: `outsize` bytes at `outbuf`, the window's within them
        // (checked); MPI forbids the buffers to overlap.
        let out = unsafe { std::slice::from_raw_parts_mut(outbuf.add(w.at), w.len) };
        // SAFETY: `incount` elements at `inbuf` (the contract).
        unsafe { ty.pack_into(inbuf, w.n, out) };
    }
    // SAFETY: as `Window::at` checked it.
    unsafe { w.move_past(position) };
    Ok(())
}

/// `MPI_Unpack_c`'s body: `outcount` elements of `dt` into `outbuf` from
/// `inbuf` (of `insize` bytes) at `*position`, which moves past them.
///
/// # Safety
/// MPI's contract for `MPI_Unpack`.
unsafe fn unpack(
    inbuf: *const u8,
    insize: Count,
    position: *mut Count,
    outbuf: *mut u8,
    outcount: Count,
    dt: Handle,
    ch: Handle,
) -> Result<()> {
    comm(ch)?;
    let ty = type_of(dt)?;
    // SAFETY: the contract.
    let w = unsafe {
        Window::at((outcount, "outcount"), (insize, "insize"), position, |n| {
            ty.bytes(n)
        })
    }?;
    if w.len > 0 {
        if inbuf.is_null() || (outbuf.is_null() && !ty.absolute()) {
            return Err(Fail::new(ERR_BUFFER, "inbuf or outbuf is NULL"));
        }
        // SAFETY: `insize` bytes at `inbuf`, the window's within them
        // (checked).
        let data = unsafe { std::slice::from_raw_parts(inbuf.add(w.at), w.len) };
        // SAFETY: `outcount` elements at `outbuf` (the contract).
        unsafe { ty.unpack(data, outbuf, w.n) };
    }
    // SAFETY: as `Window::at` checked it.
    unsafe { w.move_past(position) };
    Ok(())
}

/// `MPI_Pack_size_c`'s body: the bytes `incount` elements of `dt` pack
/// into.
fn pack_size(incount: Count, dt: Handle, ch: Handle) -> Result<Count> {
    comm(ch)?;
    let n = type_of(dt)?.bytes(size_arg(incount, "incount")?)?;
    Ok(n as Count)
}

/// An `int` output of what fits one (else `MPI_ERR_COUNT`, to be asked
/// through the `_c` form).
fn narrow(n: Count, what: &str) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| {
        Fail::new(
            ERR_COUNT,
            format!("{what} {n} is above 2^31 - 1 (the _c form takes it)"),
        )
    })
}

/// `body` (the `_c` form's) on an `int` position, widened to a count and
/// written back narrowed.
///
/// # Safety
/// `position` is NULL or valid; `body` is safe to call with a valid count.
unsafe fn at_int(position: *mut c_int, body: impl FnOnce(*mut Count) -> Result<()>) -> Result<()> {
    if position.is_null() {
        return Err(Fail::arg("position is NULL"));
    }
    // SAFETY: non-NULL, valid (the contract).
    let mut at = Count::from(unsafe { *position });
    body(&mut at)?;
    // SAFETY: as above.
    unsafe { *position = narrow(at, "position")? };
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Pack(
    inbuf: *const u8,
    incount: c_int,
    dt: Handle,
    outbuf: *mut u8,
    outsize: c_int,
    position: *mut c_int,
    ch: Handle,
) -> c_int {
    entry(ch, "MPI_Pack", || {
        let (n, size) = (incount.into(), outsize.into());
        // SAFETY: the same contract.
        unsafe { at_int(position, |at| pack(inbuf, n, dt, outbuf, size, at, ch)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_c(
    inbuf: *const u8,
    incount: Count,
    dt: Handle,
    outbuf: *mut u8,
    outsize: Count,
    position: *mut Count,
    ch: Handle,
) -> c_int {
    // SAFETY: the contract.
    entry(ch, "MPI_Pack_c", || unsafe {
        pack(inbuf, incount, dt, outbuf, outsize, position, ch)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Unpack(
    inbuf: *const u8,
    insize: c_int,
    position: *mut c_int,
    outbuf: *mut u8,
    outcount: c_int,
    dt: Handle,
    ch: Handle,
) -> c_int {
    entry(ch, "MPI_Unpack", || {
        let (size, n) = (insize.into(), outcount.into());
        // SAFETY: the same contract.
        unsafe { at_int(position, |at| unpack(inbuf, size, at, outbuf, n, dt, ch)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Unpack_c(
    inbuf: *const u8,
    insize: Count,
    position: *mut Count,
    outbuf: *mut u8,
    outcount: Count,
    dt: Handle,
    ch: Handle,
) -> c_int {
    // SAFETY: the contract.
    entry(ch, "MPI_Unpack_c", || unsafe {
        unpack(inbuf, insize, position, outbuf, outcount, dt, ch)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_size(
    incount: c_int,
    dt: Handle,
    ch: Handle,
    size: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Pack_size", || {
        let n = narrow(pack_size(incount.into(), dt, ch)?, "the packed size")?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(size, n) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_size_c(
    incount: Count,
    dt: Handle,
    ch: Handle,
    size: *mut Count,
) -> c_int {
    entry(ch, "MPI_Pack_size_c", || {
        let n = pack_size(incount, dt, ch)?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(size, n) };
        Ok(())
    })
}
