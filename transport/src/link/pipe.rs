//! In-process links: the link core of every rank of a world in this
//! process, joined by in-memory queues instead of sockets. Unlike the
//! in-memory transport (`mem.rs`, which puts each message straight into
//! its receiver's inbox), every frame here goes through the core as it
//! would over a network: dispatch's checks, credits, and relaying along
//! the shape's routes, so an in-process world can take any shape (a
//! star, a hypercube, a circulant) and exercise its relays.

use super::{Core, CoreConfig, Gone, Link, LinkTransport, Next};
use crate::route::{Shape, ShapeError};
use crate::wire::{FrameType, Header};
use crate::{LinkKind, Payload, TransportError};
use crossbeam_channel::{Receiver, Sender};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// One frame on its way.
type Frame = (Header, Payload);
/// A queue's two ends.
type Queue = (Sender<Frame>, Receiver<Frame>);

/// One rank's end of its link to `peer`: a queue out, and one in that its
/// reader thread drains into the core.
#[derive(Debug)]
struct PipeLink {
    peer: u32,
    rank: u32,
    out: Mutex<Option<Sender<Frame>>>,
    inn: Mutex<Option<Receiver<Frame>>>,
    /// Dropped at close: the reader stops.
    stop: Mutex<Option<Sender<()>>>,
    stopped: Receiver<()>,
    net: Arc<PipeNet>,
}

impl PipeLink {
    fn put(&self, frame: Frame) -> bool {
        if self.net.is_cut(self.rank, self.peer) {
            // Lost on a cut network: the sender cannot tell.
            return true;
        }
        let out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        out.as_ref().is_some_and(|tx| tx.send(frame).is_ok())
    }

    /// A frame that needs no answer (relayed, a notice, the goodbye):
    /// dropped if the link has closed.
    fn pass(&self, h: Header, payload: Payload) {
        if !self.put((h, payload)) {
            tracing::debug!(peer = self.peer, "link closed; frame dropped");
        }
    }
}

impl Link for PipeLink {
    fn kind(&self) -> LinkKind {
        LinkKind::Memory
    }

    fn send(&self, _: &Core, h: Header, parts: &[&[u8]], dst: u32) -> Result<(), TransportError> {
        if self.put((h, Payload::from_parts(parts))) {
            Ok(())
        } else {
            Err(TransportError::PeerDisconnected { rank: dst })
        }
    }

    fn forward(&self, _: &Core, h: Header, payload: Payload) {
        self.pass(h, payload);
    }

    fn tell_gone(&self, _: &Core, gone: u32, how: Gone, dst: u32) {
        let h = Header {
            aux: how as u32,
            ..Header::control(FrameType::PeerGone, gone, dst)
        };
        self.pass(h, Payload::default());
    }

    fn poll(&self, _: &Core, _: Option<usize>) -> bool {
        // The reader thread delivers; a caller has nothing to read.
        false
    }

    fn patience(&self) -> Duration {
        Duration::ZERO
    }

    fn caller_polls(&self, _core: &Core, _on: bool, _want_len: Option<usize>) {}

