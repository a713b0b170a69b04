//! Heap requests the link's reader left to the group's RPC server (for
//! want of room to answer them where they were read: the requester's
//! credit, or the link's write budget) are answered here, per requester.
//!
//! Such an answer is sent with a send that may wait — for the requester
//! to return credit, or for its link to drain — up to the deadline. The
//! server thread must not wait so: it serves every rank's RPC and heap
//! requests, and one requester that takes none of its answers (it stopped
//! reading its socket, or never returns credit) would hold up all of them
//! a deadline per request. So the server only queues the request here,
//! and each requester with requests waiting has a thread of its own that
//! answers them in order, then ends. A requester's waiting requests are
//! bounded ([`MAX_WAITING`], [`MAX_WAITING_BYTES`]); past the bound, and
//! once an answer to it fails (it took nothing for a whole deadline, or
//! it is gone), its requests are dropped, saying so and naming it: its
//! calls fail at their deadline, as they would had it been silent.

use super::super::rpc::{decode_request, Sideline};
use super::{HeapSlot, HEAP_FN};
use meshwork_transport::{Payload, Transport, TransportError};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// Requests one requester may have waiting for an answer here. An honest
/// one has at most its threads × `WINDOW` pieces in flight, and reaches
/// the server only once its credit at this rank is spent.
const MAX_WAITING: usize = 256;
/// Their bytes (a put carries its piece), at most, beyond the first.
const MAX_WAITING_BYTES: usize = 64 << 20;

/// One requester's waiting requests.
#[derive(Debug, Default)]
struct Waiting {
    requests: VecDeque<Payload>,
    bytes: usize,
    /// A thread answers them.
    serving: bool,
}

/// See the module docs.
pub(crate) struct Replies {
    transport: Arc<dyn Transport>,
    comm: u64,
    heap: HeapSlot,
    waiting: Mutex<HashMap<u32, Waiting>>,
}

impl std::fmt::Debug for Replies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replies").field("comm", &self.comm).finish()
    }
}

