//! Collectives. Each MPI collective becomes a [`Plan`]: one meshwork
//! [`Call`] on byte regions of one element type, the scratch it needs
//! (a derived type's packed copy, a non-root's reduction buffer, the copy
//! `MPI_IN_PLACE` implies), and what to copy back after. The blocking
//! form runs it through `ProcessGroup::call_bytes`, the `MPI_I…` form
//! through `ProcessGroup::call_nb`; both are meshwork's one call entry.
//!
//! Data movement (broadcast, gathers, scatters, all-to-all) moves bytes,
//! so any datatype goes; reductions take the meshwork element type of
//! the datatype and SUM, PROD, MIN or MAX, and any other operator is a
//! gather of every contribution, folded after it (`fold.rs`). The `v`
//! forms, whose blocks differ in size from rank to rank, have no meshwork
//! call: they are point-to-point messages on a lane of their own
//! ([`VLANE`]).

use crate::consts::*;
use crate::datatype::{reduces_as, type_of, Type};
use crate::fold::Fold;
use crate::p2p::{add_request, start_request, Pending, Request};
use crate::state::{comm, entry, Comm, Fail, Result};
use crate::Handle;
use mw::{Buffers, Call, DType, Element, OwnedBuffers, ReduceOp, Work};
use std::ffi::c_int;
use std::sync::Arc;

/// The meshwork tag of the `v` collectives' messages.
const VLANE: u64 = 0x4d50_4920_7663_6f6c;

/// Bytes of memory: the caller's, or scratch a plan keeps.
#[derive(Clone, Copy, Debug)]
struct Region {
    at: usize,
    len: usize,
}

impl Region {
    const EMPTY: Region = Region { at: 0, len: 0 };

    /// # Safety
    /// The region is valid for reads for the call.
    unsafe fn bytes<'a>(self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: valid (the contract).
        unsafe { std::slice::from_raw_parts(self.at as *const u8, self.len) }
    }

    /// # Safety
    /// The region is valid for reads and writes for the call, and nothing
    /// else touches it.
    unsafe fn bytes_mut<'a>(self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: valid and exclusive (the contract).
        unsafe { std::slice::from_raw_parts_mut(self.at as *mut u8, self.len) }
    }

    fn offset(self, by: usize, len: usize) -> Region {
        Region {
            at: self.at + by,
            len,
        }
    }
}

/// A step after the call: `from` (packed) into `count` elements of `ty`
/// at `to`.
struct Unpack {
    from: Region,
    ty: Arc<Type>,
    count: usize,
    to: usize,
}

/// A step after the call that gathered every rank's contribution to a
/// reduction meshwork lacks (`fold.rs`): the fold of those of `ranks`
/// in `from` (`stride` bytes a rank, read from `offset`, `count`
/// elements) into `to`.
struct FoldStep {
    fold: Fold,
    from: Region,
    stride: usize,
    offset: usize,
    ranks: std::ops::Range<usize>,
    count: usize,
    to: Region,
}

/// What runs after the call, in order.
enum After {
    Unpack(Unpack),
    Fold(FoldStep),
}

enum Bufs {
    InPlace(Region),
    SendRecv { send: Region, recv: Region },
}

/// One collective, ready to run.
struct Plan {
    comm: Arc<Comm>,
    call: Call,
    dtype: DType,
    bufs: Bufs,
    /// Scratch, 8-byte aligned; its memory does not move with the Vec.
    keep: Vec<Vec<u64>>,
    after: Vec<After>,
}

// SAFETY: the regions are the caller's buffers, which MPI gives to the
// operation until it completes, and the plan's own scratch.
unsafe impl Send for Plan {}

impl Plan {
    fn new(comm: Arc<Comm>, call: Call, dtype: DType) -> Plan {
        Plan {
            comm,
            call,
            dtype,
            bufs: Bufs::InPlace(Region::EMPTY),
            keep: Vec::new(),
            after: Vec::new(),
        }
    }

    fn scratch(&mut self, len: usize) -> Region {
        let mut v = vec![0u64; len.div_ceil(8)];
        let at = v.as_mut_ptr() as usize;
        self.keep.push(v);
        Region { at, len }
    }

    /// Scratch holding `count` elements of `ty` at `buf`, packed.
    ///
    /// # Safety
    /// `buf` holds `count` elements of `ty`.
    unsafe fn copied(&mut self, buf: usize, ty: &Type, count: usize) -> Result<Region> {
        // SAFETY: the contract.
        let packed = unsafe { ty.pack(buf as *const u8, count) }?;
        let r = self.scratch(packed.len());
        // SAFETY: fresh scratch of that length.
        unsafe { r.bytes_mut() }.copy_from_slice(&packed);
        Ok(r)
    }

    /// What the call reads: the caller's memory if it is one run of
    /// bytes, else a packed copy.
    ///
    /// # Safety
    /// As [`copied`](Self::copied).
    unsafe fn input(&mut self, buf: usize, ty: &Type, count: usize) -> Result<Region> {
        let len = ty.bytes(count)?;
        if len > 0 && buf == 0 {
            return Err(Fail::new(
                ERR_BUFFER,
                "send buffer is NULL with a nonzero count",
            ));
        }
        if ty.is_flat() {
            return Ok(Region { at: buf, len });
        }
        // SAFETY: the contract.
        unsafe { self.copied(buf, ty, count) }
    }

    /// Where the call writes: the caller's memory if it is one run of
    /// bytes, else scratch unpacked into it after.
    fn output(&mut self, buf: usize, ty: &Arc<Type>, count: usize) -> Result<Region> {
        let len = ty.bytes(count)?;
        if len > 0 && buf == 0 {
            return Err(Fail::new(
                ERR_BUFFER,
                "receive buffer is NULL with a nonzero count",
            ));
        }
        if ty.is_flat() {
            return Ok(Region { at: buf, len });
        }
        let r = self.scratch(len);
        self.after.push(After::Unpack(Unpack {
            from: r,
            ty: ty.clone(),
            count,
            to: buf,
        }));
        Ok(r)
    }

    /// Read and written in place: the caller's memory, or a packed copy
    /// unpacked after.
    ///
    /// # Safety
    /// As [`copied`](Self::copied), writable.
    unsafe fn inout(&mut self, buf: usize, ty: &Arc<Type>, count: usize) -> Result<Region> {
        if ty.is_flat() {
            return self.output(buf, ty, count);
        }
        // SAFETY: the contract.
        let r = unsafe { self.copied(buf, ty, count) }?;
        self.after.push(After::Unpack(Unpack {
            from: r,
            ty: ty.clone(),
            count,
            to: buf,
        }));
        Ok(r)
    }

    fn finish(after: &[After]) {
        for step in after {
            match step {
                // SAFETY: `from` is the plan's scratch and `to` the
                // caller's buffer of `count` elements (MPI's contract).
                After::Unpack(u) => unsafe {
                    u.ty.unpack(u.from.bytes(), u.to as *mut u8, u.count)
                },
                After::Fold(f) => {
                    // SAFETY: `from` is the plan's scratch the call filled
                    // and `to` this rank's result, scratch or the caller's
                    // contiguous buffer; they never overlap.
                    let (from, to) = unsafe { (f.from.bytes(), f.to.bytes_mut()) };
                    f.fold
                        .fold(from, f.stride, f.offset, f.ranks.clone(), f.count, to);
                }
            }
        }
    }

    /// Run it to its end.
    fn run(self) -> Result<()> {
        // SAFETY: the regions are valid for the call (see `Plan`); send and
        // receive never overlap (in place is one region).
        let bufs = unsafe {
            match self.bufs {
                Bufs::InPlace(r) => Buffers::InPlace(r.bytes_mut()),
                Bufs::SendRecv { send, recv } => Buffers::SendRecv {
                    send: send.bytes(),
                    recv: recv.bytes_mut(),
                },
            }
        };
        self.comm.group.call_bytes(self.call, self.dtype, bufs)?;
        Plan::finish(&self.after);
        Ok(())
    }

