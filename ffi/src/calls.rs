//! The collectives and point-to-point calls. Each collective checks its
//! pointers and counts, then runs through meshwork's one entry,
//! `ProcessGroup::call_bytes`, which checks the rest (alignment for the
//! `mw_dtype`, lengths, root, operator) and dispatches on the type.

use crate::status::*;
use crate::{group, guard, mw_group, Failure};
use mw::{Buffers, Call, ProcessGroup};
use std::ffi::c_void;

/// The element type an `mw_dtype` names: `MW_F32` … `MW_U16` are
/// meshwork's types in their wire order.
fn dtype_of(t: mw_dtype) -> Result<mw::DType, Failure> {
    u8::try_from(t)
        .ok()
        .and_then(mw::DType::from_id)
        .ok_or_else(|| Failure::invalid(format!("unknown mw_dtype {t} (MW_F32..MW_U16 are 0..11)")))
}

/// A buffer as the C caller gives it: an address and a count of elements.
#[derive(Clone, Copy)]
struct Raw {
    at: *const c_void,
    count: usize,
}

impl Raw {
    /// Its length in bytes for elements of `d`: non-NULL unless empty,
    /// and within the address space.
    fn bytes(self, d: mw::DType, what: &str) -> Result<usize, Failure> {
        let n = self
            .count
            .checked_mul(d.size())
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| {
                Failure::invalid(format!(
                    "{what}: {} elements of {} bytes overflow the address space",
                    self.count,
                    d.size()
                ))
            })?;
        if n > 0 && self.at.is_null() {
            return Err(Failure::invalid(format!(
                "{what} is NULL with a count of {}",
                self.count
            )));
        }
        Ok(n)
    }
}

/// `at` as `n` bytes (empty when `n` is 0, whatever `at` is).
///
/// # Safety
/// When `n > 0`, `at` is valid for `n` bytes, read, and not written by
/// anyone else during the call.
unsafe fn view<'a>(at: *const c_void, n: usize) -> &'a [u8] {
    if n == 0 {
        return &[];
    }
    // SAFETY: non-NULL (`Raw::bytes`), valid for `n` bytes (the contract).
    unsafe { std::slice::from_raw_parts(at.cast::<u8>(), n) }
}

/// [`view`], writable.
///
/// # Safety
/// When `n > 0`, `at` is valid for `n` bytes, read and written, and not
/// accessed by anyone else during the call.
unsafe fn view_mut<'a>(at: *mut c_void, n: usize) -> &'a mut [u8] {
    if n == 0 {
        return &mut [];
    }
    // SAFETY: as in `view`, and exclusive by the contract.
    unsafe { std::slice::from_raw_parts_mut(at.cast::<u8>(), n) }
}

/// Run `call` in place on `buf`.
///
/// # Safety
/// `g` is NULL or a live group; `buf` NULL or valid for `count` elements
/// of `t`, read and written.
unsafe fn in_place(
    g: *mut mw_group,
    call: Call,
    t: mw_dtype,
    buf: *mut c_void,
    count: usize,
) -> Result<(), Failure> {
    // SAFETY: the caller passes NULL or a live group.
    let g = unsafe { group(g) }?;
    let d = dtype_of(t)?;
    let n = Raw {
        at: buf.cast_const(),
        count,
    }
    .bytes(d, "buf")?;
    // SAFETY: `buf` holds `n` bytes (the contract), checked above.
    let buf = unsafe { view_mut(buf, n) };
    Ok(g.call_bytes(call, d, Buffers::InPlace(buf))?)
}

/// Run `call` from `send` into `recv`, whose counts `counts` gives for
/// this group.
///
/// # Safety
/// `g` is NULL or a live group; `send` and `recv` NULL or valid for the
/// counts `counts` gives, of `t`, not overlapping.
unsafe fn send_recv(
    g: *mut mw_group,
    call: Call,
    t: mw_dtype,
    send: *const c_void,
    recv: *mut c_void,
    counts: impl FnOnce(&ProcessGroup) -> Result<(usize, usize), Failure>,
) -> Result<(), Failure> {
    // SAFETY: the caller passes NULL or a live group.
    let g = unsafe { group(g) }?;
    let d = dtype_of(t)?;
    let (send_count, recv_count) = counts(g)?;
    let s = Raw {
        at: send,
        count: send_count,
    }
    .bytes(d, "send")?;
    let r = Raw {
        at: recv.cast_const(),
        count: recv_count,
    }
    .bytes(d, "recv")?;
    // One `&` and one `&mut` slice over the same bytes would be
    // undefined behaviour: refused before either is made.
    let (a, b) = (send as usize, recv as usize);
    if s > 0 && r > 0 && a < b.saturating_add(r) && b < a.saturating_add(s) {
        return Err(Failure::invalid(
            "send and recv overlap; give separate buffers".into(),
        ));
    }
    // SAFETY: the buffers hold these bytes (the contract), checked above,
    // and do not overlap.
    let (send, recv) = unsafe { (view(send, s), view_mut(recv, r)) };
    Ok(g.call_bytes(call, d, Buffers::SendRecv { send, recv })?)
}

