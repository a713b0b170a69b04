//! The eleven collectives: one description of a call ([`Call`], which
//! collective with its arguments; [`Buffers`] and [`OwnedBuffers`], the
//! memory it works on), one entry that checks and runs it
//! ([`ProcessGroup::call`]; [`ProcessGroup::call_nb`] without blocking;
//! [`ProcessGroup::call_bytes`] over raw bytes of a [`DType`], for the C
//! and Python front ends), and the named methods of the API contract, each
//! a line over that entry. Every front end (the C ABI, Python and its
//! torch backend, `DeviceGroup`) goes through the entry, so an argument
//! that every collective gains is added here once.
//!
//! A call's path: its arguments checked against its buffers
//! (`GroupInner::count_of`), its sequence number taken and its algorithm
//! chosen (`GroupInner::begin`), the algorithm run (`meshwork_collectives`)
//! over the transport (`CollComm`).

use super::{Begun, GroupInner, ProcessGroup, Work};
use crate::error::{Error, Result};
use meshwork_collectives::{
    all_gather, all_reduce, all_to_all, barrier, broadcast, gather, reduce, reduce_scatter, scan,
    scatter, with_dtype, Collective, DType, Element, ReduceOp,
};

/// One collective call: which of the eleven, with its arguments. The
/// counts come from the buffers it is given ([`Buffers`]).
///
/// ```
/// # use meshwork::{local, Buffers, Call, ReduceOp};
/// # let world = local(2)?;
/// std::thread::scope(|s| {
///     for g in &world {
///         s.spawn(move || {
///             let mut x = [g.rank() as f32 + 1.0; 4];
///             let sum = Call::AllReduce { op: ReduceOp::Sum };
///             g.call(sum, Buffers::InPlace(&mut x[..])).unwrap();
///             assert_eq!(x, [3.0; 4]);
///             let (send, mut all) = ([g.rank() as u8], [0u8; 2]);
///             let bufs = Buffers::SendRecv { send: &send[..], recv: &mut all[..] };
///             g.call(Call::AllGather, bufs).unwrap();
///             assert_eq!(all, [0, 1]);
///         });
///     }
/// });
/// # Ok::<(), meshwork::Error>(())
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    /// Every rank's buffer reduced element-wise, the result in every
    /// rank's. Float results are bitwise identical on every rank.
    AllReduce {
        /// The reduction.
        op: ReduceOp,
    },
    /// `root`'s buffer copied into every rank's.
    Broadcast {
        /// The rank whose buffer is copied.
        root: u32,
    },
    /// Every rank's `send`, concatenated in rank order, into every rank's
    /// `recv` (world × send length).
    AllGather,
    /// `send` (world × recv length) reduced over all ranks; rank `r`
    /// receives block `r` in `recv`.
    ReduceScatter {
        /// The reduction.
        op: ReduceOp,
    },
    /// Every rank's buffer reduced into `root`'s; the others' are left
    /// unspecified (used as scratch).
    Reduce {
        /// The reduction.
        op: ReduceOp,
        /// The rank that receives the result.
        root: u32,
    },
    /// Block `j` of rank `i`'s `send` into block `i` of rank `j`'s `recv`
    /// (equal lengths, a multiple of the world size).
    AllToAll,
    /// Every rank's `send`, concatenated in rank order, into `root`'s
    /// `recv` (world × send length; checked at the root only, may be
    /// empty elsewhere).
    Gather {
        /// The rank that receives.
        root: u32,
    },
    /// Block `r` of `root`'s `send` (world × recv length; checked at the
    /// root only, may be empty elsewhere) into rank `r`'s `recv`.
    Scatter {
        /// The rank that sends.
        root: u32,
    },
    /// Inclusive prefix reduction: rank `r` gets ranks `0..=r` reduced.
    Scan {
        /// The reduction.
        op: ReduceOp,
    },
    /// Exclusive prefix reduction: rank `r` gets ranks `0..r` reduced;
    /// rank 0 gets the operator's identity (0 for Sum and Avg, 1 for
    /// Prod, +∞/−∞ for float Min/Max, `MAX`/`MIN` for integer Min/Max).
    ExclusiveScan {
        /// The reduction.
        op: ReduceOp,
    },
    /// Return once every rank has entered it; its buffer is empty.
    Barrier,
}

