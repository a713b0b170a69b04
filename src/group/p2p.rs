//! Tagged point-to-point messages: lane `(comm, PointToPoint, tag)`, FIFO
//! per sender and tag; different tags never block each other. Beside
//! them, each communicator has one *matched* lane ([`MatchedLane`],
//! `(comm, Matched, 0)`).

use super::ProcessGroup;
use crate::error::{Error, Result};
use meshwork_collectives::Element;
use meshwork_transport::{LaneKey, LaneKind, Payload};
use std::time::Duration;

/// Which lane a call is on: a tag's, or the matched lane.
#[derive(Clone, Copy)]
enum Lane {
    Tag(u64),
    Matched,
}

impl Lane {
    fn key(self, comm: u64) -> LaneKey {
        match self {
            Lane::Tag(tag) => LaneKey {
                comm,
                kind: LaneKind::PointToPoint,
                tag,
            },
            Lane::Matched => LaneKey {
                comm,
                kind: LaneKind::Matched,
                tag: 0,
            },
        }
    }
}

/// A group's *matched* lane ([`ProcessGroup::matched`]): one lane for the
/// messages a receiver matches itself (the MPI ABI's, by MPI tag and
/// source), apart from every tag's. Each message on it starts with a word
/// of [`MATCHED_WORD`](crate::MATCHED_WORD) bytes (8: the MPI envelope)
/// that travels in its frame header's tag field rather than in the
/// payload, so a message of up to 8 bytes after its word is as small on
/// the wire as one of up to 8 bytes under a tag (one cache line in shared
/// memory). A receive gets the word back as the message's first bytes; a
/// message shorter than a word is `InvalidArgument`. Its calls are the
/// tagged calls of the same names, without the tag.
#[derive(Clone, Copy, Debug)]
pub struct MatchedLane<'a> {
    group: &'a ProcessGroup,
}

impl MatchedLane<'_> {
    /// [`ProcessGroup::send_parts`] on the matched lane: the parts' first
    /// 8 bytes are the word.
    #[inline]
    pub fn send_parts(&self, parts: &[&[u8]], dst: u32) -> Result<()> {
        self.group.send_on(parts, dst, Lane::Matched)
    }

    /// [`ProcessGroup::recv_any_message`] on the matched lane.
    pub fn recv_any_message(&self, timeout: Duration) -> Result<Option<(u32, Payload)>> {
        self.group.recv_any_on(Lane::Matched, timeout)
    }

    /// [`ProcessGroup::recv_message`] on the matched lane.
    pub fn recv_message(&self, src: u32, timeout: Duration) -> Result<Option<Payload>> {
        self.group.recv_message_on(src, Lane::Matched, timeout)
    }

    /// [`ProcessGroup::recv_message_into`] on the matched lane: the word
    /// goes into the first 8 bytes of `head` (and on into `body` if
    /// `head` is shorter).
    #[inline]
    pub fn recv_message_into(
        &self,
        src: u32,
        timeout: Duration,
        head: &mut [u8],
        body: &mut [u8],
    ) -> Result<Option<bool>> {
        self.group
            .recv_message_into_on(src, Lane::Matched, timeout, head, body)
    }
}

impl ProcessGroup {
    /// The lane of `tag` on communicator `comm`.
    fn p2p_key(comm: u64, tag: u64) -> LaneKey {
        Lane::Tag(tag).key(comm)
    }

