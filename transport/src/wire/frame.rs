//! The frame codec of network links.
//!
//! Every frame is a fixed 40-byte header, then `len` payload bytes:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 1 | type: 1 data, 2 heartbeat, 3 bye, 4 peer gone, 5 credit, 6 credit wanted, 7 revoke |
//! | 1 | 1 | lane kind ([`LaneKind`]) |
//! | 2 | 2 | QUIC: sidecar payloads sent on this frame's stream before it (mod 2^16); TCP: zero |
//! | 4 | 4 | source rank (the original sender, kept through relays) |
//! | 8 | 4 | destination rank (the final receiver; a star coordinator relays others) |
//! | 12 | 4 | aux: a credit's message count; a sidecar payload's place (frames sent on its stream before it); 1 on a peer-gone notice of a silent rank; zero otherwise |
//! | 16 | 8 | communicator id |
//! | 24 | 8 | tag; on a matched lane ([`LaneKind::Matched`], whose lane's tag is 0), the message's first 8 bytes, which the payload then leaves out |
//! | 32 | 8 | payload length (a credit: bytes credited; no payload follows) |
//!
//! All integers are little-endian. A header is checked before its payload is
//! read or allocated: unknown type or lane kind, a rank outside the world,
//! or a length over the cap is a protocol error that closes the link.

use crate::{LaneKey, LaneKind};

/// Bytes of a frame header.
pub(crate) const HEADER_LEN: usize = 40;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum FrameType {
    Data = 1,
    Heartbeat = 2,
    Bye = 3,
    /// Sent by a star coordinator: rank `src` is gone (`aux` 1: silent
    /// for a whole deadline).
    PeerGone = 4,
    /// `src` took `aux` messages of the lane (comm, kind, tag) and `len`
    /// budgeted bytes from `dst`, who may send that much more (flow
    /// control, end to end; relayed in a star).
    Credit = 5,
    /// `src` waits for room to send to `dst` on the lane (comm, kind,
    /// tag): `dst` returns what it owes at once, or at its next receive
    /// from `src` (credits are otherwise returned in batches).
    CreditWanted = 6,
    /// Communicator `comm` is revoked (by `src`'s process or one it heard
    /// it from); each rank passes it on once.
    Revoke = 7,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub ftype: FrameType,
    pub kind: LaneKind,
    pub src: u32,
    pub dst: u32,
    pub comm: u64,
    pub tag: u64,
    pub len: u64,
    pub aux: u32,
    /// QUIC's order stamp (see `quic/order.rs`).
    pub seq: u16,
}

/// Why a header was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("unknown frame type {0}")]
    Type(u8),
    #[error("unknown lane kind {0}")]
    Kind(u8),
    #[error("rank {0} is outside the world of {1}")]
    Rank(u32, u32),
    #[error("frame of {0} bytes exceeds the cap of {1}")]
    TooLong(u64, u64),
}

impl Header {
    /// A control frame (heartbeat, bye, peer gone) with no payload.
    pub(crate) fn control(ftype: FrameType, src: u32, dst: u32) -> Header {
        Header {
            ftype,
            kind: LaneKind::Control,
            src,
            dst,
            comm: 0,
            tag: 0,
            len: 0,
            aux: 0,
            seq: 0,
        }
    }

    /// The lane of this frame (of a data frame, or the lane a credit is
    /// for): a matched lane's frames carry their message's word where
    /// the tag goes, and their lane's tag is 0.
    pub(crate) fn lane(&self) -> LaneKey {
        let tag = if self.kind == LaneKind::Matched {
            0
        } else {
            self.tag
        };
        LaneKey {
            comm: self.comm,
            kind: self.kind,
            tag,
        }
    }

    /// A matched lane's data frame: its message's word (the bytes that go
    /// before its payload), else `None`.
    pub(crate) fn word(&self) -> Option<[u8; crate::MATCHED_WORD]> {
        (self.ftype == FrameType::Data && self.kind == LaneKind::Matched)
            .then(|| self.tag.to_le_bytes())
    }

    /// Bytes an assembler leaves free before this frame's payload: room
    /// for a matched lane's word, so that the message is whole with no
    /// copy once it is put there.
    pub(crate) fn front(&self) -> usize {
        self.word().map_or(0, |w| w.len())
    }

    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0] = self.ftype as u8;
        h[1] = self.kind as u8;
        h[2..4].copy_from_slice(&self.seq.to_le_bytes());
        h[4..8].copy_from_slice(&self.src.to_le_bytes());
        h[8..12].copy_from_slice(&self.dst.to_le_bytes());
        h[12..16].copy_from_slice(&self.aux.to_le_bytes());
        h[16..24].copy_from_slice(&self.comm.to_le_bytes());
        h[24..32].copy_from_slice(&self.tag.to_le_bytes());
        h[32..40].copy_from_slice(&self.len.to_le_bytes());
        h
    }

    pub(crate) fn decode(
        h: &[u8; HEADER_LEN],
        world: u32,
        max_len: u64,
    ) -> Result<Header, FrameError> {
        // Fixed length: every read below is in bounds.
        let mut r = super::Reader::new(h);
        let (t, k) = (r.u8().unwrap_or(0), r.u8().unwrap_or(0));
        let seq = r.u16().unwrap_or(0);
        let (src, dst, aux) = (
            r.u32().unwrap_or(0),
            r.u32().unwrap_or(0),
            r.u32().unwrap_or(0),
        );
        let (comm, tag, len) = (
            r.u64().unwrap_or(0),
            r.u64().unwrap_or(0),
            r.u64().unwrap_or(0),
        );
        let ftype = match t {
            1 => FrameType::Data,
            2 => FrameType::Heartbeat,
            3 => FrameType::Bye,
            4 => FrameType::PeerGone,
            5 => FrameType::Credit,
            6 => FrameType::CreditWanted,
            7 => FrameType::Revoke,
            t => return Err(FrameError::Type(t)),
        };
        let kind = LaneKind::from_u8(k).ok_or(FrameError::Kind(k))?;
        for r in [src, dst] {
            if r >= world {
                return Err(FrameError::Rank(r, world));
            }
        }
        // Only data frames carry `len` bytes after the header.
        if ftype == FrameType::Data && len > max_len {
            return Err(FrameError::TooLong(len, max_len));
        }
        Ok(Header {
            ftype,
            kind,
            src,
            dst,
            comm,
            tag,
            len,
            aux,
            seq,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let h = Header {
            ftype: FrameType::Data,
            kind: LaneKind::Rpc,
            src: 3,
            dst: 1,
            comm: u64::MAX,
            tag: 42,
            len: 1 << 33,
            aux: 7,
            seq: 513,
        };
        let bytes = h.encode();
        assert_eq!(Header::decode(&bytes, 4, 1 << 34), Ok(h));
        assert_eq!(
            Header::decode(&bytes, 3, 1 << 34),
            Err(FrameError::Rank(3, 3))
        );
        assert_eq!(
            Header::decode(&bytes, 4, 1 << 20),
            Err(FrameError::TooLong(1 << 33, 1 << 20))
        );
        let mut bad = bytes;
        bad[0] = 9;
        assert_eq!(Header::decode(&bad, 4, u64::MAX), Err(FrameError::Type(9)));
        bad = bytes;
        bad[1] = 77;
        assert_eq!(Header::decode(&bad, 4, u64::MAX), Err(FrameError::Kind(77)));
    }
}