    /// Start it without blocking.
    fn start(self) -> Result<Box<dyn Pending>> {
        mw::with_dtype!(self.dtype, T => {
            let raw = |r: Region| Raw::<T>::new(r);
            let bufs = match self.bufs {
                Bufs::InPlace(r) => OwnedBuffers::InPlace(raw(r)?),
                Bufs::SendRecv { send, recv } => OwnedBuffers::SendRecv {
                    send: raw(send)?,
                    recv: raw(recv)?,
                },
            };
            let work = self.comm.group.call_nb::<T, Raw<T>>(self.call, bufs);
            Ok(Box::new(InFlight { work, keep: self.keep, after: self.after }) as Box<dyn Pending>)
        })
    }
}

/// A region as the elements of `T` that `call_nb` works on.
struct Raw<T> {
    at: *mut T,
    len: usize,
}

// SAFETY: see `Plan`.
unsafe impl<T> Send for Raw<T> {}

impl<T: Element> Raw<T> {
    fn new(r: Region) -> Result<Raw<T>> {
        let size = std::mem::size_of::<T>();
        if !r.len.is_multiple_of(size)
            || (r.len > 0 && !r.at.is_multiple_of(std::mem::align_of::<T>()))
        {
            return Err(Fail::new(
                ERR_BUFFER,
                format!(
                    "a buffer of {} bytes at {:#x} is not whole aligned elements of {size} bytes",
                    r.len, r.at
                ),
            ));
        }
        Ok(Raw {
            at: r.at as *mut T,
            len: r.len / size,
        })
    }
}

impl<T> AsMut<[T]> for Raw<T> {
    fn as_mut(&mut self) -> &mut [T] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: checked aligned and whole in `new`; the memory is the
        // operation's until it completes.
        unsafe { std::slice::from_raw_parts_mut(self.at, self.len) }
    }
}

struct InFlight<T: Element> {
    work: Work<Raw<T>>,
    /// Scratch the call works on, kept until it ends.
    #[allow(dead_code, reason = "held, not read: the call's memory")]
    keep: Vec<Vec<u64>>,
    after: Vec<After>,
}

// SAFETY: see `Plan`; the scratch moves with its owner.
unsafe impl<T: Element> Send for InFlight<T> {}

impl<T: Element> Pending for InFlight<T> {
    fn is_complete(&self) -> bool {
        self.work.is_complete()
    }

    fn finish(self: Box<Self>) -> Result<()> {
        let InFlight { work, keep, after } = *self;
        work.wait()?;
        Plan::finish(&after);
        drop(keep);
        Ok(())
    }
}

// ------------------------------------------------------------ arguments

/// A count as MPI gives it (an `int`, or an `MPI_Count` in a `_c`
/// form), checked non-negative.
fn count<T: TryInto<usize> + Copy + std::fmt::Display>(n: T) -> Result<usize> {
    n.try_into()
        .map_err(|_| Fail::new(ERR_COUNT, format!("count {n} is negative")))
}

fn op_of(op: Handle) -> Result<ReduceOp> {
    Ok(match op {
        0x21 => ReduceOp::Sum,
        0x22 => ReduceOp::Min,
        0x23 => ReduceOp::Max,
        0x24 => ReduceOp::Prod,
        0x20 => return Err(Fail::new(ERR_OP, "MPI_OP_NULL is not a reduction")),
        other => {
            return Err(Fail::new(
                ERR_OP,
                format!("reduction {other:#x} is not one meshwork has (MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX)"),
            ))
        }
    })
}

fn root_of(c: &Comm, root: c_int) -> Result<u32> {
    u32::try_from(root)
        .ok()
        .filter(|&r| r < c.size())
        .ok_or_else(|| {
            Fail::new(
                ERR_ROOT,
                format!(
                    "root {root} is not a rank of this communicator (0..{})",
                    c.size()
                ),
            )
        })
}

/// One side of a data movement: a buffer, its count and its type.
#[derive(Clone, Copy)]
struct Side {
    buf: usize,
    n: c_int,
    ty: Handle,
}

fn in_place(buf: usize) -> bool {
    buf == IN_PLACE
}

/// A reduction's plan: `send` (or in place in `recv`) reduced into `recv`.
///
/// # Safety
/// The buffers hold `n` elements of `ty` (MPI's contract).
unsafe fn reduction(
    c: Arc<Comm>,
    call: Call,
    send: usize,
    recv: usize,
    n: c_int,
    ty: &Arc<Type>,
) -> Result<Plan> {
    let mut p = Plan::new(c, call, reduces_as(ty)?);
    let n = count(n)?;
    p.bufs = if in_place(send) {
        // SAFETY: the contract.
        Bufs::InPlace(unsafe { p.inout(recv, ty, n) }?)
    } else {
        Bufs::SendRecv {
            // SAFETY: the contract.
            send: unsafe { p.input(send, ty, n) }?,
            recv: p.output(recv, ty, n)?,
        }
    };
    Ok(p)
}

/// Where a reduction meshwork lacks leaves its result.
enum Folded {
    /// On every rank (`MPI_Allreduce`).
    All,
    /// On the root (`MPI_Reduce`).
    Root(u32),
    /// On each rank, over the ranks before it and, if `inclusive`, itself.
    Prefix { inclusive: bool },
    /// On each rank, its block (`counts`, one a rank) of the whole.
    Blocks(Vec<usize>),
}

/// A reduction with `fold` (`fold.rs`): `n` elements of `ty` a rank
/// (from `send`, or `recv` in place) gathered by one meshwork call, then
/// folded into `recv` as `what` says.
///
/// # Safety
/// The buffers hold `n` elements of `ty` (MPI's contract).
unsafe fn plan_fold(
    c: Arc<Comm>,
    fold: Fold,
    what: Folded,
    send: usize,
    recv: usize,
    n: usize,
    ty: &Arc<Type>,
) -> Result<Plan> {
    let (me, world) = (c.rank() as usize, c.size() as usize);
    // This rank's share of the result: (ranks folded, offset in a rank's
    // contribution, elements), or none.
    let (mine, call) = match &what {
        Folded::All => (Some((0..world, 0, n)), Call::AllGather),
        Folded::Root(root) => (
            (me == *root as usize).then_some((0..world, 0, n)),
            Call::Gather { root: *root },
        ),
        Folded::Prefix { inclusive } => {
            let upto = if *inclusive { me + 1 } else { me };
            ((upto > 0).then_some((0..upto, 0, n)), Call::AllGather)
        }
        Folded::Blocks(counts) => {
            let before: usize = counts[..me].iter().sum();
            (
                Some((0..world, before * ty.size, counts[me])),
                Call::AllGather,
            )
        }
    };
    let mut p = Plan::new(c, call, DType::U8);
    let send = if in_place(send) {
        if matches!(what, Folded::Root(_)) && mine.is_none() {
            return Err(Fail::arg("MPI_IN_PLACE is the root's send buffer only"));
        }
        // SAFETY: the contract (in place, the input is in `recv`).
        unsafe { p.copied(recv, ty, n) }?
    } else {
        // SAFETY: the contract.
        unsafe { p.input(send, ty, n) }?
    };
    let receives = !matches!(what, Folded::Root(_)) || mine.is_some();
    let all = if receives {
        p.scratch(send.len * world)
    } else {
        Region::EMPTY
    };
    if let Some((ranks, offset, count)) = mine {
        // The fold runs before the output's unpacking, if it has one.
        let to = p.output(recv, ty, count)?;
        p.after.insert(
            0,
            After::Fold(FoldStep {
                fold,
                from: all,
                stride: send.len,
                offset,
                ranks,
                count,
                to,
            }),
        );
    }
    p.bufs = Bufs::SendRecv { send, recv: all };
    Ok(p)
}

/// The byte length of `n` elements of `dt`, with its type.
fn block(n: c_int, dt: Handle) -> Result<(Arc<Type>, usize, usize)> {
    let ty = type_of(dt)?;
    let n = count(n)?;
    let bytes = ty.bytes(n)?;
    Ok((ty, n, bytes))
}

fn same_bytes(what: &str, send: usize, recv: usize) -> Result<()> {
    if send == recv {
        return Ok(());
    }
    Err(Fail::new(
        ERR_TRUNCATE,
        format!("{what}: this rank sends blocks of {send} bytes and receives blocks of {recv} (the type signatures differ)"),
    ))
}

// ------------------------------------------------------------ the plans

unsafe fn plan_barrier(ch: Handle) -> Result<Plan> {
    Ok(Plan::new(comm(ch)?, Call::Barrier, DType::U8))
}

