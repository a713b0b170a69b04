//! Requests answered where they are read: a lane with an [`Answerer`]
//! (the one-sided operations' requests) has its requests answered by the
//! thread that read them off the link, and the answer queued on the link
//! back, with no hand-off to another thread on either side of the target.
//!
//! The answer is budgeted as any message on its lane, and in the link's
//! own write budget, but without waiting: when the requester's credit (or
//! the answer lane's depth) has no room, or the link already holds its
//! budget's worth of unwritten bytes, the request goes to the inbox
//! instead, untouched, and whoever serves the lane there answers it with
//! a send that may wait. The reading thread never waits on credit, which
//! only it could bring. Credit is the requester's word (a member may
//! forge it); the write budget is not, so what answers hold queued on a
//! link is bounded by it however the requester behaves.

use super::{Core, Reservation};
use crate::inbox::Cores;
use crate::wire::{FrameType, Header};
use crate::{Answerer, LaneKey, Payload};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a link's I/O thread keeps reading its socket without sleeping
/// after it answered a request (with a core per rank here): requests come
/// in runs (a loop of puts, a counter taken again and again), and the
/// next one, a round trip later, is then read at once instead of after a
/// wake-up.
pub(crate) const ANSWER_SPIN: Duration = Duration::from_micros(200);
use std::sync::{Arc, RwLock};

/// The answered lanes, few (one per communicator with a heap), and how
/// many requests were answered.
#[derive(Default)]
pub(crate) struct Answerers(RwLock<Vec<(LaneKey, Arc<dyn Answerer>)>>, AtomicU64);

impl fmt::Debug for Answerers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lanes: Vec<LaneKey> = self
            .0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, _)| *k)
            .collect();
        f.debug_tuple("Answerers").field(&lanes).finish()
    }
}

impl Answerers {
    fn get(&self, key: LaneKey) -> Option<Arc<dyn Answerer>> {
        let all = self.0.read().unwrap_or_else(|e| e.into_inner());
        all.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, a)| Arc::clone(a))
    }
}

/// An I/O thread's [`ANSWER_SPIN`]: after it (or anyone) answered a
/// request, its waits are zero for a while.
pub(crate) struct AnswerSpin {
    answered: u64,
    until: Option<Instant>,
}

impl AnswerSpin {
    pub(crate) fn new(core: &Core) -> AnswerSpin {
        AnswerSpin {
            answered: core.answered(),
            until: None,
        }
    }

    /// How long the thread may sleep now, `wait` otherwise: zero while
    /// requests were answered within the last [`ANSWER_SPIN`] (with a core
    /// per rank here).
    pub(crate) fn wait(&mut self, core: &Core, wait: Duration) -> Duration {
        let answered = core.answered();
        if core.cores == Cores::Own && answered != self.answered {
            self.until = Some(Instant::now() + ANSWER_SPIN);
        }
        self.answered = answered;
        match self.until {
            Some(until) if Instant::now() < until => Duration::ZERO,
            _ => {
                self.until = None;
                wait
            }
        }
    }
}

impl Core {
    /// Answer requests on lane `key` with `answerer` from now on
    /// (replacing an earlier one of that lane).
    pub(crate) fn set_answerer(&self, key: LaneKey, answerer: Arc<dyn Answerer>) {
        let mut all = self.answerers.0.write().unwrap_or_else(|e| e.into_inner());
        all.retain(|(k, _)| *k != key);
        all.push((key, answerer));
    }

    /// No answerer for communicator `comm`'s lanes any more (its group is
    /// done here).
    pub(crate) fn drop_answerers(&self, comm: u64) {
        let mut all = self.answerers.0.write().unwrap_or_else(|e| e.into_inner());
        all.retain(|(k, _)| k.comm != comm);
    }

    /// Requests answered here so far.
    pub(crate) fn answered(&self) -> u64 {
        self.answerers.1.load(Ordering::Relaxed)
    }

