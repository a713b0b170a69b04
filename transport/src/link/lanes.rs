//! Lane slots: how many budgeted messages this rank has in flight to
//! each receiver, per lane, and on how many lanes — the sender's side of
//! the bounds every receiver holds it to (`inbox/bounds.rs`). A sender out
//! of room asks the receiver for the credit it owes, and waits (with the
//! deadline) for it.

use super::Core;
use crate::inbox::LaneMap;
use crate::wire::{FrameType, Header};
use crate::{LaneKey, TransportError};
use std::collections::hash_map::Entry;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Budgeted messages sent and not yet credited: per lane, and how many
/// lanes are open to each rank. A sender holds itself to what its
/// receivers hold it to (`Inbox::deliver_checked`): at most the lane
/// depth per lane and [`LANES_PER_SENDER`] lanes per receiver.
#[derive(Debug)]
pub(crate) struct InFlight {
    lanes: LaneMap<u32>,
    open: Vec<u32>,
}

impl InFlight {
    pub(super) fn new(world: u32) -> InFlight {
        InFlight {
            lanes: LaneMap::default(),
            open: vec![0; world as usize],
        }
    }

    /// Nothing is in flight to `dst` any more (its inbox was made anew).
    pub(super) fn forget(&mut self, dst: u32) {
        self.lanes.retain(|(to, _), _| *to != dst);
        if let Some(o) = self.open.get_mut(dst as usize) {
            *o = 0;
        }
    }

    /// Whether one more message fits on `dst`'s lane `key`.
    fn has_room(&self, dst: u32, key: LaneKey, depth: u32) -> bool {
        match self.lanes.get(&(dst, key)) {
            Some(&n) => n < depth,
            None => opens(self.open.get(dst as usize), depth),
        }
    }
}

/// Whether a lane not in flight may open to a receiver that has `open`
/// lanes open (`None`: a rank this side does not count).
fn opens(open: Option<&u32>, depth: u32) -> bool {
    depth > 0 && open.is_none_or(|&o| (o as usize) < crate::inbox::LANES_PER_SENDER)
}

impl Core {
    /// Wait (up to the deadline) for a slot on `dst`'s lane `key`.
    pub(crate) fn acquire_lane(&self, dst: u32, key: LaneKey) -> Result<(), TransportError> {
        let mut lanes = self
            .lanes_in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if self.take_slot(&mut lanes, dst, key) {
            // Most sends find a slot: no clock read for them.
            return Ok(());
        }
        let deadline = Instant::now() + self.timeout();
        loop {
            if self.take_slot(&mut lanes, dst, key) {
                return Ok(());
            }
            if self.inbox.is_revoked(key.comm) {
                return Err(TransportError::Revoked);
            }
            let now = Instant::now();
            let unreachable = self.inbox.unreachable(dst);
            if now >= deadline || unreachable.is_some() {
                // A relay gone on the way is named; otherwise `dst`.
                return Err(match unreachable {
                    Some(e @ TransportError::PeerDisconnected { rank }) if rank != dst => e,
                    _ => TransportError::Timeout { waiting_on: dst },
                });
            }
            drop(lanes);
            self.ask_credit(dst, key);
            lanes = self
                .lanes_in_flight
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if !lanes.has_room(dst, key, self.lane_depth) {
                self.lane_waiters.fetch_add(1, Ordering::SeqCst);
                lanes = self
                    .lanes_freed
                    .wait_timeout(lanes, deadline.saturating_duration_since(Instant::now()))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                self.lane_waiters.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// A slot on `dst`'s lane `key` now, without waiting: taken if `true`.
    pub(crate) fn try_acquire_lane(&self, dst: u32, key: LaneKey) -> bool {
        let mut lanes = self
            .lanes_in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.take_slot(&mut lanes, dst, key)
    }

    /// Take a slot on `dst`'s lane `key` in `lanes` if one is free.
    fn take_slot(&self, lanes: &mut InFlight, dst: u32, key: LaneKey) -> bool {
        // One lookup; a lane is in the map only while something is in
        // flight on it.
        let InFlight { lanes, open } = lanes;
        match lanes.entry((dst, key)) {
            Entry::Occupied(mut n) => {
                if *n.get() >= self.lane_depth {
                    return false;
                }
                *n.get_mut() += 1;
                true
            }
            Entry::Vacant(v) => {
                let open = open.get_mut(dst as usize);
                if !opens(open.as_deref(), self.lane_depth) {
                    return false;
                }
                v.insert(1);
                if let Some(o) = open {
                    *o += 1;
                }
                true
            }
        }
    }

    /// This rank waits for room to send to `dst` on lane `key`: ask `dst`
    /// for the credit it owes (it returns credit in batches otherwise).
    pub(crate) fn ask_credit(&self, dst: u32, key: LaneKey) {
        let mut h = Header::control(FrameType::CreditWanted, self.rank, dst);
        (h.comm, h.kind, h.tag) = (key.comm, key.kind, key.tag);
        if self.transmit(self.hop(dst), h, &[], dst).is_err() {
            tracing::debug!(dst, "cannot ask for credit; the link is gone");
        }
    }

    /// `dst` took `count` messages of lane `key`. Credits for more than
    /// are in flight are ignored (the lane is not in flight: nothing to
    /// free).
    pub(crate) fn release_lane(&self, dst: u32, key: LaneKey, count: u32) {
        let mut lanes = self
            .lanes_in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = lanes.lanes.get_mut(&(dst, key)) {
            *n = n.saturating_sub(count);
            if *n == 0 {
                lanes.lanes.remove(&(dst, key));
                if let Some(open) = lanes.open.get_mut(dst as usize) {
                    *open = open.saturating_sub(1);
                }
            }
        }
        drop(lanes);
        if self.lane_waiters.load(Ordering::SeqCst) > 0 {
            self.lanes_freed.notify_all();
        }
    }

    /// Messages of lane `key` sent to `dst` and not yet credited.
    #[cfg(test)]
    pub(crate) fn in_flight(&self, dst: u32, key: LaneKey) -> u32 {
        self.lanes_in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lanes
            .get(&(dst, key))
            .copied()
            .unwrap_or(0)
    }
}