unsafe fn plan_bcast(buf: usize, n: c_int, dt: Handle, root: c_int, ch: Handle) -> Result<Plan> {
    let c = comm(ch)?;
    let root = root_of(&c, root)?;
    let (ty, n, _) = block(n, dt)?;
    let mut p = Plan::new(c, Call::Broadcast { root }, DType::U8);
    // SAFETY: the contract.
    p.bufs = Bufs::InPlace(unsafe { p.inout(buf, &ty, n) }?);
    Ok(p)
}

unsafe fn plan_reduce(
    send: usize,
    recv: usize,
    n: c_int,
    dt: Handle,
    op: Handle,
    root: c_int,
    ch: Handle,
) -> Result<Plan> {
    let c = comm(ch)?;
    let root = root_of(&c, root)?;
    let ty = type_of(dt)?;
    if let Some(fold) = Fold::of(op, dt, &ty)? {
        // SAFETY: the contract.
        return unsafe { plan_fold(c, fold, Folded::Root(root), send, recv, count(n)?, &ty) };
    }
    let call = Call::Reduce {
        op: op_of(op)?,
        root,
    };
    if c.rank() == root {
        // SAFETY: the contract.
        return unsafe { reduction(c, call, send, recv, n, &ty) };
    }
    // Elsewhere the result is not kept: the call works in scratch.
    if in_place(send) {
        return Err(Fail::arg("MPI_IN_PLACE is the root's send buffer only"));
    }
    let mut p = Plan::new(c, call, reduces_as(&ty)?);
    let n = count(n)?;
    // SAFETY: the contract.
    let send = unsafe { p.input(send, &ty, n) }?;
    let recv = p.scratch(send.len);
    p.bufs = Bufs::SendRecv { send, recv };
    Ok(p)
}

unsafe fn plan_allreduce(
    send: usize,
    recv: usize,
    n: c_int,
    dt: Handle,
    op: Handle,
    ch: Handle,
) -> Result<Plan> {
    let c = comm(ch)?;
    let ty = type_of(dt)?;
    if let Some(fold) = Fold::of(op, dt, &ty)? {
        // SAFETY: the contract.
        return unsafe { plan_fold(c, fold, Folded::All, send, recv, count(n)?, &ty) };
    }
    // SAFETY: the contract.
    unsafe { reduction(c, Call::AllReduce { op: op_of(op)? }, send, recv, n, &ty) }
}

unsafe fn plan_scan(
    send: usize,
    recv: usize,
    n: c_int,
    dt: Handle,
    op: Handle,
    ch: Handle,
    exclusive: bool,
) -> Result<Plan> {
    let c = comm(ch)?;
    let ty = type_of(dt)?;
    if let Some(fold) = Fold::of(op, dt, &ty)? {
        let what = Folded::Prefix {
            inclusive: !exclusive,
        };
        // SAFETY: the contract.
        return unsafe { plan_fold(c, fold, what, send, recv, count(n)?, &ty) };
    }
    let op = op_of(op)?;
    let call = if exclusive {
        Call::ExclusiveScan { op }
    } else {
        Call::Scan { op }
    };
    // SAFETY: the contract.
    unsafe { reduction(c, call, send, recv, n, &ty) }
}

/// Gathers to every rank (`root` None) or to one.
unsafe fn plan_gather(s: Side, r: Side, root: Option<c_int>, ch: Handle) -> Result<Plan> {
    let Side {
        buf: send,
        n: sn,
        ty: st,
    } = s;
    let Side {
        buf: recv,
        n: rn,
        ty: rt,
    } = r;
    let c = comm(ch)?;
    let (me, world) = (c.rank() as usize, c.size() as usize);
    let (call, receives) = match root {
        None => (Call::AllGather, true),
        Some(r) => {
            let root = root_of(&c, r)?;
            (Call::Gather { root }, c.rank() == root)
        }
    };
    let mut p = Plan::new(c, call, DType::U8);
    let (rty, rn, rblock) = if receives {
        block(rn, rt)?
    } else {
        (type_of(0x247)?, 0, 0)
    };
    let send = if in_place(send) {
        if !receives {
            return Err(Fail::arg("MPI_IN_PLACE is the root's send buffer only"));
        }
        // This rank's block is already in place: the call reads a copy.
        let at = recv + (me as isize * rn as isize * rty.extent) as usize;
        // SAFETY: the contract (the root's buffer holds every block).
        unsafe { p.copied(at, &rty, rn) }?
    } else {
        let (sty, sn, sblock) = block(sn, st)?;
        if receives {
            same_bytes(call.name(), sblock, rblock)?;
        }
        // SAFETY: the contract.
        unsafe { p.input(send, &sty, sn) }?
    };
    let recv = if receives {
        p.output(recv, &rty, rn * world)?
    } else {
        Region::EMPTY
    };
    p.bufs = Bufs::SendRecv { send, recv };
    Ok(p)
}

unsafe fn plan_scatter(s: Side, r: Side, root: c_int, ch: Handle) -> Result<Plan> {
    let Side {
        buf: send,
        n: sn,
        ty: st,
    } = s;
    let Side {
        buf: recv,
        n: rn,
        ty: rt,
    } = r;
    let c = comm(ch)?;
    let root = root_of(&c, root)?;
    let sends = c.rank() == root;
    let world = c.size() as usize;
    let mut p = Plan::new(c, Call::Scatter { root }, DType::U8);
    let send_region = if sends {
        let (sty, sn, sblock) = block(sn, st)?;
        if !in_place(recv) {
            let (_, _, rblock) = block(rn, rt)?;
            same_bytes("scatter", sblock, rblock)?;
        }
        // SAFETY: the contract.
        unsafe { p.input(send, &sty, sn * world) }?
    } else {
        Region::EMPTY
    };
    let recv_region = if in_place(recv) {
        if !sends {
            return Err(Fail::arg("MPI_IN_PLACE is the root's receive buffer only"));
        }
        // The root's own block stays where it is: the call writes scratch.
        let len = send_region.len / world;
        p.scratch(len)
    } else {
        let (rty, rn, _) = block(rn, rt)?;
        p.output(recv, &rty, rn)?
    };
    p.bufs = Bufs::SendRecv {
        send: send_region,
        recv: recv_region,
    };
    Ok(p)
}

unsafe fn plan_alltoall(
    send: usize,
    sn: c_int,
    st: Handle,
    recv: usize,
    rn: c_int,
    rt: Handle,
    ch: Handle,
) -> Result<Plan> {
    let c = comm(ch)?;
    let world = c.size() as usize;
    let mut p = Plan::new(c, Call::AllToAll, DType::U8);
    let (rty, rn, rblock) = block(rn, rt)?;
    let send = if in_place(send) {
        // SAFETY: the contract.
        unsafe { p.copied(recv, &rty, rn * world) }?
    } else {
        let (sty, sn, sblock) = block(sn, st)?;
        same_bytes("all_to_all", sblock, rblock)?;
        // SAFETY: the contract.
        unsafe { p.input(send, &sty, sn * world) }?
    };
    let recv = p.output(recv, &rty, rn * world)?;
    p.bufs = Bufs::SendRecv { send, recv };
    Ok(p)
}

unsafe fn plan_reduce_scatter_block(
    send: usize,
    recv: usize,
    rn: c_int,
    dt: Handle,
    op: Handle,
    ch: Handle,
) -> Result<Plan> {
    let c = comm(ch)?;
    let world = c.size() as usize;
    let ty = type_of(dt)?;
    let n = count(rn)?;
    if let Some(fold) = Fold::of(op, dt, &ty)? {
        let what = Folded::Blocks(vec![n; world]);
        // SAFETY: the contract.
        return unsafe { plan_fold(c, fold, what, send, recv, n * world, &ty) };
    }
    let mut p = Plan::new(c, Call::ReduceScatter { op: op_of(op)? }, reduces_as(&ty)?);
    let send = if in_place(send) {
        // SAFETY: the contract (in place, the input is in `recv`).
        unsafe { p.copied(recv, &ty, n * world) }?
    } else {
        // SAFETY: the contract.
        unsafe { p.input(send, &ty, n * world) }?
    };
    let recv = p.output(recv, &ty, n)?;
    p.bufs = Bufs::SendRecv { send, recv };
    Ok(p)
}

