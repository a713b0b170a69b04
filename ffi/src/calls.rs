//! The collectives and point-to-point calls. Each checks its pointers and
//! counts, picks the element type from `mw_dtype` and calls the
//! `ProcessGroup` method of the same name.

use crate::status::*;
use crate::{group, guard, mw_group, Failure};
use mw::{Element, ProcessGroup};
use std::ffi::c_void;
use std::mem::{align_of, size_of};

/// Run `$body` with `$T` the element type the `mw_dtype` `$t` names
/// (meshwork's one dispatch, `mw::with_dtype!`), or fail with
/// `MW_INVALID_ARGUMENT` for an unknown value.
macro_rules! with_dtype {
    ($t:expr, $T:ident => $body:expr) => {
        match dtype_of($t) {
            Ok(d) => mw::with_dtype!(d, $T => $body),
            Err(e) => Err(e),
        }
    };
}

/// The element type an `mw_dtype` names: `MW_F32` … `MW_U64` are
/// meshwork's types in their wire order.
fn dtype_of(t: mw_dtype) -> Result<mw::DType, Failure> {
    u8::try_from(t)
        .ok()
        .and_then(mw::DType::from_id)
        .ok_or_else(|| Failure::invalid(format!("unknown mw_dtype {t} (MW_F32..MW_U64 are 0..9)")))
}

/// The byte length of `count` elements of `T`, if it fits a slice.
fn byte_len<T>(count: usize, what: &str) -> Result<usize, Failure> {
    count
        .checked_mul(size_of::<T>())
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| {
            Failure::invalid(format!(
                "{what}: {count} elements of {} bytes overflow the address space",
                size_of::<T>()
            ))
        })
}

/// Check that `p` may hold `count` elements of `T`: non-NULL unless
/// `count` is 0, aligned, and the size does not overflow.
fn check_buf<T>(p: *const c_void, count: usize, what: &str) -> Result<usize, Failure> {
    let bytes = byte_len::<T>(count, what)?;
    if count == 0 {
        return Ok(0);
    }
    if p.is_null() {
        return Err(Failure::invalid(format!(
            "{what} is NULL with a count of {count}"
        )));
    }
    if !p.cast::<T>().is_aligned() {
        return Err(Failure::invalid(format!(
            "{what} is not aligned to {} bytes",
            align_of::<T>()
        )));
    }
    Ok(bytes)
}

/// `count` elements of `T` at `p`, after [`check_buf`].
///
/// # Safety
/// When `count > 0`, `p` points to `count` initialised elements of `T`,
/// readable and not written by anyone else during the call.
unsafe fn slice<'a, T: Element>(
    p: *const c_void,
    count: usize,
    what: &str,
) -> Result<&'a [T], Failure> {
    check_buf::<T>(p, count, what)?;
    if count == 0 {
        return Ok(&[]);
    }
    // SAFETY: non-NULL, aligned, size in range (checked above); valid for
    // `count` elements by the caller's contract. Every bit pattern is a
    // valid `T` (`Element: Pod`).
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<T>(), count) })
}

/// `count` elements of `T` at `p`, writable, after [`check_buf`].
///
/// # Safety
/// When `count > 0`, `p` points to `count` elements of `T`, writable and
/// not accessed by anyone else during the call.
unsafe fn slice_mut<'a, T: Element>(
    p: *mut c_void,
    count: usize,
    what: &str,
) -> Result<&'a mut [T], Failure> {
    check_buf::<T>(p, count, what)?;
    if count == 0 {
        return Ok(&mut []);
    }
    // SAFETY: as in `slice`, and exclusive by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<T>(), count) })
}

/// `MW_INVALID_ARGUMENT` when `send` and `recv` share bytes (one `&` and
/// one `&mut` slice over the same memory would be undefined behaviour).
fn disjoint<T>(send: &[T], recv: &[T]) -> Result<(), Failure> {
    let (a, b) = (send.as_ptr_range(), recv.as_ptr_range());
    if !send.is_empty() && !recv.is_empty() && a.start < b.end && b.start < a.end {
        return Err(Failure::invalid(
            "send and recv overlap; give separate buffers".into(),
        ));
    }
    Ok(())
}

/// `world × count`, or `MW_INVALID_ARGUMENT` on overflow.
fn times_world(g: &ProcessGroup, count: usize, what: &str) -> Result<usize, Failure> {
    count
        .checked_mul(g.world_size() as usize)
        .ok_or_else(|| Failure::invalid(format!("{what}: world size × {count} overflows")))
}

