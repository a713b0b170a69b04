//! The neighbourhood collectives (MPI-5 §8.6): each rank exchanges blocks
//! with the neighbours its communicator's topology gives it
//! ([`neighbourhood`]): a grid's ranks one step away along each
//! dimension, a graph's adjacent nodes, a distributed graph's sources and
//! destinations. Each is a `v` plan ([`VPlan`]), a message per block, so
//! the blocking, non-blocking and persistent forms are those of the `v`
//! collectives. The `_c` forms take their counts and displacements as they
//! come (above 2^31 too): the plans read any integer type.

use super::{count, started_v, Count, Kept, Restart, VPlan};
use crate::consts::*;
use crate::datatype::{type_of, Type};
use crate::p2p::{add_request, start_request, Request};
use crate::state::{comm, entry, Fail, Result};
use crate::topo::neighbourhood;
use crate::Handle;
use std::ffi::c_int;
use std::fmt::Display;
use std::sync::Arc;

/// One side of a neighbourhood collective: for the neighbour at a place
/// in MPI's order, its block's byte offset from the buffer, type and
/// count.
type Blocks<'a> = &'a dyn Fn(usize) -> Result<(isize, Arc<Type>, usize)>;

/// The plan that sends block `sends(i)` of `send` to destination `i` and
/// receives block `recvs(j)` of `recv` from source `j`, for every
/// neighbour that is not `MPI_PROC_NULL` (whose blocks are left alone).
fn plan(
    ch: Handle,
    send: usize,
    sends: Blocks<'_>,
    recv: usize,
    recvs: Blocks<'_>,
) -> Result<VPlan> {
    if send == IN_PLACE || recv == IN_PLACE {
        return Err(Fail::new(
            ERR_BUFFER,
            "MPI_IN_PLACE has no meaning in a neighbourhood collective",
        ));
    }
    let c = comm(ch)?;
    let hood = neighbourhood(&c)?;
    let mut p = VPlan::with_lanes(c, hood.lanes);
    for (i, to) in hood.destinations.iter().enumerate() {
        if let Some((peer, lane)) = *to {
            let (off, ty, n) = sends(i)?;
            p.send_on(lane, peer, send.wrapping_add_signed(off), ty, n);
        }
    }
    for (j, from) in hood.sources.iter().enumerate() {
        if let Some((peer, lane)) = *from {
            let (off, ty, n) = recvs(j)?;
            p.recv_on(lane, peer, recv.wrapping_add_signed(off), ty, n);
        }
    }
    Ok(p)
}

/// A count as MPI gives it: an `int`, or an `MPI_Count` (`_c` forms).
trait Number: TryInto<usize> + Copy + Display {}
impl<T: TryInto<usize> + Copy + Display> Number for T {}

/// A displacement as MPI gives it: an `int`, or an `MPI_Aint`.
trait Displacement: TryInto<isize> + Copy + Display {}
impl<T: TryInto<isize> + Copy + Display> Displacement for T {}

/// The byte offset of element `at` of a buffer of `ty`.
fn offset<T: Displacement>(at: T, ty: &Type) -> Result<isize> {
    at.try_into()
        .ok()
        .and_then(|at: isize| at.checked_mul(ty.extent))
        .ok_or_else(|| {
            Fail::new(
                ERR_COUNT,
                format!("displacement {at} lies beyond the address space"),
            )
        })
}

/// An array of the caller's that MPI's contract says holds one entry
/// per neighbour on its side (sources or destinations).
struct PerNeighbour<T> {
    p: *const T,
    what: &'static str,
}

impl<T: Copy> PerNeighbour<T> {
    /// # Safety
    /// `p` is NULL or holds an entry for each neighbour on the side
    /// [`get`](Self::get) is asked for.
    unsafe fn new(p: *const T, what: &'static str) -> Self {
        PerNeighbour { p, what }
    }

