//! The eleven collectives and their non-blocking forms. Each follows the
//! same path: check the arguments (here, once), take the sequence number and
//! choose the algorithm (`GroupInner::begin`), run it
//! (`meshwork_collectives`) over the transport (`CollComm`).

use super::{Call, GroupInner, ProcessGroup, Work};
use crate::error::{Error, Result};
use meshwork_collectives::{
    all_gather, all_reduce, all_to_all, barrier, broadcast, gather, reduce, reduce_scatter, scan,
    scatter, Collective, Element, ReduceOp,
};

/// `got == expected`, or an `InvalidArgument` that says what was expected.
fn check_len(
    coll: Collective,
    what: &str,
    got: usize,
    expected: Option<usize>,
    rule: &str,
) -> Result<()> {
    match expected {
        Some(e) if e == got => Ok(()),
        Some(e) => Err(Error::InvalidArgument(format!(
            "{}: {what} has {got} elements, expected {e} ({rule})",
            coll.name()
        ))),
        None => Err(Error::InvalidArgument(format!(
            "{}: {what} length overflows ({rule})",
            coll.name()
        ))),
    }
}

impl GroupInner {
    fn world_times(&self, n: usize) -> Option<usize> {
        n.checked_mul(self.world as usize)
    }

    /// `n` must be a multiple of the world size; returns `n / world`.
    fn per_rank(&self, coll: Collective, what: &str, n: usize) -> Result<usize> {
        let w = self.world as usize;
        if !n.is_multiple_of(w) {
            return Err(Error::InvalidArgument(format!(
                "{}: {what} has {n} elements, not a multiple of the world size {w}",
                coll.name()
            )));
        }
        Ok(n / w)
    }

    fn is_root(&self, root: u32) -> bool {
        self.rank == root
    }
}

