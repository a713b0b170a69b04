//! NCCL inside a node: when every rank of a group is on one host and owns
//! a GPU of its own, an NCCL communicator of the group's ranks carries the
//! collectives NCCL has, device to device; meshwork still orders them,
//! bounds them by the group's deadline and names who is missing.
//!
//! Making the communicator: the ranks agree that each can use NCCL (one
//! all_gather), rank 0 makes NCCL's unique id and broadcasts it over
//! meshwork, and each rank starts `ncclCommInitRankConfig` non-blocking
//! and polls it like a collective (so a rank that never comes is a
//! deadline, not a hang).

use super::ffi::{self, Api, Config, NcclResult, RawComm, UniqueId, IN_PROGRESS, SUCCESS};
use super::{failed, unavailable};
use crate::group::{pause, Progress};
use crate::{Buffers, Call, DType, Element, Error, ProcessGroup, ReduceOp, Result};
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr};
use std::ffi::c_int;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Rank 0's unique id, given to every rank over meshwork: `make` runs on
/// rank 0 only; its failure is every rank's `DeviceUnavailable`, naming
/// rank 0.
pub(crate) fn agree_on_id(
    group: &ProcessGroup,
    make: impl FnOnce() -> Result<[u8; 128]>,
) -> Result<[u8; 128]> {
    let mut msg = [0u8; 129];
    let mut mine = None;
    if group.rank() == 0 {
        match make() {
            Ok(id) => {
                msg[0] = 1;
                msg[1..].copy_from_slice(&id);
            }
            Err(e) => mine = Some(e),
        }
    }
    group.broadcast(&mut msg, 0)?;
    if msg[0] == 1 {
        let mut id = [0u8; 128];
        id.copy_from_slice(&msg[1..]);
        return Ok(id);
    }
    Err(match mine {
        Some(Error::DeviceUnavailable { what }) => {
            unavailable(format!("rank 0 could not make NCCL's unique id: {what}"))
        }
        Some(other) => other,
        None => unavailable("rank 0 could not make NCCL's unique id (its own error says why)"),
    })
}

/// An NCCL communicator of a group's ranks, on one stream.
pub(crate) struct NcclComm {
    api: &'static Api,
    stream: Arc<CudaStream>,
    /// The communicator of the group it was made for (a group that
    /// shrank since has other ranks: the communicator is refused then).
    comm_id: u64,
    /// How long its teardown may take (the group's deadline when made).
    deadline: Duration,
    /// Held by a call from before it takes its place in the group's order
    /// until NCCL is done with it: one call at a time, in the group's
    /// order, and nothing aborts or frees the communicator under a call
    /// still polling it.
    calls: Mutex<()>,
    /// The communicator, and why it was aborted (then it is gone).
    state: Mutex<State>,
}

struct State {
    raw: RawComm,
    aborted: Option<String>,
}

// SAFETY: an NCCL communicator may be used from any thread, one at a
// time (`calls`, and `state` for every use of `raw`); the stream is
// cudarc's (`Send + Sync`).
unsafe impl Send for NcclComm {}
// SAFETY: as above.
unsafe impl Sync for NcclComm {}

