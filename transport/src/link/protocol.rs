//! What a peer did wrong: the protocol errors that close a link.
//!
//! A link's peer is authenticated, but authenticated is not honest (see
//! `dispatch.rs`): a frame that breaks the protocol closes the link, and
//! the error names what the peer sent, for the log and for the reason a
//! QUIC link closes with. Each variant is something only the peer (or a
//! broken peer build) can cause; failures of this side's own sockets or
//! crypto have their own types where they arise.

use crate::wire::frame::FrameError;

/// What the peer sent that the protocol does not allow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProtocolError {
    /// A frame header that does not decode; a byte stream cannot be
    /// resynchronised after one.
    #[error("a malformed frame header: {0}")]
    BadHeader(#[from] FrameError),
    /// A frame the core refused (`dispatch.rs` logs which check failed):
    /// not from a rank the link serves, not along a route through it, or
    /// a notice the link may not carry.
    #[error("{0} this link may not carry")]
    NotCarried(Carried),
    /// The peer's stream ended in the middle of a frame.
    #[error("stream {id} ended inside a frame")]
    EndedInsideFrame { id: u64 },
    /// Frames on a QUIC stream the peer may not write: not one of its own
    /// unidirectional streams, or beyond the streams a link has.
    #[error("frames on unexpected stream {id}")]
    UnexpectedStream { id: u64 },
    /// Frames for a stream index the link's order keeper does not have.
    #[error("frames on no such stream (index {index})")]
    NoSuchStream { index: usize },
    /// More frames of one QUIC stream wait for sidecar payloads than may:
    /// the peer's order stamps never line up (`quic/order.rs`).
    #[error(
        "too many frames ({waiting}) waiting for sidecar payloads: order stamps that never line up"
    )]
    FramesWithoutPayloads { waiting: usize },
    /// More sidecar payloads wait for their frames than may: the peer's
    /// order stamps never line up.
    #[error("too many sidecar payloads ({waiting}) waiting for their frames: order stamps that never line up")]
    PayloadsWithoutFrames { waiting: usize },
    /// Point-to-point and RPC bytes from `src` waiting for their turn on
    /// a QUIC link, with what `src` has queued in the inbox, past the
    /// budget every sender holds itself to (`quic/order.rs`).
    #[error("{bytes} bytes from rank {src} waiting for their turn: past PEER_BUDGET_BYTES")]
    WaitingPastBudget { src: u32, bytes: u64 },
    /// A frame outside its envelope on a link whose frames are all
    /// sealed (a link with a token).
    #[error("a frame outside its envelope on an authenticated link")]
    Unsealed,
    /// The peer ended the link: its goodbye, or a control frame the core
    /// refused (and logged). Not always a violation, but the link ends
    /// all the same.
    #[error("the peer ended the link")]
    Ended,
}

/// What a frame the core refused was (see [`ProtocolError::NotCarried`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carried {
    /// A frame with its payload, read off a QUIC stream.
    Frame,
    /// A data frame's header.
    DataFrame,
    /// A payload read off the QUIC link's TCP sidecar.
    SidecarPayload,
    /// A peer-gone notice.
    PeerGone,
}

impl std::fmt::Display for Carried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Carried::Frame => "a frame",
            Carried::DataFrame => "a data frame",
            Carried::SidecarPayload => "a sidecar payload",
            Carried::PeerGone => "a peer-gone notice",
        })
    }
}