fn check_root(g: &ProcessGroup, root: u32) -> Result<(), Failure> {
    if root >= g.world_size() {
        return Err(Failure::invalid(format!(
            "root {root} is out of range; this group has ranks 0..{}",
            g.world_size()
        )));
    }
    Ok(())
}

/// Reduce `count` elements of `buf` over every rank with `op`; every rank
/// receives the result in place.
///
/// # Safety
/// `g` is NULL or a live group; `buf` is NULL or valid for `count`
/// elements of `t`, read and written.
#[no_mangle]
pub unsafe extern "C" fn mw_all_reduce(
    g: *mut mw_group,
    buf: *mut c_void,
    count: usize,
    t: mw_dtype,
    op: mw_op,
) -> mw_status {
    guard("mw_all_reduce", || {
        // SAFETY: the caller passes NULL or a live group.
        let g = unsafe { group(g) }?;
        let op = reduce_op(op)?;
        with_dtype!(t, T => {
            // SAFETY: `buf` holds `count` elements of `t` (the contract).
            let buf = unsafe { slice_mut::<T>(buf, count, "buf") }?;
            Ok(g.all_reduce(buf, op)?)
        })
    })
}

/// `root`'s `count` elements of `buf` into every rank's `buf`.
///
/// # Safety
/// As for `mw_all_reduce`.
#[no_mangle]
pub unsafe extern "C" fn mw_broadcast(
    g: *mut mw_group,
    buf: *mut c_void,
    count: usize,
    t: mw_dtype,
    root: u32,
) -> mw_status {
    guard("mw_broadcast", || {
        // SAFETY: the caller passes NULL or a live group.
        let g = unsafe { group(g) }?;
        check_root(g, root)?;
        with_dtype!(t, T => {
            // SAFETY: `buf` holds `count` elements of `t` (the contract).
            let buf = unsafe { slice_mut::<T>(buf, count, "buf") }?;
            Ok(g.broadcast(buf, root)?)
        })
    })
}

/// Every rank's `send_count` elements, concatenated in rank order, into
/// every rank's `recv` (world × `send_count` elements).
///
/// # Safety
/// `g` is NULL or a live group; `send` valid for `send_count` elements of
/// `t`, `recv` for world × `send_count`, not overlapping.
#[no_mangle]
pub unsafe extern "C" fn mw_all_gather(
    g: *mut mw_group,
    send: *const c_void,
    recv: *mut c_void,
    send_count: usize,
    t: mw_dtype,
) -> mw_status {
    guard("mw_all_gather", || {
        // SAFETY: the caller passes NULL or a live group.
        let g = unsafe { group(g) }?;
        let recv_count = times_world(g, send_count, "recv")?;
        with_dtype!(t, T => {
            // SAFETY: the buffers hold these counts of `t` (the contract).
            let (send, recv) = unsafe {
                (slice::<T>(send, send_count, "send")?, slice_mut::<T>(recv, recv_count, "recv")?)
            };
            disjoint(send, recv)?;
            Ok(g.all_gather(send, recv)?)
        })
    })
}

/// Reduce `send` (world × `recv_count` elements) over every rank with
/// `op`; rank `r` receives block `r` in `recv`.
///
/// # Safety
/// `g` is NULL or a live group; `send` valid for world × `recv_count`
/// elements of `t`, `recv` for `recv_count`, not overlapping.
#[no_mangle]
pub unsafe extern "C" fn mw_reduce_scatter(
    g: *mut mw_group,
    send: *const c_void,
    recv: *mut c_void,
    recv_count: usize,
    t: mw_dtype,
    op: mw_op,
) -> mw_status {
    guard("mw_reduce_scatter", || {
        // SAFETY: the caller passes NULL or a live group.
        let g = unsafe { group(g) }?;
        let op = reduce_op(op)?;
        let send_count = times_world(g, recv_count, "send")?;
        with_dtype!(t, T => {
            // SAFETY: the buffers hold these counts of `t` (the contract).
            let (send, recv) = unsafe {
                (slice::<T>(send, send_count, "send")?, slice_mut::<T>(recv, recv_count, "recv")?)
            };
            disjoint(send, recv)?;
            Ok(g.reduce_scatter(send, recv, op)?)
        })
    })
}

