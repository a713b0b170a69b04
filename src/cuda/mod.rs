//! Collectives and point-to-point on CUDA device buffers (`--features
//! cuda`), through [`cudarc`] (re-exported: use its `CudaSlice` and
//! `CudaStream`, so both sides agree on the version).
//!
//! Nothing of CUDA is linked: the driver (`libcuda.so`) and NCCL
//! (`libnccl.so.2`, as NVIDIA's packages and torch wheels ship it) are
//! loaded when first needed. A machine without them gets
//! [`Error::DeviceUnavailable`] naming what is missing — from
//! [`Device::open`], [`Device::count`] or [`nccl_version`] — never a
//! panic.
//!
//! A [`DeviceGroup`] runs a [`ProcessGroup`]'s calls on device buffers.
//! Made with [`DeviceGroup::connect`] on a group whose ranks are on one
//! host with a GPU each, NCCL carries the collectives it has, device to
//! device, each still ordered, bounded and diagnosed by the group
//! ([`Path::Nccl`]); on several hosts with the same number of GPUs each,
//! all_reduce goes in three tiers, NCCL inside each host and a staged
//! meshwork all_reduce between them ([`Path::Hierarchical`]). Otherwise —
//! and for scan, exclusive_scan,
//! point-to-point and the `_nb` forms — calls are staged through pinned
//! host memory: the elementwise collectives (all_reduce, broadcast,
//! reduce, scan, exclusive_scan) a chunk at a time, the copies of one
//! chunk overlapping the network transfer of the one before; the
//! collectives laid out by rank (all_gather, reduce_scatter, all_to_all,
//! gather, scatter) and point-to-point whole. Every call returns when its
//! result is in the device buffer, ordered after the work already queued
//! on the group's stream (give the stream that produced the data); a
//! `_nb` call's [`DeviceWork::wait`] does. See docs/gpu.md.
//!
//! ```no_run
//! # fn main() -> meshwork::Result<()> {
//! use meshwork::cuda::{Device, DeviceGroup};
//! use meshwork::{Node, ReduceOp};
//!
//! let g = Node::from_env()?.connect()?;
//! let dev = Device::open(0)?; // DeviceUnavailable without a driver or GPU 0
//! let stream = dev.stream()?;
//! let mut grads = stream.clone_htod(&vec![1.0f32; 1 << 20]).expect("device memory");
//! let dg = DeviceGroup::connect(g, stream)?; // NCCL if it can; dg.path() says
//! dg.all_reduce(&mut grads, ReduceOp::Sum)?;
//! # Ok(())
//! # }
//! ```

pub use cudarc;

mod ffi;
mod hier;
mod intra;
mod path;
pub use ffi::nccl_check;
mod nb;
mod nccl;
mod staging;
pub use nccl::{nccl_version, NcclVersion, MIN_NCCL};
pub use path::Path;
pub use staging::DeviceWork;

use crate::{Buffers, Call, Element, Error, ProcessGroup, ReduceOp, Result};
use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DeviceRepr, DriverError, PinnedHostSlice,
};
use staging::{Sink, Source, Ways};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

/// Chunks of this many bytes, unless [`DeviceGroup::chunk_bytes`] says
/// otherwise: large enough that a chunk's collective is bandwidth bound,
/// small enough that copies and transfer overlap on a 16 MiB gradient.
pub const DEFAULT_CHUNK_BYTES: usize = 4 << 20;

/// The largest chunk [`DeviceGroup::chunk_bytes`] takes (1 GiB): two
/// pinned buffers of it are held per group.
pub const MAX_CHUNK_BYTES: usize = 1 << 30;

/// Host buffers a staged call cycles through (two: one being copied while
/// the other is on the network).
const DEPTH: usize = 2;

fn unavailable(what: impl Into<String>) -> Error {
    Error::DeviceUnavailable { what: what.into() }
}

fn failed(op: &str, e: &DriverError) -> Error {
    Error::DeviceFailed {
        op: op.to_string(),
        what: e.to_string(),
    }
}