    /// The entry of the neighbour at place `i`.
    fn get(&self, i: usize) -> Result<T> {
        if self.p.is_null() {
            return Err(Fail::arg(format!("{} is NULL", self.what)));
        }
        // SAFETY: `i` is a neighbour's place on this array's side
        // (`plan` asks for no other), which `new`'s contract covers.
        Ok(unsafe { *self.p.add(i) })
    }
}

/// The same block to every destination; block `j` of `recv` from source
/// `j`.
fn plan_allgather<C: Number>(
    send: usize,
    sn: C,
    st: Handle,
    recv: usize,
    rn: C,
    rt: Handle,
    ch: Handle,
) -> Result<VPlan> {
    let (sty, sn, rty, rn) = (type_of(st)?, count(sn)?, type_of(rt)?, count(rn)?);
    plan(ch, send, &|_| Ok((0, sty.clone(), sn)), recv, &|j| {
        Ok((offset(j.saturating_mul(rn), &rty)?, rty.clone(), rn))
    })
}

/// # Safety
/// `counts` and `displs` hold one entry per source (MPI's contract).
#[allow(clippy::too_many_arguments, reason = "MPI's arguments, as they come")]
unsafe fn plan_allgatherv<C: Number, D: Displacement>(
    send: usize,
    sn: C,
    st: Handle,
    recv: usize,
    counts: *const C,
    displs: *const D,
    rt: Handle,
    ch: Handle,
) -> Result<VPlan> {
    let (sty, sn, rty) = (type_of(st)?, count(sn)?, type_of(rt)?);
    // SAFETY: one entry per source (the contract).
    let (counts, displs) = unsafe {
        (
            PerNeighbour::new(counts, "recvcounts"),
            PerNeighbour::new(displs, "displs"),
        )
    };
    plan(ch, send, &|_| Ok((0, sty.clone(), sn)), recv, &|j| {
        Ok((
            offset(displs.get(j)?, &rty)?,
            rty.clone(),
            count(counts.get(j)?)?,
        ))
    })
}

/// Block `i` of `send` to destination `i`, block `j` of `recv` from
/// source `j`.
fn plan_alltoall<C: Number>(
    send: usize,
    sn: C,
    st: Handle,
    recv: usize,
    rn: C,
    rt: Handle,
    ch: Handle,
) -> Result<VPlan> {
    let (sty, sn, rty, rn) = (type_of(st)?, count(sn)?, type_of(rt)?, count(rn)?);
    plan(
        ch,
        send,
        &|i| Ok((offset(i.saturating_mul(sn), &sty)?, sty.clone(), sn)),
        recv,
        &|j| Ok((offset(j.saturating_mul(rn), &rty)?, rty.clone(), rn)),
    )
}

/// # Safety
/// The arrays hold one entry per destination (`s…`) and per source
/// (`r…`), as MPI's contract says.
#[allow(clippy::too_many_arguments, reason = "MPI's arguments, as they come")]
unsafe fn plan_alltoallv<C: Number, D: Displacement>(
    send: usize,
    scounts: *const C,
    sdispls: *const D,
    st: Handle,
    recv: usize,
    rcounts: *const C,
    rdispls: *const D,
    rt: Handle,
    ch: Handle,
) -> Result<VPlan> {
    let (sty, rty) = (type_of(st)?, type_of(rt)?);
    // SAFETY: an entry per destination and per source (the contract).
    let (sc, sd, rc, rd) = unsafe {
        (
            PerNeighbour::new(scounts, "sendcounts"),
            PerNeighbour::new(sdispls, "sdispls"),
            PerNeighbour::new(rcounts, "recvcounts"),
            PerNeighbour::new(rdispls, "rdispls"),
        )
    };
    plan(
        ch,
        send,
        &|i| Ok((offset(sd.get(i)?, &sty)?, sty.clone(), count(sc.get(i)?)?)),
        recv,
        &|j| Ok((offset(rd.get(j)?, &rty)?, rty.clone(), count(rc.get(j)?)?)),
    )
}

