//! The TCP link: one authenticated TCP connection to one peer.
//!
//! Formation (`form/`) yields the authenticated stream; a [`TcpLink`]
//! then sends on it (`tx.rs`) and reads it with the frame assembler
//! (`rx.rs`). One I/O thread owns it — its own (`run`), or, for a QUIC
//! link's sidecar, the QUIC link's thread, which calls
//! [`TcpLink::service`] from its own loop — and application threads write
//! and read it directly whenever they find it free, so a small message's
//! path has no hand-off between threads. What it decodes goes to its
//! [`Sink`]: the core for a TCP group, QUIC's order keeper when the link
//! is a sidecar. This module knows nothing of QUIC.

mod fleet;
mod rx;
mod stage;
#[cfg(test)]
mod tests;
mod tx;

use crate::auth::handshake::Keys;
use crate::auth::seal::{Opener, Sealer};
use crate::form::{self, FormationError};
use crate::link::{
    heartbeat_interval, Budget, Core, Direct, Gone, Latch, Link, LinkTransport, Posted,
    Reservation, Sink, Watch,
};
use crate::spec::Spec;
use crate::wire::{FrameType, Header};
use crate::{BufferPool, LinkKind, Payload, TransportError};
use std::io::ErrorKind;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tx::{Flushed, Flusher, Out, TcpTx, Wire};

/// Form a TCP group.
pub(crate) fn connect(
    spec: &Spec,
    upgrade: form::Upgrade,
) -> Result<LinkTransport, FormationError> {
    let (core, refusers) = form_links(spec, upgrade)?;
    Ok(LinkTransport::start(core, form::background(refusers)))
}

/// [`connect`]'s formation: the core with every link in its table (not
/// started yet), and the thread refusing latecomers.
pub(crate) fn form_links(
    spec: &Spec,
    upgrade: form::Upgrade,
) -> Result<(Arc<Core>, Vec<form::Refuser>), FormationError> {
    let mut formed = form::form(spec, 0)?;
    if spec.fleet.is_some() {
        return Ok(form_fleet(spec, formed));
    }
    let upgraded = upgrade(spec, &mut formed.streams)?;
    let core = Arc::new(Core::new(&spec.core_config()));
    let mut links: Vec<Option<Arc<dyn Link>>> = vec![None; spec.world as usize];
    for (peer, make) in upgraded {
        links[peer as usize] = Some(make(&core));
    }
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
    if matches!(spec.shape, crate::spec::Shape::Tree { .. }) {
        let reattach = Arc::new(Reattaching {
            core: Arc::downgrade(&core),
            spec: spec.clone(),
            expect: formed.door.as_ref().map(|d| Arc::clone(&d.expect)),
        });
        if let Some(door) = &formed.door {
            let r = Arc::clone(&reattach);
            let _ = door.adopt.set(Box::new(move |peer, stream, keys| {
                r.install(peer, stream, &keys);
            }));
        }
        core.set_reattach(reattach);
    }
    Ok((core, formed.refuser.into_iter().collect()))
}

/// [`form_links`] for a fleet (`Spec::fleet`): every link replaceable,
/// none upgraded to shared memory (a link that ends must leave a TCP
/// door to come back through), and the coordinator's door open to every
/// worker for the group's life.
fn form_fleet(spec: &Spec, formed: form::Formed) -> (Arc<Core>, Vec<form::Refuser>) {
    let core = Arc::new(Core::new(&spec.core_config()));
    let claimed = formed.door.as_ref().map(|d| Arc::clone(&d.claimed));
    let (fleet, links) = fleet::Fleet::form(&core, spec, formed.streams, claimed);
    core.set_links(links);
    core.set_churn(Arc::clone(&fleet) as Arc<dyn crate::link::Churn>);
    if let Some(door) = &formed.door {
        lock(&door.expect).extend(1..spec.world);
        // Those formed are admitted again once they have gone.
        lock(&door.claimed).clear();
        let f = Arc::clone(&fleet);
        let _ = door.adopt.set(Box::new(move |peer, stream, keys| {
            f.install(peer, stream, &keys);
        }));
    }
    (core, formed.refuser.into_iter().collect())
}

