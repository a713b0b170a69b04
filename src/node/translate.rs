//! The transport's words in the facade's: formation failures as errors,
//! one arm per kind (the match is exhaustive: a kind the transport adds
//! does not compile here until it is given its error).

use crate::error::Error;
use meshwork_transport::FormationError;

pub(super) fn from_formation(e: FormationError) -> Error {
    match e {
        FormationError::RankConflict { rank } => Error::RankConflict { rank },
        FormationError::TokenMismatch { .. } => Error::ClusterTokenMismatch,
        FormationError::ProtocolMismatch { ours, theirs, .. } => {
            Error::ProtocolMismatch { ours, theirs }
        }
        FormationError::WorldMismatch { ours, theirs, .. } => Error::WorldMismatch { ours, theirs },
        FormationError::Timeout { missing } => Error::FormationTimeout { missing },
        FormationError::HeapMismatch { rank, ours, theirs } => Error::InvalidArgument(format!(
            "the heap differs between ranks: rank {rank} has {theirs} bytes, this rank {ours}; set the same HEAP_MB (Node::heap_bytes) everywhere"
        )),
        FormationError::TopologyMismatch { rank } => Error::ConnectionFailed {
            rank,
            reason: "it uses another topology (mesh, star, k-regular of another degree, or hypercube); set the same TOPOLOGY everywhere"
                .into(),
        },
        FormationError::ConnectionFailed { rank, reason } => {
            Error::ConnectionFailed { rank, reason }
        }
        e @ FormationError::SeedTampered { .. } => Error::ConnectionFailed {
            rank: 0,
            reason: e.to_string(),
        },
    }
}
