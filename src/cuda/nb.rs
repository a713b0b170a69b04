//! The non-blocking forms of [`DeviceGroup`]'s collectives: each takes
//! its place in the group's order when it is called (the input is copied
//! out then, whole), runs on the group's thread on that host copy, and
//! [`DeviceWork::wait`] copies the result into the device buffer it was
//! given and hands that buffer back. Nothing is chunked: a chunk's
//! collective would only take its place when the one before it ended,
//! after calls made in between.

use super::{download, failed, upload, DeviceGroup, DeviceWork, OnDevice};
use crate::staging::{self, Sink, Source, Ways};
use crate::{Element, ReduceOp, Result};
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

    /// An elementwise call on `buf`, which `wait` hands back.
    fn elementwise_nb<T: Element + DeviceRepr>(
        &self,
        op: &'static str,
        buf: CudaSlice<T>,
        ways: Ways,
        issue: impl FnOnce(Vec<T>) -> crate::Work<Vec<T>>,
    ) -> DeviceWork<CudaSlice<T>> {
        let mem = self.owned(buf, op);
        staging::elementwise_nb(op, mem, ways, issue, Owned::into_inner)
    }

    /// [`all_reduce`](Self::all_reduce) without blocking: `wait` returns
    /// `buf`, reduced.
    pub fn all_reduce_nb<T: Element + DeviceRepr>(
        &self,
        buf: CudaSlice<T>,
        op: ReduceOp,
    ) -> DeviceWork<CudaSlice<T>> {
        self.elementwise_nb("all_reduce", buf, Ways::BOTH, |h| {
            self.group.all_reduce_nb(h, op)
        })
    }

    /// [`broadcast`](Self::broadcast) without blocking.
    pub fn broadcast_nb<T: Element + DeviceRepr>(
        &self,
        buf: CudaSlice<T>,
        root: u32,
    ) -> DeviceWork<CudaSlice<T>> {
        let is_root = self.group.rank() == root;
        let ways = Ways {
            down: is_root,
            up: !is_root,
        };
        self.elementwise_nb("broadcast", buf, ways, |h| self.group.broadcast_nb(h, root))
    }

    /// [`reduce`](Self::reduce) without blocking: the result in `root`'s
    /// buffer; the others' are handed back as they were.
    pub fn reduce_nb<T: Element + DeviceRepr>(
        &self,
        buf: CudaSlice<T>,
        op: ReduceOp,
        root: u32,
    ) -> DeviceWork<CudaSlice<T>> {
        let ways = Ways {
            down: true,
            up: self.group.rank() == root,
        };
        self.elementwise_nb("reduce", buf, ways, |h| self.group.reduce_nb(h, op, root))
    }

    /// [`scan`](Self::scan) without blocking.
    pub fn scan_nb<T: Element + DeviceRepr>(
        &self,
        buf: CudaSlice<T>,
        op: ReduceOp,
    ) -> DeviceWork<CudaSlice<T>> {
        self.elementwise_nb("scan", buf, Ways::BOTH, |h| self.group.scan_nb(h, op))
    }

    /// [`exclusive_scan`](Self::exclusive_scan) without blocking.
    pub fn exclusive_scan_nb<T: Element + DeviceRepr>(
        &self,
        buf: CudaSlice<T>,
        op: ReduceOp,
    ) -> DeviceWork<CudaSlice<T>> {
        self.elementwise_nb("exclusive_scan", buf, Ways::BOTH, |h| {
            self.group.exclusive_scan_nb(h, op)
        })
    }

    /// [`all_gather`](Self::all_gather) without blocking: `send` is read
    /// now; `wait` returns `recv`, filled.
    pub fn all_gather_nb<T: Element + DeviceRepr>(
        &self,
        send: &CudaSlice<T>,
        recv: CudaSlice<T>,
    ) -> DeviceWork<CudaSlice<T>> {
        let want = send.len().checked_mul(self.world());
        self.by_rank("all_gather", send, recv, want, Ways::BOTH, |h| {
            self.group.all_gather_nb(h)
        })
    }

    /// [`reduce_scatter`](Self::reduce_scatter) without blocking.
    pub fn reduce_scatter_nb<T: Element + DeviceRepr>(
        &self,
        send: &CudaSlice<T>,
        recv: CudaSlice<T>,
        op: ReduceOp,
    ) -> DeviceWork<CudaSlice<T>> {
        // A `send` the world does not divide is the host call's error.
        let world = self.world();
        let want = if send.len().is_multiple_of(world) {
            Some(send.len() / world)
        } else {
            Some(recv.len())
        };
        self.by_rank("reduce_scatter", send, recv, want, Ways::BOTH, |h| {
            self.group.reduce_scatter_nb(h, op)
        })
    }

    /// [`all_to_all`](Self::all_to_all) without blocking.
    pub fn all_to_all_nb<T: Element + DeviceRepr>(
        &self,
        send: &CudaSlice<T>,
        recv: CudaSlice<T>,
    ) -> DeviceWork<CudaSlice<T>> {
        let want = Some(send.len());
        self.by_rank("all_to_all", send, recv, want, Ways::BOTH, |h| {
            self.group.all_to_all_nb(h)
        })
    }

    /// [`gather`](Self::gather) without blocking (`recv` is written at
    /// `root` only, and handed back everywhere).
    pub fn gather_nb<T: Element + DeviceRepr>(
        &self,
        send: &CudaSlice<T>,
        recv: CudaSlice<T>,
        root: u32,
    ) -> DeviceWork<CudaSlice<T>> {
        let ways = Ways {
            down: true,
            up: self.group.rank() == root,
        };
        let want = send.len().checked_mul(self.world());
        self.by_rank("gather", send, recv, want, ways, |h| {
            self.group.gather_nb(h, root)
        })
    }

    /// [`scatter`](Self::scatter) without blocking (`send` is read at
    /// `root` only, now).
    pub fn scatter_nb<T: Element + DeviceRepr>(
        &self,
        send: &CudaSlice<T>,
        recv: CudaSlice<T>,
        root: u32,
    ) -> DeviceWork<CudaSlice<T>> {
        let ways = Ways {
            down: self.group.rank() == root,
            up: true,
        };
        let count = recv.len();
        self.by_rank("scatter", send, recv, Some(count), ways, |h| {
            self.group.scatter_nb(h, count, root)
        })
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

    fn world(&self) -> usize {
        self.group.world_size() as usize
    }

    fn by_rank<T: Element + DeviceRepr>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: CudaSlice<T>,
        want: Option<usize>,
        ways: Ways,
        issue: impl FnOnce(Vec<T>) -> crate::Work<Vec<T>>,
    ) -> DeviceWork<CudaSlice<T>> {
        let mut from = OnDevice {
            buf: send,
            stream: &self.stream,
            op,
        };
        let to = self.owned(recv, op);
        staging::by_rank_nb(op, &mut from, to, want, ways, issue, Owned::into_inner)
    }
}
