//! The one frame reader every link's receive side feeds: bytes in;
//! headers, frames and verdicts out. It owns no source and does no I/O
//! (sans-IO): a TCP socket, a shared-memory ring and a QUIC stream each
//! read into [`Reader::space`] however they read, and say how many bytes
//! came ([`Reader::fed`]).
//!
//! Everything between the bytes and the core's dispatch is here, once:
//! - assembling frames across reads split anywhere (`wire::Assembler`);
//! - on a link with a token, envelopes: an outer header is nobody's word,
//!   a frame outside its envelope is refused, the tag is hashed as the
//!   body's bytes arrive (while they are in cache) and checked before
//!   anything of the frame is acted on;
//! - whose progress the bytes are (the frame's source rank once it is
//!   trusted, the link's peer before);
//! - the core's verdict on a header (`Core::on_header`);
//! - why a stream can be read no further, as a typed [`ReadError`].
//!
//! What stays with each link is what only it knows: where bytes come
//! from, reading a posted receive's payload straight into the caller's
//! buffers, and how its stream ends.

use super::{Carried, Core, Next, ProtocolError};
use crate::auth::seal::{AuthError, Opener, SEAL_OVERHEAD};
use crate::wire::{Assembler, FrameType, Header, HEADER_LEN};
use crate::{BufferPool, Payload};

/// Why a link's stream can be read no further: what the peer sent, or
/// (`Auth`'s own-side variants) this side's crypto failing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error(transparent)]
    Auth(#[from] AuthError),
}

impl ReadError {
    /// Say why `peer`'s link closes (a goodbye is no error, and the
    /// core's dispatch has said why it refused a frame).
    pub(crate) fn log(&self, peer: u32) {
        if matches!(
            self,
            ReadError::Protocol(ProtocolError::Ended | ProtocolError::NotCarried(_))
        ) {
            tracing::debug!(peer, "{self}; closing the link");
        } else {
            tracing::error!(peer, "{self} on the link to rank {peer}; closing the link");
        }
    }
}

/// What the bytes fed so far made.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fed {
    /// Nothing to act on yet: feed more.
    More,
    /// A frame header, decoded and checked (`wire::frame`), not yet
    /// dispatched: the link hands it to [`Reader::dispatch`] (or, where
    /// frames must wait their turn, to its order keeper).
    Header(Header),
    /// With a token: an envelope's outer header. Nothing in it counts;
    /// its body comes next ([`Reader::envelope`], or a direct read that
    /// checks the tag where the bytes land).
    Envelope(Header),
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Reader {
    peer: u32,
    asm: Assembler,
    /// With a token: opens every frame's envelope (`auth/seal.rs`).
    opener: Option<Opener>,
}

impl Reader {
    /// A reader of `peer`'s stream: frames between ranks `0..world` of at
    /// most `max_len` payload bytes, in envelopes when `opener` is given.
    pub(crate) fn new(peer: u32, world: u32, max_len: u64, opener: Option<Opener>) -> Reader {
        let overhead = if opener.is_some() {
            SEAL_OVERHEAD as u64
        } else {
            0
        };
        Reader {
            peer,
            asm: Assembler::new(world, max_len.saturating_add(overhead)),
            opener,
        }
    }

    /// Where the next bytes of the stream go (never empty).
    #[inline]
    pub(crate) fn space(&mut self) -> &mut [u8] {
        self.asm.space()
    }

    /// Whether frames come in envelopes.
    #[inline]
    fn sealed(&self) -> bool {
        self.opener.is_some()
    }

    /// The rank whose progress bytes of a frame with header `h` are: its
    /// source, unless `h` is an envelope's outer header (only the link's
    /// peer is known to be sending until the tag checks).
    #[inline]
    fn source(&self, h: &Header) -> u32 {
        if self.sealed() {
            self.peer
        } else {
            h.src
        }
    }

    /// `n` bytes were written at the start of [`space`](Self::space).
    /// Bytes of a body are progress of its sender (told to `core`); a
    /// header they complete comes back for the link to act on.
    #[inline]
    pub(crate) fn fed(&mut self, core: &Core, n: usize) -> Result<Fed, ReadError> {
        if let Some(h) = self.asm.body_header() {
            core.progress(self.peer, self.source(h), h.kind);
        }
        let h = match self.asm.advance(n).map_err(ProtocolError::from)? {
            None => {
                self.hash_arrived()?;
                return Ok(Fed::More);
            }
            Some(h) => h,
        };
        if !self.sealed() {
            return Ok(Fed::Header(h));
        }
        if h.ftype != FrameType::Data {
            return Err(ProtocolError::Unsealed.into());
        }
        Ok(Fed::Envelope(h))
    }