/// The `w` form: a type per block, displacements in bytes.
///
/// # Safety
/// As [`plan_alltoallv`].
#[allow(clippy::too_many_arguments, reason = "MPI's arguments, as they come")]
unsafe fn plan_alltoallw<C: Number>(
    send: usize,
    scounts: *const C,
    sdispls: *const isize,
    stypes: *const Handle,
    recv: usize,
    rcounts: *const C,
    rdispls: *const isize,
    rtypes: *const Handle,
    ch: Handle,
) -> Result<VPlan> {
    // SAFETY: an entry per destination and per source (the contract).
    let (sc, sd, st, rc, rd, rt) = unsafe {
        (
            PerNeighbour::new(scounts, "sendcounts"),
            PerNeighbour::new(sdispls, "sdispls"),
            PerNeighbour::new(stypes, "sendtypes"),
            PerNeighbour::new(rcounts, "recvcounts"),
            PerNeighbour::new(rdispls, "rdispls"),
            PerNeighbour::new(rtypes, "recvtypes"),
        )
    };
    plan(
        ch,
        send,
        &|i| Ok((sd.get(i)?, type_of(st.get(i)?)?, count(sc.get(i)?)?)),
        recv,
        &|j| Ok((rd.get(j)?, type_of(rt.get(j)?)?, count(rc.get(j)?)?)),
    )
}

// The blocking and non-blocking forms, `int` and `_c`.

v_forms!(MPI_Neighbor_allgather, MPI_Ineighbor_allgather,
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, ch: Handle),
    ch, req, plan_allgather(send, sn, st, recv, rn, rt, ch));
v_forms!(MPI_Neighbor_allgather_c, MPI_Ineighbor_allgather_c,
    (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, ch: Handle),
    ch, req, plan_allgather(send, sn, st, recv, rn, rt, ch));
v_forms!(MPI_Neighbor_allgatherv, MPI_Ineighbor_allgatherv,
    (send: usize, sn: c_int, st: Handle, recv: usize, counts: *const c_int, displs: *const c_int, rt: Handle, ch: Handle),
    ch, req, plan_allgatherv(send, sn, st, recv, counts, displs, rt, ch));
v_forms!(MPI_Neighbor_allgatherv_c, MPI_Ineighbor_allgatherv_c,
    (send: usize, sn: Count, st: Handle, recv: usize, counts: *const Count, displs: *const isize, rt: Handle, ch: Handle),
    ch, req, plan_allgatherv(send, sn, st, recv, counts, displs, rt, ch));
v_forms!(MPI_Neighbor_alltoall, MPI_Ineighbor_alltoall,
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, ch: Handle),
    ch, req, plan_alltoall(send, sn, st, recv, rn, rt, ch));
v_forms!(MPI_Neighbor_alltoall_c, MPI_Ineighbor_alltoall_c,
    (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, ch: Handle),
    ch, req, plan_alltoall(send, sn, st, recv, rn, rt, ch));
v_forms!(MPI_Neighbor_alltoallv, MPI_Ineighbor_alltoallv,
    (send: usize, scounts: *const c_int, sdispls: *const c_int, st: Handle, recv: usize, rcounts: *const c_int, rdispls: *const c_int, rt: Handle, ch: Handle),
    ch, req, plan_alltoallv(send, scounts, sdispls, st, recv, rcounts, rdispls, rt, ch));
v_forms!(MPI_Neighbor_alltoallv_c, MPI_Ineighbor_alltoallv_c,
    (send: usize, scounts: *const Count, sdispls: *const isize, st: Handle, recv: usize, rcounts: *const Count, rdispls: *const isize, rt: Handle, ch: Handle),
    ch, req, plan_alltoallv(send, scounts, sdispls, st, recv, rcounts, rdispls, rt, ch));