impl Call {
    /// Its name, as errors and the flight record give it (`"all_reduce"`).
    pub fn name(self) -> &'static str {
        self.collective().name()
    }

    /// Its reduction, for the calls that reduce.
    pub fn op(self) -> Option<ReduceOp> {
        match self {
            Call::AllReduce { op }
            | Call::ReduceScatter { op }
            | Call::Reduce { op, .. }
            | Call::Scan { op }
            | Call::ExclusiveScan { op } => Some(op),
            _ => None,
        }
    }

    /// Its root, for the calls that have one.
    pub fn root(self) -> Option<u32> {
        match self {
            Call::Broadcast { root }
            | Call::Reduce { root, .. }
            | Call::Gather { root }
            | Call::Scatter { root } => Some(root),
            _ => None,
        }
    }

    /// Whether it works on one buffer in place ([`Buffers::InPlace`]):
    /// all_reduce, broadcast, reduce, scan, exclusive_scan and barrier.
    /// The others read a send buffer and write a receive buffer.
    pub fn is_in_place(self) -> bool {
        matches!(
            self,
            Call::AllReduce { .. }
                | Call::Broadcast { .. }
                | Call::Reduce { .. }
                | Call::Scan { .. }
                | Call::ExclusiveScan { .. }
                | Call::Barrier
        )
    }

    pub(crate) fn collective(self) -> Collective {
        match self {
            Call::AllReduce { .. } => Collective::AllReduce,
            Call::Broadcast { .. } => Collective::Broadcast,
            Call::AllGather => Collective::AllGather,
            Call::ReduceScatter { .. } => Collective::ReduceScatter,
            Call::Reduce { .. } => Collective::Reduce,
            Call::AllToAll => Collective::AllToAll,
            Call::Gather { .. } => Collective::Gather,
            Call::Scatter { .. } => Collective::Scatter,
            Call::Scan { .. } => Collective::Scan,
            Call::ExclusiveScan { .. } => Collective::ExclusiveScan,
            Call::Barrier => Collective::Barrier,
        }
    }
}

/// The memory a [`Call`] works on: host slices (`Buffers<'_, [T]>`) for
/// [`ProcessGroup::call`], device buffers for `DeviceGroup::call`.
#[non_exhaustive]
#[derive(Debug)]
pub enum Buffers<'a, M: ?Sized> {
    /// One buffer, read and overwritten with the result: the form of the
    /// in-place calls ([`Call::is_in_place`]; empty for a barrier).
    InPlace(&'a mut M),
    /// `send` read, `recv` written: the form of the others. An in-place
    /// call takes it too: `send` is copied into `recv` (of the same
    /// length), which it then works on in place.
    SendRecv {
        /// What this rank contributes.
        send: &'a M,
        /// Where its result goes.
        recv: &'a mut M,
    },
}

/// The buffers of a non-blocking call ([`ProcessGroup::call_nb`]), owned
/// by the operation until it completes; its result is the buffer that
/// holds what it wrote (the in-place buffer, or `recv`).
#[non_exhaustive]
#[derive(Debug)]
pub enum OwnedBuffers<B> {
    /// As [`Buffers::InPlace`].
    InPlace(B),
    /// As [`Buffers::SendRecv`].
    SendRecv {
        /// What this rank contributes.
        send: B,
        /// Where its result goes, handed back by the operation.
        recv: B,
    },
}

/// The lengths of a call's buffers, in elements.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lens {
    One(usize),
    Two { send: usize, recv: usize },
}