    /// The core's verdict on header `h` (a control frame acts now):
    /// `Some` for a data frame whose body comes next.
    #[inline]
    pub(crate) fn dispatch(&self, core: &Core, h: Header) -> Result<Option<Header>, ReadError> {
        match core.on_header(self.peer, h) {
            Next::Continue => Ok(None),
            Next::Body(h) => Ok(Some(h)),
            Next::End if h.ftype == FrameType::Data => {
                Err(ProtocolError::NotCarried(Carried::DataFrame).into())
            }
            Next::End => Err(ProtocolError::Ended.into()),
        }
    }

    /// Assemble data frame `h`'s body (its header passed
    /// [`dispatch`](Self::dispatch)).
    #[inline]
    pub(crate) fn body(&mut self, h: Header, pool: &BufferPool) {
        self.asm.start_body(h, pool);
    }

    /// [`body`](Self::body) for a body whose first bytes, `read`, a direct
    /// read took off the stream before giving way.
    pub(crate) fn resume(&mut self, h: Header, pool: &BufferPool, read: &[&[u8]]) {
        self.asm.resume_body(h, pool, read);
    }

    /// Assemble the body of envelope `outer` (after `read`, its first
    /// bytes read elsewhere), hashing it as it comes in.
    pub(crate) fn envelope(
        &mut self,
        outer: Header,
        pool: &BufferPool,
        read: &[&[u8]],
    ) -> Result<(), ReadError> {
        self.asm.resume_body(outer, pool, read);
        if let Some(o) = self.opener.as_mut() {
            o.stream_start()?;
        }
        self.hash_arrived()
    }

    /// Hash what has arrived of the envelope being assembled.
    #[inline]
    fn hash_arrived(&mut self) -> Result<(), ReadError> {
        let Some(o) = self.opener.as_mut() else {
            return Ok(());
        };
        match self.asm.body_so_far() {
            Some((read, total)) => Ok(o.stream_feed(read, total)?),
            None => Ok(()),
        }
    }

    /// The next complete data frame, authentic and dispatched: its
    /// payload is for the core's inbox, a relay or an order keeper. An
    /// envelope is opened here and its frame dispatched (a control frame
    /// in an envelope acts now, and `None` comes back).
    #[inline]
    pub(crate) fn frame(&mut self, core: &Core) -> Result<Option<(Header, Payload)>, ReadError> {
        let Some((h, buf)) = self.asm.take_frame() else {
            return Ok(None);
        };
        let Some(o) = self.opener.as_mut() else {
            let mut payload = Payload::from_vec_in(buf, Some(&core.pool));
            payload.advance(h.front());
            return Ok(Some((h, payload)));
        };
        let (h, payload) = o.open(buf, core.world, core.max_message_bytes, &core.pool)?;
        Ok(self.dispatch(core, h)?.map(|h| (h, payload)))
    }

    /// Whether `head` decodes as a frame header on this stream (checked
    /// as [`fed`](Self::fed) would, without feeding it).
    pub(crate) fn decodes(&self, head: &[u8; HEADER_LEN]) -> bool {
        self.asm.decodes(head)
    }

    /// Whether the next bytes are a body's (the reader's space is the
    /// rest of it).
    #[inline]
    pub(crate) fn in_body(&self) -> bool {
        self.asm.body_header().is_some() && !self.asm.frame_ready()
    }

    /// Whether a complete frame waits for [`frame`](Self::frame).
    #[inline]
    pub(crate) fn frame_ready(&self) -> bool {
        self.asm.frame_ready()
    }

    /// Whether the stream stopped inside a frame (an end now is one
    /// inside a frame; otherwise the next byte starts a frame).
    #[inline]
    pub(crate) fn mid_frame(&self) -> bool {
        self.asm.mid_frame()
    }

    /// Give the body being read, if any, back to `pool` (the stream is
    /// done with).
    pub(crate) fn discard(&mut self, pool: &BufferPool) {
        self.asm.discard(pool);
    }

    /// The opener, for a direct read that checks an envelope where its
    /// bytes land (put back with [`put_opener`](Self::put_opener)).
    pub(crate) fn take_opener(&mut self) -> Option<Opener> {
        self.opener.take()
    }

    pub(crate) fn put_opener(&mut self, o: Opener) {
        self.opener = Some(o);
    }

    /// Whether this link's envelopes can be checked where they land.
    #[inline]
    pub(crate) fn in_place(&self) -> bool {
        self.opener.as_ref().is_some_and(Opener::in_place)
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