/// Reduce `count` elements of `buf` over every rank with `op` into
/// `root`'s `buf`; other ranks' `buf` may be overwritten with partial
/// results.
///
/// # Safety
/// As for `mw_all_reduce`.
#[no_mangle]
pub unsafe extern "C" fn mw_reduce(
    g: *mut mw_group,
    buf: *mut c_void,
    count: usize,
    t: mw_dtype,
    op: mw_op,
    root: u32,
) -> mw_status {
    guard("mw_reduce", || {
        // SAFETY: the caller passes NULL or a live group.
        let g = unsafe { group(g) }?;
        let op = reduce_op(op)?;
        check_root(g, root)?;
        with_dtype!(t, T => {
            // SAFETY: `buf` holds `count` elements of `t` (the contract).
            let buf = unsafe { slice_mut::<T>(buf, count, "buf") }?;
            Ok(g.reduce(buf, op, root)?)
        })
    })
}

/// Block `j` (of `block_count` elements) of rank `i`'s `send` into block
/// `i` of rank `j`'s `recv`; both hold world × `block_count` elements.
///
/// # Safety
/// `g` is NULL or a live group; `send` and `recv` valid for world ×
/// `block_count` elements of `t`, not overlapping.
#[no_mangle]
pub unsafe extern "C" fn mw_all_to_all(
    g: *mut mw_group,
    send: *const c_void,
    recv: *mut c_void,
    block_count: usize,
    t: mw_dtype,
) -> mw_status {
    guard("mw_all_to_all", || {
        // SAFETY: the caller passes NULL or a live group.
        let g = unsafe { group(g) }?;
        let n = times_world(g, block_count, "send and recv")?;
        with_dtype!(t, T => {
            // SAFETY: the buffers hold these counts of `t` (the contract).
            let (send, recv) = unsafe {
                (slice::<T>(send, n, "send")?, slice_mut::<T>(recv, n, "recv")?)
            };
            disjoint(send, recv)?;
            Ok(g.all_to_all(send, recv)?)
        })
    })
}

/// Every rank's `send_count` elements, concatenated in rank order, into
/// `root`'s `recv` (world × `send_count`); `recv` is not used elsewhere
/// (it may be NULL there).
///
/// # Safety
/// `g` is NULL or a live group; `send` valid for `send_count` elements of
/// `t`; at the root `recv` valid for world × `send_count`, not overlapping.
#[no_mangle]
pub unsafe extern "C" fn mw_gather(
    g: *mut mw_group,
    send: *const c_void,
    recv: *mut c_void,
    send_count: usize,
    t: mw_dtype,
    root: u32,
) -> mw_status {
    guard("mw_gather", || {
        // SAFETY: the caller passes NULL or a live group.
        let g = unsafe { group(g) }?;
        check_root(g, root)?;
        let recv_count = if g.rank() == root {
            times_world(g, send_count, "recv")?
        } else {
            0
        };
        with_dtype!(t, T => {
            // SAFETY: the buffers hold these counts of `t` (the contract).
            let (send, recv) = unsafe {
                (slice::<T>(send, send_count, "send")?, slice_mut::<T>(recv, recv_count, "recv")?)
            };
            disjoint(send, recv)?;
            Ok(g.gather(send, recv, root)?)
        })
    })
}

/// Block `r` (of `recv_count` elements) of `root`'s `send` (world ×
/// `recv_count`) into rank `r`'s `recv`; `send` is not used off the root
/// (it may be NULL there).
///
/// # Safety
/// `g` is NULL or a live group; `recv` valid for `recv_count` elements of
/// `t`; at the root `send` valid for world × `recv_count`, not overlapping.
#[no_mangle]
pub unsafe extern "C" fn mw_scatter(
    g: *mut mw_group,
    send: *const c_void,
    recv: *mut c_void,
    recv_count: usize,
    t: mw_dtype,
    root: u32,
) -> mw_status {
    guard("mw_scatter", || {
        // SAFETY: the caller passes NULL or a live group.
        let g = unsafe { group(g) }?;
        check_root(g, root)?;
        let send_count = if g.rank() == root {
            times_world(g, recv_count, "send")?
        } else {
            0
        };
        with_dtype!(t, T => {
            // SAFETY: the buffers hold these counts of `t` (the contract).
            let (send, recv) = unsafe {
                (slice::<T>(send, send_count, "send")?, slice_mut::<T>(recv, recv_count, "recv")?)
            };
            disjoint(send, recv)?;
            Ok(g.scatter(send, recv, root)?)
        })
    })
}

