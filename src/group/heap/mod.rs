//! One-sided operations on a symmetric heap: `put`, `get`, `fetch_add`,
//! `compare_swap` on another rank's heap, served on that rank's I/O side
//! while its application does anything else (a collective included): the
//! thread that reads a request off the link (the link's own thread, or an
//! application thread reading its link while it waits) answers it there
//! ([`Answerer`], the link core's `answer.rs`), and only a request it
//! cannot answer at once for want of room (the requester's credit, or the
//! link's write budget) goes to the RPC server, which answers it per
//! requester (`replies.rs`).
//!
//! The heap is 8-byte words, each an `AtomicU64`: bytes are read and
//! written through the words holding them (a word only partly covered by
//! a write is merged by compare-and-swap, so a concurrent atomic on the
//! same word is never lost), and atomics are sequentially consistent
//! operations on one word, so they are linearizable whoever issues them,
//! `atomic_load` included. No lock is held while a buffer is copied.
//!
//! Requests are RPC requests for the reserved function `HEAP_FN`, which
//! are answered at once (none waits on anything but the heap), never by a
//! worker or a user's handler: the operation (u8), the
//! offset (u64), the caller's heap size (u64), then the put's bytes, the
//! get's length (u64), the value to add (u64), or the expected and new
//! values (u64 each). A rank whose heap is another size (or none) refuses
//! every request, naming both sizes. The answer travels on RPC's response
//! lane for the request: status 0 and the bytes read or the previous
//! value, or status 1 and why not. Puts and gets are cut into pieces of
//! at most `PIECE` bytes, up to `WINDOW` of them in flight; a lane keeps
//! their order, so the pieces of one origin's puts to one target apply in
//! the order issued.

mod replies;
mod share;
mod store;

pub(crate) use replies::Replies;
pub(crate) use store::{Heap, Mapped};

use super::rpc::{request_head, request_key, response_key};
use super::GroupInner;
use crate::error::{Error, Result};
use meshwork_transport::{LaneKey, Payload, Transport};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The RPC function id of heap requests (ids from `0xFFFF_FF00` are the
/// library's; a user's handler there is never called).
pub(crate) const HEAP_FN: u32 = 0xFFFF_FFF0;

/// Where a communicator's heap is, once it has one: shared by the
/// communicator, the sub-groups made from it, and those answering its
/// requests.
pub(crate) type HeapSlot = Arc<std::sync::OnceLock<Arc<Heap>>>;
/// The largest piece of a put or get in one message.
const PIECE: usize = 4 << 20;
/// Pieces in flight at once, per call.
const WINDOW: usize = 4;

const PUT: u8 = 1;
const GET: u8 = 2;
const FETCH_ADD: u8 = 3;
const COMPARE_SWAP: u8 = 4;

const OK: u8 = 0;
const REFUSED: u8 = 1;

/// Why a heap refuses an operation: this rank's own call's
/// `InvalidArgument`, or the refusal a target answers a caller with (its
/// text travels in the answer).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// The bytes asked for run past the heap's end.
    #[error("{op}: {n} bytes at offset {offset} do not fit in the heap of {heap} bytes")]
    Outside {
        op: &'static str,
        offset: usize,
        n: usize,
        heap: usize,
    },
    /// An atomic on a word that is not 8-byte aligned.
    #[error("{op}: offset {offset} is not 8-byte aligned (heap of {heap} bytes)")]
    Misaligned {
        op: &'static str,
        offset: usize,
        heap: usize,
    },
    /// A get larger than a piece: origins ask in pieces, so only a
    /// caller that does not follow the protocol asks for more.
    #[error("get: a piece of {len} bytes, at most {PIECE}")]
    PieceTooLarge { len: usize },
    /// The caller's heap is another size than this rank's (or this rank
    /// has none: 0 bytes).
    #[error("the heap differs between ranks: this one has {ours} bytes, the caller's {theirs}; set the same HEAP_MB (Node::heap_bytes) everywhere")]
    SizeMismatch { ours: usize, theirs: u64 },
}

/// A request, decoded (a pure function of its bytes: fuzzed).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request<'a> {
    Put {
        offset: u64,
        data: &'a [u8],
    },
    Get {
        offset: u64,
        len: u64,
    },
    FetchAdd {
        offset: u64,
        value: u64,
    },
    CompareSwap {
        offset: u64,
        expected: u64,
        new: u64,
    },
}

