//! The in-memory transport: every rank of a world in one process. A send
//! copies the message into the receiver's inbox; point-to-point and RPC
//! senders wait there for room, within the same per-peer byte budget and
//! per-lane depth the network transports enforce with credits.

use crate::inbox::{budgeted, Inbox};
use crate::{
    BufferPool, LaneKey, Payload, PeerStats, Transport, TransportError, DEFAULT_PEER_BUDGET,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

/// The shared state of one in-process world.
#[derive(Debug)]
pub struct MemHub {
    inboxes: Vec<Inbox>,
    /// Message buffers, shared by the world's senders.
    pool: Arc<BufferPool>,
}

impl MemHub {
    /// A world of `world` endpoints, in rank order.
    pub fn world(world: u32) -> Vec<MemTransport> {
        // Spinning pays while every rank's thread has a core.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let sharing = crate::inbox::Cores::of(world as usize, cores);
        let hub = Arc::new(MemHub {
            inboxes: (0..world).map(|_| Inbox::new(world, sharing)).collect(),
            pool: Arc::new(BufferPool::new()),
        });
        (0..world)
            .map(|rank| MemTransport {
                hub: Arc::clone(&hub),
                rank,
                timeout_ns: AtomicU64::new(crate::DEFAULT_TIMEOUT.as_nanos() as u64),
                sent: Mutex::new(vec![(0, 0); world as usize]),
            })
            .collect()
    }
}

/// One rank's endpoint of a [`MemHub`] world. Dropping it closes it.
#[derive(Debug)]
pub struct MemTransport {
    hub: Arc<MemHub>,
    rank: u32,
    timeout_ns: AtomicU64,
    /// (messages, bytes) sent, by destination.
    sent: Mutex<Vec<(u64, u64)>>,
}

impl MemTransport {
    fn own(&self) -> &Inbox {
        &self.hub.inboxes[self.rank as usize]
    }
}

impl Transport for MemTransport {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn world(&self) -> u32 {
        self.hub.inboxes.len() as u32
    }

    fn send(&self, dst: u32, key: LaneKey, parts: &[&[u8]]) -> Result<(), TransportError> {
        let Some(inbox) = self.hub.inboxes.get(dst as usize) else {
            return Err(TransportError::NoSuchRank {
                rank: dst,
                world: self.world(),
            });
        };
        if self.own().is_closed() {
            return Err(TransportError::Closed);
        }
        if self.own().is_gone(dst) {
            return Err(TransportError::PeerDisconnected { rank: dst });
        }
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        crate::holds_its_word(key.kind, len as usize)?;
        if budgeted(key.kind) {
            let timeout = Duration::from_nanos(self.timeout_ns.load(Ordering::Relaxed));
            inbox
                .wait_room(self.rank, key, len, DEFAULT_PEER_BUDGET, timeout)
                .map_err(|_| TransportError::Timeout { waiting_on: dst })?;
        }
        inbox.deliver(
            self.rank,
            key,
            Payload::from_parts_in(parts, Some(&self.hub.pool)),
        );
        if let Some(c) = self
            .sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(dst as usize)
        {
            c.0 += 1;
            c.1 += len;
        }
        Ok(())
    }

    fn recv(
        &self,
        src: u32,
        key: LaneKey,
        timeout: Duration,
        want_len: Option<usize>,
    ) -> Result<Payload, TransportError> {
        self.own().recv(src, key, timeout, want_len)
    }

    fn links(&self) -> Vec<crate::LinkKind> {
        (0..self.world())
            .map(|r| {
                if r == self.rank {
                    crate::LinkKind::Local
                } else {
                    crate::LinkKind::Memory
                }
            })
            .collect()
    }

    fn stats(&self) -> Vec<PeerStats> {
        let sent = self.sent.lock().unwrap_or_else(|e| e.into_inner()).clone();
        self.own()
            .stats()
            .into_iter()
            .zip(sent)
            .map(|(s, (m, b))| PeerStats {
                sent_messages: m,
                sent_bytes: b,
                ..s
            })
            .collect()
    }

    /// In-process peers are this program's own threads: nothing to refuse.
    fn note_collective(&self, _comm: u64, _seq: u64) {}

    fn set_timeout(&self, timeout: Duration) {
        self.timeout_ns.store(
            u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    fn recv_any(&self, key: LaneKey, timeout: Duration) -> Result<(u32, Payload), TransportError> {
        self.own().recv_any(key, timeout)
    }

    fn is_gone(&self, rank: u32) -> bool {
        self.own().is_gone(rank)
    }

    fn revoke(&self, comm: u64) {
        for inbox in &self.hub.inboxes {
            inbox.revoke(comm);
        }
    }

    fn is_revoked(&self, comm: u64) -> bool {
        self.own().is_revoked(comm)
    }

    fn forget(&self, comm: u64) {
        self.own().forget(comm);
    }

    fn queued(&self, src: u32, key: LaneKey) -> bool {
        !self.own().lane_is_empty(src, key)
    }

    fn close(&self) {
        if self.own().is_closed() {
            return;
        }
        self.own().close();
        for (r, inbox) in self.hub.inboxes.iter().enumerate() {
            if r != self.rank as usize {
                inbox.set_gone(self.rank);
            }
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
    const T: Duration = Duration::from_secs(1);

    #[test]
    fn lanes_are_fifo_and_independent() {
        let w = MemHub::world(2);
        w[0].send(1, KEY, &[b"a"]).unwrap();
        w[0].send(1, OTHER, &[b"x"]).unwrap();
        w[0].send(1, KEY, &[b"b", b"c"]).unwrap();
        assert_eq!(w[1].recv(0, OTHER, T, None).unwrap().as_ref(), b"x");
        assert_eq!(w[1].recv(0, KEY, T, None).unwrap().as_ref(), b"a");
        assert_eq!(
            w[1].recv(0, KEY, T, Some(5)),
            Err(TransportError::LengthMismatch {
                from: 0,
                got: 2,
                want: 5
            })
        );
        assert_eq!(w[1].recv(0, KEY, T, Some(2)).unwrap().as_ref(), b"bc");
    }

    #[test]
    fn timeout_consumes_nothing_and_close_is_seen_after_draining() {
        let mut w = MemHub::world(2);
        let t = Duration::from_millis(20);
        assert_eq!(
            w[1].recv(0, KEY, t, None),
            Err(TransportError::Timeout { waiting_on: 0 })
        );
        w[0].send(1, KEY, &[b"last"]).unwrap();
        drop(w.remove(0));
        assert_eq!(w[0].recv(0, KEY, t, None).unwrap().as_ref(), b"last");
        assert_eq!(
            w[0].recv(0, KEY, t, None),
            Err(TransportError::PeerDisconnected { rank: 0 })
        );
        assert_eq!(
            w[0].send(0, KEY, &[]),
            Err(TransportError::PeerDisconnected { rank: 0 })
        );
        assert_eq!(
            w[0].recv(5, KEY, t, None),
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
