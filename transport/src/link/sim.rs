//! A deterministic link simulator: the real core (`Core`, its dispatch,
//! credits, relay and peer-gone handling, and the `Transport` impl over
//! it) on every rank of a world, joined by simulated links instead of
//! sockets. Each directed link is a FIFO (as a TCP stream or a QUIC
//! stream is); a seeded generator picks which link delivers its next frame,
//! so one seed is one reproducible interleaving, and a step budget turns a
//! protocol that stops making progress into a failure instead of a hang.

use super::{Core, CoreConfig, Gone, Link, LinkTransport, Next};
use crate::wire::{FrameType, Header};
use crate::{LaneKey, LaneKind, LinkKind, Payload, Transport, TransportError};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Frames in flight on one directed link.
type Fifo = VecDeque<(Header, Vec<u8>)>;

/// Frames in flight on every directed link: `queues[from][to]`.
#[derive(Debug, Default)]
struct Net {
    queues: Vec<Vec<Fifo>>,
    /// Links cut (both directions): frames to or from them vanish.
    cut: Vec<bool>,
}

/// A simulated link from `from` to `to`.
#[derive(Debug)]
struct SimLink {
    from: u32,
    to: u32,
    net: Arc<Mutex<Net>>,
}

impl SimLink {
    fn put(&self, h: Header, payload: &[u8]) {
        let mut net = self.net.lock().unwrap();
        if !net.cut[self.from as usize] && !net.cut[self.to as usize] {
            net.queues[self.from as usize][self.to as usize].push_back((h, payload.to_vec()));
        }
    }
}

impl Link for SimLink {
    fn kind(&self) -> LinkKind {
        LinkKind::Tcp
    }
    fn send(&self, _: &Core, h: Header, parts: &[&[u8]], _: u32) -> Result<(), TransportError> {
        self.put(h, &parts.concat());
        Ok(())
    }
    fn forward(&self, _: &Core, h: Header, payload: Payload) {
        self.put(h, payload.as_ref());
    }
    fn tell_gone(&self, _: &Core, gone: u32, how: Gone, dst: u32) {
        let h = Header {
            aux: how as u32,
            ..Header::control(FrameType::PeerGone, gone, dst)
        };
        self.put(h, &[]);
    }
    fn poll(&self, _: &Core, _: Option<usize>) -> bool {
        false
    }

    fn caller_polls(&self, _core: &Core, _on: bool, _want_len: Option<usize>) {}
    fn start(self: Arc<Self>, _: &Arc<Core>) {}
    fn close_begin(&self) {}
    fn close_flush(&self) {}
    fn close_end(&self) {}
}

/// A world of cores over simulated links.
struct World {
    net: Arc<Mutex<Net>>,
    cores: Vec<Arc<Core>>,
    ranks: Vec<LinkTransport>,
    rng: u64,
    /// Frames delivered so far.
    steps: usize,
    /// The links they came over, in order.
    trace: Vec<(usize, usize)>,
}