    /// This group's matched lane.
    #[inline]
    pub fn matched(&self) -> MatchedLane<'_> {
        MatchedLane { group: self }
    }

    /// The current communicator, checked usable and `rank` in range.
    fn checked(&self, op: &str, what: &str, rank: u32) -> Result<&super::GroupInner> {
        let inner = self.inner();
        if rank >= inner.world {
            return Err(Error::InvalidArgument(format!(
                "{op}: {what} {rank} is out of range; this group has ranks 0..{}",
                inner.world
            )));
        }
        inner.check_usable()?;
        Ok(inner)
    }

    /// Send `data` to `dst` under `tag`. Returns once the message is
    /// buffered (the caller may reuse `data`).
    pub fn send<T: Element>(&self, data: &[T], dst: u32, tag: u64) -> Result<()> {
        self.send_bytes(bytemuck::cast_slice(data), dst, tag)
    }

    /// Receive the next message from `src` under `tag` into `buf`. A
    /// message of another length is `InvalidArgument` naming both lengths,
    /// and stays queued for a receive with the right buffer.
    pub fn recv<T: Element>(&self, buf: &mut [T], src: u32, tag: u64) -> Result<()> {
        let inner = self.checked("recv", "source", src)?;
        let bytes = bytemuck::cast_slice_mut::<T, u8>(buf);
        inner
            .transport
            .recv_into(
                src,
                Self::p2p_key(inner.comm_id, tag),
                inner.timeout(),
                &mut [],
                bytes,
            )
            .map_err(|e| inner.error(e, "recv"))
    }

    /// Send raw bytes to `dst` under `tag`.
    pub fn send_bytes(&self, data: &[u8], dst: u32, tag: u64) -> Result<()> {
        let inner = self.checked("send", "destination", dst)?;
        inner
            .transport
            .send(dst, Self::p2p_key(inner.comm_id, tag), &[data])
            .map_err(|e| inner.error(e, "send"))
    }

    /// Send the concatenation of `parts` to `dst` under `tag` as one
    /// message, with no copy to join them (a header and a payload).
    pub fn send_parts(&self, parts: &[&[u8]], dst: u32, tag: u64) -> Result<()> {
        self.send_on(parts, dst, Lane::Tag(tag))
    }

    #[inline]
    fn send_on(&self, parts: &[&[u8]], dst: u32, lane: Lane) -> Result<()> {
        let inner = self.checked("send", "destination", dst)?;
        inner
            .transport
            .send(dst, lane.key(inner.comm_id), parts)
            .map_err(|e| inner.error(e, "send"))
    }

    /// The next message under `tag` from any rank, with its sender;
    /// `None` if none came within `timeout` (nothing is consumed). A
    /// failed rank or a revoked group is an error as for
    /// [`recv`](Self::recv). The message is handed over as it was
    /// received, with no copy.
    pub fn recv_any_message(&self, tag: u64, timeout: Duration) -> Result<Option<(u32, Payload)>> {
        self.recv_any_on(Lane::Tag(tag), timeout)
    }

    fn recv_any_on(&self, lane: Lane, timeout: Duration) -> Result<Option<(u32, Payload)>> {
        let inner = self.inner();
        inner.check_usable()?;
        match inner.transport.recv_any(lane.key(inner.comm_id), timeout) {
            Ok(got) => Ok(Some(got)),
            Err(meshwork_transport::TransportError::Timeout { .. }) => Ok(None),
            Err(e) => Err(inner.error(e, "recv")),
        }
    }

    /// The next message from `src` under `tag`, handed over as received
    /// (no copy); `None` if none came within `timeout` (nothing is
    /// consumed). Waiting for one sender polls its link from the caller's
    /// thread, as [`recv`](Self::recv) does.
    pub fn recv_message(&self, src: u32, tag: u64, timeout: Duration) -> Result<Option<Payload>> {
        self.recv_message_on(src, Lane::Tag(tag), timeout)
    }

    fn recv_message_on(&self, src: u32, lane: Lane, timeout: Duration) -> Result<Option<Payload>> {
        let inner = self.checked("recv", "source", src)?;
        match inner
            .transport
            .recv(src, lane.key(inner.comm_id), timeout, None)
        {
            Ok(msg) => Ok(Some(msg)),
            Err(meshwork_transport::TransportError::Timeout { .. }) => Ok(None),
            Err(e) => Err(inner.error(e, "recv")),
        }
    }

    /// The next message from `src` under `tag`, if it is `head.len() +
    /// body.len()` bytes long, read into `head` then `body` (by the link
    /// straight from the wire where it can): `Some(true)`. `Some(false)`
    /// when the next message has another length (it stays queued), `None`
    /// when none came within `timeout`. On an error or `Some(false)` the
    /// buffers' contents are unspecified.
    pub fn recv_message_into(
        &self,
        src: u32,
        tag: u64,
        timeout: Duration,
        head: &mut [u8],
        body: &mut [u8],
    ) -> Result<Option<bool>> {
        self.recv_message_into_on(src, Lane::Tag(tag), timeout, head, body)
    }

    #[inline]
    fn recv_message_into_on(
        &self,
        src: u32,
        lane: Lane,
        timeout: Duration,
        head: &mut [u8],
        body: &mut [u8],
    ) -> Result<Option<bool>> {
        use meshwork_transport::TransportError as T;
        let inner = self.checked("recv", "source", src)?;
        let key = lane.key(inner.comm_id);
        match inner.transport.recv_into(src, key, timeout, head, body) {
            Ok(()) => Ok(Some(true)),
            Err(T::LengthMismatch { .. }) => Ok(Some(false)),
            Err(T::Timeout { .. }) => Ok(None),
            Err(e) => Err(inner.error(e, "recv")),
        }
    }

    /// Receive the next message from `src` under `tag`, whatever its length.
    pub fn recv_bytes(&self, src: u32, tag: u64) -> Result<Vec<u8>> {
        self.recv_bytes_timeout(src, tag, self.inner().timeout())
    }

    /// [`ProcessGroup::recv_bytes`] with its own deadline; a timeout
    /// consumes nothing.
    pub fn recv_bytes_timeout(&self, src: u32, tag: u64, timeout: Duration) -> Result<Vec<u8>> {
        let inner = self.checked("recv_bytes", "source", src)?;
        let msg = inner
            .transport
            .recv(src, Self::p2p_key(inner.comm_id, tag), timeout, None)
            .map_err(|e| inner.error(e, "recv_bytes"))?;
        Ok(msg.as_ref().to_vec())
    }
}