/// Inclusive prefix reduction: rank `r`'s `buf` becomes the reduction of
/// ranks `0..=r`'s.
///
/// # Safety
/// As for `mw_all_reduce`.
#[no_mangle]
pub unsafe extern "C" fn mw_scan(
    g: *mut mw_group,
    buf: *mut c_void,
    count: usize,
    t: mw_dtype,
    op: mw_op,
) -> mw_status {
    guard("mw_scan", || {
        // SAFETY: the caller passes NULL or a live group.
        let g = unsafe { group(g) }?;
        let op = reduce_op(op)?;
        with_dtype!(t, T => {
            // SAFETY: `buf` holds `count` elements of `t` (the contract).
            let buf = unsafe { slice_mut::<T>(buf, count, "buf") }?;
            Ok(g.scan(buf, op)?)
        })
    })
}

/// Exclusive prefix reduction: rank `r`'s `buf` becomes the reduction of
/// ranks `0..r`'s; rank 0's becomes the operator's identity.
///
/// # Safety
/// As for `mw_all_reduce`.
#[no_mangle]
pub unsafe extern "C" fn mw_exclusive_scan(
    g: *mut mw_group,
    buf: *mut c_void,
    count: usize,
    t: mw_dtype,
    op: mw_op,
) -> mw_status {
    guard("mw_exclusive_scan", || {
        // SAFETY: the caller passes NULL or a live group.
        let g = unsafe { group(g) }?;
        let op = reduce_op(op)?;
        with_dtype!(t, T => {
            // SAFETY: `buf` holds `count` elements of `t` (the contract).
            let buf = unsafe { slice_mut::<T>(buf, count, "buf") }?;
            Ok(g.exclusive_scan(buf, op)?)
        })
    })
}

/// Wait until every rank has called it.
///
/// # Safety
/// `g` is NULL or a live group.
#[no_mangle]
pub unsafe extern "C" fn mw_barrier(g: *mut mw_group) -> mw_status {
    guard("mw_barrier", || {
        // SAFETY: the caller passes NULL or a live group.
        Ok(unsafe { group(g) }?.barrier()?)
    })
}

/// Send `bytes` bytes of `buf` to `dst` under `tag`; returns once they
/// are buffered (`buf` may be reused).
///
/// # Safety
/// `g` is NULL or a live group; `buf` NULL or valid for `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn mw_send(
    g: *mut mw_group,
    buf: *const c_void,
    bytes: usize,
    dst: u32,
    tag: u64,
) -> mw_status {
    guard("mw_send", || {
        // SAFETY: the caller passes NULL or a live group.
        let g = unsafe { group(g) }?;
        // SAFETY: `buf` holds `bytes` bytes (the contract).
        let data = unsafe { slice::<u8>(buf, bytes, "buf") }?;
        Ok(g.send_bytes(data, dst, tag)?)
    })
}

/// Receive the next message from `src` under `tag` into `buf`, which must
/// be exactly its length (`bytes`); a message of another length is
/// `MW_INVALID_ARGUMENT` and stays queued.
///
/// # Safety
/// `g` is NULL or a live group; `buf` NULL or valid for `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn mw_recv(
    g: *mut mw_group,
    buf: *mut c_void,
    bytes: usize,
    src: u32,
    tag: u64,
) -> mw_status {
    guard("mw_recv", || {
        // SAFETY: the caller passes NULL or a live group.
        let g = unsafe { group(g) }?;
        // SAFETY: `buf` holds `bytes` bytes (the contract).
        let buf = unsafe { slice_mut::<u8>(buf, bytes, "buf") }?;
        Ok(g.recv(buf, src, tag)?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C constants name meshwork's types, each its own, and nothing
    /// past them names one.
    #[test]
    fn each_mw_dtype_names_its_type() {
        let pairs = [
            (MW_F32, mw::DType::F32),
            (MW_F64, mw::DType::F64),
            (MW_F16, mw::DType::F16),
            (MW_BF16, mw::DType::BF16),
            (MW_I8, mw::DType::I8),
            (MW_I32, mw::DType::I32),
            (MW_I64, mw::DType::I64),
            (MW_U8, mw::DType::U8),
            (MW_U32, mw::DType::U32),
            (MW_U64, mw::DType::U64),
        ];
        for (c, d) in pairs {
            assert_eq!(dtype_of(c).ok(), Some(d), "mw_dtype {c}");
            let size = mw::with_dtype!(d, T => size_of::<T>());
            assert_eq!(size, d.size());
        }
        for bad in [10, 255, 256, u32::MAX] {
            assert!(dtype_of(bad).is_err(), "mw_dtype {bad}");
        }
    }
}
