//! The one resumable frame assembler: every byte stream a link reads (a
//! TCP socket, a QUIC stream, the sidecar) is turned into frames by it.
//!
//! It owns no source. A reader asks where the next bytes go
//! ([`Assembler::space`]), reads into that slice however its source
//! reads, and reports how many arrived ([`Assembler::advance`]); a
//! complete header comes back decoded for the reader to act on (a
//! control frame at once; a data frame's body with
//! [`Assembler::start_body`]), and a complete body is taken with
//! [`Assembler::take_frame`]. Any number of calls may split a frame
//! anywhere.
//!
//! Memory follows the bytes, not the header's claim: a body is reserved
//! up to [`RESERVE`] bytes before anything of it arrives and grows as its
//! bytes come (doubling), so a peer announcing 16 GiB and sending nothing
//! costs at most `RESERVE`. A buffer already in the pool that fits the
//! whole body is used whole (no new memory is reserved for it).

use super::frame::{FrameError, FrameType, Header, HEADER_LEN};
use crate::BufferPool;

/// Most bytes reserved for a body before its bytes arrive.
pub(crate) const RESERVE: usize = 4 << 20;

#[derive(Debug)]
struct Body {
    header: Header,
    buf: Vec<u8>,
    /// Bytes of the body read so far (`buf[..read]`, from the front
    /// room on).
    read: usize,
    /// The body's length, from the header, and the front room
    /// ([`Header::front`]).
    total: usize,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Assembler {
    head: [u8; HEADER_LEN],
    have: usize,
    body: Option<Body>,
    world: u32,
    max_len: u64,
}

impl Assembler {
    /// An assembler for frames between ranks `0..world`, data frames of at
    /// most `max_len` payload bytes.
    pub(crate) fn new(world: u32, max_len: u64) -> Assembler {
        Assembler {
            head: [0; HEADER_LEN],
            have: 0,
            body: None,
            world,
            max_len,
        }
    }

    /// Where the next bytes of the stream go: the rest of a header, or of
    /// a body (never empty while a frame is incomplete).
    pub(crate) fn space(&mut self) -> &mut [u8] {
        match &mut self.body {
            Some(b) => {
                if b.read == b.buf.len() && b.read < b.total {
                    grow(b);
                }
                &mut b.buf[b.read..]
            }
            None => &mut self.head[self.have..],
        }
    }

    /// `n` bytes were written at the start of [`space`](Self::space). A
    /// header they complete is decoded and returned; one that does not
    /// decode is a protocol error (the stream cannot be resynchronised).
    pub(crate) fn advance(&mut self, n: usize) -> Result<Option<Header>, FrameError> {
        if let Some(b) = &mut self.body {
            b.read = (b.read + n).min(b.buf.len());
            return Ok(None);
        }
        self.have = (self.have + n).min(HEADER_LEN);
        if self.have < HEADER_LEN {
            return Ok(None);
        }
        self.have = 0;
        Header::decode(&self.head, self.world, self.max_len).map(Some)
    }

    /// Whether `head` decodes as a header of this stream's frames.
    pub(crate) fn decodes(&self, head: &[u8; HEADER_LEN]) -> bool {
        Header::decode(head, self.world, self.max_len).is_ok()
    }

    /// Read `h`'s body next (`h` is a data frame just returned by
    /// [`advance`](Self::advance)).
    pub(crate) fn start_body(&mut self, h: Header, pool: &BufferPool) {
        debug_assert_eq!(h.ftype, FrameType::Data);
        // `h.len` was checked against the cap by `decode`; a cap over the
        // address space is refused here rather than truncated.
        let front = h.front();
        let total = usize::try_from(h.len)
            .unwrap_or(usize::MAX)
            .saturating_add(front);
        // The front room counts beside the reservation: a body of
        // `RESERVE` bytes is never regrown for its word.
        let mut buf = pool.take_reusing(total, RESERVE + front);
        let first = total.min(buf.capacity().max(total.min(RESERVE + front)));
        set_len(&mut buf, first);
        self.body = Some(Body {
            header: h,
            buf,
            read: front,
            total,
        });
    }