/// A request's head: RPC's (the heap function, the id), then the
/// operation, the offset and the caller's heap size.
fn head(op: u8, id: u64, offset: usize, size: usize) -> [u8; 29] {
    let mut h = [0u8; 29];
    h[..12].copy_from_slice(&request_head(HEAP_FN, id));
    h[12] = op;
    h[13..21].copy_from_slice(&(offset as u64).to_le_bytes());
    h[21..].copy_from_slice(&(size as u64).to_le_bytes());
    h
}

/// `(request id, the caller's heap size, request)` from a heap
/// request's RPC arguments; `None`: not a request of this protocol.
pub(crate) fn decode_request(id: u64, args: &[u8]) -> Option<(u64, u64, Request<'_>)> {
    let (&op, rest) = args.split_first()?;
    let (offset, rest) = rest.split_first_chunk::<8>()?;
    let (size, rest) = rest.split_first_chunk::<8>()?;
    let offset = u64::from_le_bytes(*offset);
    let u64_at = |i: usize| {
        rest.get(i..i + 8)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map(u64::from_le_bytes)
    };
    let req = match (op, rest.len()) {
        (PUT, _) => Request::Put { offset, data: rest },
        (GET, 8) => Request::Get {
            offset,
            len: u64_at(0)?,
        },
        (FETCH_ADD, 8) => Request::FetchAdd {
            offset,
            value: u64_at(0)?,
        },
        (COMPARE_SWAP, 16) => Request::CompareSwap {
            offset,
            expected: u64_at(0)?,
            new: u64_at(8)?,
        },
        _ => return None,
    };
    Some((id, u64::from_le_bytes(*size), req))
}

/// Why `heap` refuses `req`, or the length of what it answers (the bytes
/// read, the previous value); nothing is done yet.
fn check(heap: &Heap, req: &Request<'_>) -> std::result::Result<usize, Refusal> {
    let at = |offset: u64| usize::try_from(offset).unwrap_or(usize::MAX);
    let refused = |why: Option<Refusal>, len: usize| why.map_or(Ok(len), Err);
    match *req {
        Request::Put { offset, data } => refused(heap.outside("put", at(offset), data.len()), 0),
        Request::Get { offset, len } => {
            let len = at(len);
            if let Some(why) = heap.outside("get", at(offset), len) {
                return Err(why);
            }
            if len > PIECE {
                // Origins ask in pieces: an answer is never larger.
                return Err(Refusal::PieceTooLarge { len });
            }
            Ok(len)
        }
        Request::FetchAdd { offset, .. } => refused(heap.not_a_word("fetch_add", at(offset)), 8),
        Request::CompareSwap { offset, .. } => {
            refused(heap.not_a_word("compare_swap", at(offset)), 8)
        }
    }
}

/// Carry out `req` (it passed [`check`]) on `heap`, appending what it
/// answers to `out`.
fn perform(heap: &Heap, req: &Request<'_>, out: &mut Vec<u8>) {
    let at = |offset: u64| usize::try_from(offset).unwrap_or(usize::MAX);
    match *req {
        Request::Put { offset, data } => heap.write(at(offset), data),
        Request::Get { offset, len } => {
            let from = out.len();
            out.resize(from + at(len), 0);
            heap.read(at(offset), &mut out[from..]);
        }
        Request::FetchAdd { offset, value } => {
            let prev = heap.word(at(offset)).fetch_add(value, Ordering::SeqCst);
            out.extend_from_slice(&prev.to_le_bytes());
        }
        Request::CompareSwap {
            offset,
            expected,
            new,
        } => {
            let prev = match heap.word(at(offset)).compare_exchange(
                expected,
                new,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(v) | Err(v) => v,
            };
            out.extend_from_slice(&prev.to_le_bytes());
        }
    }
}

/// What `heap` answers to `req`: the bytes read or the previous value,
/// or why not.
fn apply(heap: &Heap, req: &Request<'_>) -> std::result::Result<Vec<u8>, Refusal> {
    let len = check(heap, req)?;
    let mut out = Vec::with_capacity(len);
    perform(heap, req, &mut out);
    Ok(out)
}