/// `MPI_Reduce_scatter` with blocks of different sizes: an all-reduce of
/// the whole into scratch, this rank's block copied out after.
unsafe fn plan_reduce_scatter(
    send: usize,
    recv: usize,
    counts: *const c_int,
    dt: Handle,
    op: Handle,
    ch: Handle,
) -> Result<Plan> {
    let c = comm(ch)?;
    let (me, world) = (c.rank() as usize, c.size() as usize);
    if counts.is_null() {
        return Err(Fail::arg("recvcounts is NULL"));
    }
    // SAFETY: one count per rank (the contract).
    let counts = unsafe { std::slice::from_raw_parts(counts, world) };
    let counts: Vec<usize> = counts.iter().map(|&n| count(n)).collect::<Result<_>>()?;
    let ty = type_of(dt)?;
    let total: usize = counts.iter().sum();
    if let Some(fold) = Fold::of(op, dt, &ty)? {
        // SAFETY: the contract.
        return unsafe { plan_fold(c, fold, Folded::Blocks(counts), send, recv, total, &ty) };
    }
    if counts.iter().all(|&n| n == counts[0]) {
        // SAFETY: the contract.
        return unsafe { plan_reduce_scatter_block(send, recv, counts[0] as c_int, dt, op, ch) };
    }
    let before: usize = counts[..me].iter().sum();
    let mut p = Plan::new(c, Call::AllReduce { op: op_of(op)? }, reduces_as(&ty)?);
    let input = if in_place(send) { recv } else { send };
    // SAFETY: the contract.
    let all = unsafe { p.copied(input, &ty, total) }?;
    p.bufs = Bufs::InPlace(all);
    p.after.push(After::Unpack(Unpack {
        from: all.offset(before * ty.size, counts[me] * ty.size),
        ty,
        count: counts[me],
        to: recv,
    }));
    Ok(p)
}

// ------------------------------------------------------------ the v forms

/// A `v` collective: blocks of any size, sent to and received from
/// peers as point-to-point messages on the `v` lane under the
/// communicator's next `v` sequence number (every member counts its `v`
/// collectives alike, so concurrent ones never take each other's
/// messages, whatever order they are waited in). A collective may take
/// more than one number, its lanes: a block goes on the lane that pairs
/// it with its receive where one sender sends one receiver two blocks
/// (the neighbourhood collectives' grids, `coll/neighbour.rs`).
struct VPlan {
    c: Arc<Comm>,
    tag: u64,
    /// Each block this rank sends.
    sends: Vec<Block>,
    /// Each block this rank receives.
    recvs: Vec<Block>,
}

/// One block of a `v` collective: the peer it goes to or comes from, its
/// lane, and where it lies (address, type, count).
struct Block {
    peer: u32,
    lane: u64,
    buf: usize,
    ty: Arc<Type>,
    n: usize,
}

impl VPlan {
    fn new(c: Arc<Comm>) -> VPlan {
        VPlan::with_lanes(c, 1)
    }

    /// A plan of `lanes` lanes (every member passes the same number).
    fn with_lanes(c: Arc<Comm>, lanes: u64) -> VPlan {
        let seq = c
            .vseq
            .fetch_add(lanes.max(1), std::sync::atomic::Ordering::Relaxed);
        VPlan {
            tag: VLANE.wrapping_add(seq),
            c,
            sends: Vec::new(),
            recvs: Vec::new(),
        }
    }

    fn send(&mut self, to: u32, buf: usize, ty: Arc<Type>, n: usize) {
        self.send_on(0, to, buf, ty, n);
    }

    fn recv(&mut self, from: u32, buf: usize, ty: Arc<Type>, n: usize) {
        self.recv_on(0, from, buf, ty, n);
    }

    fn send_on(&mut self, lane: u64, peer: u32, buf: usize, ty: Arc<Type>, n: usize) {
        let b = Block {
            peer,
            lane,
            buf,
            ty,
            n,
        };
        self.sends.push(b);
    }

    fn recv_on(&mut self, lane: u64, peer: u32, buf: usize, ty: Arc<Type>, n: usize) {
        let b = Block {
            peer,
            lane,
            buf,
            ty,
            n,
        };
        self.recvs.push(b);
    }

    /// Send every block: to peers as messages, to this rank as the
    /// packed bytes its own receives take, in order. What is left is the
    /// receives.
    ///
    /// # Safety
    /// Every send block lies in the caller's memory (MPI's contract).
    unsafe fn start(self) -> Result<VRecvs> {
        let mut own = Vec::new();
        for b in &self.sends {
            // SAFETY: the contract.
            let data = unsafe { b.ty.pack(b.buf as *const u8, b.n) }?;
            if b.peer == self.c.rank() {
                own.push((b.lane, data.into_owned()));
            } else {
                self.c
                    .group
                    .send_bytes(&data, b.peer, self.tag.wrapping_add(b.lane))
                    .map_err(Fail::from)?;
            }
        }
        let n = self.recvs.len();
        Ok(VRecvs {
            c: self.c,
            tag: self.tag,
            recvs: self.recvs,
            got: std::sync::Mutex::new((0..n).map(|_| None).collect()),
            own,
        })
    }

    /// The blocking form: send, then receive every block.
    ///
    /// # Safety
    /// As [`VPlan::start`], and every receive block is writable.
    unsafe fn run(self) -> Result<()> {
        // SAFETY: the contract.
        Box::new(unsafe { self.start() }?).finish()
    }
}

/// A `v` collective whose sends are out: its receives, each filled as
/// its message comes.
struct VRecvs {
    c: Arc<Comm>,
    tag: u64,
    recvs: Vec<Block>,
    /// The message each receive took, once it came.
    got: std::sync::Mutex<Vec<Option<mw::Payload>>>,
    /// The blocks this rank sent itself, with their lanes, in order.
    own: Vec<(u64, Vec<u8>)>,
}

impl VRecvs {
    /// Take what has come, waiting up to `timeout` for each message that
    /// has not (a deadline without progress, as meshwork's calls have);
    /// whether every receive has its message.
    fn take(&self, timeout: std::time::Duration) -> Result<bool> {
        let mut got = self.got.lock().unwrap_or_else(|e| e.into_inner());
        let me = self.c.rank();
        for (slot, b) in got.iter_mut().zip(&self.recvs) {
            if slot.is_some() || b.peer == me {
                continue;
            }
            let tag = self.tag.wrapping_add(b.lane);
            match self.c.group.recv_message(b.peer, tag, timeout)? {
                Some(m) => *slot = Some(m),
                None => return Ok(false),
            }
        }
        Ok(true)
    }
}

impl Pending for VRecvs {
    fn is_complete(&self) -> bool {
        // An error shows at `finish`, which asks again.
        self.take(std::time::Duration::ZERO).unwrap_or(true)
    }

    fn finish(self: Box<Self>) -> Result<()> {
        let deadline = self.c.group.timeout();
        let me = self.c.rank();
        if !self.take(deadline)? {
            let missing = self
                .got
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .zip(&self.recvs)
                .find(|(g, b)| g.is_none() && b.peer != me)
                .map_or(0, |(_, b)| b.peer);
            return Err(Fail::new(
                ERR_OTHER,
                format!("rank {missing} sent no block of this collective within {deadline:?}"),
            ));
        }
        let got = self.got.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut own = self.own;
        for (slot, b) in got.iter().zip(&self.recvs) {
            let kept;
            let data: &[u8] = match slot {
                _ if b.peer == me => {
                    // This rank's blocks to itself, first sent first taken.
                    let Some(at) = own.iter().position(|(lane, _)| *lane == b.lane) else {
                        return Err(Fail::new(
                            ERR_OTHER,
                            "this rank receives more blocks from itself than it sends itself (the neighbour lists differ)",
                        ));
                    };
                    kept = own.remove(at).1;
                    &kept
                }
                Some(m) => m.as_ref(),
                None => &[],
            };
            let want = b.ty.bytes(b.n)?;
            if data.len() != want {
                return Err(Fail::new(
                    ERR_TRUNCATE,
                    format!(
                        "rank {} sent {} bytes where this rank expects {want} (the counts differ)",
                        b.peer,
                        data.len()
                    ),
                ));
            }
            // SAFETY: the caller's buffer holds `n` elements (MPI's contract).
            unsafe { b.ty.unpack(data, b.buf as *mut u8, b.n) };
        }
        Ok(())
    }
}

