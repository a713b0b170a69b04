//! The point-to-point trait every algorithm is written against.

use crate::element::Element;
use crate::op::ReduceOp;

/// What an algorithm may do: learn its rank and world size, send bytes to a
/// peer, and receive the next bytes a peer sent.
///
/// One `Comm` value serves one collective call. Its contract:
///
/// * **FIFO per peer.** Messages from one sender are received in the order
///   they were sent; algorithms never need tags inside one call.
/// * **Buffered sends.** `send` returns once the bytes are copied or queued;
///   algorithms send before they receive (a ring step, an exchange) and rely
///   on that not to deadlock.
/// * **Deadlines live in the implementation.** `recv` fails when the peer has
///   made no progress for the implementation's deadline, and it fails at once
///   when the peer is known dead; algorithms see no clock.
/// * **Length is checked by the implementation.** `recv(from, len)` yields
///   exactly `len` bytes or an error, so a confused or hostile peer cannot
///   make an algorithm index out of bounds.
pub trait Comm {
    /// The implementation's error (a timeout naming the peer, a mismatch…).
    type Error;
    /// A received message's bytes; kept alive while the algorithm reads it.
    type Buf: AsRef<[u8]>;

    /// This rank, in `0..size()`.
    fn rank(&self) -> usize;
    /// Number of ranks taking part.
    fn size(&self) -> usize;
    /// Queue `data` for `to`.
    fn send(&mut self, to: usize, data: &[u8]) -> Result<(), Self::Error>;
    /// The next message from `from`, which must be `len` bytes long.
    fn recv(&mut self, from: usize, len: usize) -> Result<Self::Buf, Self::Error>;
    /// The children per interior rank of the relay tree the ranks form
    /// (rank 0 the root, breadth first: `Topology::Tree`'s fanout), for
    /// the tree algorithms. By default `size() − 1`: a star, every rank a
    /// child of rank 0.
    fn fanout(&self) -> usize {
        self.size().saturating_sub(1).max(1)
    }
    /// Whether `rank` is known gone (left or failed): a receive from it
    /// fails at once. By default nothing is known.
    fn is_gone(&self, rank: usize) -> bool {
        let _ = rank;
        false
    }
    /// The next message from `from`, into `dst` (it must be `dst.len()`
    /// bytes long). A transport may read it there directly; by default it
    /// is received and copied.
    fn recv_into_bytes(&mut self, from: usize, dst: &mut [u8]) -> Result<(), Self::Error> {
        let msg = self.recv(from, dst.len())?;
        dst.copy_from_slice(msg.as_ref());
        Ok(())
    }
}

/// Send a slice of elements.
pub(crate) fn send_elems<T: Element, C: Comm>(
    comm: &mut C,
    to: usize,
    data: &[T],
) -> Result<(), C::Error> {
    comm.send(to, bytemuck::cast_slice(data))
}

/// Receive exactly `dst.len()` elements from `from` into `dst`.
pub(crate) fn recv_into<T: Element, C: Comm>(
    comm: &mut C,
    from: usize,
    dst: &mut [T],
) -> Result<(), C::Error> {
    comm.recv_into_bytes(from, bytemuck::cast_slice_mut::<T, u8>(dst))
}

/// Receive `acc.len()` elements from `from` and fold them into `acc`, the
/// received values on the left (`from_left`) or on the right of `⊕`.
pub(crate) fn recv_reduce<T: Element, C: Comm>(
    comm: &mut C,
    from: usize,
    acc: &mut [T],
    op: ReduceOp,
    from_left: bool,
) -> Result<(), C::Error> {
    let msg = comm.recv(from, std::mem::size_of_val(acc))?;
    with_elems(msg.as_ref(), |x: &[T]| {
        if from_left {
            T::reduce_from_left(op, acc, x)
        } else {
            T::reduce(op, acc, x)
        }
    });
    Ok(())
}

/// View received bytes as elements; copies only if the transport handed over
/// a buffer that is not aligned for `T` (ours are, by construction).
pub(crate) fn with_elems<T: Element, R>(bytes: &[u8], f: impl FnOnce(&[T]) -> R) -> R {
    match bytemuck::try_cast_slice::<u8, T>(bytes) {
        Ok(elems) => f(elems),
        Err(_) => f(&bytemuck::pod_collect_to_vec::<u8, T>(bytes)),
    }
}