/// A tree's re-attachment over TCP (`link::Reattach`): an orphan dials its
/// nearest live ancestor as a child dials its parent at formation, and
/// the ancestor's listener, which refuses latecomers, admits it.
#[derive(Debug)]
struct Reattaching {
    core: std::sync::Weak<Core>,
    spec: Spec,
    /// The listener's admitted ranks (an interior rank's; a leaf has none).
    expect: Option<Arc<Mutex<std::collections::BTreeSet<u32>>>>,
}

impl Reattaching {
    /// Make the link to `peer` over the authenticated `stream`, add it to
    /// the table and start it.
    fn install(&self, peer: u32, stream: TcpStream, keys: &Keys) {
        let Some(core) = self.core.upgrade() else {
            return;
        };
        if core.closing.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        match TcpLink::new(&core, peer, stream, keys, &self.spec, Arc::new(Direct)) {
            Ok(link) => {
                let link: Arc<dyn Link> = Arc::new(link);
                if core.add_link(peer, Arc::clone(&link)) {
                    link.start(&core);
                    tracing::info!(peer, "re-attached");
                } else {
                    tracing::warn!(peer, "a second link to the same rank; dropped");
                }
            }
            Err(e) => tracing::error!(peer, "cannot set up the re-attached link: {e}"),
        }
    }
}