/// # Safety
/// `p` is NULL or holds `n` ints.
unsafe fn ints<'a>(p: *const c_int, n: usize, what: &str) -> Result<&'a [c_int]> {
    if p.is_null() {
        return Err(Fail::arg(format!("{what} is NULL")));
    }
    // SAFETY: the contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

fn at(buf: usize, displ: c_int, ty: &Type) -> usize {
    (buf as isize + displ as isize * ty.extent) as usize
}

// ------------------------------------------------------------ local

/// `MPI_Reduce_local`: `inout = in op inout`, element by element, on this
/// rank alone, with the kernel the collectives reduce with (`in` stands
/// for the lower ranks, as in a reduction's operand order).
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_local(
    inbuf: usize,
    inout: usize,
    n: c_int,
    dt: Handle,
    op: Handle,
) -> c_int {
    entry(COMM_WORLD, "MPI_Reduce_local", || {
        let ty = type_of(dt)?;
        let n = count(n)?;
        // meshwork's kernel, or the fold of an operator meshwork lacks.
        let kernel = match Fold::of(op, dt, &ty)? {
            Some(fold) => Err(fold),
            None => Ok((op_of(op)?, reduces_as(&ty)?)),
        };
        // Packed into aligned scratch: the caller's memory may be neither
        // aligned for the element nor contiguous.
        let words = ty.bytes(n)?.div_ceil(8);
        let (mut acc, mut x) = (vec![0u64; words], vec![0u64; words]);
        let (acc_b, x_b) = (
            &mut bytemuck::cast_slice_mut::<u64, u8>(&mut acc)[..ty.size * n],
            &mut bytemuck::cast_slice_mut::<u64, u8>(&mut x)[..ty.size * n],
        );
        // SAFETY: both buffers hold `n` elements of `dt` (the contract).
        unsafe {
            acc_b.copy_from_slice(&ty.pack(inout as *const u8, n)?);
            x_b.copy_from_slice(&ty.pack(inbuf as *const u8, n)?);
        }
        match kernel {
            Ok((op, d)) => mw::with_dtype!(d, T => T::reduce_from_left(
                op,
                bytemuck::cast_slice_mut::<u8, T>(acc_b),
                bytemuck::cast_slice::<u8, T>(x_b),
            )),
            Err(fold) => fold.combine(x_b, acc_b, n),
        }
        // SAFETY: as above, writable.
        unsafe { ty.unpack(acc_b, inout as *mut u8, n) };
        Ok(())
    })
}

// ------------------------------------------------------------ exports

macro_rules! blocking {
    ($name:ident, $label:literal, ($($arg:ident: $t:ty),*), $ch:ident, $plan:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> c_int {
            entry($ch, $label, || {
                // SAFETY: the buffers are as MPI's contract says.
                let plan = unsafe { $plan }?;
                plan.run()
            })
        }
    };
}

macro_rules! nonblocking {
    ($name:ident, $label:literal, ($($arg:ident: $t:ty),*), $ch:ident, $req:ident, $plan:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t,)* $req: *mut Handle) -> c_int {
            entry($ch, $label, || {
                start_request($req, || {
                    // SAFETY: the buffers are as MPI's contract says.
                    let plan = unsafe { $plan }?;
                    add_request(Request::Coll(plan.start()?))
                })
            })
        }
    };
}

blocking!(MPI_Barrier, "MPI_Barrier", (ch: Handle), ch, plan_barrier(ch));
nonblocking!(MPI_Ibarrier, "MPI_Ibarrier", (ch: Handle), ch, req, plan_barrier(ch));
blocking!(MPI_Bcast, "MPI_Bcast", (buf: usize, n: c_int, dt: Handle, root: c_int, ch: Handle), ch,
    plan_bcast(buf, n, dt, root, ch));
nonblocking!(MPI_Ibcast, "MPI_Ibcast", (buf: usize, n: c_int, dt: Handle, root: c_int, ch: Handle), ch, req,
    plan_bcast(buf, n, dt, root, ch));
blocking!(MPI_Reduce, "MPI_Reduce",
    (send: usize, recv: usize, n: c_int, dt: Handle, op: Handle, root: c_int, ch: Handle), ch,
    plan_reduce(send, recv, n, dt, op, root, ch));
nonblocking!(MPI_Ireduce, "MPI_Ireduce",
    (send: usize, recv: usize, n: c_int, dt: Handle, op: Handle, root: c_int, ch: Handle), ch, req,
    plan_reduce(send, recv, n, dt, op, root, ch));
blocking!(MPI_Allreduce, "MPI_Allreduce",
    (send: usize, recv: usize, n: c_int, dt: Handle, op: Handle, ch: Handle), ch,
    plan_allreduce(send, recv, n, dt, op, ch));
nonblocking!(MPI_Iallreduce, "MPI_Iallreduce",
    (send: usize, recv: usize, n: c_int, dt: Handle, op: Handle, ch: Handle), ch, req,
    plan_allreduce(send, recv, n, dt, op, ch));
blocking!(MPI_Scan, "MPI_Scan",
    (send: usize, recv: usize, n: c_int, dt: Handle, op: Handle, ch: Handle), ch,
    plan_scan(send, recv, n, dt, op, ch, false));
nonblocking!(MPI_Iscan, "MPI_Iscan",
    (send: usize, recv: usize, n: c_int, dt: Handle, op: Handle, ch: Handle), ch, req,
    plan_scan(send, recv, n, dt, op, ch, false));
blocking!(MPI_Exscan, "MPI_Exscan",
    (send: usize, recv: usize, n: c_int, dt: Handle, op: Handle, ch: Handle), ch,
    plan_scan(send, recv, n, dt, op, ch, true));
nonblocking!(MPI_Iexscan, "MPI_Iexscan",
    (send: usize, recv: usize, n: c_int, dt: Handle, op: Handle, ch: Handle), ch, req,
    plan_scan(send, recv, n, dt, op, ch, true));
blocking!(MPI_Allgather, "MPI_Allgather",
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, ch: Handle), ch,
    plan_gather(Side { buf: send, n: sn, ty: st }, Side { buf: recv, n: rn, ty: rt }, None, ch));
nonblocking!(MPI_Iallgather, "MPI_Iallgather",
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, ch: Handle), ch, req,
    plan_gather(Side { buf: send, n: sn, ty: st }, Side { buf: recv, n: rn, ty: rt }, None, ch));
blocking!(MPI_Gather, "MPI_Gather",
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, root: c_int, ch: Handle), ch,
    plan_gather(Side { buf: send, n: sn, ty: st }, Side { buf: recv, n: rn, ty: rt }, Some(root), ch));
nonblocking!(MPI_Igather, "MPI_Igather",
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, root: c_int, ch: Handle), ch, req,
    plan_gather(Side { buf: send, n: sn, ty: st }, Side { buf: recv, n: rn, ty: rt }, Some(root), ch));
blocking!(MPI_Scatter, "MPI_Scatter",
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, root: c_int, ch: Handle), ch,
    plan_scatter(Side { buf: send, n: sn, ty: st }, Side { buf: recv, n: rn, ty: rt }, root, ch));
nonblocking!(MPI_Iscatter, "MPI_Iscatter",
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, root: c_int, ch: Handle), ch, req,
    plan_scatter(Side { buf: send, n: sn, ty: st }, Side { buf: recv, n: rn, ty: rt }, root, ch));
blocking!(MPI_Alltoall, "MPI_Alltoall",
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, ch: Handle), ch,
    plan_alltoall(send, sn, st, recv, rn, rt, ch));
nonblocking!(MPI_Ialltoall, "MPI_Ialltoall",
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, ch: Handle), ch, req,
    plan_alltoall(send, sn, st, recv, rn, rt, ch));
blocking!(MPI_Reduce_scatter_block, "MPI_Reduce_scatter_block",
    (send: usize, recv: usize, rn: c_int, dt: Handle, op: Handle, ch: Handle), ch,
    plan_reduce_scatter_block(send, recv, rn, dt, op, ch));
