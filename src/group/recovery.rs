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
    /// The first rank to meet a failure revokes the group; every member
    /// whose call then fails agrees with the others on what failed and
    /// replaces the group, in place (the same `ProcessGroup`), with the
    /// survivors: that call, and every pending non-blocking one, fails
    /// with [`Error::GroupShrunk`] naming the failed ranks (the same on
    /// every survivor), `rank()` and `world_size()` are the shrunk
    /// group's, and the program retries. Sub-groups split from it are
    /// revoked. A member that makes no call for a whole deadline after the
    /// failure is counted failed too.
    Shrink,
}

impl Recovery {
    /// Parse `manual`, `abort` or `shrink` (any case).
    pub fn parse(s: &str) -> Option<Recovery> {
        match s.to_ascii_lowercase().as_str() {
            "manual" => Some(Recovery::Manual),
            "abort" => Some(Recovery::Abort),
            "shrink" => Some(Recovery::Shrink),
            _ => None,
        }
    }
}

/// How long a call that waited on a rank which did not fail waits for the
/// failure behind it to become known here (a dead process's links end at
/// once; a silence is noticed by every link within the liveness limit
/// and a heartbeat): a second, or the liveness limit and a half if
/// longer, never past the deadline.
pub(super) fn grace(timeout: Duration, liveness: Duration) -> Duration {
    timeout.min((liveness + liveness / 2).max(Duration::from_secs(1)))
}

impl GroupInner {
    /// [`grace`] for this group's deadline and its links' liveness.
    pub(crate) fn grace(&self) -> Duration {
        grace(self.timeout(), self.transport.liveness())
    }

    /// The error for a transport failure during `op`: revocation as
    /// `Revoked`, a failure named after the rank that failed, and under
    /// [`Recovery::Abort`] the group revoked everywhere.
    pub(crate) fn error(&self, e: TransportError, op: &str) -> Error {
        self.error_in(e, op, None)
    }

    /// [`error`](Self::error) of collective call `seq` (`Some`): a timeout
    /// that no failure explains asks the other members who never entered
    /// the call (`flight.rs`).
    pub(crate) fn error_in(&self, e: TransportError, op: &str, seq: Option<u64>) -> Error {
        let err = self.blame(e, op, seq);
        let failure = matches!(err, Error::PeerDisconnected { .. } | Error::Timeout { .. });
        match self.recovery() {
            Recovery::Abort if failure => {
                tracing::warn!(op, "{err}; revoking the group (RECOVERY=abort)");
                self.transport.revoke(self.comm_id);
            }
            // Set at run time on a group that cannot shrink (a node
            // refuses it up front): it aborts instead.
            Recovery::Shrink if failure && self.fixed_relays() => {
                tracing::warn!(
                    op,
                    "{err}; revoking the group: {}",
                    crate::shape::sparse_cannot("RECOVERY=shrink")
                );
                self.transport.revoke(self.comm_id);
            }
            Recovery::Shrink if failure || matches!(err, Error::Revoked) => {
                return self.recover(err);
            }
            _ => {}
        }
        err
    }