/// `world × count`, or `MW_INVALID_ARGUMENT` on overflow.
fn times_world(g: &ProcessGroup, count: usize, what: &str) -> Result<usize, Failure> {
    count
        .checked_mul(g.world_size() as usize)
        .ok_or_else(|| Failure::invalid(format!("{what}: world size × {count} overflows")))
}

/// `world × count` at `root`, 0 elsewhere (the buffer the others do not use).
fn at_root(g: &ProcessGroup, root: u32, count: usize, what: &str) -> Result<usize, Failure> {
    if g.rank() == root {
        times_world(g, count, what)
    } else {
        Ok(0)
    }
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
        let call = Call::AllReduce { op: reduce_op(op)? };
        // SAFETY: as this function's contract.
        unsafe { in_place(g, call, t, buf, count) }
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
        // SAFETY: as this function's contract.
        unsafe { in_place(g, Call::Broadcast { root }, t, buf, count) }
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
        let counts = |g: &ProcessGroup| Ok((send_count, times_world(g, send_count, "recv")?));
        // SAFETY: as this function's contract.
        unsafe { send_recv(g, Call::AllGather, t, send, recv, counts) }
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
        let call = Call::ReduceScatter { op: reduce_op(op)? };
        let counts = |g: &ProcessGroup| Ok((times_world(g, recv_count, "send")?, recv_count));
        // SAFETY: as this function's contract.
        unsafe { send_recv(g, call, t, send, recv, counts) }
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
        let call = Call::Reduce {
            op: reduce_op(op)?,
            root,
        };
        // SAFETY: as this function's contract.
        unsafe { in_place(g, call, t, buf, count) }
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
        let counts = |g: &ProcessGroup| {
            let n = times_world(g, block_count, "send and recv")?;
            Ok((n, n))
        };
        // SAFETY: as this function's contract.
        unsafe { send_recv(g, Call::AllToAll, t, send, recv, counts) }
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
        let counts = |g: &ProcessGroup| Ok((send_count, at_root(g, root, send_count, "recv")?));
        // SAFETY: as this function's contract.
        unsafe { send_recv(g, Call::Gather { root }, t, send, recv, counts) }
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
        let counts = |g: &ProcessGroup| Ok((at_root(g, root, recv_count, "send")?, recv_count));
        // SAFETY: as this function's contract.
        unsafe { send_recv(g, Call::Scatter { root }, t, send, recv, counts) }
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
        let call = Call::Scan { op: reduce_op(op)? };
        // SAFETY: as this function's contract.
        unsafe { in_place(g, call, t, buf, count) }
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
        let call = Call::ExclusiveScan { op: reduce_op(op)? };
        // SAFETY: as this function's contract.
        unsafe { in_place(g, call, t, buf, count) }
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
        let n = Raw {
            at: buf,
            count: bytes,
        }
        .bytes(mw::DType::U8, "buf")?;
        // SAFETY: `buf` holds `bytes` bytes (the contract), checked above.
        let data = unsafe { view(buf, n) };
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
        let n = Raw {
            at: buf.cast_const(),
            count: bytes,
        }
        .bytes(mw::DType::U8, "buf")?;
        // SAFETY: `buf` holds `bytes` bytes (the contract), checked above.
        let buf = unsafe { view_mut(buf, n) };
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
            (MW_I16, mw::DType::I16),
            (MW_U16, mw::DType::U16),
        ];
        for (c, d) in pairs {
            assert_eq!(dtype_of(c).ok(), Some(d), "mw_dtype {c}");
            let size = mw::with_dtype!(d, T => std::mem::size_of::<T>());
            assert_eq!(size, d.size());
        }
        for bad in [12, 255, 256, u32::MAX] {
            assert!(dtype_of(bad).is_err(), "mw_dtype {bad}");
        }
    }
}
