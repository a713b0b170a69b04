//! TCP's read stage: at a frame boundary one `recvmsg` takes what has
//! come, up to [`STAGE`] bytes, and the link's frame reader is fed from
//! here (`rx.rs`); and the one non-blocking vectored read every read
//! of the socket makes.

use crate::wire::{FrameType, HEADER_LEN};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Bytes a read at a frame boundary takes at most: a small frame's
/// header and body, or several small frames, come in one system call
/// (reading a header alone, then its body, took two per message).
const STAGE: usize = 16 << 10;

/// Bytes read off the socket ahead of the reader, fed to it from here. A
/// pump returns with bytes here only when they are the start of a frame
/// whose header, if staged, decodes (its rest is in the socket or on its
/// way, so a readiness event, or the thread that posted for it, comes):
/// whole frames, and headers to refuse, never wait here.
#[derive(Debug)]
pub(super) struct Stage {
    buf: Box<[u8]>,
    at: usize,
    end: usize,
}

impl Stage {
    pub(super) fn new() -> Stage {
        Stage {
            buf: vec![0; STAGE].into_boxed_slice(),
            at: 0,
            end: 0,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.at == self.end
    }

    pub(super) fn clear(&mut self) {
        (self.at, self.end) = (0, 0);
    }

    /// One non-blocking read of what the socket has, up to [`STAGE`]
    /// bytes (into an empty stage).
    pub(super) fn read(&mut self, stream: &TcpStream) -> std::io::Result<usize> {
        debug_assert!(self.is_empty());
        let n = read_pieces_now(stream, &mut [&mut self.buf[..]], 0)?;
        (self.at, self.end) = (0, n);
        Ok(n)
    }

    /// Move staged bytes to the start of `dst`; how many.
    pub(super) fn give(&mut self, dst: &mut [u8]) -> usize {
        let n = dst.len().min(self.end - self.at);
        dst[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        n
    }

    /// Whether a whole frame is staged (the stage starting at a frame
    /// boundary): a control frame's header, or a data frame's header and
    /// all of its body (an envelope's, on a link with a token). Its
    /// header is not checked here; the reader checks it when fed.
    pub(super) fn holds_frame(&self) -> bool {
        let Some(head) = self.head() else {
            return false;
        };
        if head[0] != FrameType::Data as u8 {
            return true;
        }
        let mut len = [0u8; 8];
        len.copy_from_slice(&head[32..40]);
        (self.end - self.at - HEADER_LEN) as u64 >= u64::from_le_bytes(len)
    }

    /// The staged frame header, if a whole one is staged.
    pub(super) fn head(&self) -> Option<&[u8; HEADER_LEN]> {
        self.buf[self.at..self.end].first_chunk::<HEADER_LEN>()
    }

    /// Move staged bytes into `pieces`, in order from their start; how
    /// many.
    pub(super) fn give_pieces(&mut self, pieces: &mut [&mut [u8]]) -> usize {
        let mut moved = 0;
        for piece in pieces.iter_mut() {
            if self.is_empty() {
                break;
            }
            moved += self.give(piece);
        }
        moved
    }
}

/// Most pieces one direct read fills (an envelope: frame header,
/// descriptor, payload, tag).
const MAX_PIECES: usize = 4;

/// One non-blocking read into `pieces` after their first `skip` bytes
/// (a single `recvmsg(2)` however many pieces); `Ok(0)` is end of stream.
pub(super) fn read_pieces_now(
    stream: &TcpStream,
    pieces: &mut [&mut [u8]],
    mut skip: usize,
) -> std::io::Result<usize> {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_PIECES];
    let mut count = 0;
    for piece in pieces.iter_mut() {
        let from = skip.min(piece.len());
        skip -= from;
        let rest = &mut piece[from..];
        if rest.is_empty() {
            continue;
        }
        let Some(slot) = iov.get_mut(count) else {
            break;
        };
        *slot = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        count += 1;
    }
    if count == 0 {
        return Ok(0);
    }
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = count;
    // SAFETY: each of the first `count` iovecs points into a distinct,
    // exclusively borrowed slice of its stated length, alive for the call;
    // recvmsg(2) writes at most that many bytes into them.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Header;
    use crate::LaneKind;

    fn staged(bytes: &[u8]) -> Stage {
        let mut s = Stage::new();
        s.buf[..bytes.len()].copy_from_slice(bytes);
        (s.at, s.end) = (0, bytes.len());
        s
    }

    /// A whole frame is a control frame's header (a credit's length is
    /// bytes credited, not a payload) or a data frame's header and body.
    #[test]
    fn a_stage_knows_when_it_holds_a_whole_frame() {
        let mut credit = Header::control(FrameType::Credit, 1, 0);
        credit.len = 1 << 20;
        assert!(staged(&credit.encode()).holds_frame());
        let data = Header {
            kind: LaneKind::PointToPoint,
            len: 10,
            ..Header::control(FrameType::Data, 1, 0)
        };
        let mut bytes = data.encode().to_vec();
        assert!(!staged(&bytes[..HEADER_LEN - 1]).holds_frame());
        bytes.extend_from_slice(&[7; 9]);
        assert!(!staged(&bytes).holds_frame());
        bytes.push(7);
        assert!(staged(&bytes).holds_frame());
        // Read from the middle of the stage, as after a frame given away.
        let mut s = staged(&[&[0u8; 5][..], &bytes].concat());
        s.at = 5;
        assert!(s.holds_frame());
        assert!(!staged(&[]).holds_frame());
    }
}
