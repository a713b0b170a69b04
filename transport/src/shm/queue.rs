//! Frames queued for a shared-memory link's writer by threads that must
//! not block (relays, credits, answers, the goodbye), with a count the
//! writer reads after every message instead of the lock.

use crate::wire::Header;
use crate::Payload;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// A frame queued, with the bytes reserved for it in the link's budget
/// (0: none).
pub(super) type Queued = (Header, Payload, usize);

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct Queue {
    frames: Mutex<VecDeque<Queued>>,
    /// How many frames `frames` holds, stored under its lock.
    len: AtomicUsize,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Queued>> {
        self.frames.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue a frame. The count is stored sequentially consistent: a
    /// pusher's fence after this pairs with the writer's before its last
    /// look ([`is_empty`](Self::is_empty)), so either the writer sees the
    /// frame or the pusher finds the writer free.
    pub(super) fn push(&self, frame: Queued) {
        let mut q = self.lock();
        q.push_back(frame);
        self.len.store(q.len(), Ordering::SeqCst);
    }

    /// The first frame queued; a look at the count, not the lock, when
    /// there is none.
    pub(super) fn pop(&self) -> Option<Queued> {
        if self.is_empty() {
            return None;
        }
        let mut q = self.lock();
        let frame = q.pop_front();
        self.len.store(q.len(), Ordering::SeqCst);
        frame
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len.load(Ordering::SeqCst) == 0
    }

    /// Bytes queued, headers included.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.lock()
            .iter()
            .map(|(_, p, _)| crate::wire::HEADER_LEN + p.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{FrameType, HEADER_LEN};

    #[test]
    fn frames_come_out_in_order_and_the_count_follows() {
        let q = Queue::default();
        assert!(q.is_empty() && q.pop().is_none());
        for aux in 0..3 {
            let h = Header {
                aux,
                ..Header::control(FrameType::Credit, 0, 1)
            };
            q.push((h, Payload::from_parts(&[&[7; 5]]), aux as usize));
        }
        assert_eq!(q.bytes(), 3 * (HEADER_LEN + 5));
        let order: Vec<u32> = std::iter::from_fn(|| q.pop())
            .map(|(h, _, _)| h.aux)
            .collect();
        assert_eq!(order, [0, 1, 2]);
        assert!(q.is_empty());
    }
}
