//! The large-count forms (`MPI_Send_c`, `MPI_Allreduce_c`, …): the same
//! calls with `MPI_Count` counts and `MPI_Aint` displacements. Each takes
//! counts that fit an `int` to the `int` form; a larger one is
//! `MPI_ERR_COUNT` (a single call of more than 2^31 − 1 elements is not
//! supported yet). mpi4py calls these forms whenever a library has them.

use crate::coll::*;
use crate::consts::*;
use crate::datatype::*;
use crate::decode::counted;
use crate::p2p::*;
use crate::state::{comm, raise, Fail};
use crate::{put, Handle, Status};
use std::ffi::c_int;

fn too_large(name: &str, ch: Handle) -> c_int {
    raise(
        ch,
        name,
        Fail::new(
            ERR_COUNT,
            "a count or displacement above 2^31 - 1 is not supported by meshwork's MPI",
        ),
    )
}

/// A `_c` form whose count arguments narrow to `int`, then the `int` form.
macro_rules! narrow {
    // A type constructor: the new type `*$out` took counts (`counted`).
    (counted $name:ident => $base:ident, ($($arg:ident: $t:ty),*), [$($c:ident),*], $out:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> c_int {
            $(
                let Ok($c) = c_int::try_from($c) else {
                    return too_large(stringify!($name), COMM_WORLD);
                };
            )*
            // SAFETY: the `int` form's contract, which the caller's meets;
            // `$out` is NULL or valid (the same).
            unsafe { counted($base($($arg),*), $out) }
        }
    };
    ($name:ident => $base:ident, $ch:expr, ($($arg:ident: $t:ty),*), [$($c:ident),*]) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> c_int {
            $(
                let Ok($c) = c_int::try_from($c) else {
                    return too_large(stringify!($name), $ch);
                };
            )*
            // SAFETY: the `int` form's contract, which the caller's meets.
            unsafe { $base($($arg),*) }
        }
    };
}

type Count = i64;
type Req = *mut Handle;

narrow!(MPI_Send_c => MPI_Send, ch, (buf: *const u8, count: Count, dt: Handle, dest: c_int, tag: c_int, ch: Handle), [count]);
narrow!(MPI_Ssend_c => MPI_Ssend, ch, (buf: *const u8, count: Count, dt: Handle, dest: c_int, tag: c_int, ch: Handle), [count]);
narrow!(MPI_Rsend_c => MPI_Rsend, ch, (buf: *const u8, count: Count, dt: Handle, dest: c_int, tag: c_int, ch: Handle), [count]);
narrow!(MPI_Recv_c => MPI_Recv, ch, (buf: *mut u8, count: Count, dt: Handle, source: c_int, tag: c_int, ch: Handle, status: *mut Status), [count]);
narrow!(MPI_Isend_c => MPI_Isend, ch, (buf: *const u8, count: Count, dt: Handle, dest: c_int, tag: c_int, ch: Handle, request: Req), [count]);
narrow!(MPI_Issend_c => MPI_Issend, ch, (buf: *const u8, count: Count, dt: Handle, dest: c_int, tag: c_int, ch: Handle, request: Req), [count]);
narrow!(MPI_Irecv_c => MPI_Irecv, ch, (buf: *mut u8, count: Count, dt: Handle, source: c_int, tag: c_int, ch: Handle, request: Req), [count]);
narrow!(MPI_Sendrecv_c => MPI_Sendrecv, ch, (sendbuf: *const u8, sendcount: Count, sendtype: Handle, dest: c_int, sendtag: c_int,
    recvbuf: *mut u8, recvcount: Count, recvtype: Handle, source: c_int, recvtag: c_int, ch: Handle, status: *mut Status), [sendcount, recvcount]);
narrow!(MPI_Sendrecv_replace_c => MPI_Sendrecv_replace, ch, (buf: *mut u8, count: Count, dt: Handle, dest: c_int, sendtag: c_int,
    source: c_int, recvtag: c_int, ch: Handle, status: *mut Status), [count]);