impl World {
    fn new(world: u32, star: bool, seed: u64) -> World {
        let n = world as usize;
        let net = Arc::new(Mutex::new(Net {
            queues: (0..n)
                .map(|_| (0..n).map(|_| VecDeque::new()).collect())
                .collect(),
            cut: vec![false; n],
        }));
        let mut cores = Vec::new();
        let mut ranks = Vec::new();
        for r in 0..world {
            let core = Arc::new(Core::new(&CoreConfig {
                rank: r,
                world,
                shape: if star {
                    crate::route::Shape::Star
                } else {
                    crate::route::Shape::Mesh
                },
                timeout: Duration::from_secs(1),
                liveness: Duration::from_secs(1),
                max_message_bytes: 1 << 20,
                peer_budget_bytes: 1 << 20,
                lane_depth: 8,
                ranks_here: 1,
            }));
            core.set_links(
                (0..world)
                    .map(|p| {
                        let linked = p != r && (!star || r == 0 || p == 0);
                        linked.then(|| {
                            Arc::new(SimLink {
                                from: r,
                                to: p,
                                net: Arc::clone(&net),
                            }) as Arc<dyn Link>
                        })
                    })
                    .collect(),
            );
            cores.push(Arc::clone(&core));
            ranks.push(LinkTransport::start(core, Vec::new()));
        }
        World {
            net,
            cores,
            ranks,
            rng: seed.max(1),
            steps: 0,
            trace: Vec::new(),
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Deliver one frame from a link chosen at random among those with
    /// frames waiting, as that link's reader would; `false` if none wait.
    fn step(&mut self) -> bool {
        let ready: Vec<(usize, usize)> = {
            let net = self.net.lock().unwrap();
            let mut v = Vec::new();
            for (f, row) in net.queues.iter().enumerate() {
                for (t, q) in row.iter().enumerate() {
                    if !q.is_empty() {
                        v.push((f, t));
                    }
                }
            }
            v
        };
        if ready.is_empty() {
            return false;
        }
        let (from, to) = ready[(self.next_random() % ready.len() as u64) as usize];
        let Some((h, body)) = self.net.lock().unwrap().queues[from][to].pop_front() else {
            return false;
        };
        self.steps += 1;
        self.trace.push((from, to));
        let core = &self.cores[to];
        match core.on_header(from as u32, h) {
            Next::Body(h) => {
                assert!(
                    core.on_data(from as u32, h, Payload::from_parts(&[&body])),
                    "a frame refused: {h:?}"
                );
            }
            Next::Continue => {}
            Next::End => panic!("a link ended on {h:?}"),
        }
        true
    }

    /// Deliver until nothing is in flight, within `budget` steps.
    fn drain(&mut self, budget: usize) {
        let start = self.steps;
        while self.step() {
            assert!(
                self.steps - start <= budget,
                "no quiescence after {budget} deliveries"
            );
        }
    }

    /// Rank `r` has left: its links are cut and the ranks it linked to
    /// find it gone, as a reader meeting EOF would report.
    fn kill(&mut self, r: u32) {
        {
            // What it had not yet handed to the network never arrives.
            let mut net = self.net.lock().unwrap();
            net.cut[r as usize] = true;
            let n = net.queues.len();
            for p in 0..n {
                net.queues[r as usize][p].clear();
                net.queues[p][r as usize].clear();
            }
        }
        for (p, core) in self.cores.iter().enumerate() {
            if p as u32 != r && core.link(r).is_some() {
                core.lost(r);
            }
        }
    }
}

fn key(kind: LaneKind, tag: u64) -> LaneKey {
    LaneKey { comm: 0, kind, tag }
}

const LANES: [(LaneKind, u64); 3] = [
    (LaneKind::PointToPoint, 1),
    (LaneKind::PointToPoint, 2),
    (LaneKind::Collective, 0),
];

/// Every rank sends `per_lane` messages to every other rank on each of
/// three lanes, in rounds with deliveries in between in a seeded order;
/// every receiver gets every lane in order. In a star, workers' traffic
/// to each other crosses the coordinator (relay, credits relayed too).
fn all_pairs_in_order(world: u32, star: bool, seed: u64) {
    let mut w = World::new(world, star, seed);
    let per_lane = 48u32;
    let wait = Duration::ZERO;
    let mut next = vec![vec![[0u32; 3]; world as usize]; world as usize];
    let mut sent = 0;
    while sent < per_lane {
        // A round: each sender sends up to the lane depth, then frames
        // move and receivers take what arrived (returning credits).
        for round in 0..4 {
            if sent + round >= per_lane {
                break;
            }
            for src in 0..world {
                for dst in (0..world).filter(|&d| d != src) {
                    for (i, &(kind, tag)) in LANES.iter().enumerate() {
                        let n = sent + round;
                        let body = [src as u8, dst as u8, i as u8, n as u8];
                        w.ranks[src as usize]
                            .send(dst, key(kind, tag), &[&body])
                            .unwrap();
                    }
                }
            }
        }
        sent = (sent + 4).min(per_lane);
        w.drain(100_000);
        for dst in 0..world {
            for src in (0..world).filter(|&s| s != dst) {
                for (i, &(kind, tag)) in LANES.iter().enumerate() {
                    let got = &mut next[dst as usize][src as usize][i];
                    while let Ok(m) = w.ranks[dst as usize].recv(src, key(kind, tag), wait, None) {
                        let want = [src as u8, dst as u8, i as u8, *got as u8];
                        assert_eq!(
                            m.as_ref(),
                            want,
                            "seed {seed}: lane {i} from {src} at {dst}"
                        );
                        *got += 1;
                    }
                }
            }
        }
        // Credits the receives returned.
        w.drain(100_000);
    }
    for (dst, row) in next.iter().enumerate() {
        for (src, got) in row.iter().enumerate().filter(|&(s, _)| s != dst) {
            assert_eq!(*got, [per_lane; 3], "seed {seed}: {src} -> {dst}");
        }
    }
}

#[test]
fn mesh_lanes_stay_in_order_under_every_interleaving() {
    for seed in 1..=40 {
        all_pairs_in_order(4, false, seed);
    }
}

#[test]
fn star_relays_keep_every_lane_in_order_under_every_interleaving() {
    for seed in 1..=40 {
        all_pairs_in_order(5, true, seed);
    }
}

/// A worker of a star leaves with messages to another worker still in
/// flight through the coordinator: the other worker gets every one of
/// them, then `PeerDisconnected` — never the notice first.
#[test]
fn a_departed_workers_last_messages_arrive_before_its_notice() {
    for seed in 1..=60 {
        let mut w = World::new(4, true, seed);
        let k = key(LaneKind::Collective, 3);
        for i in 0..6u8 {
            w.ranks[1].send(3, k, &[&[i]]).unwrap();
        }
        // Some of it reaches the coordinator before worker 1 leaves.
        for _ in 0..(seed % 9) {
            w.step();
        }
        let reached: usize = {
            let net = w.net.lock().unwrap();
            6 - net.queues[1][0].len()
        };
        w.kill(1);
        w.drain(10_000);
        let r3 = &w.ranks[3];
        for i in 0..reached as u8 {
            let m = r3.recv(1, k, Duration::ZERO, None).unwrap();
            assert_eq!(m.as_ref(), [i], "seed {seed}");
        }
        assert_eq!(
            r3.recv(1, k, Duration::ZERO, None),
            Err(TransportError::PeerDisconnected { rank: 1 }),
            "seed {seed}: {reached} delivered"
        );
        // Worker 2 heard of it too, and the survivors still talk.
        assert!(w.cores[2].inbox.is_gone(1));
        w.ranks[2].send(3, k, &[b"ok"]).unwrap();
        w.drain(100);
        let got = w.ranks[3].recv(2, k, Duration::ZERO, None).unwrap();
        assert_eq!(got.as_ref(), b"ok");
    }
}

/// The same interleaving for the same seed: a recorded failure replays.
#[test]
fn a_seed_is_one_interleaving() {
    let order = |seed| {
        let mut w = World::new(3, false, seed);
        for src in 0..3u32 {
            for dst in (0..3).filter(|&d| d != src) {
                for i in 0..3u8 {
                    w.ranks[src as usize]
                        .send(dst, key(LaneKind::Collective, 0), &[&[i]])
                        .unwrap();
                }
            }
        }
        w.drain(1000);
        w.trace
    };
    assert_eq!(order(7), order(7));
    assert_ne!(order(7), order(8));
}