    /// `Recovery::Shrink`: revoke this communicator (every member's calls
    /// fail, and each comes here), agree on what failed, and put the
    /// survivors' communicator in its place; the call fails with
    /// `GroupShrunk`. Once per communicator: a thread that comes later,
    /// or a call still on it, gets the same `GroupShrunk`.
    pub(crate) fn recover(&self, err: Error) -> Error {
        let shrunk = |failed: &Vec<u32>| Error::GroupShrunk {
            failed: failed.clone(),
        };
        if let Some(failed) = self.shrunk.get() {
            return shrunk(failed);
        }
        let Some(cell) = self.cell.get().and_then(std::sync::Weak::upgrade) else {
            return err;
        };
        let _one = cell.recovering.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(failed) = self.shrunk.get() {
            return shrunk(failed);
        }
        tracing::warn!("{err}; shrinking the group (RECOVERY=shrink)");
        self.transport.revoke(self.comm_id);
        for &child in self
            .children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            self.transport.revoke(child);
        }
        let n = self.agreements.load(std::sync::atomic::Ordering::Relaxed);
        let failed = match self.agree(u64::MAX) {
            Ok((_, failed)) => failed,
            // Without quorum the group stays, stale: it never goes on as
            // a smaller world beside the side that has quorum.
            Err(e) => return e,
        };
        let Some(survivors) = self.survivors(&failed, n) else {
            return Error::Expelled { rank: self.rank };
        };
        self.retire();
        cell.replace(survivors);
        let _ = self.shrunk.set(failed.clone());
        tracing::info!(?failed, "group shrunk in place");
        shrunk(&failed)
    }

    fn blame(&self, e: TransportError, op: &str, seq: Option<u64>) -> Error {
        let suspect = match e {
            TransportError::Revoked => return Error::Revoked,
            TransportError::Timeout { waiting_on } => waiting_on,
            TransportError::PeerDisconnected { rank } => rank,
            other => return Error::from_transport(other, op),
        };
        let mut failed = self.transport.failed();
        if failed.contains(&suspect) {
            // This call met a failure itself: name the first rank that
            // failed, even if a revocation (another member's answer to it)
            // came meanwhile — not one that went after it (a process that
            // exits on the error the first caused).
            let first = self.transport.failed_in_order().first().copied();
            return match first.filter(|&f| f != suspect) {
                Some(f) => self.failure_of(f, op),
                None => Error::from_transport(e, op),
            };
        }
        if let TransportError::PeerDisconnected { rank } = e {
            if self.transport.left().contains(&rank) {
                // It shut the group down (or dropped it) while this call
                // needed it: it will send nothing more.
                return Error::PeerDisconnected { rank };
            }
        }
        if self.transport.is_revoked(self.comm_id) {
            return Error::Revoked;
        }
        if failed.is_empty() {
            // A failure behind the rank waited on shows here within the
            // liveness limit: a deadline much longer than that has seen it
            // already, and waits no more (a timeout ends at its deadline).
            let long = self.timeout() > 2 * self.transport.liveness();
            let wait = match e {
                TransportError::Timeout { .. } if long => Duration::ZERO,
                _ => self.grace(),
            };
            failed = self.transport.await_failure(self.comm_id, wait);
            if self.transport.is_revoked(self.comm_id) {
                return Error::Revoked;
            }
        }
        if failed.is_empty() {
            if let Some(&gone) = self.transport.left().first() {
                // A member left while the others needed it.
                return Error::PeerDisconnected { rank: gone };
            }
            if let Some(leaving) = self.shutting_down() {
                // A member shuts the group down while this call needs it
                // (its goodbye came; its links end once it gives up on
                // this rank's).
                return Error::Timeout {
                    op: op.to_string(),
                    waiting_on: vec![leaving],
                    detail: format!(": rank {leaving} shut the group down during this call"),
                };
            }
            if let (TransportError::Timeout { .. }, Some(seq)) = (&e, seq) {
                if let Some(missing) = self.who_is_missing(op, seq) {
                    tracing::debug!(op, seq, ?missing.ranks, "named the ranks that never entered the call");
                    return Error::Timeout {
                        op: op.to_string(),
                        waiting_on: missing.ranks,
                        detail: missing.detail,
                    };
                }
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
        let first = self.transport.failed_in_order();
        match e {
            TransportError::PeerDisconnected { .. } => Error::PeerDisconnected {
                rank: first.first().copied().unwrap_or(failed[0]),
            },
            _ => Error::Timeout {
                op: op.to_string(),
                waiting_on: failed,
                detail: String::new(),
            },
        }
    }

    /// A member whose goodbye of this group's shutdown came here: it
    /// called `shutdown`, and will take part in no call.
    fn shutting_down(&self) -> Option<u32> {
        let key = super::shutdown_key(self.comm_id);
        (0..self.world).find(|&m| m != self.rank && self.transport.queued(m, key))
    }

    /// The error naming failed rank `rank`: gone, or silent.
    fn failure_of(&self, rank: u32, op: &str) -> Error {
        if self.transport.is_gone(rank) {
            Error::PeerDisconnected { rank }
        } else {
            Error::Timeout {
                op: op.to_string(),
                waiting_on: vec![rank],
                detail: String::new(),
            }
        }
    }
}