narrow!(MPI_Bcast_init_c => MPI_Bcast_init, ch, (buf: usize, n: Count, dt: Handle, root: c_int, ch: Handle, info: Handle, req: Req), [n]);
narrow!(MPI_Reduce_init_c => MPI_Reduce_init, ch, (send: usize, recv: usize, n: Count, dt: Handle, op: Handle, root: c_int, ch: Handle, info: Handle, req: Req), [n]);
narrow!(MPI_Allreduce_init_c => MPI_Allreduce_init, ch, (send: usize, recv: usize, n: Count, dt: Handle, op: Handle, ch: Handle, info: Handle, req: Req), [n]);
narrow!(MPI_Scan_init_c => MPI_Scan_init, ch, (send: usize, recv: usize, n: Count, dt: Handle, op: Handle, ch: Handle, info: Handle, req: Req), [n]);
narrow!(MPI_Exscan_init_c => MPI_Exscan_init, ch, (send: usize, recv: usize, n: Count, dt: Handle, op: Handle, ch: Handle, info: Handle, req: Req), [n]);
narrow!(MPI_Allgather_init_c => MPI_Allgather_init, ch, (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, ch: Handle, info: Handle, req: Req), [sn, rn]);
narrow!(MPI_Gather_init_c => MPI_Gather_init, ch, (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, root: c_int, ch: Handle, info: Handle, req: Req), [sn, rn]);
narrow!(MPI_Scatter_init_c => MPI_Scatter_init, ch, (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, root: c_int, ch: Handle, info: Handle, req: Req), [sn, rn]);
narrow!(MPI_Alltoall_init_c => MPI_Alltoall_init, ch, (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, ch: Handle, info: Handle, req: Req), [sn, rn]);
narrow!(MPI_Reduce_scatter_block_init_c => MPI_Reduce_scatter_block_init, ch, (send: usize, recv: usize, rn: Count, dt: Handle, op: Handle, ch: Handle, info: Handle, req: Req), [rn]);

narrow!(MPI_Bcast_c => MPI_Bcast, ch, (buf: usize, n: Count, dt: Handle, root: c_int, ch: Handle), [n]);
narrow!(MPI_Ibcast_c => MPI_Ibcast, ch, (buf: usize, n: Count, dt: Handle, root: c_int, ch: Handle, req: Req), [n]);
narrow!(MPI_Reduce_c => MPI_Reduce, ch, (send: usize, recv: usize, n: Count, dt: Handle, op: Handle, root: c_int, ch: Handle), [n]);
narrow!(MPI_Ireduce_c => MPI_Ireduce, ch, (send: usize, recv: usize, n: Count, dt: Handle, op: Handle, root: c_int, ch: Handle, req: Req), [n]);
narrow!(MPI_Allreduce_c => MPI_Allreduce, ch, (send: usize, recv: usize, n: Count, dt: Handle, op: Handle, ch: Handle), [n]);
narrow!(MPI_Iallreduce_c => MPI_Iallreduce, ch, (send: usize, recv: usize, n: Count, dt: Handle, op: Handle, ch: Handle, req: Req), [n]);
narrow!(MPI_Scan_c => MPI_Scan, ch, (send: usize, recv: usize, n: Count, dt: Handle, op: Handle, ch: Handle), [n]);
narrow!(MPI_Iscan_c => MPI_Iscan, ch, (send: usize, recv: usize, n: Count, dt: Handle, op: Handle, ch: Handle, req: Req), [n]);
narrow!(MPI_Exscan_c => MPI_Exscan, ch, (send: usize, recv: usize, n: Count, dt: Handle, op: Handle, ch: Handle), [n]);
narrow!(MPI_Iexscan_c => MPI_Iexscan, ch, (send: usize, recv: usize, n: Count, dt: Handle, op: Handle, ch: Handle, req: Req), [n]);
narrow!(MPI_Allgather_c => MPI_Allgather, ch, (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, ch: Handle), [sn, rn]);
narrow!(MPI_Iallgather_c => MPI_Iallgather, ch, (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, ch: Handle, req: Req), [sn, rn]);
narrow!(MPI_Gather_c => MPI_Gather, ch, (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, root: c_int, ch: Handle), [sn, rn]);
narrow!(MPI_Igather_c => MPI_Igather, ch, (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, root: c_int, ch: Handle, req: Req), [sn, rn]);
narrow!(MPI_Scatter_c => MPI_Scatter, ch, (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, root: c_int, ch: Handle), [sn, rn]);
narrow!(MPI_Iscatter_c => MPI_Iscatter, ch, (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, root: c_int, ch: Handle, req: Req), [sn, rn]);
narrow!(MPI_Alltoall_c => MPI_Alltoall, ch, (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, ch: Handle), [sn, rn]);
narrow!(MPI_Ialltoall_c => MPI_Ialltoall, ch, (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, ch: Handle, req: Req), [sn, rn]);
narrow!(MPI_Reduce_scatter_block_c => MPI_Reduce_scatter_block, ch, (send: usize, recv: usize, rn: Count, dt: Handle, op: Handle, ch: Handle), [rn]);
narrow!(MPI_Ireduce_scatter_block_c => MPI_Ireduce_scatter_block, ch, (send: usize, recv: usize, rn: Count, dt: Handle, op: Handle, ch: Handle, req: Req), [rn]);