nonblocking!(MPI_Ireduce_scatter_block, "MPI_Ireduce_scatter_block",
    (send: usize, recv: usize, rn: c_int, dt: Handle, op: Handle, ch: Handle), ch, req,
    plan_reduce_scatter_block(send, recv, rn, dt, op, ch));
blocking!(MPI_Reduce_scatter, "MPI_Reduce_scatter",
    (send: usize, recv: usize, counts: *const c_int, dt: Handle, op: Handle, ch: Handle), ch,
    plan_reduce_scatter(send, recv, counts, dt, op, ch));
nonblocking!(MPI_Ireduce_scatter, "MPI_Ireduce_scatter",
    (send: usize, recv: usize, counts: *const c_int, dt: Handle, op: Handle, ch: Handle), ch, req,
    plan_reduce_scatter(send, recv, counts, dt, op, ch));

/// # Safety
/// The buffers and arrays are as MPI's contract says.
#[allow(clippy::too_many_arguments, reason = "MPI's arguments, as they come")]
unsafe fn plan_allgatherv(
    send: usize,
    sn: c_int,
    st: Handle,
    recv: usize,
    counts: *const c_int,
    displs: *const c_int,
    rt: Handle,
    ch: Handle,
) -> Result<VPlan> {
    let c = comm(ch)?;
    let (me, world) = (c.rank(), c.size() as usize);
    let rty = type_of(rt)?;
    // SAFETY: one entry per rank (the contract).
    let (counts, displs) = unsafe {
        (
            ints(counts, world, "recvcounts")?,
            ints(displs, world, "displs")?,
        )
    };
    let (sbuf, sty, sn) = if in_place(send) {
        (
            at(recv, displs[me as usize], &rty),
            rty.clone(),
            count(counts[me as usize])?,
        )
    } else {
        (send, type_of(st)?, count(sn)?)
    };
    let mut p = VPlan::new(c);
    for peer in 0..world {
        p.send(peer as u32, sbuf, sty.clone(), sn);
        p.recv(
            peer as u32,
            at(recv, displs[peer], &rty),
            rty.clone(),
            count(counts[peer])?,
        );
    }
    Ok(p)
}

/// # Safety
/// The buffers and arrays are as MPI's contract says.
#[allow(clippy::too_many_arguments, reason = "MPI's arguments, as they come")]
unsafe fn plan_gatherv(
    send: usize,
    sn: c_int,
    st: Handle,
    recv: usize,
    counts: *const c_int,
    displs: *const c_int,
    rt: Handle,
    root: c_int,
    ch: Handle,
) -> Result<VPlan> {
    let c = comm(ch)?;
    let root = root_of(&c, root)?;
    let (me, world) = (c.rank(), c.size() as usize);
    let mut p = VPlan::new(c);
    if me != root || !in_place(send) {
        p.send(root, send, type_of(st)?, count(sn)?);
    }
    if me == root {
        let rty = type_of(rt)?;
        // SAFETY: one entry per rank (the contract).
        let (counts, displs) = unsafe {
            (
                ints(counts, world, "recvcounts")?,
                ints(displs, world, "displs")?,
            )
        };
        for from in 0..world {
            if from == me as usize && in_place(send) {
                continue;
            }
            p.recv(
                from as u32,
                at(recv, displs[from], &rty),
                rty.clone(),
                count(counts[from])?,
            );
        }
    }
    Ok(p)
}

/// # Safety
/// The buffers and arrays are as MPI's contract says.
#[allow(clippy::too_many_arguments, reason = "MPI's arguments, as they come")]
unsafe fn plan_scatterv(
    send: usize,
    counts: *const c_int,
    displs: *const c_int,
    st: Handle,
    recv: usize,
    rn: c_int,
    rt: Handle,
    root: c_int,
    ch: Handle,
) -> Result<VPlan> {
    let c = comm(ch)?;
    let root = root_of(&c, root)?;
    let (me, world) = (c.rank(), c.size() as usize);
    let mut p = VPlan::new(c);
    if me == root {
        let sty = type_of(st)?;
        // SAFETY: one entry per rank (the contract).
        let (counts, displs) = unsafe {
            (
                ints(counts, world, "sendcounts")?,
                ints(displs, world, "displs")?,
            )
        };
        for to in 0..world {
            if to == me as usize && in_place(recv) {
                continue;
            }
            p.send(
                to as u32,
                at(send, displs[to], &sty),
                sty.clone(),
                count(counts[to])?,
            );
        }
    }
    if me != root || !in_place(recv) {
        p.recv(root, recv, type_of(rt)?, count(rn)?);
    }
    Ok(p)
}

/// The all-to-all of blocks of any size: per peer, a byte offset, a
/// type and a count.
fn plan_alltoall_any(
    c: Arc<Comm>,
    send: usize,
    sends: &dyn Fn(usize) -> Result<(usize, Arc<Type>, usize)>,
    recv: usize,
    recvs: &dyn Fn(usize) -> Result<(usize, Arc<Type>, usize)>,
) -> Result<VPlan> {
    let world = c.size() as usize;
    let mut p = VPlan::new(c);
    for peer in 0..world {
        let (off, ty, n) = sends(peer)?;
        p.send(peer as u32, send + off, ty, n);
        let (off, ty, n) = recvs(peer)?;
        p.recv(peer as u32, recv + off, ty, n);
    }
    Ok(p)
}

/// # Safety
/// The buffers and arrays are as MPI's contract says.
#[allow(clippy::too_many_arguments, reason = "MPI's arguments, as they come")]
unsafe fn plan_alltoallv(
    send: usize,
    scounts: *const c_int,
    sdispls: *const c_int,
    st: Handle,
    recv: usize,
    rcounts: *const c_int,
    rdispls: *const c_int,
    rt: Handle,
    ch: Handle,
) -> Result<VPlan> {
    let c = comm(ch)?;
    let world = c.size() as usize;
    // In place, each block goes out from where its answer lands: every
    // block is packed (sent, or kept for this rank) before any lands.
    let (send, scounts, sdispls, st) = if in_place(send) {
        (recv, rcounts, rdispls, rt)
    } else {
        (send, scounts, sdispls, st)
    };
    let (sty, rty) = (type_of(st)?, type_of(rt)?);
    // SAFETY: one entry per rank (the contract).
    let (sc, sd, rc, rd) = unsafe {
        (
            ints(scounts, world, "sendcounts")?,
            ints(sdispls, world, "sdispls")?,
            ints(rcounts, world, "recvcounts")?,
            ints(rdispls, world, "rdispls")?,
        )
    };
    let sends = |i: usize| {
        Ok((
            (sd[i] as isize * sty.extent) as usize,
            sty.clone(),
            count(sc[i])?,
        ))
    };
    let recvs = |i: usize| {
        Ok((
            (rd[i] as isize * rty.extent) as usize,
            rty.clone(),
            count(rc[i])?,
        ))
    };
    plan_alltoall_any(c, send, &sends, recv, &recvs)
}

/// # Safety
/// The buffers and arrays are as MPI's contract says.
#[allow(clippy::too_many_arguments, reason = "MPI's arguments, as they come")]
unsafe fn plan_alltoallw(
    send: usize,
    scounts: *const c_int,
    sdispls: *const c_int,
    stypes: *const Handle,
    recv: usize,
    rcounts: *const c_int,
    rdispls: *const c_int,
    rtypes: *const Handle,
    ch: Handle,
) -> Result<VPlan> {
    let c = comm(ch)?;
    let world = c.size() as usize;
    // In place: as `plan_alltoallv`.
    let (send, scounts, sdispls, stypes) = if in_place(send) {
        (recv, rcounts, rdispls, rtypes)
    } else {
        (send, scounts, sdispls, stypes)
    };
    if stypes.is_null() || rtypes.is_null() {
        return Err(Fail::arg("sendtypes or recvtypes is NULL"));
    }
    // SAFETY: one entry per rank (the contract).
    let (sc, sd, rc, rd, stys, rtys) = unsafe {
        (
            ints(scounts, world, "sendcounts")?,
            ints(sdispls, world, "sdispls")?,
            ints(rcounts, world, "recvcounts")?,
            ints(rdispls, world, "rdispls")?,
            std::slice::from_raw_parts(stypes, world),
            std::slice::from_raw_parts(rtypes, world),
        )
    };
    let sends = |i: usize| Ok((sd[i] as usize, type_of(stys[i])?, count(sc[i])?));
    let recvs = |i: usize| Ok((rd[i] as usize, type_of(rtys[i])?, count(rc[i])?));
    plan_alltoall_any(c, send, &sends, recv, &recvs)
}