impl ProcessGroup {
    /// Element-wise reduction of every rank's `buf`, left in every `buf`.
    /// Float results are bitwise identical on every rank.
    pub fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let call = self
            .shared()
            .begin::<T>(Collective::AllReduce, buf.len(), Some(op), None)?;
        self.inner()
            .run(&call, |c, a| all_reduce::all_reduce(c, buf, op, a))
    }

    /// Non-blocking [`ProcessGroup::all_reduce`]; the result is the reduced buffer.
    pub fn all_reduce_nb<T: Element>(&self, buf: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        self.all_reduce_nb_in(buf, op)
    }

    /// [`ProcessGroup::all_reduce_nb`] on any buffer the caller hands over
    /// (a `Vec<T>`, a `Box<[T]>`, a fixed array, a handle on memory that
    /// something else owns); the result is the buffer, reduced in place: no
    /// copy is made on the way in or out.
    ///
    /// The operation owns `buf` until it completes and calls
    /// `buf.as_mut()` on the group's thread, where it reads and writes the
    /// slice it gets; `as_mut` must give the same slice every time. If the
    /// operation fails, the buffer is dropped there and may hold part of a
    /// result.
    ///
    /// ```
    /// # use meshwork::{local, ReduceOp};
    /// # let world = local(2)?;
    /// std::thread::scope(|s| {
    ///     for g in &world {
    ///         s.spawn(move || {
    ///             let buf: Box<[f32]> = vec![g.rank() as f32 + 1.0; 4].into_boxed_slice();
    ///             let w = g.all_reduce_nb_in(buf, ReduceOp::Sum);
    ///             assert_eq!(*w.wait().unwrap(), [3.0; 4]);
    ///             let w = g.all_reduce_nb_in([g.rank() as u8; 3], ReduceOp::Max);
    ///             assert_eq!(w.wait().unwrap(), [1; 3]);
    ///         });
    ///     }
    /// });
    /// # Ok::<(), meshwork::Error>(())
    /// ```
    pub fn all_reduce_nb_in<T: Element, B: AsMut<[T]> + Send + 'static>(
        &self,
        mut buf: B,
        op: ReduceOp,
    ) -> Work<B> {
        let len = buf.as_mut().len();
        let call = self
            .shared()
            .begin::<T>(Collective::AllReduce, len, Some(op), None);
        self.submit(call, move |g, call| {
            g.run(call, |c, a| all_reduce::all_reduce(c, buf.as_mut(), op, a))?;
            Ok(buf)
        })
    }

    /// Copy `root`'s `buf` into every rank's `buf`.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: u32) -> Result<()> {
        let call = self
            .shared()
            .begin::<T>(Collective::Broadcast, buf.len(), None, Some(root))?;
        self.inner()
            .run(&call, |c, a| broadcast::broadcast(c, buf, root as usize, a))
    }

    /// Non-blocking [`ProcessGroup::broadcast`]; the result is the root's buffer.
    pub fn broadcast_nb<T: Element>(&self, mut buf: Vec<T>, root: u32) -> Work<Vec<T>> {
        let call = self
            .shared()
            .begin::<T>(Collective::Broadcast, buf.len(), None, Some(root));
        self.submit(call, move |g, call| {
            g.run(call, |c, a| {
                broadcast::broadcast(c, &mut buf, root as usize, a)
            })?;
            Ok(buf)
        })
    }

    /// Every rank's `send`, concatenated in rank order, into every rank's
    /// `recv` (`recv.len() == world × send.len()`).
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let coll = Collective::AllGather;
        check_len(
            coll,
            "recv",
            recv.len(),
            self.inner().world_times(send.len()),
            "world size × send length",
        )?;
        let call = self.shared().begin::<T>(coll, send.len(), None, None)?;
        self.inner()
            .run(&call, |c, a| all_gather::all_gather(c, send, recv, a))
    }

    /// Non-blocking [`ProcessGroup::all_gather`]; the result is `recv`.
    pub fn all_gather_nb<T: Element>(&self, send: Vec<T>) -> Work<Vec<T>> {
        let call = self
            .shared()
            .begin::<T>(Collective::AllGather, send.len(), None, None);
        let world = self.inner().world as usize;
        self.submit(call, move |g, call| {
            let mut recv = zeroed(send.len() * world);
            g.run(call, |c, a| all_gather::all_gather(c, &send, &mut recv, a))?;
            Ok(recv)
        })
    }

    /// Reduce `send` (world × block elements) over all ranks; rank `r`
    /// receives block `r` in `recv`.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let coll = Collective::ReduceScatter;
        check_len(
            coll,
            "send",
            send.len(),
            self.inner().world_times(recv.len()),
            "world size × recv length",
        )?;
        let call = self.shared().begin::<T>(coll, recv.len(), Some(op), None)?;
        self.inner().run(&call, |c, a| {
            reduce_scatter::reduce_scatter(c, send, recv, op, a)
        })
    }

    /// Non-blocking [`ProcessGroup::reduce_scatter`]; `send` must hold a
    /// multiple of the world size; the result is this rank's block.
    pub fn reduce_scatter_nb<T: Element>(&self, send: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        let coll = Collective::ReduceScatter;
        let call = self
            .inner()
            .per_rank(coll, "send", send.len())
            .and_then(|block| self.shared().begin::<T>(coll, block, Some(op), None));
        self.submit(call, move |g, call| {
            let mut recv = zeroed(call.desc.count as usize);
            g.run(call, |c, a| {
                reduce_scatter::reduce_scatter(c, &send, &mut recv, op, a)
            })?;
            Ok(recv)
        })
    }

    /// Element-wise reduction of every rank's `buf` into `root`'s `buf`;
    /// other ranks' `buf` is left unspecified (used as scratch).
    pub fn reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp, root: u32) -> Result<()> {
        let call = self
            .shared()
            .begin::<T>(Collective::Reduce, buf.len(), Some(op), Some(root))?;
        self.inner()
            .run(&call, |c, a| reduce::reduce(c, buf, op, root as usize, a))
    }

    /// Non-blocking [`ProcessGroup::reduce`]; the result is the reduced
    /// buffer at the root and unspecified elsewhere.
    pub fn reduce_nb<T: Element>(&self, mut buf: Vec<T>, op: ReduceOp, root: u32) -> Work<Vec<T>> {
        let call = self
            .shared()
            .begin::<T>(Collective::Reduce, buf.len(), Some(op), Some(root));
        self.submit(call, move |g, call| {
            g.run(call, |c, a| {
                reduce::reduce(c, &mut buf, op, root as usize, a)
            })?;
            Ok(buf)
        })
    }

    /// Block `j` of rank `i`'s `send` becomes block `i` of rank `j`'s
    /// `recv`; `send.len() == recv.len()`, a multiple of the world size.
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let coll = Collective::AllToAll;
        check_len(
            coll,
            "recv",
            recv.len(),
            Some(send.len()),
            "equal to send length",
        )?;
        let block = self.inner().per_rank(coll, "send", send.len())?;
        let call = self.shared().begin::<T>(coll, block, None, None)?;
        self.inner()
            .run(&call, |c, a| all_to_all::all_to_all(c, send, recv, a))
    }

    /// Non-blocking [`ProcessGroup::all_to_all`]; the result is `recv`.
    pub fn all_to_all_nb<T: Element>(&self, send: Vec<T>) -> Work<Vec<T>> {
        let coll = Collective::AllToAll;
        let call = self
            .inner()
            .per_rank(coll, "send", send.len())
            .and_then(|block| self.shared().begin::<T>(coll, block, None, None));
        self.submit(call, move |g, call| {
            let mut recv = zeroed(send.len());
            g.run(call, |c, a| all_to_all::all_to_all(c, &send, &mut recv, a))?;
            Ok(recv)
        })
    }

    /// Every rank's `send`, concatenated in rank order, into `root`'s `recv`
    /// (`world × send.len()`; checked at the root only, may be empty
    /// elsewhere).
    pub fn gather<T: Element>(&self, send: &[T], recv: &mut [T], root: u32) -> Result<()> {
        let coll = Collective::Gather;
        if self.inner().is_root(root) {
            check_len(
                coll,
                "recv",
                recv.len(),
                self.inner().world_times(send.len()),
                "world size × send length, at the root",
            )?;
        }
        let call = self
            .shared()
            .begin::<T>(coll, send.len(), None, Some(root))?;
        self.inner().run(&call, |c, a| {
            gather::gather(c, send, recv, root as usize, a)
        })
    }

    /// Non-blocking [`ProcessGroup::gather`]; the result is `recv` at the
    /// root and empty elsewhere.
    pub fn gather_nb<T: Element>(&self, send: Vec<T>, root: u32) -> Work<Vec<T>> {
        let call = self
            .shared()
            .begin::<T>(Collective::Gather, send.len(), None, Some(root));
        let n = if self.inner().is_root(root) {
            send.len() * self.inner().world as usize
        } else {
            0
        };
        self.submit(call, move |g, call| {
            let mut recv = zeroed(n);
            g.run(call, |c, a| {
                gather::gather(c, &send, &mut recv, root as usize, a)
            })?;
            Ok(recv)
        })
    }

    /// Block `r` of `root`'s `send` (`world × recv.len()`; checked at the
    /// root only, may be empty elsewhere) into rank `r`'s `recv`.
    pub fn scatter<T: Element>(&self, send: &[T], recv: &mut [T], root: u32) -> Result<()> {
        let coll = Collective::Scatter;
        if self.inner().is_root(root) {
            check_len(
                coll,
                "send",
                send.len(),
                self.inner().world_times(recv.len()),
                "world size × recv length, at the root",
            )?;
        }
        let call = self
            .shared()
            .begin::<T>(coll, recv.len(), None, Some(root))?;
        self.inner().run(&call, |c, a| {
            scatter::scatter(c, send, recv, root as usize, a)
        })
    }

    /// Non-blocking [`ProcessGroup::scatter`] of `count` elements per rank;
    /// `send` is read at the root only. The result is this rank's block.
    pub fn scatter_nb<T: Element>(&self, send: Vec<T>, count: usize, root: u32) -> Work<Vec<T>> {
        let coll = Collective::Scatter;
        let checked = if self.inner().is_root(root) {
            check_len(
                coll,
                "send",
                send.len(),
                self.inner().world_times(count),
                "world size × count, at the root",
            )
        } else {
            Ok(())
        };
        let call = checked.and_then(|()| self.shared().begin::<T>(coll, count, None, Some(root)));
        self.submit(call, move |g, call| {
            let mut recv = zeroed(count);
            g.run(call, |c, a| {
                scatter::scatter(c, &send, &mut recv, root as usize, a)
            })?;
            Ok(recv)
        })
    }

    /// Inclusive prefix reduction: rank `r` gets ranks `0..=r` reduced.
    pub fn scan<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let call = self
            .shared()
            .begin::<T>(Collective::Scan, buf.len(), Some(op), None)?;
        self.inner()
            .run(&call, |c, a| scan::scan(c, buf, op, false, a))
    }

    /// Non-blocking [`ProcessGroup::scan`].
    pub fn scan_nb<T: Element>(&self, mut buf: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        let call = self
            .shared()
            .begin::<T>(Collective::Scan, buf.len(), Some(op), None);
        self.submit(call, move |g, call| {
            g.run(call, |c, a| scan::scan(c, &mut buf, op, false, a))?;
            Ok(buf)
        })
    }

    /// Exclusive prefix reduction: rank `r` gets ranks `0..r` reduced; rank
    /// 0 gets the operator's identity (0 for Sum and Avg, 1 for Prod, +∞/−∞
    /// for float Min/Max, `MAX`/`MIN` for integer Min/Max).
    pub fn exclusive_scan<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let call =
            self.shared()
                .begin::<T>(Collective::ExclusiveScan, buf.len(), Some(op), None)?;
        self.inner()
            .run(&call, |c, a| scan::scan(c, buf, op, true, a))
    }

    /// Non-blocking [`ProcessGroup::exclusive_scan`].
    pub fn exclusive_scan_nb<T: Element>(&self, mut buf: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        let call = self
            .shared()
            .begin::<T>(Collective::ExclusiveScan, buf.len(), Some(op), None);
        self.submit(call, move |g, call| {
            g.run(call, |c, a| scan::scan(c, &mut buf, op, true, a))?;
            Ok(buf)
        })
    }

    /// Return once every rank has entered the barrier.
    pub fn barrier(&self) -> Result<()> {
        let call = self
            .shared()
            .begin::<u8>(Collective::Barrier, 0, None, None)?;
        self.inner().run(&call, |c, a| barrier::barrier(c, a))
    }

    /// Non-blocking [`ProcessGroup::barrier`].
    pub fn barrier_nb(&self) -> Work<()> {
        let call = self
            .shared()
            .begin::<u8>(Collective::Barrier, 0, None, None);
        self.submit(call, move |g, call: &Call| {
            g.run(call, |c, a| barrier::barrier(c, a))
        })
    }
}

fn zeroed<T: Element>(n: usize) -> Vec<T> {
    vec![T::zeroed(); n]
}