narrow!(counted MPI_Type_contiguous_c => MPI_Type_contiguous, (count: Count, old: Handle, out: *mut Handle), [count], out);
narrow!(counted MPI_Type_vector_c => MPI_Type_vector, (count: Count, blocklength: Count, stride: Count, old: Handle, out: *mut Handle), [count, blocklength, stride], out);

/// `n` counts or displacements of a `_c` form as `int`s; `None` if one
/// does not fit (or the array is NULL with `n > 0`: the `int` form says
/// so).
///
/// # Safety
/// `p` is NULL or holds `n` values.
pub(crate) unsafe fn ints<T: Copy + TryInto<c_int>>(p: *const T, n: usize) -> Option<Vec<c_int>> {
    if p.is_null() {
        return Some(Vec::new());
    }
    // SAFETY: the contract.
    let v = unsafe { std::slice::from_raw_parts(p, n) };
    v.iter().map(|&x| x.try_into().ok()).collect()
}

/// The array argument as the `int` form takes it: NULL stays NULL.
fn ptr(v: &[c_int], orig_null: bool) -> *const c_int {
    if orig_null {
        std::ptr::null()
    } else {
        v.as_ptr()
    }
}

fn is_root(ch: Handle, root: c_int) -> bool {
    comm(ch).is_ok_and(|c| c.rank() as c_int == root)
}

pub(crate) fn size_of_comm(ch: Handle) -> usize {
    comm(ch).map_or(0, |c| c.size() as usize)
}

/// The arrays of a `v` collective narrowed to `int`: `counts` and
/// `displs` of `n` entries each (NULL stays NULL), then `then` with them,
/// or `MPI_ERR_COUNT` when one does not fit.
///
/// # Safety
/// Each array is NULL or holds `n` entries.
unsafe fn narrowed<D: Copy + TryInto<c_int>>(
    name: &str,
    ch: Handle,
    n: usize,
    arrays: [(*const Count, *const D); 2],
    then: impl FnOnce([(*const c_int, *const c_int); 2]) -> c_int,
) -> c_int {
    let mut kept = Vec::new();
    for (counts, displs) in arrays {
        // SAFETY: the contract.
        let (Some(c), Some(d)) = (unsafe { ints(counts, n) }, unsafe { ints(displs, n) }) else {
            return too_large(name, ch);
        };
        kept.push((c, counts.is_null(), d, displs.is_null()));
    }
    let p = |i: usize| {
        let (c, cn, d, dn) = &kept[i];
        (ptr(c, *cn), ptr(d, *dn))
    };
    then([p(0), p(1)])
}

