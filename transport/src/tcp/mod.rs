//! The TCP link: one authenticated TCP connection to one peer.
//!
//! Formation (`form/`) yields the authenticated stream; a [`TcpLink`]
//! then sends on it from application threads and its writer thread
//! (`tx.rs`) and reads it with the frame assembler, driven by its reader
//! thread or a waiting application thread (`rx.rs`). What it decodes goes
//! to its [`Sink`]: the core for a TCP group, QUIC's order keeper when
//! the link is a QUIC link's sidecar. This module knows nothing of QUIC.

mod rx;
mod tx;

use crate::auth::handshake::Keys;
use crate::auth::seal::{Opener, Sealer};
use crate::form::{self, FormationError};
use crate::link::{Budget, Core, CoreConfig, Direct, Link, LinkTransport, Sink};
use crate::spec::Spec;
use crate::wire::{FrameType, Header};
use crate::{LinkKind, Payload, TransportError};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use tx::{Out, TcpTx, Wire};

/// Form a TCP group.
pub(crate) fn connect(spec: &Spec) -> Result<LinkTransport, FormationError> {
    let formed = form::form(spec, 0)?;
    let core = Arc::new(Core::new(&core_config(spec)));
    let mut links: Vec<Option<Arc<dyn Link>>> = vec![None; spec.world as usize];
    for (peer, stream, keys) in formed.streams {
        match TcpLink::new(&core, peer, stream, &keys, spec, Arc::new(Direct)) {
            Ok(link) => links[peer as usize] = Some(Arc::new(link)),
            Err(e) => {
                tracing::error!(peer, "cannot set up the link: {e}");
                core.inbox.set_gone(peer);
            }
        }
    }
    core.set_links(links);
    Ok(LinkTransport::start(
        core,
        formed.refuser.into_iter().collect(),
    ))
}

/// What the core needs from a spec.
pub(crate) fn core_config(spec: &Spec) -> CoreConfig {
    // Ranks on this host (same address as ours) against its cores.
    let me = spec.peers.get(spec.rank as usize).map(|a| a.ip());
    CoreConfig {
        rank: spec.rank,
        world: spec.world,
        star: spec.star(),
        timeout: spec.timeout,
        max_message_bytes: spec.max_message_bytes,
        peer_budget_bytes: spec.peer_budget_bytes,
        lane_depth: spec.lane_depth,
        ranks_here: spec.peers.iter().filter(|a| Some(a.ip()) == me).count(),
    }
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct TcpLink {
    peer: u32,
    tx: TcpTx,
    rx: Arc<rx::Rx>,
    sink: Arc<dyn Sink>,
    /// The writer's queue, until the writer starts.
    queue: Mutex<Option<crossbeam_channel::Receiver<Out>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    reader: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl TcpLink {
    /// A link over the authenticated `stream` to `peer`; its frames go to
    /// `sink`.
    pub(crate) fn new(
        core: &Core,
        peer: u32,
        stream: TcpStream,
        keys: &Keys,
        spec: &Spec,
        sink: Arc<dyn Sink>,
    ) -> std::io::Result<TcpLink> {
        let _ = stream.set_nodelay(true);
        let sealer = spec.seal.then(|| Sealer::new(keys.send));
        let opener = spec.seal.then(|| Opener::new(keys.recv));
        let (tx, queue) = crossbeam_channel::unbounded::<Out>();
        let read_half = stream.try_clone()?;
        Ok(TcpLink {
            peer,
            tx: TcpTx {
                tx,
                budget: Arc::new(Budget::new(spec.send_budget_bytes)),
                wire: Arc::new(Wire::new(stream, sealer)),
            },
            rx: Arc::new(rx::Rx::new(peer, read_half, opener, core)),
            sink,
            queue: Mutex::new(Some(queue)),
            writer: Mutex::new(None),
            reader: Mutex::new(None),
        })
    }

    /// Send a frame; see [`Link::send`].
    pub(crate) fn send_frame(
        &self,
        core: &Core,
        header: Header,
        parts: &[&[u8]],
        dst: u32,
    ) -> Result<(), TransportError> {
        self.tx.send(header, parts, core, dst)
    }

    /// Queue a frame without blocking (relays); `false`: the link ended.
    pub(crate) fn enqueue(&self, core: &Core, header: Header, payload: Payload) -> bool {
        self.tx.enqueue_frame(header, payload, &core.pool)
    }

    /// Read what has arrived, if no other thread is; whether it ended.
    pub(crate) fn pump(&self, core: &Core) -> bool {
        self.rx.try_pump(core, &*self.sink)
    }
}

impl Link for TcpLink {
    fn kind(&self) -> LinkKind {
        LinkKind::Tcp
    }

    fn send(
        &self,
        core: &Core,
        header: Header,
        parts: &[&[u8]],
        dst: u32,
    ) -> Result<(), TransportError> {
        self.send_frame(core, header, parts, dst)
    }

    fn forward(&self, core: &Core, header: Header, payload: Payload) {
        self.enqueue(core, header, payload);
    }

    fn tell_gone(&self, core: &Core, gone: u32) {
        let h = Header::control(FrameType::PeerGone, gone, self.peer);
        self.enqueue(core, h, Payload::default());
    }

    fn poll(&self, core: &Core, _want_len: Option<usize>) -> bool {
        self.pump(core)
    }

    fn start(&self, core: &Arc<Core>) {
        let Some(queue) = lock(&self.queue).take() else {
            return;
        };
        let (peer, rank) = (self.peer, core.rank);
        let (c1, c2) = (Arc::clone(core), Arc::clone(core));
        let (s1, s2) = (Arc::clone(&self.sink), Arc::clone(&self.sink));
        let tx = self.tx.clone();
        let rx = Arc::clone(&self.rx);
        let writer = std::thread::Builder::new()
            .name(format!("meshwork-w{rank}-{peer}"))
            .spawn(move || tx::writer(c1, peer, tx, queue, s1));
        let reader = std::thread::Builder::new()
            .name(format!("meshwork-r{rank}-{peer}"))
            .spawn(move || rx::reader(c2, rx, s2));
        match (writer, reader) {
            (Ok(w), Ok(r)) => {
                *lock(&self.writer) = Some(w);
                *lock(&self.reader) = Some(r);
            }
            _ => {
                tracing::error!(peer, "cannot spawn link threads; the link is unusable");
                self.rx.shutdown();
                core.inbox.set_gone(peer);
            }
        }
    }

    fn close_begin(&self) {
        self.tx.enqueue(Out::Close);
    }

    fn close_flush(&self) {
        if let Some(w) = lock(&self.writer).take() {
            let _ = w.join();
        }
    }

    fn close_end(&self) {
        self.rx.shutdown();
        if let Some(r) = lock(&self.reader).take() {
            let _ = r.join();
        }
    }
}