    /// A message for this rank (it passed dispatch's checks): answered
    /// here if its lane has an answerer that takes it. `true`: it was,
    /// counted as received and taken, its credit and its answer queued.
    ///
    /// The answer's room is reserved twice before the answerer acts: the
    /// requester's credit and lane depth (what it may have waiting at its
    /// end), and the link's own write budget (what may wait here to be
    /// written). Credits come from the requester, which may forge them;
    /// the write budget frees only as the link writes, so a requester that
    /// stops reading gets no more than it holds queued here, and its
    /// further requests wait in the inbox for the group's server.
    pub(super) fn answer_here(&self, h: &Header, payload: &Payload) -> bool {
        let key = LaneKey {
            comm: h.comm,
            kind: h.kind,
            tag: h.tag,
        };
        let Some(answerer) = self.answerers.get(key) else {
            return false;
        };
        let src = h.src;
        let Some(link) = self.link(self.hop(src)) else {
            // Nowhere to answer: the server's send says so.
            return false;
        };
        let mut reserved: Option<(LaneKey, usize, Reservation)> = None;
        let mut room = |lane: LaneKey, len: usize| {
            if reserved.is_some() || !self.try_acquire_room(src, lane, len) {
                return false;
            }
            match link.reserve(len) {
                Some(r) => {
                    reserved = Some((lane, len, r));
                    true
                }
                None => {
                    self.give_back_room(src, lane, len);
                    false
                }
            }
        };
        let answered = answerer.answer(src, payload.as_ref(), &mut room);
        let (answer, reserved) = match (answered, reserved) {
            (Some(answer), Some((_, _, r))) => (answer, r),
            (_, taken) => {
                // Not answered here (or answered without asking for room:
                // an answerer breaking its contract is not obeyed).
                if let Some((lane, len, r)) = taken {
                    link.unreserve(r);
                    self.give_back_room(src, lane, len);
                }
                return false;
            }
        };
        let (lane, body) = answer;
        self.answerers.1.fetch_add(1, Ordering::Relaxed);
        self.inbox.took_direct(src, key, payload.len());
        self.return_credit(src, key, true);
        let len = body.len();
        let header = Header {
            ftype: FrameType::Data,
            kind: lane.kind,
            src: self.rank,
            dst: src,
            comm: lane.comm,
            tag: lane.tag,
            len: len as u64,
            aux: 0,
            seq: 0,
        };
        let body = Payload::from_vec_in(body, Some(&self.pool));
        link.forward_reserved(self, header, body, reserved);
        let (m, b) = &self.sent[src as usize];
        m.fetch_add(1, Ordering::Relaxed);
        b.fetch_add(len as u64, Ordering::Relaxed);
        true
    }

    /// Room for `len` bytes on lane `key` to `dst` now, without waiting:
    /// reserved if `true`.
    fn try_acquire_room(&self, dst: u32, key: LaneKey, len: usize) -> bool {
        if len as u64 > self.max_message_bytes {
            // Over the cap: left to the server, whose send says so.
            return false;
        }
        if !crate::inbox::budgeted(key.kind) {
            return true;
        }
        let Some(flow) = self.flow.get(dst as usize) else {
            return false;
        };
        if !self.try_acquire_lane(dst, key) {
            return false;
        }
        if flow.try_acquire(len) {
            true
        } else {
            self.release_lane(dst, key, 1);
            false
        }
    }

    /// Give back room [`try_acquire_room`](Self::try_acquire_room)
    /// reserved and no answer used.
    fn give_back_room(&self, dst: u32, key: LaneKey, len: usize) {
        if !crate::inbox::budgeted(key.kind) {
            return;
        }
        if let Some(flow) = self.flow.get(dst as usize) {
            flow.release(len);
        }
        self.release_lane(dst, key, 1);
    }
}

/// A test's answerer of one-sided-like requests, for the backends' attack
/// tests: request `id` (8 bytes, on lane [`REQUESTS`]) is answered with
/// [`ANSWER`] bytes of `id` on lane `1 + id`, as the heap answers a get.
#[cfg(test)]
pub(crate) mod testing {
    use crate::{LaneKey, LaneKind};

    pub(crate) const REQUESTS: LaneKey = LaneKey {
        comm: 0,
        kind: LaneKind::Rpc,
        tag: 0,
    };
    pub(crate) const ANSWER: usize = 1 << 20;

    pub(crate) struct Get;