impl Replies {
    pub(crate) fn new(transport: Arc<dyn Transport>, comm: u64, heap: HeapSlot) -> Arc<Replies> {
        Arc::new(Replies {
            transport,
            comm,
            heap,
            waiting: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u32, Waiting>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answer heap request `request` (RPC's bytes: head, then arguments)
    /// from `src`, after `src`'s requests waiting before it; never waits.
    pub(crate) fn push(self: &Arc<Self>, src: u32, request: Payload) {
        let mut all = self.lock();
        let w = all.entry(src).or_default();
        let len = request.len();
        if !w.requests.is_empty()
            && (w.requests.len() >= MAX_WAITING || w.bytes.saturating_add(len) > MAX_WAITING_BYTES)
        {
            tracing::warn!(
                src,
                waiting = w.requests.len(),
                "rank {src} takes none of its heap answers; a request of {len} bytes from it is dropped"
            );
            return;
        }
        w.requests.push_back(request);
        w.bytes += len;
        if w.serving {
            return;
        }
        w.serving = true;
        drop(all);
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("meshwork-heap-{}-{src}", self.transport.rank()))
            .spawn(move || me.serve(src));
        if let Err(e) = spawned {
            tracing::error!(
                src,
                "cannot start a thread to answer rank {src}: {e}; its heap requests are dropped"
            );
            self.lock().remove(&src);
        }
    }

    /// Answer `src`'s waiting requests in order, until none is left.
    fn serve(&self, src: u32) {
        loop {
            let request = {
                let mut all = self.lock();
                let Some(w) = all.get_mut(&src) else { return };
                match w.requests.pop_front() {
                    Some(r) => {
                        w.bytes -= r.len();
                        r
                    }
                    None => {
                        all.remove(&src);
                        return;
                    }
                }
            };
            let Some((_, id, args)) = decode_request(request.as_ref()) else {
                continue;
            };
            let heap = self.heap.get().map(|h| &**h);
            match super::answer(&*self.transport, self.comm, heap, src, id, args) {
                Err(TransportError::Closed) => return self.drop_waiting(src),
                Err(
                    e @ (TransportError::Timeout { .. } | TransportError::PeerDisconnected { .. }),
                ) => {
                    // Every answer behind it would wait as long.
                    tracing::warn!(src, "rank {src} took no heap answer ({e}); the requests it has waiting are dropped");
                    self.drop_waiting(src);
                }
                _ => {}
            }
        }
    }

    /// Drop what `src` has waiting (its thread goes on with what comes
    /// after).
    fn drop_waiting(&self, src: u32) {
        if let Some(w) = self.lock().get_mut(&src) {
            w.requests.clear();
            w.bytes = 0;
        }
    }

    /// Requests `src` has waiting.
    #[cfg(test)]
    fn waiting(&self, src: u32) -> usize {
        self.lock().get(&src).map_or(0, |w| w.requests.len())
    }
}

impl Sideline for Replies {
    fn fn_id(&self) -> u32 {
        HEAP_FN
    }

    fn take(self: Arc<Self>, src: u32, request: Payload) {
        self.push(src, request);
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::rpc::{request_head, response_key, serve, Rpc};
    use super::*;
    use crossbeam_channel::{Receiver, Sender};
    use meshwork_transport::{LaneKey, LinkKind, PeerStats};
    use std::time::Duration;

    /// A transport whose rank 1 takes none of its answers: a send to it
    /// waits until `release` is dropped, then times out. Sends to others
    /// are recorded in `sent`; requests come from `requests`.
    #[derive(Debug)]
    struct Stuck {
        requests: Receiver<(u32, Payload)>,
        release: Receiver<()>,
        sent: Sender<(u32, LaneKey, Vec<u8>)>,
        stuck: Sender<()>,
    }

    impl Transport for Stuck {
        fn rank(&self) -> u32 {
            0
        }
        fn world(&self) -> u32 {
            3
        }
        fn send(&self, dst: u32, key: LaneKey, parts: &[&[u8]]) -> Result<(), TransportError> {
            if dst == 1 {
                let _ = self.stuck.send(());
                let _ = self.release.recv();
                return Err(TransportError::Timeout { waiting_on: 1 });
            }
            let _ = self.sent.send((dst, key, parts.concat()));
            Ok(())
        }
        fn recv(
            &self,
            src: u32,
            _: LaneKey,
            _: Duration,
            _: Option<usize>,
        ) -> Result<Payload, TransportError> {
            Err(TransportError::Timeout { waiting_on: src })
        }
        fn note_collective(&self, _: u64, _: u64) {}
        fn stats(&self) -> Vec<PeerStats> {
            Vec::new()
        }
        fn links(&self) -> Vec<LinkKind> {
            Vec::new()
        }
        fn set_timeout(&self, _: Duration) {}
        fn recv_any(
            &self,
            _: LaneKey,
            timeout: Duration,
        ) -> Result<(u32, Payload), TransportError> {
            match self.requests.recv_timeout(timeout) {
                Ok(r) => Ok(r),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    Err(TransportError::Timeout { waiting_on: 0 })
                }
                Err(_) => Err(TransportError::Closed),
            }
        }
        fn close(&self) {}
        fn revoke(&self, _: u64) {}
        fn is_revoked(&self, _: u64) -> bool {
            false
        }
    }

    struct World {
        transport: Arc<Stuck>,
        requests: Sender<(u32, Payload)>,
        release: Sender<()>,
        sent: Receiver<(u32, LaneKey, Vec<u8>)>,
        stuck: Receiver<()>,
    }

    fn world() -> World {
        let (requests, req_rx) = crossbeam_channel::unbounded();
        let (release, release_rx) = crossbeam_channel::unbounded();
        let (sent_tx, sent) = crossbeam_channel::unbounded();
        let (stuck_tx, stuck) = crossbeam_channel::unbounded();
        World {
            transport: Arc::new(Stuck {
                requests: req_rx,
                release: release_rx,
                sent: sent_tx,
                stuck: stuck_tx,
            }),
            requests,
            release,
            sent,
            stuck,
        }
    }

    /// A heap request (a get of 8 bytes at 0 from a heap of 64) with `id`.
    fn heap_request(id: u64) -> Payload {
        let mut args = vec![2u8];
        args.extend(0u64.to_le_bytes());
        args.extend(64u64.to_le_bytes());
        args.extend(8u64.to_le_bytes());
        Payload::from_parts(&[&request_head(HEAP_FN, id), &args])
    }

    /// The group's RPC server, with rank 1's heap requests left to it and
    /// rank 1 taking no answers: rank 2's RPC is still answered at once,
    /// and rank 1's own answers wait on their own.
    #[test]
    fn a_requester_that_takes_no_answers_does_not_hold_up_the_server() {
        let w = world();
        let rpc = Rpc::new();
        rpc.register(7, Arc::new(|_, _| b"fine".to_vec()));
        let transport = Arc::clone(&w.transport) as Arc<dyn Transport>;
        let replies = Replies::new(Arc::clone(&transport), 0, HeapSlot::default());
        serve(transport, 0, Arc::clone(&rpc), replies);
        for id in 0..3 {
            w.requests.send((1, heap_request(id))).unwrap();
        }
        w.stuck.recv().unwrap();
        w.requests
            .send((2, Payload::from_parts(&[&request_head(7, 40), b"hi"])))
            .unwrap();
        let got = w.sent.recv_timeout(Duration::from_secs(20));
        drop(w.release);
        let (dst, key, body) = got.expect("rank 2's RPC answered while rank 1 takes nothing");
        assert_eq!((dst, key), (2, response_key(0, 40)));
        assert_eq!(body, b"\0fine");
    }

    /// What a requester that takes no answers has waiting here is bounded.
    #[test]
    fn requests_waiting_for_one_requester_are_bounded() {
        let w = world();
        let replies = Replies::new(
            Arc::clone(&w.transport) as Arc<dyn Transport>,
            0,
            HeapSlot::default(),
        );
        for id in 0..(MAX_WAITING as u64 * 4) {
            replies.push(1, heap_request(id));
        }
        w.stuck.recv().unwrap();
        assert!(replies.waiting(1) <= MAX_WAITING, "{}", replies.waiting(1));
        // Another requester is answered meanwhile.
        replies.push(2, heap_request(9));
        let (dst, key, _) = w.sent.recv_timeout(Duration::from_secs(20)).unwrap();
        assert_eq!((dst, key), (2, response_key(0, 9)));
        // Once an answer to it fails, what it had waiting is dropped.
        drop(w.release);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while replies.waiting(1) > 0 {
            assert!(std::time::Instant::now() < deadline, "still waiting");
            std::thread::yield_now();
        }
    }
}