/// Why this rank (`heap`, if it has one) refuses a request from a caller
/// whose heap is `size` bytes, or the length of its answer's body.
fn admit(heap: Option<&Heap>, size: u64, req: &Request<'_>) -> std::result::Result<usize, Refusal> {
    match heap {
        Some(heap) if heap.len() as u64 == size => check(heap, req),
        _ => Err(Refusal::SizeMismatch {
            ours: heap.map_or(0, Heap::len),
            theirs: size,
        }),
    }
}

/// The answer to an admitted request (`admitted`): the status byte, then
/// the body.
fn answer_bytes(
    heap: Option<&Heap>,
    req: &Request<'_>,
    admitted: std::result::Result<usize, Refusal>,
) -> Vec<u8> {
    match (heap, admitted) {
        (Some(heap), Ok(len)) => {
            let mut out = Vec::with_capacity(1 + len);
            out.push(OK);
            perform(heap, req, &mut out);
            out
        }
        (_, Err(why)) => [&[REFUSED], why.to_string().as_bytes()].concat(),
        (None, Ok(_)) => vec![REFUSED],
    }
}

/// What this rank (`heap`, if it has one) answers to a heap request
/// (`id` and RPC arguments `args`): the request's id, and the answer (the
/// status byte, then the body); `None` for what is not a request (fuzzed).
pub(crate) fn answer_to(heap: Option<&Heap>, id: u64, args: &[u8]) -> Option<(u64, Vec<u8>)> {
    let (id, size, request) = decode_request(id, args)?;
    let admitted = admit(heap, size, &request);
    Some((id, answer_bytes(heap, &request, admitted)))
}

/// Answer a heap request from `src` (for `HEAP_FN`: one the link's
/// reader left to the RPC server, for want of room to answer with; see
/// `replies.rs`), with a send that may wait. `Err`: the answer could not
/// be sent.
pub(crate) fn answer(
    t: &dyn Transport,
    comm: u64,
    heap: Option<&Heap>,
    src: u32,
    id: u64,
    args: &[u8],
) -> std::result::Result<(), meshwork_transport::TransportError> {
    let Some((id, answer)) = answer_to(heap, id, args) else {
        tracing::warn!(
            src,
            "malformed heap request of {} bytes dropped",
            args.len()
        );
        return Ok(());
    };
    let sent = match t.send(src, response_key(comm, id), &[&answer]) {
        // A piece over the cap (the origin's cap is not this rank's):
        // refused by name rather than left to time out.
        Err(meshwork_transport::TransportError::MessageTooLarge { len, max }) => {
            let why = format!(
                "an answer of {len} bytes is over this rank's message cap of {max} (MAX_MESSAGE_BYTES differs between ranks)"
            );
            t.send(src, response_key(comm, id), &[&[REFUSED], why.as_bytes()])
        }
        sent => sent,
    };
    if let Err(e) = &sent {
        tracing::warn!(src, "cannot answer a heap request: {e}");
    }
    sent
}

/// Answers a communicator's heap requests on the thread that reads them
/// off the link (the target's I/O side), without waking its RPC server.
pub(crate) struct Answerer {
    pub(crate) heap: HeapSlot,
    pub(crate) comm: u64,
}

impl meshwork_transport::Answerer for Answerer {
    fn answer(
        &self,
        _src: u32,
        request: &[u8],
        room: &mut dyn FnMut(LaneKey, usize) -> bool,
    ) -> Option<(LaneKey, Vec<u8>)> {
        let (fn_id, id, args) = super::rpc::decode_request(request)?;
        if fn_id != HEAP_FN {
            return None;
        }
        // Malformed: the server drops it, saying so.
        let (id, size, req) = decode_request(id, args)?;
        let heap = self.heap.get().map(|h| &**h);
        let admitted = admit(heap, size, &req);
        let len = 1 + match &admitted {
            Ok(n) => *n,
            // A refusal is rare: its text is made again for the answer.
            Err(why) => why.to_string().len(),
        };
        let lane = response_key(self.comm, id);
        if !room(lane, len) {
            return None;
        }
        Some((lane, answer_bytes(heap, &req, admitted)))
    }
}

/// One request under way: its id and, for a get, where its bytes go.
struct InFlight {
    id: u64,
    range: std::ops::Range<usize>,
}