    fn start(self: Arc<Self>, core: &Arc<Core>) {
        let Some(inn) = self.inn.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let (core, stopped, peer) = (Arc::clone(core), self.stopped.clone(), self.peer);
        let name = format!("meshwork-pipe-{}-{peer}", self.rank);
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            loop {
                let frame = crossbeam_channel::select! {
                    recv(inn) -> f => f,
                    recv(stopped) -> _ => return,
                };
                let Ok((h, payload)) = frame else { break };
                let ok = match core.on_header(peer, h) {
                    Next::Continue => true,
                    Next::Body(h) => {
                        core.progress(peer, h.src, h.kind);
                        core.on_data(peer, h, payload)
                    }
                    Next::End => false,
                };
                if !ok {
                    break;
                }
            }
            core.lost(peer);
        });
        if let Err(e) = spawned {
            tracing::error!(peer, "cannot start the link's thread: {e}");
        }
    }

    fn close_begin(&self) {}

    fn close_flush(&self) {
        self.pass(
            Header::control(FrameType::Bye, self.rank, self.peer),
            Payload::default(),
        );
        drop(self.out.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    fn close_end(&self) {
        drop(self.stop.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

/// The network of an in-process world ([`world_with_net`]): it can be
/// cut into sides and healed, as a partition of real hosts would be.
#[derive(Debug, Default)]
pub struct PipeNet {
    /// Directed pairs (from, to) whose frames are lost.
    cut: Mutex<BTreeSet<(u32, u32)>>,
    cores: Mutex<Vec<Weak<Core>>>,
}

impl PipeNet {
    fn is_cut(&self, from: u32, to: u32) -> bool {
        let cut = self.cut.lock().unwrap_or_else(|e| e.into_inner());
        !cut.is_empty() && cut.contains(&(from, to))
    }

    fn core(&self, r: u32) -> Option<Arc<Core>> {
        let cores = self.cores.lock().unwrap_or_else(|e| e.into_inner());
        cores.get(r as usize)?.upgrade()
    }

    /// Cut the network into `sides`: every frame between ranks on
    /// different sides is lost from now on, and each end's failure
    /// detector sees the other silent at once (as it would after the
    /// liveness limit). Ranks on no side keep all their links.
    pub fn partition(&self, sides: &[&[u32]]) {
        let mut pairs = Vec::new();
        for (i, a) in sides.iter().enumerate() {
            for b in sides.iter().skip(i + 1) {
                for &x in *a {
                    for &y in *b {
                        pairs.push((x, y));
                    }
                }
            }
        }
        {
            let mut cut = self.cut.lock().unwrap_or_else(|e| e.into_inner());
            for &(x, y) in &pairs {
                cut.insert((x, y));
                cut.insert((y, x));
            }
        }
        for (x, y) in pairs {
            for (me, peer) in [(x, y), (y, x)] {
                if let Some(core) = self.core(me) {
                    if core.link(peer).is_some() {
                        core.silent(peer);
                    }
                }
            }
        }
    }

    /// Heal every cut: frames flow again, and each end hears the other.
    pub fn heal(&self) {
        let pairs = std::mem::take(&mut *self.cut.lock().unwrap_or_else(|e| e.into_inner()));
        for (me, peer) in pairs {
            if let Some(core) = self.core(me) {
                if core.link(peer).is_some() {
                    core.heard(peer);
                }
            }
        }
    }
}

/// A world of `world` ranks in this process shaped as `shape`: rank `r`'s
/// transport is element `r`; only linked ranks share a queue, the others'
/// frames are relayed. `Err`: a shape the world cannot take.
pub fn world(world: u32, shape: Shape) -> Result<Vec<LinkTransport>, ShapeError> {
    world_with_net(world, shape).map(|(ranks, _)| ranks)
}

/// [`world`], with its network, which a test may cut into sides.
pub fn world_with_net(
    world: u32,
    shape: Shape,
) -> Result<(Vec<LinkTransport>, Arc<PipeNet>), ShapeError> {
    if world == 0 {
        return Err(ShapeError::NoRanks);
    }
    if world > 1 {
        shape.check(world)?;
    }
    let n = world as usize;
    // queues[a][b]: frames from a to b.
    let queues: Vec<Vec<Option<Queue>>> = (0..n)
        .map(|a| {
            (0..n)
                .map(|b| {
                    shape
                        .linked(world, a as u32, b as u32)
                        .then(crossbeam_channel::unbounded)
                })
                .collect()
        })
        .collect();
    let net = Arc::new(PipeNet::default());
    let mut ranks = Vec::with_capacity(n);
    for r in 0..world {
        let core = Arc::new(Core::new(&CoreConfig {
            rank: r,
            world,
            shape,
            timeout: crate::DEFAULT_TIMEOUT,
            liveness: crate::DEFAULT_TIMEOUT,
            max_message_bytes: crate::DEFAULT_MAX_MESSAGE_BYTES,
            peer_budget_bytes: crate::DEFAULT_PEER_BUDGET,
            lane_depth: crate::LANE_DEPTH,
            ranks_here: n,
        }));
        let links = (0..world)
            .map(|p| {
                let out = queues[r as usize][p as usize].as_ref()?.0.clone();
                let inn = queues[p as usize][r as usize].as_ref()?.1.clone();
                let (stop, stopped) = crossbeam_channel::bounded(0);
                Some(Arc::new(PipeLink {
                    peer: p,
                    rank: r,
                    out: Mutex::new(Some(out)),
                    inn: Mutex::new(Some(inn)),
                    stop: Mutex::new(Some(stop)),
                    stopped,
                    net: Arc::clone(&net),
                }) as Arc<dyn Link>)
            })
            .collect();
        core.set_links(links);
        net.cores
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&core));
        ranks.push(core);
    }
    // Only the links hold the queues now: a rank that closes ends its
    // peers' readers.
    drop(queues);
    let ranks = ranks
        .into_iter()
        .map(|core| LinkTransport::start(core, Vec::new()))
        .collect();
    Ok((ranks, net))
}