/// Runs `f`, a first call into a dynamically loaded library: a symbol the
/// installed library lacks is a panic inside cudarc, turned into
/// `DeviceUnavailable` naming `what`.
fn loaded<R>(what: &str, f: impl FnOnce() -> R) -> Result<R> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("it could not be loaded");
        unavailable(format!("{what}: {why}"))
    })
}

/// The CUDA driver is on the loader's path.
fn driver() -> Result<()> {
    // SAFETY: only tries to dlopen the driver's library by its names; it
    // runs no code of it beyond its initialisers.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(unavailable(
            "the CUDA driver (libcuda.so): not found on the loader's path (LD_LIBRARY_PATH, ldconfig); \
             this machine has no NVIDIA driver installed",
        ))
    }
}

/// One CUDA device of this machine, its primary context held.
#[derive(Debug)]
pub struct Device {
    ctx: Arc<CudaContext>,
}

impl Device {
    /// How many CUDA devices this process sees (`CUDA_VISIBLE_DEVICES`
    /// applies); `DeviceUnavailable` without a driver.
    pub fn count() -> Result<usize> {
        driver()?;
        let n = loaded("the CUDA driver (libcuda.so)", CudaContext::device_count)?
            .map_err(|e| unavailable(format!("the CUDA driver (libcuda.so): {e}")))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Device `ordinal` (0-based, among the visible ones):
    /// `DeviceUnavailable` without a driver, or when there is no such
    /// device, naming how many there are.
    pub fn open(ordinal: usize) -> Result<Device> {
        let count = Device::count()?;
        if ordinal >= count {
            return Err(unavailable(format!(
                "CUDA device {ordinal}: this process sees {count} (CUDA_VISIBLE_DEVICES={})",
                std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "unset".into())
            )));
        }
        let what = format!("CUDA device {ordinal}");
        let ctx = loaded(&what, || CudaContext::new(ordinal))?
            .map_err(|e| unavailable(format!("{what}: {e}")))?;
        Ok(Device { ctx })
    }

    /// Its context (cudarc's).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// A new stream on it.
    pub fn stream(&self) -> Result<Arc<CudaStream>> {
        self.ctx.new_stream().map_err(|e| failed("new stream", &e))
    }

    /// Its name (e.g. `NVIDIA H200`).
    pub fn name(&self) -> Result<String> {
        self.ctx.name().map_err(|e| failed("device name", &e))
    }
}

/// Pinned (page-locked) host memory: copies to and from it run at the
/// bus's speed, and the network reads it like any host buffer.
struct Pinned {
    mem: PinnedHostSlice<u8>,
    ptr: *mut u8,
}

// SAFETY: `ptr` points into `mem`, which is `Send` (cudarc); the pointer
// moves with the allocation it points into, and is used by one thread at
// a time (whoever holds the `Pinned`).
unsafe impl Send for Pinned {}

impl Pinned {
    fn new(stream: &CudaStream, bytes: usize) -> Result<Pinned> {
        // SAFETY: the memory is uninitialised until the write below, and
        // not read before it. Flags 0: not write-combined (the CPU reads
        // it to reduce), not mapped into the device.
        let mut mem = unsafe { stream.context().alloc_pinned_with_flags::<u8>(bytes, 0) }
            .map_err(|e| failed("pinned host memory", &e))?;
        let ptr = mem
            .as_mut_ptr()
            .map_err(|e| failed("pinned host memory", &e))?;
        // SAFETY: `ptr` is `bytes` long (just allocated).
        unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
        Ok(Pinned { mem, ptr })
    }
}