    impl crate::Answerer for Get {
        fn answer(
            &self,
            _src: u32,
            request: &[u8],
            room: &mut dyn FnMut(LaneKey, usize) -> bool,
        ) -> Option<(LaneKey, Vec<u8>)> {
            let id = u64::from_le_bytes(request.try_into().ok()?);
            let lane = LaneKey {
                tag: 1 + id,
                ..REQUESTS
            };
            room(lane, ANSWER).then(|| (lane, vec![id as u8; ANSWER]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{CoreConfig, Link};
    use super::*;
    use crate::{LaneKind, LinkKind, TransportError};
    use std::sync::Mutex;
    use std::time::Duration;

    /// A link that records what is forwarded on it.
    #[derive(Debug, Default)]
    struct Recorder(Mutex<Vec<(Header, Vec<u8>)>>);

    impl Link for Recorder {
        fn kind(&self) -> LinkKind {
            LinkKind::Tcp
        }
        fn send(&self, _: &Core, h: Header, p: &[&[u8]], _: u32) -> Result<(), TransportError> {
            self.0.lock().unwrap().push((h, p.concat()));
            Ok(())
        }
        fn forward(&self, _: &Core, h: Header, p: Payload) {
            self.0.lock().unwrap().push((h, p.as_ref().to_vec()));
        }
        fn tell_gone(&self, _: &Core, _: u32, _: super::super::Gone, _: u32) {}
        fn poll(&self, _: &Core, _: Option<usize>) -> bool {
            false
        }
        fn caller_polls(&self, _: &Core, _: bool, _: Option<usize>) {}
        fn start(self: Arc<Self>, _: &Arc<Core>) {}
        fn close_begin(&self) {}
        fn close_flush(&self) {}
        fn close_end(&self) {}
    }

    /// Answers "ping" with "pong" on lane tag 1 + the request's first byte.
    struct Pong;

    impl Answerer for Pong {
        fn answer(
            &self,
            _src: u32,
            request: &[u8],
            room: &mut dyn FnMut(LaneKey, usize) -> bool,
        ) -> Option<(LaneKey, Vec<u8>)> {
            let (&n, rest) = request.split_first()?;
            if rest != b"ping" {
                return None;
            }
            let lane = LaneKey {
                comm: 0,
                kind: LaneKind::Rpc,
                tag: 1 + u64::from(n),
            };
            room(lane, 4).then(|| (lane, b"pong".to_vec()))
        }
    }

    const REQUESTS: LaneKey = LaneKey {
        comm: 0,
        kind: LaneKind::Rpc,
        tag: 0,
    };

    fn setup(budget: u64) -> (Core, Arc<Recorder>) {
        let core = Core::new(&CoreConfig {
            rank: 0,
            world: 2,
            shape: crate::Shape::Mesh,
            timeout: Duration::from_secs(5),
            liveness: Duration::from_secs(5),
            max_message_bytes: 1 << 20,
            peer_budget_bytes: budget,
            lane_depth: 4,
            ranks_here: 1,
        });
        let link = Arc::new(Recorder::default());
        core.set_links(vec![None, Some(Arc::clone(&link) as Arc<dyn Link>)]);
        core.set_answerer(REQUESTS, Arc::new(Pong));
        (core, link)
    }

    fn request(n: u8, body: &[u8]) -> (Header, Payload) {
        let mut bytes = vec![n];
        bytes.extend_from_slice(body);
        let h = Header {
            ftype: FrameType::Data,
            kind: LaneKind::Rpc,
            src: 1,
            dst: 0,
            comm: 0,
            tag: 0,
            len: bytes.len() as u64,
            aux: 0,
            seq: 0,
        };
        (h, Payload::from_parts(&[&bytes]))
    }

    #[test]
    fn a_request_it_takes_is_answered_where_it_was_read() {
        let (core, link) = setup(1 << 20);
        let (h, p) = request(7, b"ping");
        assert!(core.on_data(1, h, p));
        let sent = link.0.lock().unwrap();
        assert_eq!(sent.len(), 1);
        assert_eq!((sent[0].0.dst, sent[0].0.tag), (1, 8));
        assert_eq!(sent[0].1, b"pong");
        assert!(core.inbox.lane_is_empty(1, REQUESTS), "not queued");
        assert_eq!(core.sent[1].0.load(Ordering::Relaxed), 1);
        let stats = core.inbox.stats();
        assert_eq!(stats[1].received_messages, 1);
    }

    #[test]
    fn what_it_does_not_take_goes_to_the_inbox() {
        let (core, link) = setup(1 << 20);
        let (h, p) = request(7, b"other");
        assert!(core.on_data(1, h, p));
        assert!(link.0.lock().unwrap().is_empty());
        let got = core.inbox.try_take(1, REQUESTS, None).unwrap().unwrap();
        assert_eq!(&got.as_ref()[1..], b"other");
    }

    #[test]
    fn without_credit_for_the_answer_the_request_waits_in_the_inbox() {
        let (core, link) = setup(16);
        // Everything it may send to rank 1 is in flight.
        core.flow[1].acquire(16, Duration::ZERO, 1).unwrap();
        let (h, p) = request(1, b"ping");
        assert!(core.on_data(1, h, p));
        assert!(link.0.lock().unwrap().is_empty(), "nothing answered");
        assert!(!core.inbox.lane_is_empty(1, REQUESTS), "queued instead");
        let answer_lane = LaneKey { tag: 2, ..REQUESTS };
        assert_eq!(
            core.in_flight(1, answer_lane),
            0,
            "its lane slot given back"
        );
        // Credit back: the next one is answered at once.
        core.flow[1].release(16);
        let (h, p) = request(2, b"ping");
        assert!(core.on_data(1, h, p));
        let sent = link.0.lock().unwrap();
        let answers: Vec<u64> = sent
            .iter()
            .filter(|(h, _)| h.ftype == FrameType::Data)
            .map(|(h, _)| h.tag)
            .collect();
        assert_eq!(answers, [3]);
    }
}