impl<M: ?Sized> Buffers<'_, M> {
    /// Their lengths, each measured by `len`.
    pub(crate) fn lens(&self, len: impl Fn(&M) -> usize) -> Lens {
        match self {
            Buffers::InPlace(b) => Lens::One(len(b)),
            Buffers::SendRecv { send, recv } => Lens::Two {
                send: len(send),
                recv: len(recv),
            },
        }
    }
}

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

    /// Check `call` against the lengths of its buffers (this rank's
    /// share of the rules: the ranks' agreement on lengths is the
    /// algorithms'); the count its descriptor carries.
    fn count_of(&self, call: Call, lens: Lens) -> Result<usize> {
        let coll = call.collective();
        let lens = match lens {
            Lens::Two { send, recv } if call.is_in_place() => {
                check_len(coll, "recv", recv, Some(send), "equal to send length")?;
                Lens::One(recv)
            }
            lens => lens,
        };
        let here = |root| self.rank == root;
        match (call, lens) {
            (Call::Barrier, Lens::One(0)) => Ok(0),
            (Call::Barrier, _) => Err(Error::InvalidArgument(
                "barrier: takes no buffer; give an empty one".into(),
            )),
            (_, Lens::One(n)) if call.is_in_place() => Ok(n),
            (_, Lens::One(_)) => Err(Error::InvalidArgument(format!(
                "{}: needs a send and a receive buffer (Buffers::SendRecv), not one in place",
                coll.name()
            ))),
            (Call::AllGather, Lens::Two { send, recv }) => {
                let want = self.world_times(send);
                check_len(coll, "recv", recv, want, "world size × send length")?;
                Ok(send)
            }
            (Call::ReduceScatter { .. }, Lens::Two { send, recv }) => {
                let want = self.world_times(recv);
                check_len(coll, "send", send, want, "world size × recv length")?;
                Ok(recv)
            }
            (Call::AllToAll, Lens::Two { send, recv }) => {
                check_len(coll, "recv", recv, Some(send), "equal to send length")?;
                self.per_rank(coll, "send", send)
            }
            (Call::Gather { root }, Lens::Two { send, recv }) => {
                if here(root) {
                    let want = self.world_times(send);
                    let rule = "world size × send length, at the root";
                    check_len(coll, "recv", recv, want, rule)?;
                }
                Ok(send)
            }
            (Call::Scatter { root }, Lens::Two { send, recv }) => {
                if here(root) {
                    let want = self.world_times(recv);
                    let rule = "world size × recv length, at the root";
                    check_len(coll, "send", send, want, rule)?;
                }
                Ok(recv)
            }
            (_, Lens::Two { .. }) => Err(Error::InvalidArgument(format!(
                "{}: takes one buffer in place",
                coll.name()
            ))),
        }
    }
}

/// Run a begun call on its buffers (checked by `count_of`), on the
/// communicator it was begun on.
fn execute<T: Element>(begun: &Begun, call: Call, bufs: Buffers<'_, [T]>) -> Result<()> {
    let bufs = match bufs {
        Buffers::SendRecv { send, recv } if call.is_in_place() => {
            recv.copy_from_slice(send);
            Buffers::InPlace(recv)
        }
        bufs => bufs,
    };
    begun.inner.run(begun, |c, a| match (call, bufs) {
        (Call::AllReduce { op }, Buffers::InPlace(buf)) => all_reduce::all_reduce(c, buf, op, a),
        (Call::Broadcast { root }, Buffers::InPlace(buf)) => {
            broadcast::broadcast(c, buf, root as usize, a)
        }
        (Call::Reduce { op, root }, Buffers::InPlace(buf)) => {
            reduce::reduce(c, buf, op, root as usize, a)
        }
        (Call::Scan { op }, Buffers::InPlace(buf)) => scan::scan(c, buf, op, false, a),
        (Call::ExclusiveScan { op }, Buffers::InPlace(buf)) => scan::scan(c, buf, op, true, a),
        (Call::Barrier, _) => barrier::barrier(c, a),
        (Call::AllGather, Buffers::SendRecv { send, recv }) => {
            all_gather::all_gather(c, send, recv, a)
        }
        (Call::ReduceScatter { op }, Buffers::SendRecv { send, recv }) => {
            reduce_scatter::reduce_scatter(c, send, recv, op, a)
        }
        (Call::AllToAll, Buffers::SendRecv { send, recv }) => {
            all_to_all::all_to_all(c, send, recv, a)
        }
        (Call::Gather { root }, Buffers::SendRecv { send, recv }) => {
            gather::gather(c, send, recv, root as usize, a)
        }
        (Call::Scatter { root }, Buffers::SendRecv { send, recv }) => {
            scatter::scatter(c, send, recv, root as usize, a)
        }
        // `count_of` refused every other pairing before the call began.
        (call, _) => Err(Error::InvalidArgument(format!(
            "{}: buffers of the wrong form",
            call.name()
        ))),
    })
}

/// The buffers a non-blocking call checked are the ones it runs on: an
/// `as_mut` that gives another length the second time breaks its
/// contract, an `InvalidArgument` rather than a panic on the group's
/// thread.
fn same_lens<T>(call: Call, checked: Lens, bufs: &Buffers<'_, [T]>) -> Result<()> {
    if checked == bufs.lens(<[T]>::len) {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "{}: a buffer's as_mut() gave another length on the group's thread than when the call was made",
        call.name()
    )))
}

