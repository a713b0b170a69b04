//! Quorum: recovery goes on only on a side of a partition that holds a
//! strict majority of the group's last agreed membership, so a cut
//! network never forks a job into two groups that both carry on.
//!
//! A rank whose agreement ends without quorum keeps its group, *stale*:
//! every call on it fails with [`Error::NoQuorum`] naming the members it
//! reaches and how many recovery needs. Two rules keep two sides from both
//! going on (`docs/fault-tolerance.md`, "Quorum"):
//!
//! 1. A decision is acted on only once a quorum of its survivors has
//!    confirmed it (the agreement's last step): two quorums of one
//!    membership share a member, and a member confirms one decision per
//!    agreement, so two different decisions cannot both be confirmed.
//! 2. A member that confirmed a decision and did not see it confirmed
//!    (the network cut the confirmations off, or it was frozen and woke to
//!    an agreement the others had finished) is *bound*: it never confirms
//!    another decision on that group, whose quorum could otherwise be made
//!    of it and the side that did not act. Its group is stale for good
//!    ([`Error::Expelled`]); it comes back through the job's seed
//!    ([`crate::ProcessGroup::rejoin`]). A stale member that confirmed
//!    nothing tries again (under `Recovery::Shrink`, on its next call, at
//!    most once per liveness period), and a retry brings back the whole
//!    group or nothing: once the network heals, a side that lost quorum
//!    but kept its links (a 2 | 2 cut) agrees again with the other and the
//!    whole group goes on.

use super::GroupInner;
use crate::error::Error;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How many members recovery (automatic shrink, `agree`, `shrink`,
/// `grow`) needs on its side (`QUORUM`, [`crate::Node::quorum`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Quorum {
    /// A strict majority of the group's last agreed membership: a job of
    /// 2 cannot survive the loss of one, a job of 3 survives one, of 4
    /// one, of 5 two.
    #[default]
    Majority,
    /// At least this many members, and always a strict majority.
    AtLeast(u32),
    /// At least this many members even when that is not a majority:
    /// **two sides of a partition may both go on** as separate groups.
    /// Only for a job that can tell its halves apart itself.
    UnsafeAtLeast(u32),
}

impl Quorum {
    /// Members a group of `world` needs on its side to recover.
    pub fn needed(self, world: u32) -> u32 {
        let majority = world / 2 + 1;
        match self {
            Quorum::Majority => majority,
            Quorum::AtLeast(n) => n.max(majority),
            Quorum::UnsafeAtLeast(n) => n.clamp(1, world.max(1)),
        }
    }

    /// Parse `QUORUM`: `majority`, a count `n` (at least a majority), or
    /// `unsafe:n`.
    pub fn parse(s: &str) -> Option<Quorum> {
        let s = s.trim().to_ascii_lowercase();
        if s == "majority" {
            return Some(Quorum::Majority);
        }
        if let Some(n) = s.strip_prefix("unsafe:") {
            return n.trim().parse().ok().map(Quorum::UnsafeAtLeast);
        }
        s.parse().ok().map(Quorum::AtLeast)
    }

    /// Why this setting cannot serve a group of `world`, if it cannot: a
    /// count above the world (no recovery could ever succeed), or one
    /// below a majority not named unsafe.
    pub(crate) fn check(self, world: u32) -> Result<(), String> {
        let majority = world / 2 + 1;
        match self {
            Quorum::Majority => Ok(()),
            Quorum::AtLeast(n) | Quorum::UnsafeAtLeast(n) if n > world => Err(format!(
                "QUORUM={n}: the group has only {world} members, so no recovery could succeed"
            )),
            Quorum::AtLeast(n) if n < majority => Err(format!(
                "QUORUM={n} is below a majority of {world} ({majority}): two sides of a partition could both go on; set QUORUM=unsafe:{n} (Node::quorum_unsafe) if that is meant"
            )),
            Quorum::UnsafeAtLeast(0) => Err("QUORUM=unsafe:0: at least one member".into()),
            _ => Ok(()),
        }
    }
}