impl NcclComm {
    /// The communicator of `group`'s ranks on `stream` (collective: every
    /// rank calls it, after every rank has said it loads NCCL). Bounded by
    /// the group's deadline, which NCCL's setup (seconds on a large node)
    /// must fit in.
    pub(crate) fn connect(group: &ProcessGroup, stream: &Arc<CudaStream>) -> Result<NcclComm> {
        let api = ffi::api()?;
        let id = agree_on_id(group, || {
            api.unique_id().map(|id| id.internal.map(|c| c as u8))
        })?;
        let id = UniqueId {
            internal: id.map(|b| b as std::ffi::c_char),
        };
        let inner = group.inner();
        let (world, rank) = (inner.world as c_int, inner.rank as c_int);
        // Its making takes a place in the group's order, as a barrier (it
        // is one), before anything here can fail: every rank takes it.
        let call = group.outside::<u8>(Call::Barrier, 0)?;
        let comm = NcclComm {
            api,
            stream: Arc::clone(stream),
            comm_id: inner.comm_id,
            deadline: inner.timeout(),
            calls: Mutex::new(()),
            state: Mutex::new(State {
                raw: std::ptr::null_mut(),
                aborted: None,
            }),
        };
        let started = stream
            .context()
            .bind_to_thread()
            .map_err(|e| failed("NCCL's communicator", &e))
            .and_then(|()| {
                let mut st = comm.lock();
                let mut config = Config::non_blocking();
                // SAFETY: `raw` and `config` are valid to write and read;
                // `id` is the one rank 0 made; the device is current here.
                let r = unsafe {
                    (api.comm_init_rank_config)(&mut st.raw, world, id, rank, &mut config)
                };
                if r == SUCCESS || r == IN_PROGRESS {
                    Ok(())
                } else {
                    Err(unavailable(format!(
                        "NCCL: ncclCommInitRankConfig failed on rank {rank}: {}",
                        api.describe(r, st.raw)
                    )))
                }
            });
        // Whether every rank started: a rank whose NCCL refused at once
        // is known to the others now, not at their deadline.
        let mut all = vec![0u8; world as usize];
        let agreed = group.all_gather(&[u8::from(started.is_ok())], &mut all);
        let failed: Vec<usize> = (0..all.len()).filter(|&r| all[r] == 0).collect();
        let refused = match (started, agreed) {
            (Err(e), _) | (Ok(()), Err(e)) => Some(e),
            (Ok(()), Ok(())) if !failed.is_empty() => Some(unavailable(format!(
                "NCCL's communicator could not be started on ranks {failed:?} (their errors say why)"
            ))),
            (Ok(()), Ok(())) => None,
        };
        if let Some(e) = refused {
            comm.abort(&e.to_string());
            return Err(call.refused(e));
        }
        let outcome = call.watch(
            || comm.settled("NCCL's communicator"),
            || comm.abort("its making timed out"),
        );
        if let Err(e) = &outcome {
            // NCCL's way out of a failed init: abort, never destroy.
            comm.abort(&e.to_string());
        }
        outcome.map(|()| comm)
    }

