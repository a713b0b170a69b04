//! The in-memory transport: every rank of a world in one process, one
//! mailbox per rank (a map of lanes guarded by a mutex, and a condvar).
//! A send copies the message into the receiver's mailbox; a receive waits
//! on the condvar until its lane has a message, the sender is gone, or the
//! deadline passes. Queues are unbounded here: byte budgets arrive with the
//! network transports, whose peers can be hostile.

use crate::{BufferPool, LaneKey, Payload, Transport, TransportError};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct MailboxState {
    lanes: HashMap<(u32, LaneKey), VecDeque<Payload>>,
}

#[derive(Debug, Default)]
struct Mailbox {
    state: Mutex<MailboxState>,
    arrived: Condvar,
}

/// The shared state of one in-process world.
#[derive(Debug)]
pub struct MemHub {
    mailboxes: Vec<Mailbox>,
    /// `gone[r]`: rank r's endpoint is closed.
    gone: Mutex<Vec<bool>>,
    /// Message buffers, shared by the world's senders.
    pool: Arc<BufferPool>,
}

impl MemHub {
    /// A world of `world` endpoints, in rank order.
    pub fn world(world: u32) -> Vec<MemTransport> {
        let hub = Arc::new(MemHub {
            mailboxes: (0..world).map(|_| Mailbox::default()).collect(),
            gone: Mutex::new(vec![false; world as usize]),
            pool: Arc::new(BufferPool::new()),
        });
        (0..world)
            .map(|rank| MemTransport {
                hub: Arc::clone(&hub),
                rank,
            })
            .collect()
    }

    fn is_gone(&self, rank: u32) -> bool {
        lock(&self.gone)[rank as usize]
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not take the world down with poisoned locks.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One rank's endpoint of a [`MemHub`] world. Dropping it closes it.
#[derive(Debug)]
pub struct MemTransport {
    hub: Arc<MemHub>,
    rank: u32,
}

impl MemTransport {
    fn check_peer(&self, peer: u32) -> Result<(), TransportError> {
        let world = self.world();
        if peer >= world {
            return Err(TransportError::NoSuchRank { rank: peer, world });
        }
        if self.hub.is_gone(self.rank) {
            return Err(TransportError::Closed);
        }
        Ok(())
    }
}

impl Transport for MemTransport {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn world(&self) -> u32 {
        self.hub.mailboxes.len() as u32
    }

    fn send(&self, dst: u32, key: LaneKey, parts: &[&[u8]]) -> Result<(), TransportError> {
        self.check_peer(dst)?;
        if self.hub.is_gone(dst) {
            return Err(TransportError::PeerDisconnected { rank: dst });
        }
        let msg = Payload::from_parts_in(parts, Some(&self.hub.pool));
        let mailbox = &self.hub.mailboxes[dst as usize];
        lock(&mailbox.state)
            .lanes
            .entry((self.rank, key))
            .or_default()
            .push_back(msg);
        mailbox.arrived.notify_all();
        Ok(())
    }

    fn recv(&self, src: u32, key: LaneKey, timeout: Duration) -> Result<Payload, TransportError> {
        self.check_peer(src)?;
        let deadline = Instant::now() + timeout;
        let mailbox = &self.hub.mailboxes[self.rank as usize];
        let mut state = lock(&mailbox.state);
        loop {
            if let Some(queue) = state.lanes.get_mut(&(src, key)) {
                if let Some(msg) = queue.pop_front() {
                    if queue.is_empty() {
                        // Lanes are per call; keep the map from growing.
                        state.lanes.remove(&(src, key));
                    }
                    return Ok(msg);
                }
            }
            if self.hub.is_gone(src) {
                return Err(TransportError::PeerDisconnected { rank: src });
            }
            if self.hub.is_gone(self.rank) {
                return Err(TransportError::Closed);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(TransportError::Timeout { waiting_on: src });
            }
            state = mailbox
                .arrived
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn close(&self) {
        let mut gone = lock(&self.hub.gone);
        if std::mem::replace(&mut gone[self.rank as usize], true) {
            return;
        }
        drop(gone);
        for mailbox in &self.hub.mailboxes {
            // Take the lock so no receiver misses the wake-up between its
            // check and its wait.
            let _state = lock(&mailbox.state);
            mailbox.arrived.notify_all();
        }
    }
}

impl Drop for MemTransport {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LaneKind;

    const KEY: LaneKey = LaneKey {
        comm: 0,
        kind: LaneKind::PointToPoint,
        tag: 7,
    };
    const OTHER: LaneKey = LaneKey {
        comm: 0,
        kind: LaneKind::PointToPoint,
        tag: 8,
    };

    #[test]
    fn lanes_are_fifo_and_independent() {
        let w = MemHub::world(2);
        w[0].send(1, KEY, &[b"a"]).unwrap();
        w[0].send(1, OTHER, &[b"x"]).unwrap();
        w[0].send(1, KEY, &[b"b", b"c"]).unwrap();
        let t = Duration::from_secs(1);
        assert_eq!(w[1].recv(0, OTHER, t).unwrap().as_ref(), b"x");
        assert_eq!(w[1].recv(0, KEY, t).unwrap().as_ref(), b"a");
        assert_eq!(w[1].recv(0, KEY, t).unwrap().as_ref(), b"bc");
    }

    #[test]
    fn timeout_consumes_nothing_and_close_is_seen_after_draining() {
        let mut w = MemHub::world(2);
        let t = Duration::from_millis(20);
        assert_eq!(
            w[1].recv(0, KEY, t),
            Err(TransportError::Timeout { waiting_on: 0 })
        );
        w[0].send(1, KEY, &[b"last"]).unwrap();
        drop(w.remove(0));
        assert_eq!(w[0].recv(0, KEY, t).unwrap().as_ref(), b"last");
        assert_eq!(
            w[0].recv(0, KEY, t),
            Err(TransportError::PeerDisconnected { rank: 0 })
        );
        assert_eq!(
            w[0].send(0, KEY, &[]),
            Err(TransportError::PeerDisconnected { rank: 0 })
        );
        assert_eq!(
            w[0].recv(5, KEY, t),
            Err(TransportError::NoSuchRank { rank: 5, world: 2 })
        );
    }

    #[test]
    fn payload_advance_strips_headers() {
        let mut p = Payload::from_parts(&[b"head", b"body"]);
        p.advance(4);
        assert_eq!(p.as_ref(), b"body");
        p.advance(100);
        assert!(p.is_empty());
    }
}