v_forms!(MPI_Neighbor_alltoallw, MPI_Ineighbor_alltoallw,
    (send: usize, scounts: *const c_int, sdispls: *const isize, stypes: *const Handle, recv: usize, rcounts: *const c_int, rdispls: *const isize, rtypes: *const Handle, ch: Handle),
    ch, req, plan_alltoallw(send, scounts, sdispls, stypes, recv, rcounts, rdispls, rtypes, ch));
v_forms!(MPI_Neighbor_alltoallw_c, MPI_Ineighbor_alltoallw_c,
    (send: usize, scounts: *const Count, sdispls: *const isize, stypes: *const Handle, recv: usize, rcounts: *const Count, rdispls: *const isize, rtypes: *const Handle, ch: Handle),
    ch, req, plan_alltoallw(send, scounts, sdispls, stypes, recv, rcounts, rdispls, rtypes, ch));

// The persistent forms: each start plans anew on the arguments kept (the
// arrays by address, which MPI's contract keeps until the request is
// freed).

persistent!(MPI_Neighbor_allgather_init,
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, ch: Handle),
    ch, plan_allgather(send, sn, st, recv, rn, rt, ch), started_v);
persistent!(MPI_Neighbor_allgather_init_c,
    (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, ch: Handle),
    ch, plan_allgather(send, sn, st, recv, rn, rt, ch), started_v);
persistent!(MPI_Neighbor_allgatherv_init,
    (send: usize, sn: c_int, st: Handle, recv: usize, counts: *const c_int, displs: *const c_int, rt: Handle, ch: Handle),
    ch, plan_allgatherv(send, sn, st, recv, counts, displs, rt, ch), started_v);
persistent!(MPI_Neighbor_allgatherv_init_c,
    (send: usize, sn: Count, st: Handle, recv: usize, counts: *const Count, displs: *const isize, rt: Handle, ch: Handle),
    ch, plan_allgatherv(send, sn, st, recv, counts, displs, rt, ch), started_v);
persistent!(MPI_Neighbor_alltoall_init,
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, ch: Handle),
    ch, plan_alltoall(send, sn, st, recv, rn, rt, ch), started_v);
persistent!(MPI_Neighbor_alltoall_init_c,
    (send: usize, sn: Count, st: Handle, recv: usize, rn: Count, rt: Handle, ch: Handle),
    ch, plan_alltoall(send, sn, st, recv, rn, rt, ch), started_v);
persistent!(MPI_Neighbor_alltoallv_init,
    (send: usize, scounts: *const c_int, sdispls: *const c_int, st: Handle, recv: usize, rcounts: *const c_int, rdispls: *const c_int, rt: Handle, ch: Handle),
    ch, plan_alltoallv(send, scounts, sdispls, st, recv, rcounts, rdispls, rt, ch), started_v);
persistent!(MPI_Neighbor_alltoallv_init_c,
    (send: usize, scounts: *const Count, sdispls: *const isize, st: Handle, recv: usize, rcounts: *const Count, rdispls: *const isize, rt: Handle, ch: Handle),
    ch, plan_alltoallv(send, scounts, sdispls, st, recv, rcounts, rdispls, rt, ch), started_v);
persistent!(MPI_Neighbor_alltoallw_init,
    (send: usize, scounts: *const c_int, sdispls: *const isize, stypes: *const Handle, recv: usize, rcounts: *const c_int, rdispls: *const isize, rtypes: *const Handle, ch: Handle),
    ch, plan_alltoallw(send, scounts, sdispls, stypes, recv, rcounts, rdispls, rtypes, ch), started_v);
persistent!(MPI_Neighbor_alltoallw_init_c,
    (send: usize, scounts: *const Count, sdispls: *const isize, stypes: *const Handle, recv: usize, rcounts: *const Count, rdispls: *const isize, rtypes: *const Handle, ch: Handle),
    ch, plan_alltoallw(send, scounts, sdispls, stypes, recv, rcounts, rdispls, rtypes, ch), started_v);