/// A pinned buffer seen as `T`s (its length rounded down to whole `T`s;
/// pinned memory is page aligned, so any `T` is aligned in it).
struct Typed<T> {
    host: Pinned,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T> Typed<T> {
    fn whole(&self) -> usize {
        let len = self.host.mem.len();
        len - len % std::mem::size_of::<T>()
    }
}

impl<T: Element> Deref for Typed<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr..ptr + whole` lies in the allocation, initialised
        // in `Pinned::new`; the shared borrow of `self` keeps every
        // `&mut` view (`deref_mut`) away for its lifetime.
        let bytes = unsafe { std::slice::from_raw_parts(self.host.ptr, self.whole()) };
        bytemuck::cast_slice(bytes)
    }
}

impl<T: Element> DerefMut for Typed<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; the exclusive borrow of `self` makes this
        // the only view.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.host.ptr, self.whole()) };
        bytemuck::cast_slice_mut(bytes)
    }
}

/// Waits for `stream`'s work, the copy just queued included. A copy to or
/// from a plain slice is queued, not done, when cudarc returns (its
/// `[T]` host slices synchronise nothing, and pinned memory makes the
/// copy truly asynchronous): the pipeline hands the host buffer on next,
/// and the call's result must be in the device buffer when it returns.
fn complete(stream: &CudaStream, op: &str) -> Result<()> {
    stream.synchronize().map_err(|e| failed(op, &e))
}

/// A device buffer the pipeline reads (and writes, when `&mut`).
struct OnDevice<'a, S> {
    buf: S,
    stream: &'a Arc<CudaStream>,
    op: &'static str,
}

/// Copies `buf[at..at + into.len()]` into `into`, complete on return.
fn download<T: DeviceRepr>(
    buf: &CudaSlice<T>,
    stream: &Arc<CudaStream>,
    op: &str,
    at: usize,
    into: &mut [T],
) -> Result<()> {
    if into.is_empty() {
        return Ok(());
    }
    let part = buf.slice(at..at + into.len());
    stream
        .memcpy_dtoh(&part, into)
        .map_err(|e| failed(op, &e))?;
    complete(stream, op)
}

impl<T: DeviceRepr> Source<T> for OnDevice<'_, &CudaSlice<T>> {
    fn len(&self) -> usize {
        self.buf.len()
    }
    fn download(&mut self, at: usize, into: &mut [T]) -> Result<()> {
        download(self.buf, self.stream, self.op, at, into)
    }
}

impl<T: DeviceRepr> Source<T> for OnDevice<'_, &mut CudaSlice<T>> {
    fn len(&self) -> usize {
        self.buf.len()
    }
    fn download(&mut self, at: usize, into: &mut [T]) -> Result<()> {
        download(self.buf, self.stream, self.op, at, into)
    }
}

/// Copies `from` into `buf[at..at + from.len()]`, complete on return.
fn upload<T: DeviceRepr>(
    buf: &mut CudaSlice<T>,
    stream: &Arc<CudaStream>,
    op: &str,
    at: usize,
    from: &[T],
) -> Result<()> {
    if from.is_empty() {
        return Ok(());
    }
    let mut part = buf.slice_mut(at..at + from.len());
    stream
        .memcpy_htod(from, &mut part)
        .map_err(|e| failed(op, &e))?;
    complete(stream, op)
}

impl<T: DeviceRepr> Sink<T> for OnDevice<'_, &mut CudaSlice<T>> {
    fn upload(&mut self, at: usize, from: &[T]) -> Result<()> {
        upload(self.buf, self.stream, self.op, at, from)
    }
}

/// The named collectives of [`DeviceGroup`], each a line over its one
/// entry: `fn name(buf; args) => call` runs `call` in place on a device
/// buffer, `fn name(send, recv; args) => call` from `send` into `recv`;
/// with `nb`, the same without blocking over [`DeviceGroup::call_nb`]
/// (the buffer written is taken by value and handed back by `wait`).
macro_rules! named {
    () => {};
    ($(#[$doc:meta])* fn $name:ident(buf; $($arg:ident: $ty:ty),*) => $call:expr; $($rest:tt)*) => {
        $(#[$doc])*
        pub fn $name<T: Element + DeviceRepr>(
            &self,
            buf: &mut CudaSlice<T>,
            $($arg: $ty),*
        ) -> Result<()> {
            self.call($call, Buffers::InPlace(buf))
        }
        named! { $($rest)* }
    };
    ($(#[$doc:meta])* fn $name:ident(send, recv; $($arg:ident: $ty:ty),*) => $call:expr; $($rest:tt)*) => {
        $(#[$doc])*
        pub fn $name<T: Element + DeviceRepr>(
            &self,
            send: &CudaSlice<T>,
            recv: &mut CudaSlice<T>,
            $($arg: $ty),*
        ) -> Result<()> {
            self.call($call, Buffers::SendRecv { send, recv })
        }
        named! { $($rest)* }
    };
    ($(#[$doc:meta])* nb fn $name:ident(buf; $($arg:ident: $ty:ty),*) => $call:expr; $($rest:tt)*) => {
        $(#[$doc])*
        pub fn $name<T: Element + DeviceRepr>(
            &self,
            buf: CudaSlice<T>,
            $($arg: $ty),*
        ) -> DeviceWork<CudaSlice<T>> {
            self.call_nb($call, None, buf)
        }
        named! { $($rest)* }
    };
    ($(#[$doc:meta])* nb fn $name:ident(send, recv; $($arg:ident: $ty:ty),*) => $call:expr; $($rest:tt)*) => {
        $(#[$doc])*
        pub fn $name<T: Element + DeviceRepr>(
            &self,
            send: &CudaSlice<T>,
            recv: CudaSlice<T>,
            $($arg: $ty),*
        ) -> DeviceWork<CudaSlice<T>> {
            self.call_nb($call, Some(send), recv)
        }
        named! { $($rest)* }
    };
}
use named;

/// A [`ProcessGroup`]'s calls on CUDA device buffers, staged through
/// pinned host memory (see the module docs). `Send + Sync`; its pinned
/// buffers are kept for the next call.
pub struct DeviceGroup {
    group: Arc<ProcessGroup>,
    stream: Arc<CudaStream>,
    chunk_bytes: usize,
    pool: Mutex<Vec<Pinned>>,
    path: Path,
    engine: Engine,
}

/// What carries a [`DeviceGroup`]'s calls (its [`Path`], made).
enum Engine {
    /// Every call staged through pinned host memory.
    Staged,
    /// NCCL among the group's ranks, device to device, for the calls it
    /// has (`intra::carries`); the others staged.
    Nccl(intra::NcclComm),
    /// all_reduce in three tiers (`hier.rs`); the others staged.
    Hierarchical(Box<hier::Hier>),
}

impl fmt::Debug for DeviceGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceGroup")
            .field("rank", &self.group.rank())
            .field("world", &self.group.world_size())
            .field("chunk_bytes", &self.chunk_bytes)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl DeviceGroup {
    /// `group`'s calls on buffers of `stream`'s device, ordered on
    /// `stream`, every one staged through host memory (not collective:
    /// see [`connect`](Self::connect) for NCCL).
    pub fn new(group: Arc<ProcessGroup>, stream: Arc<CudaStream>) -> DeviceGroup {
        DeviceGroup {
            group,
            stream,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            pool: Mutex::new(Vec::new()),
            path: Path::Staged {
                why: "made with DeviceGroup::new, which stages every call".into(),
            },
            engine: Engine::Staged,
        }
    }

    /// `group`'s calls on buffers of `stream`'s device, on the best
    /// [`Path`] every rank can take (collective: every rank calls it).
    /// The ranks exchange where they run (host, GPU UUID, whether NCCL
    /// loads): all on one host, each with a GPU of its own, NCCL loaded
    /// everywhere, and an NCCL communicator of the group's ranks is made
    /// (its unique id sent over meshwork); otherwise every call is
    /// staged, and [`path`](Self::path) says why. Making the
    /// communicator is bounded by the group's deadline; its failure is an
    /// error here, not a silent fallback.
    pub fn connect(group: Arc<ProcessGroup>, stream: Arc<CudaStream>) -> Result<DeviceGroup> {
        let mut dg = DeviceGroup::new(group, stream);
        // Every rank takes part in the exchange, even one that cannot say
        // where it runs (it says it cannot use NCCL, then fails): the
        // group's order stays the same everywhere.
        let here = path::Placement::here(&dg.stream);
        let me = here
            .as_ref()
            .copied()
            .unwrap_or_else(|_| path::Placement::unusable());
        let (path, layout) = path::agree_on_path(&dg.group, me)?;
        dg.path = path;
        here?;
        // Every rank makes its communicator (or fails to), then all learn
        // whether all did: either every rank has its path or none does.
        let made = match dg.path {
            Path::Nccl => {
                intra::NcclComm::connect(&dg.group, &dg.stream).map(|c| dg.engine = Engine::Nccl(c))
            }
            Path::Hierarchical { .. } => {
                // The splits are the group's collectives: their errors are
                // its own, on every rank.
                let (host_group, across_group) = hier::Hier::split(&dg.group, &layout)?;
                hier::Hier::new(&dg.group, host_group, across_group, &dg.stream)
                    .map(|h| dg.engine = Engine::Hierarchical(Box::new(h)))
            }
            _ => return Ok(dg),
        };
        let mut all = vec![0u8; dg.group.world_size() as usize];
        let agreed = dg.group.all_gather(&[u8::from(made.is_ok())], &mut all);
        made?;
        agreed?;
        let failed: Vec<usize> = (0..all.len()).filter(|&r| all[r] == 0).collect();
        if !failed.is_empty() {
            return Err(unavailable(format!(
                "NCCL's communicator could not be made on ranks {failed:?} (their errors say why)"
            )));
        }
        Ok(dg)
    }

    /// How this group moves device buffers, and why.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stage in chunks of `bytes` (rounded down to a multiple of 8, kept
    /// within 8 bytes and [`MAX_CHUNK_BYTES`]). Every rank must use the
    /// same size: each chunk is its own collective.
    pub fn chunk_bytes(mut self, bytes: usize) -> DeviceGroup {
        self.set_chunk_bytes(bytes);
        self
    }

    /// [`chunk_bytes`](Self::chunk_bytes) in place, for this group and
    /// its staged tier between hosts.
    fn set_chunk_bytes(&mut self, bytes: usize) {
        let bytes = bytes.clamp(8, MAX_CHUNK_BYTES);
        self.chunk_bytes = bytes - bytes % 8;
        self.pool = Mutex::new(Vec::new());
        if let Engine::Hierarchical(h) = &mut self.engine {
            h.across.set_chunk_bytes(bytes);
        }
    }

    /// The group underneath.
    pub fn group(&self) -> &Arc<ProcessGroup> {
        &self.group
    }

    /// The stream every copy is ordered on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// [`ProcessGroup::call`] on device buffers: the one entry of this
    /// group's collectives, carried by its engine ([`path`](Self::path)):
    /// NCCL or the hierarchical all_reduce where they have the call,
    /// otherwise staged through pinned host memory into the group's own
    /// entry. Checked as a host call is; a call in place given a send
    /// and a receive buffer copies `send` into `recv` on the stream
    /// first. A barrier waits for the work queued on the stream.
    pub fn call<T: Element + DeviceRepr>(
        &self,
        call: Call,
        bufs: Buffers<'_, CudaSlice<T>>,
    ) -> Result<()> {
        let bufs = match self.in_place_form(call, bufs) {
            Ok(bufs) => bufs,
            Err(e) => return Err(self.refuse(e)),
        };
        match (&self.engine, call, bufs) {
            (_, Call::Barrier, bufs) => {
                // The entry's rule: a barrier takes no buffer.
                self.group.checked_count(call, bufs.lens(CudaSlice::len))?;
                self.barrier()
            }
            (Engine::Nccl(nccl), call, bufs) if intra::carries(call, T::DTYPE) => {
                nccl.call(&self.group, call, bufs)
            }
            (Engine::Hierarchical(h), Call::AllReduce { op }, Buffers::InPlace(buf))
                if ffi::data_type(T::DTYPE).is_some() =>
            {
                h.current(&self.group)?;
                // NCCL checks nothing across ranks: a length that differs
                // would pair one rank's tail with another's next call.
                staging::same_length(&self.group, "all_reduce", buf.len())?;
                hier::all_reduce(&**h, buf, op)
            }
            (_, call, Buffers::InPlace(buf)) => {
                let ways = ways(call, self.group.rank());
                self.elementwise(call.name(), buf, ways, |h| {
                    self.group.call(call, Buffers::InPlace(h))
                })
            }
            (_, call, Buffers::SendRecv { send, recv }) => {
                let ways = ways(call, self.group.rank());
                self.whole(call.name(), send, recv, ways, |send, recv| {
                    self.group.call(call, Buffers::SendRecv { send, recv })
                })
            }
        }
    }

    /// `bufs` in the form `call` runs in: a call in place given a send
    /// and a receive buffer has `send` copied into `recv` (equal lengths).
    fn in_place_form<'a, T: Element + DeviceRepr>(
        &self,
        call: Call,
        bufs: Buffers<'a, CudaSlice<T>>,
    ) -> Result<Buffers<'a, CudaSlice<T>>> {
        match bufs {
            Buffers::SendRecv { send, recv } if call.is_in_place() => {
                copy_in(&self.stream, call, send, recv)?;
                Ok(Buffers::InPlace(recv))
            }
            bufs => Ok(bufs),
        }
    }

    /// A call refused on this rank alone: with NCCL, the communicator is
    /// aborted too, so that nothing pairs with the call the others make.
    fn refuse(&self, e: Error) -> Error {
        match &self.engine {
            Engine::Nccl(nccl) => nccl.reject(e),
            _ => e,
        }
    }

    named! {
        /// [`ProcessGroup::all_reduce`] on a device buffer.
        fn all_reduce(buf; op: ReduceOp) => Call::AllReduce { op };
        /// [`ProcessGroup::broadcast`] on a device buffer.
        fn broadcast(buf; root: u32) => Call::Broadcast { root };
        /// [`ProcessGroup::reduce`] on a device buffer: the result at `root`;
        /// the others' buffers are left as they were.
        fn reduce(buf; op: ReduceOp, root: u32) => Call::Reduce { op, root };
        /// [`ProcessGroup::scan`] on a device buffer.
        fn scan(buf; op: ReduceOp) => Call::Scan { op };
        /// [`ProcessGroup::exclusive_scan`] on a device buffer.
        fn exclusive_scan(buf; op: ReduceOp) => Call::ExclusiveScan { op };
        /// [`ProcessGroup::all_gather`] on device buffers.
        fn all_gather(send, recv;) => Call::AllGather;
        /// [`ProcessGroup::reduce_scatter`] on device buffers.
        fn reduce_scatter(send, recv; op: ReduceOp) => Call::ReduceScatter { op };
        /// [`ProcessGroup::all_to_all`] on device buffers.
        fn all_to_all(send, recv;) => Call::AllToAll;
        /// [`ProcessGroup::gather`] on device buffers (`recv` is written at
        /// `root` only).
        fn gather(send, recv; root: u32) => Call::Gather { root };
        /// [`ProcessGroup::scatter`] on device buffers (`send` is read at
        /// `root` only).
        fn scatter(send, recv; root: u32) => Call::Scatter { root };
    }

    /// [`ProcessGroup::barrier`], after the work queued on the stream.
    pub fn barrier(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| failed("barrier", &e))?;
        self.group.barrier()
    }

    /// [`ProcessGroup::send`] of a device buffer: one message, which a
    /// host `recv` or a device [`recv`](Self::recv) takes alike.
    pub fn send<T: Element + DeviceRepr>(
        &self,
        buf: &CudaSlice<T>,
        dst: u32,
        tag: u64,
    ) -> Result<()> {
        let mut host = vec![bytemuck::Zeroable::zeroed(); buf.len()];
        let mut from = OnDevice {
            buf,
            stream: &self.stream,
            op: "send",
        };
        from.download(0, &mut host)?;
        self.group.send(&host, dst, tag)
    }

    /// [`ProcessGroup::recv`] into a device buffer.
    pub fn recv<T: Element + DeviceRepr>(
        &self,
        buf: &mut CudaSlice<T>,
        src: u32,
        tag: u64,
    ) -> Result<()> {
        let mut host = vec![bytemuck::Zeroable::zeroed(); buf.len()];
        self.group.recv(&mut host, src, tag)?;
        let mut to = OnDevice {
            buf,
            stream: &self.stream,
            op: "recv",
        };
        to.upload(0, &host)
    }

    /// An elementwise call on `buf`, staged a chunk at a time once the
    /// ranks agree on its length.
    fn elementwise<T: Element + DeviceRepr>(
        &self,
        op: &'static str,
        buf: &mut CudaSlice<T>,
        ways: Ways,
        call: impl Fn(&mut [T]) -> Result<()> + Sync,
    ) -> Result<()> {
        staging::same_length(&self.group, op, buf.len())?;
        let mut mem = OnDevice {
            buf,
            stream: &self.stream,
            op,
        };
        self.pipeline(op, &mut mem, ways, call)
    }

    /// An elementwise call on `mem` (any device memory: a buffer, a range
    /// of one) where the ranks already agree on its length, staged a chunk
    /// at a time (also the hierarchical all_reduce's tier between hosts:
    /// the whole group agreed on the length first).
    fn pipeline<T: Element + DeviceRepr, M: Sink<T>>(
        &self,
        op: &'static str,
        mem: &mut M,
        ways: Ways,
        call: impl Fn(&mut [T]) -> Result<()> + Sync,
    ) -> Result<()> {
        let chunk = (self.chunk_bytes / std::mem::size_of::<T>()).max(1);
        let mut hosts = self.take(op)?;
        let r = staging::pipelined(mem, &mut hosts, chunk, ways, call);
        self.pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(hosts.into_iter().map(|t| t.host));
        r
    }

    fn whole<T: Element + DeviceRepr>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        ways: Ways,
        call: impl FnOnce(&[T], &mut [T]) -> Result<()>,
    ) -> Result<()> {
        let mut from = OnDevice {
            buf: send,
            stream: &self.stream,
            op,
        };
        let mut to = OnDevice {
            buf: recv,
            stream: &self.stream,
            op,
        };
        staging::staged_whole(&mut from, &mut to, ways, call)
    }

    /// [`DEPTH`] pinned buffers of a chunk each, from the pool or new.
    fn take<T: Element>(&self, op: &str) -> Result<Vec<Typed<T>>> {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::with_capacity(DEPTH);
        while out.len() < DEPTH {
            let host = match pool.pop() {
                Some(h) => h,
                None => match Pinned::new(&self.stream, self.chunk_bytes) {
                    Ok(h) => h,
                    Err(e) => {
                        // What was taken goes back for the next call.
                        pool.extend(out.into_iter().map(|t: Typed<T>| t.host));
                        return Err(match e {
                            Error::DeviceFailed { what, .. } => Error::DeviceFailed {
                                op: op.to_string(),
                                what: format!("pinned host memory: {what}"),
                            },
                            other => other,
                        });
                    }
                },
            };
            out.push(Typed {
                host,
                _t: std::marker::PhantomData,
            });
        }
        Ok(out)
    }
}

/// Which way a staged call copies on this rank: out of the device where
/// the rank's input counts, back where it receives a result.
fn ways(call: Call, rank: u32) -> Ways {
    match call {
        Call::Broadcast { root } => Ways {
            down: rank == root,
            up: rank != root,
        },
        Call::Reduce { root, .. } | Call::Gather { root } => Ways {
            down: true,
            up: rank == root,
        },
        Call::Scatter { root } => Ways {
            down: rank == root,
            up: true,
        },
        _ => Ways::BOTH,
    }
}

/// `send` into `recv` on `stream`, for `call` in place on `recv`.
fn copy_in<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    call: Call,
    send: &CudaSlice<T>,
    recv: &mut CudaSlice<T>,
) -> Result<()> {
    if send.len() != recv.len() {
        return Err(Error::InvalidArgument(format!(
            "{}: recv has {} elements, expected {} (equal to send length)",
            call.name(),
            recv.len(),
            send.len()
        )));
    }
    stream
        .memcpy_dtod(send, recv)
        .map_err(|e| failed(call.name(), &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `loaded` makes of a panic inside a loaded library's call.
    #[test]
    fn a_panic_while_loading_is_a_typed_error_naming_the_library() {
        let r: Result<()> = loaded("NCCL (libnccl.so.2)", || {
            panic!("Missing symbol ncclCommInitRankConfig")
        });
        match r {
            Err(Error::DeviceUnavailable { what }) => {
                assert!(
                    what.contains("libnccl.so.2") && what.contains("ncclCommInitRankConfig"),
                    "{what}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