/// `bytes` as elements of `T`, or an `InvalidArgument` naming `what`.
fn as_elements<'a, T: Element>(call: Call, what: &str, bytes: &'a [u8]) -> Result<&'a [T]> {
    if bytes.is_empty() {
        return Ok(&[]);
    }
    bytemuck::try_cast_slice(bytes).map_err(|e| cast_error::<T>(call, what, bytes.len(), e))
}

/// [`as_elements`], writable.
fn as_elements_mut<'a, T: Element>(
    call: Call,
    what: &str,
    bytes: &'a mut [u8],
) -> Result<&'a mut [T]> {
    if bytes.is_empty() {
        return Ok(&mut []);
    }
    let len = bytes.len();
    bytemuck::try_cast_slice_mut(bytes).map_err(|e| cast_error::<T>(call, what, len, e))
}

fn cast_error<T: Element>(call: Call, what: &str, len: usize, e: bytemuck::PodCastError) -> Error {
    let (size, name) = (T::DTYPE.size(), T::DTYPE.name());
    Error::InvalidArgument(match e {
        bytemuck::PodCastError::TargetAlignmentGreaterAndInputNotAligned => format!(
            "{}: {what} is not aligned to {} bytes ({name})",
            call.name(),
            std::mem::align_of::<T>()
        ),
        _ => format!(
            "{}: {what} holds {len} bytes, not a whole number of {name} elements ({size} bytes each)",
            call.name()
        ),
    })
}

impl ProcessGroup {
    /// Run `call` on `bufs`: the one entry every collective goes
    /// through (the named methods, the C ABI, Python, `DeviceGroup`).
    /// Arguments are checked here, before any message moves: lengths
    /// that do not fit the call (each rule is in [`Call`]'s variants), a
    /// root out of range, `Avg` on integers, a form the call does not
    /// take are `InvalidArgument`, and the group goes on.
    pub fn call<T: Element>(&self, call: Call, bufs: Buffers<'_, [T]>) -> Result<()> {
        let inner = self.shared();
        let count = inner.count_of(call, bufs.lens(<[T]>::len))?;
        let begun = inner.begin::<T>(call, count)?;
        execute(&begun, call, bufs)
    }

