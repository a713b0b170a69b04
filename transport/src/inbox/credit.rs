//! Credits: what a receiver owes each sender for the budgeted messages
//! taken, returned in batches or at once to a sender that waits.

use super::Inbox;
use crate::LaneKey;

/// Credits owed to one sender: bytes, and messages per lane.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Credit {
    pub bytes: u64,
    pub lanes: Vec<(LaneKey, u32)>,
}

impl Inbox {
    /// What `src` is owed after a receive on `key`: everything consumed
    /// since the last credit, once enough bytes are due, or `key`'s lane
    /// is half consumed, or `src` has said it waits for room
    /// ([`want_credit`](Self::want_credit)) — so a sender waiting for room
    /// is never left waiting on a receiver that is waiting on it, and a
    /// sender that is not waiting gets its credit in batches (not a frame
    /// back per message).
    pub(crate) fn take_credit(
        &self,
        src: u32,
        key: LaneKey,
        at_least: u64,
        depth: u32,
    ) -> Option<Credit> {
        // Most receives owe nothing yet: the glance says so without the
        // lock.
        if !self.glance.may_owe(src, at_least, depth) {
            return None;
        }
        let mut st = self.lock();
        let lane_due = st.lane_due.get(&(src, key)).copied().unwrap_or(0);
        let p = st.peers.get(src as usize)?;
        let flush = p.credit_due >= at_least || lane_due >= depth / 2 || p.credit_wanted;
        // Only when flushing: is anything owed on any of `src`'s lanes?
        if !flush || (p.credit_due == 0 && !st.lane_due.keys().any(|(s, _)| *s == src)) {
            return None;
        }
        let p = st.peers.get_mut(src as usize)?;
        p.credit_wanted = false;
        p.most_lane_due = 0;
        let bytes = std::mem::take(&mut p.credit_due);
        st.owed_changed.push(src);
        let keys: Vec<(u32, LaneKey)> = st
            .lane_due
            .keys()
            .filter(|(s, _)| *s == src)
            .copied()
            .collect();
        let lanes = keys
            .into_iter()
            .filter_map(|k| st.lane_due.remove(&k).map(|n| (k.1, n)))
            .collect();
        Some(Credit { bytes, lanes })
    }

    /// `src` waits for room to send here: its credit goes back with the
    /// next [`take_credit`](Self::take_credit), whatever the batch.
    pub(crate) fn want_credit(&self, src: u32) {
        let mut st = self.lock();
        if let Some(p) = st.peers.get_mut(src as usize) {
            p.credit_wanted = true;
            st.owed_changed.push(src);
        }
    }
}