impl GroupInner {
    /// This rank's heap, or why there is none.
    fn heap(&self, op: &'static str) -> Result<&Arc<Heap>> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(Error::ShutDown);
        }
        self.heap.get().filter(|h| h.len() > 0).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{op}: this group has no heap (heap of 0 bytes; set HEAP_MB or Node::heap_bytes)"
            ))
        })
    }

    /// The heap, checked for `op` on `rank`'s `n` bytes at `offset`.
    fn heap_for(&self, op: &'static str, rank: u32, offset: usize, n: usize) -> Result<&Arc<Heap>> {
        let heap = self.heap(op)?;
        if rank >= self.world {
            return Err(Error::InvalidArgument(format!(
                "{op}: rank {rank} is out of range; this group has ranks 0..{} (heap of {} bytes)",
                self.world,
                heap.len()
            )));
        }
        match heap.outside(op, offset, n) {
            Some(why) => Err(Error::InvalidArgument(why.to_string())),
            None => Ok(heap),
        }
    }

    /// `rank`'s heap if it is mapped here (a same-host peer's), unless
    /// `rank` is known gone: its memory outlives it, its heap does not.
    fn mapped_live(&self, op: &str, rank: u32) -> Result<Option<&Arc<Heap>>> {
        let Some(peer) = self.mapped(rank) else {
            return Ok(None);
        };
        if self.transport.is_gone(rank) {
            return Err(Error::from_transport(
                meshwork_transport::TransportError::PeerDisconnected { rank },
                op,
            ));
        }
        Ok(Some(peer))
    }

    /// Send a request (`parts`, head first) to `dst`.
    fn heap_send(&self, op: &str, dst: u32, parts: &[&[u8]]) -> Result<()> {
        self.transport
            .send(dst, request_key(self.comm_id), parts)
            .map_err(|e| Error::from_transport(e, op))
    }

    /// The largest piece of a put or get: [`PIECE`], or less where the
    /// links' message cap (`MAX_MESSAGE_BYTES`) is lower (a request or an
    /// answer carries a piece and a head of under 64 bytes).
    fn piece(&self) -> usize {
        let cap = usize::try_from(self.transport.max_message_bytes()).unwrap_or(usize::MAX);
        PIECE.min(cap.saturating_sub(64)).max(8)
    }

    fn next_id(&self) -> u64 {
        self.rpc.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The answer to request `id` from `dst`: its body, or the target's
    /// refusal as `InvalidArgument`.
    fn heap_answer(&self, op: &str, dst: u32, id: u64) -> Result<Payload> {
        // As RPC's calls do: what came too late for an earlier call (heap
        // or RPC, one id space) is dropped, not left queued.
        self.discard_late_responses();
        let reply = self
            .transport
            .recv(dst, response_key(self.comm_id, id), self.timeout(), None)
            .map_err(|e| {
                self.rpc.abandon(dst, id);
                Error::from_transport(e, op)
            })?;
        match reply.as_ref().first() {
            Some(&OK) => Ok(reply),
            Some(&REFUSED) => Err(Error::InvalidArgument(
                String::from_utf8_lossy(&reply.as_ref()[1..]).into_owned(),
            )),
            _ => Err(Error::InvalidArgument(format!(
                "{op}: rank {dst} answered with a malformed response"
            ))),
        }
    }

    /// Wait for the oldest of `flight`, for `op` on `dst`; a get's bytes
    /// go to `buf`.
    fn land(
        &self,
        op: &str,
        dst: u32,
        flight: &mut VecDeque<InFlight>,
        buf: Option<&mut [u8]>,
    ) -> Result<()> {
        let Some(f) = flight.pop_front() else {
            return Ok(());
        };
        let answered = self.heap_answer(op, dst, f.id);
        if answered.is_err() {
            // The rest will not be waited for: their answers are dropped.
            for rest in flight.drain(..) {
                self.rpc.abandon(dst, rest.id);
            }
        }
        let reply = answered?;
        if let Some(buf) = buf {
            let body = &reply.as_ref()[1..];
            let into = &mut buf[f.range];
            if body.len() != into.len() {
                return Err(Error::InvalidArgument(format!(
                    "{op}: rank {dst} sent {} bytes for a piece of {}",
                    body.len(),
                    into.len()
                )));
            }
            into.copy_from_slice(body);
        }
        Ok(())
    }

    pub(crate) fn heap_put(&self, dst: u32, offset: usize, data: &[u8]) -> Result<()> {
        let heap = self.heap_for("put", dst, offset, data.len())?;
        if dst == self.rank {
            heap.write(offset, data);
            return Ok(());
        }
        if let Some(peer) = self.mapped_live("put", dst)? {
            peer.write(offset, data);
            // Before whatever this thread does next (a flag it sets, a
            // message it sends), as a put that was answered is.
            std::sync::atomic::fence(Ordering::SeqCst);
            return Ok(());
        }
        let mut flight = VecDeque::new();
        let size = self.piece();
        for (i, piece) in data.chunks(size).enumerate() {
            if flight.len() == WINDOW {
                self.land("put", dst, &mut flight, None)?;
            }
            let id = self.next_id();
            let h = head(PUT, id, offset + i * size, heap.len());
            self.heap_send("put", dst, &[&h, piece])?;
            flight.push_back(InFlight { id, range: 0..0 });
        }
        while !flight.is_empty() {
            self.land("put", dst, &mut flight, None)?;
        }
        Ok(())
    }

    pub(crate) fn heap_get(&self, src: u32, offset: usize, buf: &mut [u8]) -> Result<()> {
        let heap = self.heap_for("get", src, offset, buf.len())?;
        if src == self.rank {
            heap.read(offset, buf);
            return Ok(());
        }
        if let Some(peer) = self.mapped_live("get", src)? {
            std::sync::atomic::fence(Ordering::SeqCst);
            peer.read(offset, buf);
            return Ok(());
        }
        let mut flight = VecDeque::new();
        let mut start = 0;
        while start < buf.len() {
            if flight.len() == WINDOW {
                self.land("get", src, &mut flight, Some(&mut *buf))?;
            }
            let n = self.piece().min(buf.len() - start);
            let id = self.next_id();
            let h = head(GET, id, offset + start, heap.len());
            self.heap_send("get", src, &[&h, &(n as u64).to_le_bytes()])?;
            flight.push_back(InFlight {
                id,
                range: start..start + n,
            });
            start += n;
        }
        while !flight.is_empty() {
            self.land("get", src, &mut flight, Some(&mut *buf))?;
        }
        Ok(())
    }

    /// An atomic on `dst`'s word at `offset`: `op` with `args` (8 or 16
    /// bytes); the previous value.
    pub(crate) fn heap_atomic(
        &self,
        name: &'static str,
        dst: u32,
        offset: usize,
        req: Request<'_>,
    ) -> Result<u64> {
        let heap = self.heap_for(name, dst, offset, 0)?;
        if let Some(why) = heap.not_a_word(name, offset) {
            return Err(Error::InvalidArgument(why.to_string()));
        }
        if dst == self.rank {
            let prev = apply(heap, &req).map_err(|why| Error::InvalidArgument(why.to_string()))?;
            return Ok(u64_of(&prev));
        }
        if let Some(peer) = self.mapped_live(name, dst)? {
            let prev = apply(peer, &req).map_err(|why| Error::InvalidArgument(why.to_string()))?;
            return Ok(u64_of(&prev));
        }
        let id = self.next_id();
        let (op, args) = match req {
            Request::FetchAdd { value, .. } => (FETCH_ADD, value.to_le_bytes().to_vec()),
            Request::CompareSwap { expected, new, .. } => (
                COMPARE_SWAP,
                [expected.to_le_bytes(), new.to_le_bytes()].concat(),
            ),
            _ => return Err(Error::InvalidArgument(format!("{name}: not an atomic"))),
        };
        self.heap_send(name, dst, &[&head(op, id, offset, heap.len()), &args])?;
        let reply = self.heap_answer(name, dst, id)?;
        let body = &reply.as_ref()[1..];
        if body.len() != 8 {
            return Err(Error::InvalidArgument(format!(
                "{name}: rank {dst} answered {} bytes, not a word",
                body.len()
            )));
        }
        Ok(u64_of(body))
    }

    pub(crate) fn heap_local(
        &self,
        op: &'static str,
        offset: usize,
        n: usize,
    ) -> Result<&Arc<Heap>> {
        self.heap_for(op, self.rank, offset, n)
    }
}