impl crate::link::Reattach for Reattaching {
    fn dial(&self, parent: u32) {
        let Ok(addrs) = self.spec.addrs_of(parent) else {
            tracing::error!(parent, "no address to re-attach to");
            return;
        };
        let (core, spec, expect) = (self.core.clone(), self.spec.clone(), self.expect.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("meshwork-reattach-{parent}"))
            .spawn(move || {
                let me = Reattaching { core, spec, expect };
                let id = form::identity(&me.spec, 0);
                let deadline = Instant::now() + me.spec.timeout;
                let cancel = std::sync::atomic::AtomicBool::new(false);
                let mut backoff = form::Backoff::new();
                loop {
                    let timeout = me.spec.timeout;
                    match form::dial_until(addrs.clone(), parent, &id, deadline, timeout, &cancel) {
                        Ok((stream, keys)) => return me.install(parent, stream, &keys),
                        // The parent has not heard of the failure yet: it
                        // refuses this rank as taken until it has.
                        Err(FormationError::RankConflict { .. }) if Instant::now() < deadline => {
                            backoff.pause(deadline);
                        }
                        Err(e) => {
                            if let Some(core) = me.core.upgrade() {
                                core.give_up_link(parent);
                            }
                            return tracing::error!(parent, "cannot re-attach: {e}");
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!(parent, "cannot start re-attaching: {e}");
        }
    }

    fn admit(&self, ranks: &[u32]) {
        match &self.expect {
            Some(expect) => lock(expect).extend(ranks.iter().copied()),
            None => tracing::warn!(?ranks, "no listener here to admit re-attaching ranks"),
        }
        // An orphan that never dials (it failed too) is given up at the
        // deadline: what waited for its link is dropped.
        let (core, ranks, timeout) = (self.core.clone(), ranks.to_vec(), self.spec.timeout);
        let spawned = std::thread::Builder::new()
            .name("meshwork-adopt".into())
            .spawn(move || {
                #[allow(
                    clippy::disallowed_methods,
                    reason = "a deadline for links that may never come, not synchronisation"
                )]
                std::thread::sleep(timeout);
                if let Some(core) = core.upgrade() {
                    for r in ranks {
                        if core.link(r).is_none() {
                            core.give_up_link(r);
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot watch the re-attaching ranks' deadline: {e}");
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct TcpLink {
    peer: u32,
    /// This end's rank, and the pool the goodbye's envelope comes from.
    rank: u32,
    pool: Arc<BufferPool>,
    tx: TcpTx,
    rx: rx::Rx,
    /// Whether its I/O thread is woken when bytes arrive (not while
    /// callers read the socket themselves).
    watch: Watch,
    sink: Arc<dyn Sink>,
    /// The I/O thread's writing state.
    flusher: Mutex<Flusher>,
    /// Set once the goodbye is written or the link has ended.
    flushed: Latch,
    /// How long closing waits for the goodbye to be written.
    close_wait: Duration,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

const WAKE: mio::Token = mio::Token(0);
const SOCKET: mio::Token = mio::Token(1);

/// What a turn of servicing left.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Serviced {
    /// Service again within this long (a heartbeat or a silence check is
    /// due), or sooner on an event.
    Within(Duration),
    /// The link has ended.
    Ended,
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
        stream.set_nonblocking(true)?;
        let protect = spec.protect();
        let sealer = protect.map(|p| Sealer::new(keys.send, p));
        let opener = protect.map(|p| Opener::new(keys.recv, p));
        let (tx, queue) = crossbeam_channel::unbounded::<Out>();
        let read_half = stream.try_clone()?;
        Ok(TcpLink {
            peer,
            rank: core.rank,
            pool: Arc::clone(&core.pool),
            tx: TcpTx {
                tx,
                budget: Arc::new(Budget::new(spec.send_budget_bytes)),
                wire: Arc::new(Wire::new(stream, sealer)),
            },
            rx: rx::Rx::new(peer, read_half, opener, core),
            watch: Watch::default(),
            sink,
            flusher: Mutex::new(Flusher::new(queue)),
            flushed: Latch::default(),
            close_wait: spec.timeout,
            thread: Mutex::new(None),
        })
    }

    /// Queue a frame without blocking (relays); `false`: the link ended.
    pub(crate) fn enqueue(&self, core: &Core, header: Header, payload: Payload) -> bool {
        self.tx.enqueue_frame(header, payload, &core.pool)
    }

    /// Room in the link's budget for a frame of `len` payload bytes, now
    /// or `None` (see [`Link::reserve`]).
    pub(crate) fn reserve(&self, len: usize) -> Option<Reservation> {
        self.tx.reserve(len)
    }

    /// Queue a frame within `room`, without blocking.
    pub(crate) fn enqueue_reserved(
        &self,
        core: &Core,
        header: Header,
        payload: Payload,
        room: Reservation,
    ) -> bool {
        self.tx.enqueue_reserved(header, payload, &core.pool, room)
    }

    /// Give back `room` unused.
    pub(crate) fn unreserve(&self, room: Reservation) {
        self.tx.budget.release(room.bytes);
    }

    /// Bytes queued on the link and not yet written (reserved or not).
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        self.tx.queued_bytes()
    }

    /// A caller starts (`true`) or stops reading the socket itself,
    /// waiting for a message of `want_len` bytes if known.
    pub(crate) fn caller_polls(&self, core: &Core, on: bool, want_len: Option<usize>) {
        let bulk = want_len.is_some_and(|n| n >= BULK);
        if on {
            self.watch.begin(bulk);
        } else {
            self.watch.end(core.answered(), bulk);
        }
    }

    /// A thread parks on what the I/O thread reads (`on`), or stops; see
    /// [`Link::want`] and [`Watch::park`].
    pub(crate) fn park(&self, on: bool) -> bool {
        self.watch.park(on)
    }

    /// Read what has arrived, if no other thread is; whether it ended.
    pub(crate) fn pump(&self, core: &Core) -> bool {
        self.rx.try_pump(core, &*self.sink)
    }

    /// Give the link to the I/O thread polling `registry`: readiness of
    /// its socket comes as `token`, and `waker` wakes the thread when
    /// frames are queued.
    pub(crate) fn attach(
        &self,
        registry: &mio::Registry,
        token: mio::Token,
        waker: Arc<mio::Waker>,
    ) -> std::io::Result<()> {
        let fd = self.tx.wire.stream.as_raw_fd();
        self.watch.attach(registry, token, fd, Arc::clone(&waker))?;
        self.tx.wire.set_waker(waker);
        Ok(())
    }

    /// One turn of the link's I/O: read (after a readiness event), write
    /// what is queued as far as the socket takes it, send a heartbeat when
    /// idle, notice silence.
    pub(crate) fn service(&self, core: &Core, readable: bool) -> Serviced {
        if readable && self.rx.pump_now(core, &*self.sink) {
            return self.ended();
        }
        let hb = heartbeat_interval(core.liveness());
        let mut f = lock(&self.flusher);
        let flushed = self.tx.flush(&mut f);
        let written = match flushed {
            Ok(Flushed::Idle) if f.last_beat.elapsed() >= hb => {
                f.last_beat = Instant::now();
                self.tx.heartbeat(core, self.peer)
            }
            Ok(_) => true,
            Err(ref e) => {
                tracing::debug!(peer = self.peer, "write failed: {e}");
                false
            }
        };
        // Woken when the socket takes more, only while it would not.
        self.watch.writing(matches!(flushed, Ok(Flushed::Blocked)));
        let beat_due = hb.saturating_sub(f.last_beat.elapsed());
        // A peer that has taken nothing of what is queued for it for a
        // whole deadline has stopped reading: it is failed, and what it
        // would make this rank hold for it (answers, relays, credits) is
        // dropped with the link instead of piling up.
        let stall = f.stalled_since.map(|s| s.elapsed());
        let stalled = written && stall.is_some_and(|s| s >= core.timeout());
        // Whoever waits for the goodbye reads the flusher: set it unlocked.
        drop(f);
        if matches!(flushed, Ok(Flushed::Finished)) {
            self.flushed.set();
        }
        if !written {
            self.rx.fail(core, &*self.sink);
        }
        if stalled {
            tracing::error!(
                peer = self.peer,
                "rank {} has read nothing of what is queued for it for {:?}; closing the link",
                self.peer,
                core.timeout()
            );
            self.rx.fail(core, &*self.sink);
            return self.ended();
        }
        let stall_due = match stall {
            Some(s) => core.timeout().saturating_sub(s),
            None => Duration::MAX,
        };
        // Reading back on when the callers' quiet period is over.
        let quiet_due = self.watch.settle(core.answered()).unwrap_or(Duration::MAX);
        match self.rx.check_silence(core) {
            None => self.ended(),
            Some(silence_due) => Serviced::Within(
                beat_due
                    .min(silence_due)
                    .min(stall_due)
                    .min(quiet_due)
                    .max(Duration::from_millis(1)),
            ),
        }
    }

    /// The link has ended: nothing more will be written, or queued.
    fn ended(&self) -> Serviced {
        self.finish();
        Serviced::Ended
    }

    /// The I/O thread stops: sends fail at once from now on, and whoever
    /// waits for the goodbye stops waiting.
    fn finish(&self) {
        self.tx.wire.end();
        self.flushed.set();
    }

    /// Say goodbye after what is queued (the owner's thread writes it).
    pub(crate) fn begin_close(&self) {
        self.tx.close(self.rank, self.peer, &self.pool);
    }

    /// Wait until the goodbye is written or the link has ended — at most
    /// the deadline, counted from when the socket last took anything (a
    /// peer that stopped reading long ago is not waited for again).
    pub(crate) fn wait_flushed(&self) {
        let started = Instant::now();
        let flushed = self.flushed.wait(|| {
            // Asked again as the wait goes on: the stall may begin meanwhile.
            let stalled = lock(&self.flusher).stalled_since;
            stalled.map_or(started, |s| s.min(started)) + self.close_wait
        });
        if !flushed {
            tracing::debug!(peer = self.peer, "the peer does not read; closing anyway");
        }
    }

    /// Cut the connection: its I/O thread sees it end.
    pub(crate) fn shutdown(&self) {
        self.rx.shutdown();
    }
}

/// Whether `events` say the socket of `token` has something to read (data,
/// its end, or an error the next read reports).
pub(crate) fn readable_in(events: &mio::Events, token: mio::Token) -> bool {
    events
        .iter()
        .any(|e| e.token() == token && (e.is_readable() || e.is_read_closed() || e.is_error()))
}

/// From this size, a caller done waiting for a message leaves the
/// longest quiet period at once (`Watch::end`): a caller in a loop of
/// large receives (`osu_bw`'s window, a ring's steps) is back within it
/// and reads the next message straight into its buffers, where the
/// link's thread, woken the moment the caller stopped, assembled the next
/// one and the caller copied it out: `osu_bw` at 4 MiB over loopback TCP
/// went from 0.31–0.43 of Open MPI's to 0.89–0.92 with this and the
/// reader's stop after a posted message it assembled (`rx.rs`). A caller
/// that works on what came for longer leaves the stream to the thread
/// after the period, which the socket's buffer absorbs off loopback.
const BULK: usize = 64 << 10;

/// The I/O thread of a TCP link: wait for the socket or a wake-up, then
/// service the link, until it ends.
fn run(core: Arc<Core>, link: Arc<TcpLink>, mut poll: mio::Poll, waker: Arc<mio::Waker>) {
    if let Err(e) = link.attach(poll.registry(), SOCKET, waker) {
        tracing::error!(peer = link.peer, "cannot poll the link's socket: {e}");
        link.rx.fail(&core, &*link.sink);
        link.finish();
        return;
    }
    // The first turn writes whatever was queued before the thread started.
    link.serve(&core, &mut poll, SOCKET, true);
}

impl TcpLink {
    /// Service the link whenever `poll` reports its socket (as `token`)
    /// or a wake-up, until it ends; `readable`: read on the first turn.
    pub(crate) fn serve(
        &self,
        core: &Core,
        poll: &mut mio::Poll,
        token: mio::Token,
        mut readable: bool,
    ) {
        let mut events = mio::Events::with_capacity(8);
        let mut spin = crate::link::AnswerSpin::new(core);
        loop {
            let wait = match self.service(core, readable) {
                Serviced::Ended => return,
                Serviced::Within(d) => d,
            };
            // Answering requests: look again without sleeping for a while.
            let wait = spin.wait(core, wait);
            if let Err(e) = poll.poll(&mut events, Some(wait)) {
                if e.kind() != ErrorKind::Interrupted {
                    tracing::error!(peer = self.peer, "poll: {e}");
                    self.rx.fail(core, &*self.sink);
                    self.finish();
                    return;
                }
            }
            readable = readable_in(&events, token);
        }
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
        self.tx.send(header, parts, core, dst)
    }

    fn forward(&self, core: &Core, header: Header, payload: Payload) {
        self.enqueue(core, header, payload);
    }

    fn reserve(&self, len: usize) -> Option<Reservation> {
        TcpLink::reserve(self, len)
    }

    fn forward_reserved(&self, core: &Core, header: Header, payload: Payload, room: Reservation) {
        self.enqueue_reserved(core, header, payload, room);
    }

    fn unreserve(&self, room: Reservation) {
        TcpLink::unreserve(self, room);
    }

    #[cfg(test)]
    fn queued_bytes(&self) -> usize {
        TcpLink::queued_bytes(self)
    }

    fn tell_gone(&self, core: &Core, gone: u32, how: Gone, dst: u32) {
        let h = Header {
            aux: how as u32,
            ..Header::control(FrameType::PeerGone, gone, dst)
        };
        self.enqueue(core, h, Payload::default());
    }

    fn poll(&self, core: &Core, _want_len: Option<usize>) -> bool {
        self.pump(core)
    }

    fn poll_into(&self, core: &Core, posted: &mut Posted<'_>) -> bool {
        if self.sink.reads_direct() {
            self.rx.try_pump_into(core, &*self.sink, posted)
        } else {
            self.pump(core)
        }
    }

    fn caller_polls(&self, core: &Core, on: bool, want_len: Option<usize>) {
        self.caller_polls(core, on, want_len);
    }

    fn want(&self, _kind: crate::LaneKind, on: bool) -> bool {
        self.park(on)
    }

    fn want_standing(&self, _kind: crate::LaneKind, _on: bool) -> bool {
        false
    }

    fn start(self: Arc<Self>, core: &Arc<Core>) {
        let peer = self.peer;
        let spawned = mio::Poll::new()
            .and_then(|poll| {
                let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE)?);
                Ok((poll, waker))
            })
            .and_then(|(poll, waker)| {
                let (c, l) = (Arc::clone(core), Arc::clone(&self));
                std::thread::Builder::new()
                    .name(format!("meshwork-t{}-{peer}", core.rank))
                    .spawn(move || run(c, l, poll, waker))
            });
        match spawned {
            Ok(t) => *lock(&self.thread) = Some(t),
            Err(e) => {
                tracing::error!(peer, "cannot start the link's thread: {e}");
                self.rx.fail(core, &*self.sink);
                self.finish();
            }
        }
    }

    fn close_begin(&self) {
        self.begin_close();
    }

    fn close_flush(&self) {
        self.wait_flushed();
    }

    fn close_end(&self) {
        self.shutdown();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
    }
}
