//! Why a group could not form: the one error type of formation, which
//! the address book (`spec.rs`), formation (`form/`), the same-host
//! upgrade and the backends all return. Its own module, so that none of
//! them has to reach into another for it.

use crate::auth::handshake::HandshakeError;
use std::net::SocketAddr;

/// Why a group could not form. Not `#[non_exhaustive]`: the facade
/// translates each variant into its own error, so a new one must be
/// given its translation where it is added (`meshwork`'s
/// `node/translate.rs` fails to compile until it is).
#[derive(Debug, thiserror::Error)]
pub enum FormationError {
    #[error("rank {rank} is already taken")]
    RankConflict { rank: u32 },
    #[error("rank {rank} holds another cluster token")]
    TokenMismatch { rank: u32 },
    #[error("rank {rank} speaks protocol {theirs}, we speak {ours}")]
    ProtocolMismatch { rank: u32, ours: u32, theirs: u32 },
    #[error("rank {rank} expects a world of {theirs}, we expect {ours}")]
    WorldMismatch { rank: u32, ours: u32, theirs: u32 },
    #[error(
        "rank {rank} uses another topology (mesh, star, k-regular of another degree, or hypercube)"
    )]
    TopologyMismatch { rank: u32 },
    /// The ranks' symmetric heaps differ (`HEAP_MB`, 0 included).
    #[error("rank {rank} has a heap of {theirs} bytes, this rank {ours}")]
    HeapMismatch { rank: u32, ours: u64, theirs: u64 },
    #[error("ranks {missing:?} did not connect before the deadline")]
    Timeout { missing: Vec<u32> },
    #[error("cannot connect to rank {rank}: {reason}")]
    ConnectionFailed { rank: u32, reason: String },
    /// What the seed sent after proving the token did not hold up: altered
    /// in transit (an on-path attacker), or a broken seed. Nothing it sent
    /// was used.
    #[error("the seed at {seed} sent {what}; altered in transit? nothing from it was used")]
    SeedTampered {
        seed: SocketAddr,
        what: &'static str,
    },
}

impl FormationError {
    pub(crate) fn from_handshake(e: HandshakeError, rank: u32) -> FormationError {
        match e {
            HandshakeError::Protocol { ours, theirs } => {
                FormationError::ProtocolMismatch { rank, ours, theirs }
            }
            HandshakeError::World { ours, theirs } => {
                FormationError::WorldMismatch { rank, ours, theirs }
            }
            HandshakeError::RankConflict { rank } => FormationError::RankConflict { rank },
            HandshakeError::Topology => FormationError::TopologyMismatch { rank },
            HandshakeError::Token => FormationError::TokenMismatch { rank },
            HandshakeError::Heap { ours, theirs } => {
                FormationError::HeapMismatch { rank, ours, theirs }
            }
            e @ HandshakeError::Transport { .. } => FormationError::ConnectionFailed {
                rank,
                reason: e.to_string(),
            },
            HandshakeError::Stranger => FormationError::ConnectionFailed {
                rank,
                reason: "the peer is not a meshwork node".into(),
            },
            HandshakeError::Io(e) => FormationError::ConnectionFailed {
                rank,
                reason: e.to_string(),
            },
        }
    }
}

pub(crate) fn io_fail(rank: u32, e: std::io::Error) -> FormationError {
    FormationError::ConnectionFailed {
        rank,
        reason: e.to_string(),
    }
}