/// The blocking and the non-blocking export of a `v` collective.
macro_rules! v_forms {
    ($blocking:ident, $nonblocking:ident, ($($arg:ident: $t:ty),*), $ch:ident, $req:ident, $plan:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $blocking($($arg: $t),*) -> c_int {
            entry($ch, stringify!($blocking), || {
                // SAFETY: the buffers are as MPI's contract says.
                unsafe { $plan?.run() }
            })
        }

        #[no_mangle]
        pub unsafe extern "C" fn $nonblocking($($arg: $t,)* $req: *mut Handle) -> c_int {
            entry($ch, stringify!($nonblocking), || {
                start_request($req, || {
                    // SAFETY: the buffers are as MPI's contract says, and
                    // stay so until the request completes.
                    let recvs = unsafe { $plan?.start() }?;
                    add_request(Request::Coll(Box::new(recvs)))
                })
            })
        }
    };
}

v_forms!(MPI_Allgatherv, MPI_Iallgatherv,
    (send: usize, sn: c_int, st: Handle, recv: usize, counts: *const c_int, displs: *const c_int, rt: Handle, ch: Handle),
    ch, req, plan_allgatherv(send, sn, st, recv, counts, displs, rt, ch));
v_forms!(MPI_Gatherv, MPI_Igatherv,
    (send: usize, sn: c_int, st: Handle, recv: usize, counts: *const c_int, displs: *const c_int, rt: Handle, root: c_int, ch: Handle),
    ch, req, plan_gatherv(send, sn, st, recv, counts, displs, rt, root, ch));
v_forms!(MPI_Scatterv, MPI_Iscatterv,
    (send: usize, counts: *const c_int, displs: *const c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, root: c_int, ch: Handle),
    ch, req, plan_scatterv(send, counts, displs, st, recv, rn, rt, root, ch));
v_forms!(MPI_Alltoallv, MPI_Ialltoallv,
    (send: usize, scounts: *const c_int, sdispls: *const c_int, st: Handle, recv: usize, rcounts: *const c_int, rdispls: *const c_int, rt: Handle, ch: Handle),
    ch, req, plan_alltoallv(send, scounts, sdispls, st, recv, rcounts, rdispls, rt, ch));
v_forms!(MPI_Alltoallw, MPI_Ialltoallw,
    (send: usize, scounts: *const c_int, sdispls: *const c_int, stypes: *const Handle, recv: usize, rcounts: *const c_int, rdispls: *const c_int, rtypes: *const Handle, ch: Handle),
    ch, req, plan_alltoallw(send, scounts, sdispls, stypes, recv, rcounts, rdispls, rtypes, ch));

// ------------------------------------------------------------ persistent

/// A persistent collective's start: its plan made and started anew on the
/// arguments its `_init` call took, each `MPI_Start`.
pub(crate) struct Restart(Box<dyn Fn() -> Result<Request> + Send + Sync>);

impl Restart {
    pub fn start(&self) -> Result<Request> {
        (self.0)()
    }
}

/// The arguments of an `_init` call, kept for its starts: plain values,
/// and buffers and arrays by address, which MPI's contract keeps as they
/// were given until the request is freed.
#[derive(Clone, Copy)]
struct Kept<T>(T);

impl<T: Copy> Kept<T> {
    /// The arguments (a call, so that a closure takes the whole `Kept`).
    fn get(&self) -> T {
        self.0
    }
}

// SAFETY: the addresses it holds are only read by the starts, under the
// contract above; nothing in it is tied to the thread that made it.
unsafe impl<T> Send for Kept<T> {}
// SAFETY: as above: shared, it is only copied.
unsafe impl<T> Sync for Kept<T> {}

/// `MPI_X_init(args…, info, request)`: a persistent request whose start
/// is `MPI_IX(args…)`. The info's hints are read by no one.
macro_rules! persistent {
    ($name:ident, ($($arg:ident: $t:ty),*), $ch:ident, $plan:expr, $started:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t,)* _info: Handle, request: *mut Handle) -> c_int {
            crate::p2p::more::init($ch, stringify!($name), request, |_| {
                let kept = Kept(($($arg,)*));
                Ok(crate::p2p::more::Persist::Coll(Restart(Box::new(move || {
                    let ($($arg,)*) = kept.get();
                    // SAFETY: the buffers and arrays are as the `_init`
                    // call was given them (MPI's contract, above).
                    unsafe { $started($plan?) }
                }))))
            })
        }
    };
}

/// A plan's start as the request `MPI_Start` completes.
///
/// # Safety
/// None beyond the plan's making (the same signature as [`started_v`]).
unsafe fn started(plan: Plan) -> Result<Request> {
    Ok(Request::Coll(plan.start()?))
}

/// A `v` plan's start, likewise.
///
/// # Safety
/// Its send blocks lie in the caller's memory (MPI's contract).
unsafe fn started_v(plan: VPlan) -> Result<Request> {
    // SAFETY: the contract.
    Ok(Request::Coll(Box::new(unsafe { plan.start() }?)))
}

persistent!(MPI_Barrier_init, (ch: Handle), ch, plan_barrier(ch), started);
persistent!(MPI_Bcast_init, (buf: usize, n: c_int, dt: Handle, root: c_int, ch: Handle), ch,
    plan_bcast(buf, n, dt, root, ch), started);
persistent!(MPI_Reduce_init,
    (send: usize, recv: usize, n: c_int, dt: Handle, op: Handle, root: c_int, ch: Handle), ch,
    plan_reduce(send, recv, n, dt, op, root, ch), started);
persistent!(MPI_Allreduce_init,
    (send: usize, recv: usize, n: c_int, dt: Handle, op: Handle, ch: Handle), ch,
    plan_allreduce(send, recv, n, dt, op, ch), started);
persistent!(MPI_Scan_init,
    (send: usize, recv: usize, n: c_int, dt: Handle, op: Handle, ch: Handle), ch,
    plan_scan(send, recv, n, dt, op, ch, false), started);
persistent!(MPI_Exscan_init,
    (send: usize, recv: usize, n: c_int, dt: Handle, op: Handle, ch: Handle), ch,
    plan_scan(send, recv, n, dt, op, ch, true), started);
persistent!(MPI_Allgather_init,
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, ch: Handle), ch,
    plan_gather(Side { buf: send, n: sn, ty: st }, Side { buf: recv, n: rn, ty: rt }, None, ch), started);
persistent!(MPI_Gather_init,
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, root: c_int, ch: Handle), ch,
    plan_gather(Side { buf: send, n: sn, ty: st }, Side { buf: recv, n: rn, ty: rt }, Some(root), ch), started);
persistent!(MPI_Scatter_init,
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, root: c_int, ch: Handle), ch,
    plan_scatter(Side { buf: send, n: sn, ty: st }, Side { buf: recv, n: rn, ty: rt }, root, ch), started);
persistent!(MPI_Alltoall_init,
    (send: usize, sn: c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, ch: Handle), ch,
    plan_alltoall(send, sn, st, recv, rn, rt, ch), started);
persistent!(MPI_Reduce_scatter_block_init,
    (send: usize, recv: usize, rn: c_int, dt: Handle, op: Handle, ch: Handle), ch,
    plan_reduce_scatter_block(send, recv, rn, dt, op, ch), started);
persistent!(MPI_Reduce_scatter_init,
    (send: usize, recv: usize, counts: *const c_int, dt: Handle, op: Handle, ch: Handle), ch,
    plan_reduce_scatter(send, recv, counts, dt, op, ch), started);
persistent!(MPI_Allgatherv_init,
    (send: usize, sn: c_int, st: Handle, recv: usize, counts: *const c_int, displs: *const c_int, rt: Handle, ch: Handle),
    ch, plan_allgatherv(send, sn, st, recv, counts, displs, rt, ch), started_v);
persistent!(MPI_Gatherv_init,
    (send: usize, sn: c_int, st: Handle, recv: usize, counts: *const c_int, displs: *const c_int, rt: Handle, root: c_int, ch: Handle),
    ch, plan_gatherv(send, sn, st, recv, counts, displs, rt, root, ch), started_v);