/// The second pair of a `v` collective with one pair of arrays.
const NONE: (*const Count, *const isize) = (std::ptr::null(), std::ptr::null());

/// Entries in a rooted `v` collective's arrays: one per rank at the
/// root; none elsewhere (they mean nothing there).
pub(crate) fn at_root(ch: Handle, root: c_int) -> usize {
    if is_root(ch, root) {
        size_of_comm(ch)
    } else {
        0
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Allgatherv_c(
    send: usize,
    sn: Count,
    st: Handle,
    recv: usize,
    counts: *const Count,
    displs: *const isize,
    rt: Handle,
    ch: Handle,
) -> c_int {
    let name = "MPI_Allgatherv_c";
    let Ok(sn) = c_int::try_from(sn) else {
        return too_large(name, ch);
    };
    // SAFETY: one entry per rank (the contract).
    unsafe {
        narrowed(
            name,
            ch,
            size_of_comm(ch),
            [(counts, displs), NONE],
            |[(c, d), _]| MPI_Allgatherv(send, sn, st, recv, c, d, rt, ch),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Iallgatherv_c(
    send: usize,
    sn: Count,
    st: Handle,
    recv: usize,
    counts: *const Count,
    displs: *const isize,
    rt: Handle,
    ch: Handle,
    req: Req,
) -> c_int {
    let name = "MPI_Iallgatherv_c";
    let Ok(sn) = c_int::try_from(sn) else {
        return too_large(name, ch);
    };
    // SAFETY: one entry per rank (the contract).
    unsafe {
        narrowed(
            name,
            ch,
            size_of_comm(ch),
            [(counts, displs), NONE],
            |[(c, d), _]| MPI_Iallgatherv(send, sn, st, recv, c, d, rt, ch, req),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Gatherv_c(
    send: usize,
    sn: Count,
    st: Handle,
    recv: usize,
    counts: *const Count,
    displs: *const isize,
    rt: Handle,
    root: c_int,
    ch: Handle,
) -> c_int {
    let name = "MPI_Gatherv_c";
    let Ok(sn) = c_int::try_from(sn) else {
        return too_large(name, ch);
    };
    // SAFETY: one entry per rank at the root (the contract).
    unsafe {
        narrowed(
            name,
            ch,
            at_root(ch, root),
            [(counts, displs), NONE],
            |[(c, d), _]| MPI_Gatherv(send, sn, st, recv, c, d, rt, root, ch),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Igatherv_c(
    send: usize,
    sn: Count,
    st: Handle,
    recv: usize,
    counts: *const Count,
    displs: *const isize,
    rt: Handle,
    root: c_int,
    ch: Handle,
    req: Req,
) -> c_int {
    let name = "MPI_Igatherv_c";
    let Ok(sn) = c_int::try_from(sn) else {
        return too_large(name, ch);
    };
    // SAFETY: one entry per rank at the root (the contract).
    unsafe {
        narrowed(
            name,
            ch,
            at_root(ch, root),
            [(counts, displs), NONE],
            |[(c, d), _]| MPI_Igatherv(send, sn, st, recv, c, d, rt, root, ch, req),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Scatterv_c(
    send: usize,
    counts: *const Count,
    displs: *const isize,
    st: Handle,
    recv: usize,
    rn: Count,
    rt: Handle,
    root: c_int,
    ch: Handle,
) -> c_int {
    let name = "MPI_Scatterv_c";
    let Ok(rn) = c_int::try_from(rn) else {
        return too_large(name, ch);
    };
    // SAFETY: one entry per rank at the root (the contract).
    unsafe {
        narrowed(
            name,
            ch,
            at_root(ch, root),
            [(counts, displs), NONE],
            |[(c, d), _]| MPI_Scatterv(send, c, d, st, recv, rn, rt, root, ch),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Iscatterv_c(
    send: usize,
    counts: *const Count,
    displs: *const isize,
    st: Handle,
    recv: usize,
    rn: Count,
    rt: Handle,
    root: c_int,
    ch: Handle,
    req: Req,
) -> c_int {
    let name = "MPI_Iscatterv_c";
    let Ok(rn) = c_int::try_from(rn) else {
        return too_large(name, ch);
    };
    // SAFETY: one entry per rank at the root (the contract).
    unsafe {
        narrowed(
            name,
            ch,
            at_root(ch, root),
            [(counts, displs), NONE],
            |[(c, d), _]| MPI_Iscatterv(send, c, d, st, recv, rn, rt, root, ch, req),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoallv_c(
    send: usize,
    scounts: *const Count,
    sdispls: *const isize,
    st: Handle,
    recv: usize,
    rcounts: *const Count,
    rdispls: *const isize,
    rt: Handle,
    ch: Handle,
) -> c_int {
    let arrays = [(scounts, sdispls), (rcounts, rdispls)];
    // SAFETY: one entry per rank (the contract).
    unsafe {
        narrowed(
            "MPI_Alltoallv_c",
            ch,
            size_of_comm(ch),
            arrays,
            |[(sc, sd), (rc, rd)]| MPI_Alltoallv(send, sc, sd, st, recv, rc, rd, rt, ch),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Ialltoallv_c(
    send: usize,
    scounts: *const Count,
    sdispls: *const isize,
    st: Handle,
    recv: usize,
    rcounts: *const Count,
    rdispls: *const isize,
    rt: Handle,
    ch: Handle,
    req: Req,
) -> c_int {
    let arrays = [(scounts, sdispls), (rcounts, rdispls)];
    // SAFETY: one entry per rank (the contract).
    unsafe {
        narrowed(
            "MPI_Ialltoallv_c",
            ch,
            size_of_comm(ch),
            arrays,
            |[(sc, sd), (rc, rd)]| MPI_Ialltoallv(send, sc, sd, st, recv, rc, rd, rt, ch, req),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoallw_c(
    send: usize,
    scounts: *const Count,
    sdispls: *const isize,
    stypes: *const Handle,
    recv: usize,
    rcounts: *const Count,
    rdispls: *const isize,
    rtypes: *const Handle,
    ch: Handle,
) -> c_int {
    let arrays = [(scounts, sdispls), (rcounts, rdispls)];
    // SAFETY: one entry per rank (the contract).
    unsafe {
        narrowed(
            "MPI_Alltoallw_c",
            ch,
            size_of_comm(ch),
            arrays,
            |[(sc, sd), (rc, rd)]| MPI_Alltoallw(send, sc, sd, stypes, recv, rc, rd, rtypes, ch),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Ialltoallw_c(
    send: usize,
    scounts: *const Count,
    sdispls: *const isize,
    stypes: *const Handle,
    recv: usize,
    rcounts: *const Count,
    rdispls: *const isize,
    rtypes: *const Handle,
    ch: Handle,
    req: Req,
) -> c_int {
    let arrays = [(scounts, sdispls), (rcounts, rdispls)];
    // SAFETY: one entry per rank (the contract).
    unsafe {
        narrowed(
            "MPI_Ialltoallw_c",
            ch,
            size_of_comm(ch),
            arrays,
            |[(sc, sd), (rc, rd)]| {
                MPI_Ialltoallw(send, sc, sd, stypes, recv, rc, rd, rtypes, ch, req)
            },
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_scatter_c(
    send: usize,
    recv: usize,
    counts: *const Count,
    dt: Handle,
    op: Handle,
    ch: Handle,
) -> c_int {
    let n = size_of_comm(ch);
    // SAFETY: one entry per rank (the contract).
    let Some(c) = (unsafe { ints(counts, n) }) else {
        return too_large("MPI_Reduce_scatter_c", ch);
    };
    // SAFETY: the `int` form's contract.
    unsafe { MPI_Reduce_scatter(send, recv, ptr(&c, counts.is_null()), dt, op, ch) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Ireduce_scatter_c(
    send: usize,
    recv: usize,
    counts: *const Count,
    dt: Handle,
    op: Handle,
    ch: Handle,
    req: Req,
) -> c_int {
    let n = size_of_comm(ch);
    // SAFETY: one entry per rank (the contract).
    let Some(c) = (unsafe { ints(counts, n) }) else {
        return too_large("MPI_Ireduce_scatter_c", ch);
    };
    // SAFETY: the `int` form's contract.
    unsafe { MPI_Ireduce_scatter(send, recv, ptr(&c, counts.is_null()), dt, op, ch, req) }
}

narrow!(counted MPI_Type_create_hvector_c => MPI_Type_create_hvector, (count: Count, blocklength: Count, stride: isize, old: Handle, out: *mut Handle), [count, blocklength], out);
narrow!(counted MPI_Type_create_hindexed_block_c => MPI_Type_create_hindexed_block, (count: Count, blocklength: Count, displacements: *const isize, old: Handle, out: *mut Handle), [count, blocklength], out);

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_hindexed_c(
    count: Count,
    blocklengths: *const Count,
    displacements: *const isize,
    old: Handle,
    out: *mut Handle,
) -> c_int {
    let (Ok(n), Ok(n32)) = (usize::try_from(count), c_int::try_from(count)) else {
        return too_large("MPI_Type_create_hindexed_c", COMM_WORLD);
    };
    // SAFETY: `count` entries (the contract).
    let Some(b) = (unsafe { ints(blocklengths, n) }) else {
        return too_large("MPI_Type_create_hindexed_c", COMM_WORLD);
    };
    let lens = ptr(&b, blocklengths.is_null());
    // SAFETY: the `int` form's contract.
    unsafe {
        counted(
            MPI_Type_create_hindexed(n32, lens, displacements, old, out),
            out,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_subarray_c(
    ndims: c_int,
    sizes: *const Count,
    subsizes: *const Count,
    starts: *const Count,
    order: c_int,
    old: Handle,
    out: *mut Handle,
) -> c_int {
    let n = usize::try_from(ndims).unwrap_or(0);
    // SAFETY: `ndims` entries each (the contract).
    let (Some(a), Some(b), Some(c)) =
        (unsafe { (ints(sizes, n), ints(subsizes, n), ints(starts, n)) })
    else {
        return too_large("MPI_Type_create_subarray_c", COMM_WORLD);
    };
    let (a, b, c) = (
        ptr(&a, sizes.is_null()),
        ptr(&b, subsizes.is_null()),
        ptr(&c, starts.is_null()),
    );
    // SAFETY: the `int` form's contract.
    unsafe {
        counted(
            MPI_Type_create_subarray(ndims, a, b, c, order, old, out),
            out,
        )
    }
}

/// `MPI_Count` bounds are `MPI_Aint`s on the 64-bit hosts meshwork runs on.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_resized_c(
    old: Handle,
    lb: Count,
    extent: Count,
    out: *mut Handle,
) -> c_int {
    // SAFETY: the `int` form's contract.
    unsafe {
        counted(
            MPI_Type_create_resized(old, lb as isize, extent as isize, out),
            out,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_true_extent_c(
    t: Handle,
    true_lb: *mut Count,
    true_extent: *mut Count,
) -> c_int {
    // SAFETY: the same contract: an `MPI_Count` is an `isize` here.
    unsafe { MPI_Type_get_true_extent(t, true_lb.cast(), true_extent.cast()) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_indexed_c(
    count: Count,
    blocklengths: *const Count,
    displacements: *const Count,
    old: Handle,
    out: *mut Handle,
) -> c_int {
    let Ok(n) = usize::try_from(count) else {
        return too_large("MPI_Type_indexed_c", COMM_WORLD);
    };
    // SAFETY: `count` entries each (the contract).
    let (Some(b), Some(d)) = (unsafe { ints(blocklengths, n) }, unsafe {
        ints(displacements, n)
    }) else {
        return too_large("MPI_Type_indexed_c", COMM_WORLD);
    };
    let (lens, displs) = (
        ptr(&b, blocklengths.is_null()),
        ptr(&d, displacements.is_null()),
    );
    // SAFETY: the `int` form's contract.
    unsafe { counted(MPI_Type_indexed(n as c_int, lens, displs, old, out), out) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_indexed_block_c(
    count: Count,
    blocklength: Count,
    displacements: *const Count,
    old: Handle,
    out: *mut Handle,
) -> c_int {
    let name = "MPI_Type_create_indexed_block_c";
    let (Ok(n), Ok(b)) = (usize::try_from(count), c_int::try_from(blocklength)) else {
        return too_large(name, COMM_WORLD);
    };
    // SAFETY: `count` entries (the contract).
    let Some(d) = (unsafe { ints(displacements, n) }) else {
        return too_large(name, COMM_WORLD);
    };
    let displs = ptr(&d, displacements.is_null());
    // SAFETY: the `int` form's contract.
    unsafe {
        counted(
            MPI_Type_create_indexed_block(n as c_int, b, displs, old, out),
            out,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_local_c(
    inbuf: usize,
    inout: usize,
    count: Count,
    dt: Handle,
    op: Handle,
) -> c_int {
    match c_int::try_from(count) {
        // SAFETY: the `int` form's contract.
        Ok(n) => unsafe { MPI_Reduce_local(inbuf, inout, n, dt, op) },
        Err(_) => too_large("MPI_Reduce_local_c", COMM_WORLD),
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_struct_c(
    count: Count,
    blocklengths: *const Count,
    displacements: *const isize,
    types: *const Handle,
    out: *mut Handle,
) -> c_int {
    let name = "MPI_Type_create_struct_c";
    let Ok(n) = usize::try_from(count) else {
        return too_large(name, COMM_WORLD);
    };
    if n > 0 && (blocklengths.is_null() || displacements.is_null() || types.is_null()) {
        return crate::state::raise(COMM_WORLD, name, Fail::arg("an array is NULL"));
    }
    let mut blocks = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: `count` entries each (the contract).
        let (len, d, t) = unsafe { (*blocklengths.add(i), *displacements.add(i), *types.add(i)) };
        let Ok(len) = usize::try_from(len) else {
            return too_large(name, COMM_WORLD);
        };
        blocks.push((len, d, t));
    }
    // SAFETY: the contract.
    unsafe { counted(create_struct(name, &blocks, out), out) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Get_count_c(
    status: *const Status,
    dt: Handle,
    count: *mut Count,
) -> c_int {
    let mut n: c_int = 0;
    // SAFETY: the `int` form's contract.
    let rc = unsafe { MPI_Get_count(status, dt, &mut n) };
    if rc == SUCCESS {
        // SAFETY: NULL or valid (the contract).
        unsafe { put(count, Count::from(n)) };
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Get_elements_c(
    status: *const Status,
    dt: Handle,
    count: *mut Count,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Get_count_c(status, dt, count) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_size_c(t: Handle, size: *mut Count) -> c_int {
    crate::state::entry(COMM_WORLD, "MPI_Type_size_c", || {
        let t = type_of(t)?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(size, t.size as Count) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_extent_c(
    t: Handle,
    lb: *mut Count,
    extent: *mut Count,
) -> c_int {
    let (mut l, mut e) = (0isize, 0isize);
    // SAFETY: the `int` form's contract, with valid outputs.
    let rc = unsafe { MPI_Type_get_extent(t, &mut l, &mut e) };
    if rc == SUCCESS {
        // SAFETY: NULL or valid (the contract).
        unsafe {
            put(lb, l as Count);
            put(extent, e as Count);
        }
    }
    rc
}