/// Why a group is stale (see the module docs).
#[derive(Clone, Debug)]
pub(crate) enum Stale {
    /// Its last agreement ended without quorum.
    NoQuorum {
        /// The members this rank could count on, in the group's numbering.
        reachable: Vec<u32>,
        needed: u32,
        /// The agreement that ended without quorum, and its last attempt
        /// here: a retry is that agreement's next attempt.
        agreement: u64,
        attempt: u32,
        /// When that attempt ended (a retry waits a liveness period).
        at: Instant,
    },
    /// The other members agreed this rank failed and went on without it,
    /// or it is bound to a decision it did not see confirmed, or too few
    /// members are linked to ever agree: stale for good.
    Expelled,
}

impl Stale {
    pub(crate) fn error(&self, rank: u32) -> Error {
        match self {
            Stale::NoQuorum {
                reachable, needed, ..
            } => Error::NoQuorum {
                reachable: reachable.clone(),
                needed: *needed,
            },
            Stale::Expelled => Error::Expelled { rank },
        }
    }
}

impl GroupInner {
    /// The quorum this group's recovery needs.
    pub(crate) fn quorum(&self) -> Quorum {
        *self.quorum.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_quorum(&self, quorum: Quorum) {
        *self.quorum.lock().unwrap_or_else(|e| e.into_inner()) = quorum;
    }

    /// The group is stale from now on (see [`Stale`]).
    pub(crate) fn make_stale(&self, stale: Stale) -> Error {
        let err = stale.error(self.rank);
        tracing::error!("{err}");
        *self.stale.lock().unwrap_or_else(|e| e.into_inner()) = Some(stale);
        self.is_stale.store(true, Ordering::Release);
        err
    }

    /// An agreement reached quorum: the group is no longer stale.
    pub(crate) fn clear_stale(&self) {
        if self.is_stale.swap(false, Ordering::AcqRel) {
            *self.stale.lock().unwrap_or_else(|e| e.into_inner()) = None;
            tracing::info!("quorum regained");
        }
    }

    /// Why the group is stale, if it is.
    pub(crate) fn stale(&self) -> Option<Stale> {
        if !self.is_stale.load(Ordering::Acquire) {
            return None;
        }
        self.stale.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The error of a stale group this rank may not try to recover now:
    /// expelled (never), or (`retry_after`: a liveness period) tried too
    /// recently. `None`: not stale, or it may try again.
    pub(crate) fn stale_error(&self, retry_after: Option<Duration>) -> Option<Error> {
        let stale = self.stale()?;
        let may_retry = match (&stale, retry_after) {
            (Stale::NoQuorum { at, .. }, Some(after)) => at.elapsed() >= after,
            _ => false,
        };
        (!may_retry).then(|| stale.error(self.rank))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majorities_and_settings() {
        let needed: Vec<u32> = (1..=6).map(|w| Quorum::Majority.needed(w)).collect();
        assert_eq!(needed, [1, 2, 2, 3, 3, 4]);
        assert_eq!(Quorum::AtLeast(4).needed(5), 4);
        assert_eq!(Quorum::AtLeast(1).needed(5), 3, "never below a majority");
        assert_eq!(Quorum::UnsafeAtLeast(1).needed(4), 1);
        assert_eq!(Quorum::parse("3"), Some(Quorum::AtLeast(3)));
        assert_eq!(Quorum::parse("unsafe:1"), Some(Quorum::UnsafeAtLeast(1)));
        assert_eq!(Quorum::parse(" Majority "), Some(Quorum::Majority));
        assert_eq!(Quorum::parse("most"), None);
        assert!(
            Quorum::AtLeast(2).check(4).is_err(),
            "below a majority of 4"
        );
        assert!(Quorum::UnsafeAtLeast(2).check(4).is_ok());
        assert!(Quorum::AtLeast(5).check(4).is_err(), "above the world");
        assert!(Quorum::AtLeast(3).check(4).is_ok());
    }
}
