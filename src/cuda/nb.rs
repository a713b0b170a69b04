//! The non-blocking forms of [`DeviceGroup`]'s collectives: each takes
//! its place in the group's order when it is called (the input is copied
//! out then, whole), runs on the group's thread on that host copy, and
//! [`DeviceWork::wait`] copies the result into the device buffer it was
//! given and hands that buffer back. Nothing is chunked: a chunk's
//! collective would only take its place when the one before it ended,
//! after calls made in between.

use super::staging::{self, Sink, Source};
use super::{copy_in, download, failed, named, upload, ways, DeviceGroup, DeviceWork, OnDevice};
use crate::{Call, Element, OwnedBuffers, ReduceOp, Result};
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
use std::sync::Arc;

/// A device buffer a non-blocking call owns until it is waited for.
struct Owned<T> {
    buf: CudaSlice<T>,
    stream: Arc<CudaStream>,
    op: &'static str,
}

impl<T> Owned<T> {
    fn into_inner(self) -> CudaSlice<T> {
        self.buf
    }
}

impl<T: DeviceRepr> Source<T> for Owned<T> {
    fn len(&self) -> usize {
        self.buf.len()
    }
    fn download(&mut self, at: usize, into: &mut [T]) -> Result<()> {
        download(&self.buf, &self.stream, self.op, at, into)
    }
}

impl<T: DeviceRepr> Sink<T> for Owned<T> {
    fn upload(&mut self, at: usize, from: &[T]) -> Result<()> {
        upload(&mut self.buf, &self.stream, self.op, at, from)
    }
}

impl DeviceGroup {
    fn owned<T>(&self, buf: CudaSlice<T>, op: &'static str) -> Owned<T> {
        Owned {
            buf,
            stream: Arc::clone(&self.stream),
            op,
        }
    }

    /// [`call`](Self::call) without blocking, through the group's own
    /// non-blocking entry ([`crate::ProcessGroup::call_nb`]): `buf` is the
    /// buffer in place or, with `send`, the receive buffer; `wait` hands
    /// it back. `send` is read now. Staged whole, whatever the group's
    /// engine (see the module docs).
    pub fn call_nb<T: Element + DeviceRepr>(
        &self,
        call: Call,
        send: Option<&CudaSlice<T>>,
        buf: CudaSlice<T>,
    ) -> DeviceWork<CudaSlice<T>> {
        let (op, ways) = (call.name(), ways(call, self.group.rank()));
        match send {
            Some(send) if !call.is_in_place() => {
                let mut from = OnDevice {
                    buf: send,
                    stream: &self.stream,
                    op,
                };
                // The host result is as long as `buf` where it is copied
                // back (the entry checks that length), empty elsewhere.
                let n = if ways.up { buf.len() } else { 0 };
                let to = self.owned(buf, op);
                let issue = |send| {
                    let recv = vec![bytemuck::Zeroable::zeroed(); n];
                    self.group
                        .call_nb(call, OwnedBuffers::SendRecv { send, recv })
                };
                staging::by_rank_nb(op, &mut from, to, ways, issue, Owned::into_inner)
            }
            send => {
                // A barrier waits for the work queued on the stream first,
                // as the blocking one does.
                if call == Call::Barrier {
                    if let Err(e) = self.stream.synchronize() {
                        return DeviceWork::ended(Err(failed("barrier", &e)));
                    }
                }
                let mut buf = buf;
                if let Some(send) = send {
                    if let Err(e) = copy_in(&self.stream, call, send, &mut buf) {
                        return DeviceWork::ended(Err(e));
                    }
                }
                let mem = self.owned(buf, op);
                let issue = |h| self.group.call_nb(call, OwnedBuffers::InPlace(h));
                staging::elementwise_nb(op, mem, ways, issue, Owned::into_inner)
            }
        }
    }

    named! {
        /// [`all_reduce`](Self::all_reduce) without blocking: `wait`
        /// returns `buf`, reduced.
        nb fn all_reduce_nb(buf; op: ReduceOp) => Call::AllReduce { op };
        /// [`broadcast`](Self::broadcast) without blocking.
        nb fn broadcast_nb(buf; root: u32) => Call::Broadcast { root };
        /// [`reduce`](Self::reduce) without blocking: the result in
        /// `root`'s buffer; the others' are handed back as they were.
        nb fn reduce_nb(buf; op: ReduceOp, root: u32) => Call::Reduce { op, root };
        /// [`scan`](Self::scan) without blocking.
        nb fn scan_nb(buf; op: ReduceOp) => Call::Scan { op };
        /// [`exclusive_scan`](Self::exclusive_scan) without blocking.
        nb fn exclusive_scan_nb(buf; op: ReduceOp) => Call::ExclusiveScan { op };
        /// [`all_gather`](Self::all_gather) without blocking: `send` is
        /// read now; `wait` returns `recv`, filled.
        nb fn all_gather_nb(send, recv;) => Call::AllGather;
        /// [`reduce_scatter`](Self::reduce_scatter) without blocking.
        nb fn reduce_scatter_nb(send, recv; op: ReduceOp) => Call::ReduceScatter { op };
        /// [`all_to_all`](Self::all_to_all) without blocking.
        nb fn all_to_all_nb(send, recv;) => Call::AllToAll;
        /// [`gather`](Self::gather) without blocking (`recv` is written at
        /// `root` only, and handed back everywhere).
        nb fn gather_nb(send, recv; root: u32) => Call::Gather { root };
        /// [`scatter`](Self::scatter) without blocking (`send` is read at
        /// `root` only, now).
        nb fn scatter_nb(send, recv; root: u32) => Call::Scatter { root };
    }

    /// [`barrier`](Self::barrier) without blocking: the work queued on
    /// the stream so far is waited for now, the barrier on the group's
    /// thread.
    pub fn barrier_nb(&self) -> DeviceWork<()> {
        match self.stream.synchronize() {
            Ok(()) => DeviceWork::new(self.group.barrier_nb(), Ok),
            Err(e) => DeviceWork::ended(Err(failed("barrier", &e))),
        }
    }
}
