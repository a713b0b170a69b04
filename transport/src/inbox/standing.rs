//! Where each peer stands: gone (its link ended), left (it said goodbye
//! first), silent (nothing heard for the liveness limit), and in what
//! order peers failed, so that a failure is blamed on the first rank that
//! went and not on one that followed it (a process that exits on the
//! error the first one caused).

use super::{Change, Inbox, Peer, State, Wait};
use crate::TransportError;
use std::time::{Duration, Instant};

impl State {
    /// `src`'s standing may have changed: it takes the next place in the
    /// order of failures if it failed just now, and leaves it once it is
    /// heard again.
    pub(super) fn note_failure(&mut self, src: u32) {
        let next = self.failures + 1;
        if let Some(p) = self.peers.get_mut(src as usize) {
            match (p.failed(), p.failed_order) {
                (true, 0) => {
                    p.failed_order = next;
                    self.failures = next;
                }
                (false, _) => p.failed_order = 0,
                (true, _) => {}
            }
        }
    }
}

impl Inbox {
    /// `src` is gone for good (EOF, reset, exited, closed).
    pub(crate) fn set_gone(&self, src: u32) {
        let mut st = self.lock();
        if let Some(p) = st.peers.get_mut(src as usize) {
            p.gone = true;
            self.glance.troubled();
        }
        st.note_failure(src);
        st.wake(Change::All);
    }

    /// `src` is back on a new link (a fleet's worker, or its coordinator,
    /// that came again): it stands as at formation. What its last link
    /// delivered and nobody took is dropped, and neither side owes the
    /// other credit any more — each starts the new link with its whole
    /// budget, as the other's fresh inbox expects.
    pub(crate) fn revive(&self, src: u32) {
        let mut st = self.lock();
        let State {
            lanes,
            lane_due,
            owed_changed,
            peers,
            ..
        } = &mut *st;
        let Some(p) = peers.get_mut(src as usize) else {
            return;
        };
        lanes.retain(|(from, _), _| *from != src);
        lane_due.retain(|(from, _), _| *from != src);
        // What it sent is kept count of; what was owed on it is not.
        *p = Peer {
            received_messages: p.received_messages,
            received_bytes: p.received_bytes,
            max_queued_bytes: p.max_queued_bytes,
            owed_listed: p.owed_listed,
            ..Peer::new(super::stamp::stamp())
        };
        super::credit::list_owed(p, owed_changed, src);
        st.wake(Change::All);
    }

    /// `src` said goodbye: when its link ends, it left rather than
    /// failed.
    pub(crate) fn set_left(&self, src: u32) {
        if let Some(p) = self.lock().peers.get_mut(src as usize) {
            p.left = true;
        }
    }

    /// Whether `src` said goodbye (it left).
    pub(crate) fn has_left(&self, src: u32) -> bool {
        self.lock().peers.get(src as usize).is_some_and(|p| p.left)
    }

    /// Ranks gone without a goodbye, or silent for a whole deadline.
    pub(crate) fn failed(&self) -> Vec<u32> {
        self.lock()
            .peers
            .iter()
            .enumerate()
            .filter(|(_, p)| p.failed())
            .map(|(r, _)| r as u32)
            .collect()
    }

    /// Whether `src` is known failed (gone without a goodbye, or silent),
    /// or out of reach (a relay between it and this rank is).
    pub(crate) fn is_failed(&self, src: u32) -> bool {
        let st = self.lock();
        st.peers.get(src as usize).is_some_and(Peer::failed) || st.cut(src).is_some()
    }

    /// The ranks that relay between each rank and this one (a sparse
    /// shape's routes): a wait on a rank fails, naming the relay, as soon
    /// as a relay on its way is gone or silent.
    pub(crate) fn set_relays(&self, relays: Vec<Vec<u32>>) {
        self.lock().relays = relays;
    }

    /// Park until a peer's standing changes or a communicator is revoked,
    /// `timeout` at most.
    pub(crate) fn wait_news(&self, timeout: Duration) {
        let st = self.lock();
        drop(self.wait_until(st, Instant::now() + timeout, Wait::News));
    }

    /// Whether `src` is known gone, or out of reach for good (a relay on
    /// its way is gone).
    pub(crate) fn is_gone(&self, src: u32) -> bool {
        self.unreachable(src).is_some()
    }

    /// Why a send to `dst` cannot arrive, if it cannot: `dst` is gone, or
    /// a relay on its way is gone (named).
    pub(crate) fn unreachable(&self, dst: u32) -> Option<TransportError> {
        if self.glance.untroubled() && (dst as usize) < self.world {
            return None;
        }
        let st = self.lock();
        if st.peers.get(dst as usize).is_none_or(|p| p.gone) {
            return Some(TransportError::PeerDisconnected { rank: dst });
        }
        st.cut(dst)
            .filter(|e| matches!(e, TransportError::PeerDisconnected { .. }))
    }

    /// The link to `src` carried nothing, not even heartbeats, for a whole
    /// deadline (or it did again: `silent = false`). Whether that is news
    /// (it was not so already).
    pub(crate) fn set_silent(&self, src: u32, silent: bool) -> bool {
        let mut st = self.lock();
        let news = st
            .peers
            .get_mut(src as usize)
            .is_some_and(|p| std::mem::replace(&mut p.silent, silent) != silent);
        if silent {
            self.glance.troubled();
        }
        st.note_failure(src);
        st.wake(Change::All);
        news
    }

    /// [`failed`](Self::failed) in the order they failed, the first first.
    pub(crate) fn failed_in_order(&self) -> Vec<u32> {
        let st = self.lock();
        let mut failed: Vec<(u64, u32)> = st
            .peers
            .iter()
            .enumerate()
            .filter(|(_, p)| p.failed())
            .map(|(r, p)| (p.failed_order, r as u32))
            .collect();
        failed.sort_unstable();
        failed.into_iter().map(|(_, r)| r).collect()
    }

    /// Ranks that said goodbye and whose links have ended (they shut
    /// their group down or dropped it).
    pub(crate) fn left(&self) -> Vec<u32> {
        self.lock()
            .peers
            .iter()
            .enumerate()
            .filter(|(_, p)| p.gone && p.left)
            .map(|(r, _)| r as u32)
            .collect()
    }
}

impl Peer {
    /// Failed: gone without a goodbye, or silent.
    pub(super) fn failed(&self) -> bool {
        (self.gone && !self.left) || self.silent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two peers fail, the second before the first is heard again: the
    /// order names the first first; one heard again leaves the order.
    #[test]
    fn failures_keep_their_order() {
        let inbox = Inbox::new(4, crate::inbox::Cores::Shared);
        inbox.set_silent(3, true);
        inbox.set_gone(1);
        assert_eq!(inbox.failed(), [1, 3]);
        assert_eq!(inbox.failed_in_order(), [3, 1]);
        inbox.set_silent(3, false);
        assert_eq!(inbox.failed_in_order(), [1]);
        inbox.set_silent(3, true);
        assert_eq!(inbox.failed_in_order(), [1, 3]);
        inbox.set_left(2);
        inbox.set_gone(2);
        assert_eq!(inbox.left(), [2]);
        assert_eq!(inbox.failed_in_order(), [1, 3]);
    }
}