persistent!(MPI_Scatterv_init,
    (send: usize, counts: *const c_int, displs: *const c_int, st: Handle, recv: usize, rn: c_int, rt: Handle, root: c_int, ch: Handle),
    ch, plan_scatterv(send, counts, displs, st, recv, rn, rt, root, ch), started_v);
persistent!(MPI_Alltoallv_init,
    (send: usize, scounts: *const c_int, sdispls: *const c_int, st: Handle, recv: usize, rcounts: *const c_int, rdispls: *const c_int, rt: Handle, ch: Handle),
    ch, plan_alltoallv(send, scounts, sdispls, st, recv, rcounts, rdispls, rt, ch), started_v);
persistent!(MPI_Alltoallw_init,
    (send: usize, scounts: *const c_int, sdispls: *const c_int, stypes: *const Handle, recv: usize, rcounts: *const c_int, rdispls: *const c_int, rtypes: *const Handle, ch: Handle),
    ch, plan_alltoallw(send, scounts, sdispls, stypes, recv, rcounts, rdispls, rtypes, ch), started_v);

// The `_c` forms of the persistent `v` and `w` collectives and of
// `MPI_Reduce_scatter_init`: their arrays of counts and displacements are
// narrowed to `int` once, and the request owns them for its starts.

type Count = i64;

/// `n` entries at `p` narrowed to `int` and owned; `None` for NULL.
///
/// # Safety
/// `p` is NULL or holds `n` entries.
unsafe fn owned<T: Copy + TryInto<c_int>>(p: *const T, n: usize) -> Result<Option<Vec<c_int>>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the contract.
    let v = unsafe { crate::large::ints(p, n) };
    v.map(Some).ok_or_else(too_large)
}

fn too_large() -> Fail {
    Fail::new(ERR_COUNT, "a count or displacement above 2^31 - 1")
}

/// An owned array as the plans read it (NULL for none).
fn arr(v: &Option<Vec<c_int>>) -> *const c_int {
    v.as_ref().map_or(std::ptr::null(), |v| v.as_ptr())
}

/// The persistent request `start` starts, for call `name`.
fn persist(
    ch: Handle,
    name: &str,
    request: *mut Handle,
    make: impl FnOnce() -> Result<Box<dyn Fn() -> Result<Request> + Send + Sync>>,
) -> c_int {
    crate::p2p::more::init(ch, name, request, |_| {
        Ok(crate::p2p::more::Persist::Coll(Restart(make()?)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Allgatherv_init_c(
    send: usize,
    sn: Count,
    st: Handle,
    recv: usize,
    counts: *const Count,
    displs: *const isize,
    rt: Handle,
    ch: Handle,
    _info: Handle,
    request: *mut Handle,
) -> c_int {
    persist(ch, "MPI_Allgatherv_init_c", request, || {
        let n = crate::large::size_of_comm(ch);
        let sn = c_int::try_from(sn).map_err(|_| too_large())?;
        // SAFETY: `n` entries each (the contract).
        let (c, d) = unsafe { (owned(counts, n)?, owned(displs, n)?) };
        Ok(Box::new(move || {
            // SAFETY: the buffers as the `_init` call gave them (MPI's
            // contract); the arrays are the request's own.
            unsafe {
                started_v(plan_allgatherv(
                    send,
                    sn,
                    st,
                    recv,
                    arr(&c),
                    arr(&d),
                    rt,
                    ch,
                )?)
            }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Gatherv_init_c(
    send: usize,
    sn: Count,
    st: Handle,
    recv: usize,
    counts: *const Count,
    displs: *const isize,
    rt: Handle,
    root: c_int,
    ch: Handle,
    _info: Handle,
    request: *mut Handle,
) -> c_int {
    persist(ch, "MPI_Gatherv_init_c", request, || {
        let n = crate::large::at_root(ch, root);
        let sn = c_int::try_from(sn).map_err(|_| too_large())?;
        // SAFETY: `n` entries each (the contract).
        let (c, d) = unsafe { (owned(counts, n)?, owned(displs, n)?) };
        Ok(Box::new(move || {
            // SAFETY: as in `MPI_Allgatherv_init_c`.
            unsafe {
                started_v(plan_gatherv(
                    send,
                    sn,
                    st,
                    recv,
                    arr(&c),
                    arr(&d),
                    rt,
                    root,
                    ch,
                )?)
            }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Scatterv_init_c(
    send: usize,
    counts: *const Count,
    displs: *const isize,
    st: Handle,
    recv: usize,
    rn: Count,
    rt: Handle,
    root: c_int,
    ch: Handle,
    _info: Handle,
    request: *mut Handle,
) -> c_int {
    persist(ch, "MPI_Scatterv_init_c", request, || {
        let n = crate::large::at_root(ch, root);
        let rn = c_int::try_from(rn).map_err(|_| too_large())?;
        // SAFETY: `n` entries each (the contract).
        let (c, d) = unsafe { (owned(counts, n)?, owned(displs, n)?) };
        Ok(Box::new(move || {
            // SAFETY: as in `MPI_Allgatherv_init_c`.
            unsafe {
                started_v(plan_scatterv(
                    send,
                    arr(&c),
                    arr(&d),
                    st,
                    recv,
                    rn,
                    rt,
                    root,
                    ch,
                )?)
            }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoallv_init_c(
    send: usize,
    scounts: *const Count,
    sdispls: *const isize,
    st: Handle,
    recv: usize,
    rcounts: *const Count,
    rdispls: *const isize,
    rt: Handle,
    ch: Handle,
    _info: Handle,
    request: *mut Handle,
) -> c_int {
    persist(ch, "MPI_Alltoallv_init_c", request, || {
        let n = crate::large::size_of_comm(ch);
        // SAFETY: `n` entries each (the contract).
        let (sc, sd, rc, rd) = unsafe {
            (
                owned(scounts, n)?,
                owned(sdispls, n)?,
                owned(rcounts, n)?,
                owned(rdispls, n)?,
            )
        };
        Ok(Box::new(move || {
            // SAFETY: as in `MPI_Allgatherv_init_c`.
            unsafe {
                started_v(plan_alltoallv(
                    send,
                    arr(&sc),
                    arr(&sd),
                    st,
                    recv,
                    arr(&rc),
                    arr(&rd),
                    rt,
                    ch,
                )?)
            }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoallw_init_c(
    send: usize,
    scounts: *const Count,
    sdispls: *const isize,
    stypes: *const Handle,
    recv: usize,
    rcounts: *const Count,
    rdispls: *const isize,
    rtypes: *const Handle,
    ch: Handle,
    _info: Handle,
    request: *mut Handle,
) -> c_int {
    persist(ch, "MPI_Alltoallw_init_c", request, || {
        let n = crate::large::size_of_comm(ch);
        // SAFETY: `n` entries each (the contract).
        let (sc, sd, rc, rd) = unsafe {
            (
                owned(scounts, n)?,
                owned(sdispls, n)?,
                owned(rcounts, n)?,
                owned(rdispls, n)?,
            )
        };
        let types = Kept((stypes, rtypes));
        Ok(Box::new(move || {
            let (stypes, rtypes) = types.get();
            // SAFETY: as in `MPI_Allgatherv_init_c`; the type arrays as
            // the `_init` call gave them.
            unsafe {
                started_v(plan_alltoallw(
                    send,
                    arr(&sc),
                    arr(&sd),
                    stypes,
                    recv,
                    arr(&rc),
                    arr(&rd),
                    rtypes,
                    ch,
                )?)
            }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_scatter_init_c(
    send: usize,
    recv: usize,
    counts: *const Count,
    dt: Handle,
    op: Handle,
    ch: Handle,
    _info: Handle,
    request: *mut Handle,
) -> c_int {
    persist(ch, "MPI_Reduce_scatter_init_c", request, || {
        let n = crate::large::size_of_comm(ch);
        // SAFETY: `n` entries (the contract).
        let c = unsafe { owned(counts, n) }?;
        Ok(Box::new(move || {
            // SAFETY: as in `MPI_Allgatherv_init_c`.
            unsafe { started(plan_reduce_scatter(send, recv, arr(&c), dt, op, ch)?) }
        }))
    })
}

mod neighbour;