    /// [`ProcessGroup::call`] on raw bytes holding elements of `dtype`
    /// (the C and Python front ends): lengths are in bytes, each a whole
    /// number of elements, and each buffer aligned for `dtype`.
    pub fn call_bytes(&self, call: Call, dtype: DType, bufs: Buffers<'_, [u8]>) -> Result<()> {
        with_dtype!(dtype, T => {
            let typed: Buffers<'_, [T]> = match bufs {
                Buffers::InPlace(buf) => Buffers::InPlace(as_elements_mut(call, "buf", buf)?),
                Buffers::SendRecv { send, recv } => Buffers::SendRecv {
                    send: as_elements(call, "send", send)?,
                    recv: as_elements_mut(call, "recv", recv)?,
                },
            };
            self.call(call, typed)
        })
    }

    /// [`ProcessGroup::call`] without blocking, on buffers the caller hands
    /// over (a `Vec<T>`, a `Box<[T]>`, a fixed array, a handle on memory
    /// that something else owns): the call takes its place in the group's
    /// order now and runs on the group's thread; the result is the buffer
    /// it wrote, with no copy on the way in or out.
    ///
    /// The operation owns the buffers until it completes and calls
    /// `as_mut()` on them on the group's thread, where it reads and writes
    /// the slices it gets; `as_mut` must give the same slice every time.
    /// If the operation fails, the buffers are dropped there and may hold
    /// part of a result.
    pub fn call_nb<T, B>(&self, call: Call, bufs: OwnedBuffers<B>) -> Work<B>
    where
        T: Element,
        B: AsMut<[T]> + Send + 'static,
    {
        let mut bufs = bufs;
        let lens = match &mut bufs {
            OwnedBuffers::InPlace(b) => Lens::One(b.as_mut().len()),
            OwnedBuffers::SendRecv { send, recv } => Lens::Two {
                send: send.as_mut().len(),
                recv: recv.as_mut().len(),
            },
        };
        let inner = self.shared();
        let begun = inner
            .count_of(call, lens)
            .and_then(|count| inner.begin::<T>(call, count));
        self.submit(begun, move |_, begun| match bufs {
            OwnedBuffers::InPlace(mut buf) => {
                let bufs = Buffers::InPlace(buf.as_mut());
                same_lens(call, lens, &bufs)?;
                execute(begun, call, bufs)?;
                Ok(buf)
            }
            OwnedBuffers::SendRecv { mut send, mut recv } => {
                let bufs = Buffers::SendRecv {
                    send: send.as_mut(),
                    recv: recv.as_mut(),
                };
                same_lens(call, lens, &bufs)?;
                execute(begun, call, bufs)?;
                Ok(recv)
            }
        })
    }

    /// [`ProcessGroup::call_nb`] from `send` into a receive buffer of
    /// `recv_len` elements that the operation makes once the call is
    /// checked (so a wrong length allocates nothing) and hands back.
    fn call_nb_into<T: Element>(&self, call: Call, send: Vec<T>, recv_len: usize) -> Work<Vec<T>> {
        let inner = self.shared();
        let lens = Lens::Two {
            send: send.len(),
            recv: recv_len,
        };
        let begun = inner
            .count_of(call, lens)
            .and_then(|count| inner.begin::<T>(call, count));
        self.submit(begun, move |_, begun| {
            let mut recv = vec![T::zeroed(); recv_len];
            let bufs = Buffers::SendRecv {
                send: &send[..],
                recv: &mut recv[..],
            };
            execute(begun, call, bufs)?;
            Ok(recv)
        })
    }

    #[cfg(feature = "cuda")]
    /// Check `call` against its buffers' lengths as [`ProcessGroup::call`]
    /// does, for an engine that carries the call itself (NCCL); the
    /// count its descriptor takes (elements per rank's block).
    pub(crate) fn checked_count(&self, call: Call, lens: Lens) -> Result<usize> {
        self.inner().count_of(call, lens)
    }

    fn world(&self) -> usize {
        self.inner().world as usize
    }

    /// Element-wise reduction of every rank's `buf`, left in every `buf`.
    /// Float results are bitwise identical on every rank.
    pub fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        self.call(Call::AllReduce { op }, Buffers::InPlace(buf))
    }

    /// Non-blocking [`ProcessGroup::all_reduce`]; the result is the reduced buffer.
    pub fn all_reduce_nb<T: Element>(&self, buf: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        self.call_nb(Call::AllReduce { op }, OwnedBuffers::InPlace(buf))
    }

    /// [`ProcessGroup::all_reduce_nb`] on any buffer the caller hands over,
    /// reduced in place with no copy (see [`ProcessGroup::call_nb`]).
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
        buf: B,
        op: ReduceOp,
    ) -> Work<B> {
        self.call_nb(Call::AllReduce { op }, OwnedBuffers::InPlace(buf))
    }

    /// Copy `root`'s `buf` into every rank's `buf`.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: u32) -> Result<()> {
        self.call(Call::Broadcast { root }, Buffers::InPlace(buf))
    }

    /// Non-blocking [`ProcessGroup::broadcast`]; the result is the root's buffer.
    pub fn broadcast_nb<T: Element>(&self, buf: Vec<T>, root: u32) -> Work<Vec<T>> {
        self.call_nb(Call::Broadcast { root }, OwnedBuffers::InPlace(buf))
    }

    /// Every rank's `send`, concatenated in rank order, into every rank's
    /// `recv` (`recv.len() == world × send.len()`).
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.call(Call::AllGather, Buffers::SendRecv { send, recv })
    }

    /// Non-blocking [`ProcessGroup::all_gather`]; the result is `recv`.
    pub fn all_gather_nb<T: Element>(&self, send: Vec<T>) -> Work<Vec<T>> {
        let n = send.len().saturating_mul(self.world());
        self.call_nb_into(Call::AllGather, send, n)
    }

    /// Reduce `send` (world × block elements) over all ranks; rank `r`
    /// receives block `r` in `recv`.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        self.call(Call::ReduceScatter { op }, Buffers::SendRecv { send, recv })
    }

    /// Non-blocking [`ProcessGroup::reduce_scatter`]; `send` must hold a
    /// multiple of the world size; the result is this rank's block.
    pub fn reduce_scatter_nb<T: Element>(&self, send: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        let call = Call::ReduceScatter { op };
        match self.inner().per_rank(call.collective(), "send", send.len()) {
            Ok(block) => self.call_nb_into(call, send, block),
            Err(e) => Work::ready(Err(e)),
        }
    }

    /// Element-wise reduction of every rank's `buf` into `root`'s `buf`;
    /// other ranks' `buf` is left unspecified (used as scratch).
    pub fn reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp, root: u32) -> Result<()> {
        self.call(Call::Reduce { op, root }, Buffers::InPlace(buf))
    }

    /// Non-blocking [`ProcessGroup::reduce`]; the result is the reduced
    /// buffer at the root and unspecified elsewhere.
    pub fn reduce_nb<T: Element>(&self, buf: Vec<T>, op: ReduceOp, root: u32) -> Work<Vec<T>> {
        self.call_nb(Call::Reduce { op, root }, OwnedBuffers::InPlace(buf))
    }

    /// Block `j` of rank `i`'s `send` becomes block `i` of rank `j`'s
    /// `recv`; `send.len() == recv.len()`, a multiple of the world size.
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.call(Call::AllToAll, Buffers::SendRecv { send, recv })
    }

    /// Non-blocking [`ProcessGroup::all_to_all`]; the result is `recv`.
    pub fn all_to_all_nb<T: Element>(&self, send: Vec<T>) -> Work<Vec<T>> {
        let n = send.len();
        self.call_nb_into(Call::AllToAll, send, n)
    }

    /// Every rank's `send`, concatenated in rank order, into `root`'s `recv`
    /// (`world × send.len()`; checked at the root only, may be empty
    /// elsewhere).
    pub fn gather<T: Element>(&self, send: &[T], recv: &mut [T], root: u32) -> Result<()> {
        self.call(Call::Gather { root }, Buffers::SendRecv { send, recv })
    }

    /// Non-blocking [`ProcessGroup::gather`]; the result is `recv` at the
    /// root and empty elsewhere.
    pub fn gather_nb<T: Element>(&self, send: Vec<T>, root: u32) -> Work<Vec<T>> {
        let n = if self.rank() == root {
            send.len().saturating_mul(self.world())
        } else {
            0
        };
        self.call_nb_into(Call::Gather { root }, send, n)
    }

    /// Block `r` of `root`'s `send` (`world × recv.len()`; checked at the
    /// root only, may be empty elsewhere) into rank `r`'s `recv`.
    pub fn scatter<T: Element>(&self, send: &[T], recv: &mut [T], root: u32) -> Result<()> {
        self.call(Call::Scatter { root }, Buffers::SendRecv { send, recv })
    }

    /// Non-blocking [`ProcessGroup::scatter`] of `count` elements per rank;
    /// `send` is read at the root only. The result is this rank's block.
    pub fn scatter_nb<T: Element>(&self, send: Vec<T>, count: usize, root: u32) -> Work<Vec<T>> {
        self.call_nb_into(Call::Scatter { root }, send, count)
    }

    /// Inclusive prefix reduction: rank `r` gets ranks `0..=r` reduced.
    pub fn scan<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        self.call(Call::Scan { op }, Buffers::InPlace(buf))
    }

    /// Non-blocking [`ProcessGroup::scan`].
    pub fn scan_nb<T: Element>(&self, buf: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        self.call_nb(Call::Scan { op }, OwnedBuffers::InPlace(buf))
    }

    /// Exclusive prefix reduction: rank `r` gets ranks `0..r` reduced; rank
    /// 0 gets the operator's identity (0 for Sum and Avg, 1 for Prod, +∞/−∞
    /// for float Min/Max, `MAX`/`MIN` for integer Min/Max).
    pub fn exclusive_scan<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        self.call(Call::ExclusiveScan { op }, Buffers::InPlace(buf))
    }

    /// Non-blocking [`ProcessGroup::exclusive_scan`].
    pub fn exclusive_scan_nb<T: Element>(&self, buf: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        self.call_nb(Call::ExclusiveScan { op }, OwnedBuffers::InPlace(buf))
    }

    /// Return once every rank has entered the barrier.
    pub fn barrier(&self) -> Result<()> {
        self.call::<u8>(Call::Barrier, Buffers::InPlace(&mut []))
    }

    /// Non-blocking [`ProcessGroup::barrier`].
    pub fn barrier_nb(&self) -> Work<()> {
        let inner = self.shared();
        let begun = inner.begin::<u8>(Call::Barrier, 0);
        self.submit(begun, |_, begun| {
            execute::<u8>(begun, Call::Barrier, Buffers::InPlace(&mut []))
        })
    }
}