fn u64_of(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_le_bytes(w)
}

impl super::ProcessGroup {
    /// The size of every rank's heap in bytes (`Node::heap_bytes`,
    /// `HEAP_MB`; 0: none).
    pub fn heap_bytes(&self) -> usize {
        self.inner().heap.get().map_or(0, |h| h.len())
    }

    /// Write `data` into this rank's own heap at `offset`.
    pub fn heap_write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let inner = self.inner();
        inner
            .heap_local("heap_write", offset, data.len())?
            .write(offset, data);
        Ok(())
    }

    /// Read `buf.len()` bytes of this rank's own heap at `offset`.
    pub fn heap_read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        let inner = self.inner();
        inner
            .heap_local("heap_read", offset, buf.len())?
            .read(offset, buf);
        Ok(())
    }

    /// Write `data` into `dst`'s heap at `offset`; returns once it is
    /// there. `dst` calls nothing: its I/O side serves it. Puts from
    /// this rank to one target apply in the order issued. Out of range,
    /// no heap, a rank out of range: `InvalidArgument` naming the heap's
    /// size, and nothing is written.
    pub fn put(&self, dst: u32, offset: usize, data: &[u8]) -> Result<()> {
        self.inner().heap_put(dst, offset, data)
    }

    /// Read `buf.len()` bytes of `src`'s heap at `offset` into `buf`.
    pub fn get(&self, src: u32, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.inner().heap_get(src, offset, buf)
    }

    /// Add `value` (wrapping) to the 8-byte word at `offset` (8-byte
    /// aligned) of `dst`'s heap; the previous value. Linearizable with
    /// every other atomic on the word, whoever issues it.
    pub fn fetch_add(&self, dst: u32, offset: usize, value: u64) -> Result<u64> {
        let req = Request::FetchAdd {
            offset: offset as u64,
            value,
        };
        self.inner().heap_atomic("fetch_add", dst, offset, req)
    }

    /// Set the word at `offset` of `dst`'s heap to `new` if it holds
    /// `expected`; the previous value either way.
    pub fn compare_swap(&self, dst: u32, offset: usize, expected: u64, new: u64) -> Result<u64> {
        let req = Request::CompareSwap {
            offset: offset as u64,
            expected,
            new,
        };
        self.inner().heap_atomic("compare_swap", dst, offset, req)
    }

    /// The word at `offset` of this rank's own heap, read atomically
    /// (consistent with remote atomics on it).
    pub fn atomic_load(&self, offset: usize) -> Result<u64> {
        let inner = self.inner();
        let heap = inner.heap_local("atomic_load", offset, 0)?;
        if let Some(why) = heap.not_a_word("atomic_load", offset) {
            return Err(Error::InvalidArgument(why.to_string()));
        }
        Ok(heap.word(offset).load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_garbage_is_refused() {
        let args = |h: &[u8]| h[12..].to_vec();
        let put = [&args(&head(PUT, 9, 24, 64))[..], b"abc"].concat();
        assert_eq!(
            decode_request(9, &put),
            Some((
                9,
                64,
                Request::Put {
                    offset: 24,
                    data: b"abc"
                }
            ))
        );
        let cas = [&args(&head(COMPARE_SWAP, 1, 8, 64))[..], &[0u8; 16]].concat();
        assert!(matches!(
            decode_request(1, &cas),
            Some((1, 64, Request::CompareSwap { offset: 8, .. }))
        ));
        assert_eq!(decode_request(1, &cas[..20]), None, "a torn compare-swap");
        assert_eq!(decode_request(1, &[GET; 16]), None, "short");
        assert_eq!(decode_request(1, &[99; 40]), None, "no such operation");
        // A request past the end, or misaligned, is refused with the size.
        let heap = Heap::new(16).unwrap();
        let far = Request::Get {
            offset: u64::MAX,
            len: 2,
        };
        assert!(apply(&heap, &far)
            .unwrap_err()
            .to_string()
            .contains("heap of 16 bytes"));
        let odd = Request::FetchAdd {
            offset: 4,
            value: 1,
        };
        assert!(apply(&heap, &odd)
            .unwrap_err()
            .to_string()
            .contains("not 8-byte aligned"));
        // A caller whose heap is another size, or a rank without one.
        let (_, answer) = answer_to(Some(&heap), 1, &cas).unwrap();
        assert_eq!(answer[0], REFUSED);
        assert!(String::from_utf8_lossy(&answer[1..])
            .contains("this one has 16 bytes, the caller's 64"));
        let (_, answer) = answer_to(None, 1, &cas).unwrap();
        assert_eq!(answer[0], REFUSED);
    }
}