    /// `Done` once the communicator's last call is under way (non-blocking
    /// NCCL answers `ncclInProgress` until then), or its error.
    fn settled(&self, op: &str) -> Progress {
        let st = self.lock();
        if let Some(why) = &st.aborted {
            return Progress::Failed(Error::DeviceFailed {
                op: op.to_string(),
                what: format!("NCCL's communicator was aborted ({why})"),
            });
        }
        let mut r: NcclResult = SUCCESS;
        // SAFETY: `raw` is live: not aborted (checked above, under the
        // same lock).
        let q = unsafe { (self.api.comm_get_async_error)(st.raw, &mut r) };
        match (q, r) {
            (SUCCESS, SUCCESS) => Progress::Done,
            (SUCCESS, IN_PROGRESS) => Progress::Pending,
            (SUCCESS, r) | (r, _) => Progress::Failed(Error::DeviceFailed {
                op: op.to_string(),
                what: format!("NCCL: {}", self.api.describe(r, st.raw)),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Abort the communicator (it unblocks NCCL's kernels and threads);
    /// every later call is refused with `why`. NCCL's abort has no
    /// deadline of its own: it joins NCCL's threads, which watch for it.
    fn abort(&self, why: &str) {
        let mut st = self.lock();
        if st.aborted.is_none() {
            if !st.raw.is_null() {
                // SAFETY: `raw` is live; it is not used after this.
                unsafe { (self.api.comm_abort)(st.raw) };
            }
            st.aborted = Some(why.to_string());
        }
    }

    /// Enqueue one NCCL call (`enqueue`) as collective `call` of the
    /// group, and wait for it on the stream, bounded like any call of the
    /// group. Any failure after the call took its place aborts the
    /// communicator: NCCL pairs calls by their order alone, so a rank
    /// that skipped one would pair every later call wrongly, silently.
    fn run<T: Element>(
        &self,
        group: &ProcessGroup,
        call: Call,
        count: usize,
        enqueue: impl FnOnce(&Api, RawComm, ffi::RawStream) -> NcclResult,
    ) -> Result<()> {
        let name = call.name();
        let refuse = |why: &str| Error::DeviceFailed {
            op: name.to_string(),
            what: format!("NCCL's communicator was aborted ({why}); make a new DeviceGroup"),
        };
        let _one = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = &self.lock().aborted {
            return Err(refuse(why));
        }
        if group.inner().comm_id != self.comm_id {
            let why = "the group changed (shrank or grew) since it was made";
            self.abort(why);
            return Err(refuse(why));
        }
        let call = match group.outside::<T>(call, count) {
            Ok(call) => call,
            Err(e) => {
                // Refused here, perhaps not elsewhere: as `reject`.
                self.abort(&format!("a call was refused here: {e}"));
                return Err(e);
            }
        };
        let started = self
            .stream
            .context()
            .bind_to_thread()
            .map_err(|e| failed(name, &e))
            .and_then(|()| {
                let st = self.lock();
                match enqueue(self.api, st.raw, self.stream.cu_stream()) {
                    r if r == SUCCESS || r == IN_PROGRESS => Ok(()),
                    r => Err(Error::DeviceFailed {
                        op: name.to_string(),
                        what: format!("NCCL: {}", self.api.describe(r, st.raw)),
                    }),
                }
            });
        if let Err(e) = started {
            self.abort(&format!("{name}: {e}"));
            return Err(call.refused(e));
        }
        let mut event: Option<CudaEvent> = None;
        let outcome = call.watch(
            || self.progress(name, &mut event),
            || self.abort(&format!("{name} made no progress")),
        );
        if let Err(e) = &outcome {
            self.abort(&format!("{name}: {e}"));
        }
        outcome
    }

    /// Refuse a call this rank cannot make (its arguments are wrong): the
    /// others will make it, so the communicator is aborted here (they
    /// reach their deadline, naming this rank as never having entered
    /// it) rather than left to pair this rank's next call with it.
    pub(crate) fn reject(&self, e: Error) -> Error {
        let _one = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        self.abort(&format!("a call was refused here: {e}"));
        e
    }

    /// Whether the call just enqueued is done on the device.
    fn progress(&self, op: &str, event: &mut Option<CudaEvent>) -> Progress {
        if event.is_none() {
            match self.settled(op) {
                Progress::Done => {}
                other => return other,
            }
            match self.stream.record_event(None) {
                Ok(e) => *event = Some(e),
                Err(e) => return Progress::Failed(failed(op, &e)),
            }
        }
        let Some(ev) = event.as_ref() else {
            return Progress::Pending;
        };
        // SAFETY: the event is live (owned here) for the query.
        match unsafe { cudarc::driver::result::event::query(ev.cu_event()) } {
            Ok(()) => Progress::Done,
            Err(e) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_READY => {
                // A peer's failure shows in NCCL's error, not the event.
                match self.settled(op) {
                    Progress::Failed(e) => Progress::Failed(e),
                    _ => Progress::Pending,
                }
            }
            Err(e) => Progress::Failed(failed(op, &e)),
        }
    }

    /// all_reduce of `buf[at]` in place (all of it, or the hierarchical
    /// all_reduce's tail).
    pub(crate) fn all_reduce_range<T: Element + DeviceRepr>(
        &self,
        group: &ProcessGroup,
        buf: &mut CudaSlice<T>,
        at: std::ops::Range<usize>,
        op: ReduceOp,
    ) -> Result<()> {
        assert!(
            at.start <= at.end && at.end <= buf.len(),
            "a range of the buffer"
        );
        let n = at.len();
        let size = std::mem::size_of::<T>() as u64;
        let (ptr, _guard) = buf.device_ptr_mut(&self.stream);
        let p = ptr + at.start as u64 * size;
        let (t, o) = (ffi::nccl_type(T::DTYPE, "all_reduce")?, ffi::red_op(op));
        self.run::<T>(group, Call::AllReduce { op }, n, |api, c, s| {
            // SAFETY: in place on `n` elements inside a live buffer.
            unsafe { (api.all_reduce)(p as _, p as _, n, t, o, c, s) }
        })
    }

    /// reduce_scatter in place: `buf[..world × shard]` reduced across the
    /// group, this rank's shard left at `buf[rank × shard..]` (NCCL's
    /// in-place form: the receive buffer is the send buffer's own slot).
    pub(crate) fn reduce_scatter_in_place<T: Element + DeviceRepr>(
        &self,
        group: &ProcessGroup,
        buf: &mut CudaSlice<T>,
        shard: usize,
        op: ReduceOp,
    ) -> Result<()> {
        let at = slot::<T>(group, buf.len(), shard);
        let (ptr, _guard) = buf.device_ptr_mut(&self.stream);
        let mine = ptr + at;
        let (t, o) = (ffi::nccl_type(T::DTYPE, "reduce_scatter")?, ffi::red_op(op));
        self.run::<T>(group, Call::ReduceScatter { op }, shard, |api, c, s| {
            // SAFETY: `world × shard` elements read, `shard` written at
            // this rank's slot, all inside a live buffer.
            unsafe { (api.reduce_scatter)(ptr as _, mine as _, shard, t, o, c, s) }
        })
    }

    /// all_gather in place: every rank's `buf[rank × shard..]` to every
    /// rank's `buf[..world × shard]` (NCCL's in-place form).
    pub(crate) fn all_gather_in_place<T: Element + DeviceRepr>(
        &self,
        group: &ProcessGroup,
        buf: &mut CudaSlice<T>,
        shard: usize,
    ) -> Result<()> {
        let at = slot::<T>(group, buf.len(), shard);
        let (ptr, _guard) = buf.device_ptr_mut(&self.stream);
        let mine = ptr + at;
        let t = ffi::nccl_type(T::DTYPE, "all_gather")?;
        self.run::<T>(group, Call::AllGather, shard, |api, c, s| {
            // SAFETY: `shard` elements read at this rank's slot, `world ×
            // shard` written, all inside a live buffer.
            unsafe { (api.all_gather)(mine as _, ptr as _, shard, t, c, s) }
        })
    }

    fn broadcast<T: Element + DeviceRepr>(
        &self,
        group: &ProcessGroup,
        buf: &mut CudaSlice<T>,
        root: u32,
    ) -> Result<()> {
        let n = buf.len();
        let (ptr, _guard) = buf.device_ptr_mut(&self.stream);
        let t = ffi::nccl_type(T::DTYPE, "broadcast")?;
        self.run::<T>(group, Call::Broadcast { root }, n, |api, c, s| {
            // SAFETY: in place on `n` elements of a live device buffer.
            unsafe { (api.broadcast)(ptr as _, ptr as _, n, t, root as c_int, c, s) }
        })
    }

    fn reduce<T: Element + DeviceRepr>(
        &self,
        group: &ProcessGroup,
        buf: &mut CudaSlice<T>,
        op: ReduceOp,
        root: u32,
    ) -> Result<()> {
        let n = buf.len();
        let (ptr, _guard) = buf.device_ptr_mut(&self.stream);
        let (t, o) = (ffi::nccl_type(T::DTYPE, "reduce")?, ffi::red_op(op));
        self.run::<T>(group, Call::Reduce { op, root }, n, |api, c, s| {
            // SAFETY: in place; NCCL writes `recv` at the root only.
            unsafe { (api.reduce)(ptr as _, ptr as _, n, t, o, root as c_int, c, s) }
        })
    }

    fn all_gather<T: Element + DeviceRepr>(
        &self,
        group: &ProcessGroup,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        n: usize,
    ) -> Result<()> {
        let (sp, _g1) = send.device_ptr(&self.stream);
        let (rp, _g2) = recv.device_ptr_mut(&self.stream);
        let t = ffi::nccl_type(T::DTYPE, "all_gather")?;
        self.run::<T>(group, Call::AllGather, n, |api, c, s| {
            // SAFETY: `send` holds `n`, `recv` world × `n` elements.
            unsafe { (api.all_gather)(sp as _, rp as _, n, t, c, s) }
        })
    }

    fn reduce_scatter<T: Element + DeviceRepr>(
        &self,
        group: &ProcessGroup,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        op: ReduceOp,
        n: usize,
    ) -> Result<()> {
        let (sp, _g1) = send.device_ptr(&self.stream);
        let (rp, _g2) = recv.device_ptr_mut(&self.stream);
        let (t, o) = (ffi::nccl_type(T::DTYPE, "reduce_scatter")?, ffi::red_op(op));
        self.run::<T>(group, Call::ReduceScatter { op }, n, |api, c, s| {
            // SAFETY: `send` holds world × `n`, `recv` `n` elements.
            unsafe { (api.reduce_scatter)(sp as _, rp as _, n, t, o, c, s) }
        })
    }

    /// all_to_all, gather and scatter: one grouped NCCL send and receive
    /// per pair that exchanges a block (`sends` and `recvs`: peer, element
    /// offset), blocks of `block` elements.
    #[allow(clippy::too_many_arguments, reason = "one call's full description")]
    fn exchange<T: Element + DeviceRepr>(
        &self,
        group: &ProcessGroup,
        call: Call,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        block: usize,
        sends: &[(u32, usize)],
        recvs: &[(u32, usize)],
    ) -> Result<()> {
        let (sp, _g1) = send.device_ptr(&self.stream);
        let (rp, _g2) = recv.device_ptr_mut(&self.stream);
        let (t, size) = (
            ffi::nccl_type(T::DTYPE, call.name())?,
            std::mem::size_of::<T>() as u64,
        );
        self.run::<T>(group, call, block, |api, c, s| {
            // SAFETY: every offset + `block` lies within its buffer (the
            // callers' checks); the calls are grouped, as NCCL requires
            // for a rank's sends and receives to progress together.
            unsafe {
                let mut r = (api.group_start)();
                for &(peer, at) in sends {
                    if r == SUCCESS {
                        r = (api.send)((sp + at as u64 * size) as _, block, t, peer as c_int, c, s);
                    }
                }
                for &(peer, at) in recvs {
                    if r == SUCCESS {
                        r = (api.recv)((rp + at as u64 * size) as _, block, t, peer as c_int, c, s);
                    }
                }
                let end = (api.group_end)();
                if r == SUCCESS {
                    end
                } else {
                    r
                }
            }
        })
    }
}

/// Whether NCCL carries `call` on `t`; the others (scan, exclusive_scan,
/// barrier, and the 16-bit integers NCCL lacks) are staged through
/// meshwork.
pub(crate) fn carries(call: Call, t: DType) -> bool {
    ffi::data_type(t).is_some()
        && !matches!(
            call,
            Call::Scan { .. } | Call::ExclusiveScan { .. } | Call::Barrier
        )
}

impl NcclComm {
    /// `call` on device buffers in the form it takes (in place, or send
    /// and receive), checked as meshwork's entry checks a host call; a
    /// call refused here aborts the communicator ([`reject`](Self::reject)).
    /// all_to_all, gather and scatter are grouped sends and receives of
    /// blocks (NCCL sends to itself too).
    pub(crate) fn call<T: Element + DeviceRepr>(
        &self,
        group: &ProcessGroup,
        call: Call,
        bufs: Buffers<'_, CudaSlice<T>>,
    ) -> Result<()> {
        let block = group
            .checked_count(call, bufs.lens(CudaSlice::len))
            .map_err(|e| self.reject(e))?;
        let (w, here) = (world(group), |root| group.rank() == root);
        let by_rank = |on: bool| -> Vec<(u32, usize)> {
            if on {
                (0..w).map(|p| (p as u32, p * block)).collect()
            } else {
                Vec::new()
            }
        };
        match (call, bufs) {
            (Call::AllReduce { op }, Buffers::InPlace(buf)) => {
                let all = 0..buf.len();
                self.all_reduce_range(group, buf, all, op)
            }
            (Call::Broadcast { root }, Buffers::InPlace(buf)) => self.broadcast(group, buf, root),
            (Call::Reduce { op, root }, Buffers::InPlace(buf)) => self.reduce(group, buf, op, root),
            (Call::AllGather, Buffers::SendRecv { send, recv }) => {
                self.all_gather(group, send, recv, block)
            }
            (Call::ReduceScatter { op }, Buffers::SendRecv { send, recv }) => {
                self.reduce_scatter(group, send, recv, op, block)
            }
            (Call::AllToAll, Buffers::SendRecv { send, recv }) => {
                let pairs = by_rank(true);
                self.exchange(group, call, send, recv, block, &pairs, &pairs)
            }
            (Call::Gather { root }, Buffers::SendRecv { send, recv }) => {
                let recvs = by_rank(here(root));
                self.exchange(group, call, send, recv, block, &[(root, 0)], &recvs)
            }
            (Call::Scatter { root }, Buffers::SendRecv { send, recv }) => {
                let sends = by_rank(here(root));
                self.exchange(group, call, send, recv, block, &sends, &[(root, 0)])
            }
            (call, _) => Err(self.reject(Error::InvalidArgument(format!(
                "{}: not carried by NCCL in this form",
                call.name()
            )))),
        }
    }
}

impl Drop for NcclComm {
    /// Finalize (NCCL flushes its own work), poll it to the end within
    /// the group's deadline, then destroy; abort where any step fails or
    /// the deadline passes.
    fn drop(&mut self) {
        let _one = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let raw = {
            let st = self.lock();
            if st.aborted.is_some() || st.raw.is_null() {
                return;
            }
            st.raw
        };
        // SAFETY: `raw` is live and idle (every call was waited for).
        let r = unsafe { (self.api.comm_finalize)(raw) };
        let until = std::time::Instant::now() + self.deadline;
        let mut done = r == SUCCESS || r == IN_PROGRESS;
        let mut turns = 0u32;
        while done {
            match self.settled("teardown") {
                Progress::Done => break,
                Progress::Failed(_) => done = false,
                Progress::Pending if std::time::Instant::now() >= until => done = false,
                Progress::Pending => {
                    turns = turns.saturating_add(1);
                    pause(turns);
                }
            }
        }
        if done {
            // SAFETY: finalized; `raw` is not used after this.
            unsafe { (self.api.comm_destroy)(raw) };
            self.lock().aborted = Some("destroyed".into());
        } else {
            tracing::warn!("NCCL's communicator did not finalize in time; aborting it");
            self.abort("its teardown failed");
        }
    }
}

/// Where this rank's slot of `shard` elements starts, in bytes, in a
/// buffer of `len` elements holding one slot per rank (NCCL's in-place
/// reduce-scatter and all-gather).
fn slot<T>(group: &ProcessGroup, len: usize, shard: usize) -> u64 {
    assert!(shard * world(group) <= len, "the shards fit the buffer");
    u64::from(group.rank()) * shard as u64 * std::mem::size_of::<T>() as u64
}

fn world(group: &ProcessGroup) -> usize {
    group.world_size() as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::on_world;

    /// Rank 0's id reaches every rank; its failure is every rank's error,
    /// naming rank 0 (with its reason there).
    #[test]
    fn rank_zeros_unique_id_reaches_every_rank_or_its_failure_does() {
        let ids = on_world(3, |g| {
            agree_on_id(g, || {
                assert_eq!(g.rank(), 0, "only rank 0 makes the id");
                Ok(std::array::from_fn(|i| i as u8 ^ 0x5a))
            })
        });
        for id in ids {
            assert_eq!(id.unwrap(), std::array::from_fn(|i| i as u8 ^ 0x5a));
        }
        let errs = on_world(3, |g| {
            let r = agree_on_id(g, || Err(unavailable("NCCL (libnccl.so.2): not found")));
            (g.rank(), r.err())
        });
        for (rank, e) in errs {
            match e {
                Some(Error::DeviceUnavailable { what }) => {
                    assert!(
                        what.starts_with("rank 0 could not make NCCL's unique id"),
                        "{what}"
                    );
                    assert_eq!(what.contains("not found"), rank == 0, "{what}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