    /// [`start_body`](Self::start_body) for a body whose first bytes,
    /// `read`, were read elsewhere (a direct read that stopped part way):
    /// they are copied in, and reading goes on after them.
    pub(crate) fn resume_body(&mut self, h: Header, pool: &BufferPool, read: &[&[u8]]) {
        self.start_body(h, pool);
        let Some(b) = self.body.as_mut() else {
            return;
        };
        let from = b.read;
        let n: usize = read
            .iter()
            .map(|p| p.len())
            .sum::<usize>()
            .min(b.total - from);
        if b.buf.len() < from + n {
            set_len(&mut b.buf, from + n);
        }
        let mut at = from;
        for p in read {
            let take = p.len().min(from + n - at);
            b.buf[at..at + take].copy_from_slice(&p[..take]);
            at += take;
        }
        b.read = from + n;
    }

    /// The data frame just completed, if one has: its buffer starts with
    /// the header's [`front`](Header::front) room.
    pub(crate) fn take_frame(&mut self) -> Option<(Header, Vec<u8>)> {
        if !self.frame_ready() {
            return None;
        }
        let mut b = self.body.take()?;
        b.buf.truncate(b.total);
        Some((b.header, b.buf))
    }

    /// Whether a complete data frame waits to be taken.
    pub(crate) fn frame_ready(&self) -> bool {
        matches!(&self.body, Some(b) if b.read == b.total)
    }

    /// The body being read, as far as it is read, and its whole length.
    pub(crate) fn body_so_far(&self) -> Option<(&[u8], usize)> {
        self.body.as_ref().map(|b| (&b.buf[..b.read], b.total))
    }

    /// The header of the body being read, if any.
    pub(crate) fn body_header(&self) -> Option<&Header> {
        self.body.as_ref().map(|b| &b.header)
    }

    /// Whether part of a frame has been read and the frame is not
    /// complete (a stream ending now ends inside a frame).
    pub(crate) fn mid_frame(&self) -> bool {
        self.have != 0 || (self.body.is_some() && !self.frame_ready())
    }

    /// Give the body being read (if any) back to `pool`.
    pub(crate) fn discard(&mut self, pool: &BufferPool) {
        if let Some(b) = self.body.take() {
            pool.give(b.buf);
        }
        self.have = 0;
    }
}

/// Make `buf` `len` bytes long; bytes past its old length are zeroed.
fn set_len(buf: &mut Vec<u8>, len: usize) {
    if buf.len() >= len {
        buf.truncate(len);
    } else {
        buf.resize(len, 0);
    }
}

/// The body's buffer is full but the body is not: room for more, up to
/// its capacity if that is larger, else double (bounded by the body).
fn grow(b: &mut Body) {
    let len = b.buf.len();
    let next = if b.buf.capacity() > len {
        b.buf.capacity()
    } else {
        len.saturating_mul(2).max(64 << 10)
    };
    set_len(&mut b.buf, next.min(b.total));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LaneKind, MATCHED_WORD};

    fn data(len: u64) -> Header {
        Header {
            ftype: FrameType::Data,
            kind: LaneKind::PointToPoint,
            src: 1,
            dst: 0,
            comm: 9,
            tag: 77,
            len,
            aux: 0,
            seq: 0,
        }
    }

