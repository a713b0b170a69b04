//! Credits: what a receiver owes each sender for the budgeted messages
//! taken, returned in batches or at once to a sender that waits.

use super::{Inbox, Peer, State, LANES_PER_SENDER};
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
        let p = st.peers.get(src as usize)?;
        let lane_due = match p.due_lane {
            Some((k, n)) if k == key => n,
            _ => st.lane_due.get(&(src, key)).copied().unwrap_or(0),
        };
        let flush = p.credit_due >= at_least || lane_due >= depth / 2 || p.credit_wanted;
        if !flush || (p.credit_due == 0 && p.owed_lanes == 0) {
            return None;
        }
        let st = &mut *st;
        let p = st.peers.get_mut(src as usize)?;
        p.credit_wanted = false;
        p.most_lane_due = 0;
        let bytes = std::mem::take(&mut p.credit_due);
        let in_map = std::mem::take(&mut p.owed_lanes) - usize::from(p.due_lane.is_some());
        let mut lanes: Vec<(LaneKey, u32)> = p.due_lane.take().into_iter().collect();
        list_owed(p, &mut st.owed_changed, src);
        if in_map == 0 {
            return Some(Credit { bytes, lanes });
        }
        let keys: Vec<(u32, LaneKey)> = st
            .lane_due
            .keys()
            .filter(|(s, _)| *s == src)
            .copied()
            .collect();
        lanes.extend(
            keys.into_iter()
                .filter_map(|k| st.lane_due.remove(&k).map(|n| (k.1, n))),
        );
        Some(Credit { bytes, lanes })
    }

    /// `src` waits for room to send here: its credit goes back with the
    /// next [`take_credit`](Self::take_credit), whatever the batch.
    pub(crate) fn want_credit(&self, src: u32) {
        let mut st = self.lock();
        let st = &mut *st;
        if let Some(p) = st.peers.get_mut(src as usize) {
            p.credit_wanted = true;
            list_owed(p, &mut st.owed_changed, src);
        }
    }
}

impl State {
    /// One more message of `src`'s lane `key` is owed back. A run of
    /// messages on one lane (the usual case: one tag after another) is
    /// counted beside the map, without hashing; the count moves into the
    /// map when another lane's message comes, and back when its lane does.
    ///
    /// Whether `src` is owed on no more lanes than an honest sender may
    /// have in flight to this rank ([`LANES_PER_SENDER`]): more is a
    /// sender that ignores credits, and only messages for a forgotten
    /// communicator (unchecked against the lanes' bounds) can bring it
    /// there. From half of that on, the next receive from `src` pays it
    /// back whatever the batch, as if it had asked.
    pub(super) fn owe_message(&mut self, src: u32, key: LaneKey) -> bool {
        let State {
            peers,
            lane_due,
            owed_changed,
            ..
        } = self;
        let Some(p) = peers.get_mut(src as usize) else {
            return true;
        };
        let owed = match &mut p.due_lane {
            Some((k, n)) if *k == key => {
                *n = n.saturating_add(1);
                *n
            }
            slot => {
                if let Some((k, n)) = slot.take() {
                    lane_due.insert((src, k), n);
                }
                let before = lane_due.remove(&(src, key));
                if before.is_none() {
                    p.owed_lanes += 1;
                }
                let n = before.unwrap_or(0).saturating_add(1);
                *slot = Some((key, n));
                n
            }
        };
        p.most_lane_due = p.most_lane_due.max(owed);
        if p.owed_lanes >= LANES_PER_SENDER / 2 {
            p.credit_wanted = true;
        }
        list_owed(p, owed_changed, src);
        p.owed_lanes <= LANES_PER_SENDER
    }
}

/// `src`'s debt changed: list it for the glance, once until it is taken up.
pub(super) fn list_owed(p: &mut Peer, changed: &mut Vec<u32>, src: u32) {
    if !std::mem::replace(&mut p.owed_listed, true) {
        changed.push(src);
    }
}
