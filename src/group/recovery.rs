//! What a group does when a member fails, and how a failure is named.
//!
//! A failure is a member that is gone without a goodbye (reset, EOF, a
//! dead same-host process) or silent for a whole deadline (a stopped
//! process, a cut link): the transport knows both (`Transport::failed`).
//! A call that waited on a rank which did *not* fail — a neighbour that
//! itself waits behind the failure — gives the failure a moment to become
//! known here, then names the rank that failed, never the neighbour.

use super::GroupInner;
use crate::error::Error;
use meshwork_transport::TransportError;
use std::time::Duration;

/// What a group does when a call meets a failed member (`RECOVERY`,
/// [`crate::Node::recovery`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Recovery {
    /// The call that met the failure fails, naming the rank that failed;
    /// the program decides what to do ([`crate::ProcessGroup::revoke`],
    /// [`crate::ProcessGroup::failed`]).
    #[default]
    Manual,
    /// The first rank to meet a failure revokes the group, so every other
    /// member's pending and later calls fail at once with
    /// [`Error::Revoked`] instead of each at its own deadline.
    Abort,
}

impl Recovery {
    /// Parse `manual` or `abort` (any case).
    pub fn parse(s: &str) -> Option<Recovery> {
        match s.to_ascii_lowercase().as_str() {
            "manual" => Some(Recovery::Manual),
            "abort" => Some(Recovery::Abort),
            _ => None,
        }
    }
}

/// How long a call that waited on a rank which did not fail waits for the
/// failure behind it to become known (a peer's silence is noticed a
/// heartbeat check after its deadline; a dead process's links end at
/// once): at most a second, within the deadline-plus-2-s bound.
fn grace(timeout: Duration) -> Duration {
    timeout.min(Duration::from_secs(1))
}

impl GroupInner {
    /// The error for a transport failure during `op`: revocation as
    /// `Revoked`, a failure named after the rank that failed, and under
    /// [`Recovery::Abort`] the group revoked everywhere.
    pub(crate) fn error(&self, e: TransportError, op: &str) -> Error {
        let err = self.blame(e, op);
        let failure = matches!(err, Error::PeerDisconnected { .. } | Error::Timeout { .. });
        if failure && self.recovery() == Recovery::Abort {
            tracing::warn!(op, "{err}; revoking the group (RECOVERY=abort)");
            self.transport.revoke(self.comm_id);
        }
        err
    }

    fn blame(&self, e: TransportError, op: &str) -> Error {
        let suspect = match e {
            TransportError::Revoked => return Error::Revoked,
            TransportError::Timeout { waiting_on } => waiting_on,
            TransportError::PeerDisconnected { rank } => rank,
            other => return Error::from_transport(other, op),
        };
        if self.transport.is_revoked(self.comm_id) {
            return Error::Revoked;
        }
        let mut failed = self.transport.failed();
        if !failed.contains(&suspect) && failed.is_empty() {
            failed = self
                .transport
                .await_failure(self.comm_id, grace(self.timeout()));
            if self.transport.is_revoked(self.comm_id) {
                return Error::Revoked;
            }
        }
        if failed.is_empty() || failed.contains(&suspect) {
            return Error::from_transport(e, op);
        }
        tracing::debug!(
            op,
            suspect,
            ?failed,
            "named the failed ranks, not the rank waited on"
        );
        match e {
            TransportError::PeerDisconnected { .. } => Error::PeerDisconnected { rank: failed[0] },
            _ => Error::Timeout {
                op: op.to_string(),
                waiting_on: failed,
            },
        }
    }
}