    /// Feed `stream` in pieces of `step` bytes; the frames that come out.
    fn run(stream: &[u8], step: usize, pool: &BufferPool) -> Vec<(Header, Vec<u8>)> {
        let mut asm = Assembler::new(4, 1 << 30);
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            if let Some(f) = asm.take_frame() {
                out.push(f);
                continue;
            }
            if at == stream.len() {
                assert!(!asm.mid_frame(), "stream ended inside a frame");
                return out;
            }
            let space = asm.space();
            let n = space.len().min(step).min(stream.len() - at);
            space[..n].copy_from_slice(&stream[at..at + n]);
            at += n;
            if let Some(h) = asm.advance(n).unwrap() {
                match h.ftype {
                    FrameType::Data => asm.start_body(h, pool),
                    _ => out.push((h, Vec::new())),
                }
            }
        }
    }

    #[test]
    fn frames_come_out_whole_however_the_bytes_are_split() {
        let pool = BufferPool::new();
        let sizes = [0usize, 1, 39, 40, 4096, RESERVE + 12_345];
        let mut stream = Vec::new();
        let mut want = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let body: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
            stream.extend_from_slice(&data(n as u64).encode());
            stream.extend_from_slice(&body);
            want.push((data(n as u64), body));
            let hb = Header::control(FrameType::Heartbeat, 2, 3);
            stream.extend_from_slice(&hb.encode());
            want.push((hb, Vec::new()));
        }
        for step in [1, 7, 40, 41, 65_536, usize::MAX] {
            if step == 1 {
                // One byte at a time through 4 MiB is slow in debug builds;
                // the small frames cover the split points.
                let small = &stream[..stream.len() - (RESERVE + 12_345 + 80)];
                assert_eq!(run(small, 1, &pool), want[..want.len() - 2]);
                continue;
            }
            assert_eq!(run(&stream, step, &pool), want, "step {step}");
        }
    }

    /// A matched frame's buffer has its word's room in front of the body,
    /// whatever the split, and a 4 MiB body is read into its first
    /// reservation (never regrown for the word); a resumed body goes on
    /// after the room.
    #[test]
    fn a_matched_frame_leaves_room_for_its_word_before_its_body() {
        let pool = BufferPool::new();
        let matched = |len: u64| Header {
            kind: LaneKind::Matched,
            tag: u64::from_le_bytes(*b"envelope"),
            ..data(len)
        };
        for n in [0usize, 9, RESERVE] {
            let body: Vec<u8> = (0..n).map(|j| (j * 7) as u8).collect();
            let stream = [&matched(n as u64).encode()[..], &body].concat();
            for step in [3, 65_536, usize::MAX] {
                let out = run(&stream, step, &pool);
                let (h, buf) = &out[0];
                assert_eq!(h.front(), MATCHED_WORD);
                assert_eq!(buf.len(), MATCHED_WORD + n, "size {n}, step {step}");
                assert!(buf[MATCHED_WORD..] == body[..], "size {n}, step {step}");
            }
        }
        let mut asm = Assembler::new(4, 1 << 30);
        asm.start_body(matched(RESERVE as u64), &pool);
        assert_eq!(asm.space().len(), RESERVE, "the first reservation holds it");
        let mut asm = Assembler::new(4, 1 << 30);
        asm.resume_body(matched(10), &pool, &[b"0123", b"45"]);
        asm.space()[..4].copy_from_slice(b"6789");
        asm.advance(4).unwrap();
        let (_, buf) = asm.take_frame().unwrap();
        assert_eq!(&buf[MATCHED_WORD..], b"0123456789");
    }

    #[test]
    fn a_huge_claim_reserves_only_a_bounded_amount() {
        let pool = BufferPool::new();
        let mut asm = Assembler::new(4, u64::MAX);
        let head = data(16 << 30).encode();
        let space = asm.space();
        space.copy_from_slice(&head);
        let h = asm.advance(HEADER_LEN).unwrap().unwrap();
        asm.start_body(h, &pool);
        assert!(asm.space().len() <= RESERVE, "{}", asm.space().len());
        // Bytes arriving grow it step by step, never to the claim.
        let n = asm.space().len();
        asm.advance(n).unwrap();
        assert!(asm.space().len() <= 2 * RESERVE);
        assert!(asm.mid_frame());
        asm.discard(&pool);
        assert!(!asm.mid_frame());
    }

    #[test]
    fn a_complete_frame_is_not_mid_frame_until_taken() {
        // A stream that ends with the last byte of a frame ends cleanly, and
        // asking so does not take the frame.
        let pool = BufferPool::new();
        let mut asm = Assembler::new(4, 100);
        asm.space().copy_from_slice(&data(2).encode());
        let h = asm.advance(HEADER_LEN).unwrap().unwrap();
        asm.start_body(h, &pool);
        assert!(asm.mid_frame());
        asm.space()[..2].copy_from_slice(b"hi");
        asm.advance(2).unwrap();
        assert!(!asm.mid_frame() && asm.frame_ready());
        assert_eq!(asm.take_frame(), Some((data(2), b"hi".to_vec())));
        assert!(!asm.frame_ready());
    }

    #[test]
    fn a_bad_header_is_an_error() {
        let mut asm = Assembler::new(2, 100);
        let mut head = data(10).encode();
        head[0] = 99;
        asm.space().copy_from_slice(&head);
        assert_eq!(asm.advance(HEADER_LEN), Err(FrameError::Type(99)));
        let mut asm = Assembler::new(2, 100);
        asm.space().copy_from_slice(&data(101).encode());
        assert_eq!(asm.advance(HEADER_LEN), Err(FrameError::TooLong(101, 100)));
    }
}
