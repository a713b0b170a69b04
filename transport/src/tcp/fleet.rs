//! A fleet (`Spec::fleet`): a star over TCP whose workers come and go.
//!
//! Each peer's place in the core's table is a [`Rejoin`]: a link whose
//! TCP link underneath may be replaced. When that link ends (or is cut
//! for silence), its peer is *away*, not failed: the coordinator marks
//! the worker gone (a receive from it fails at once, and no send to it
//! waits) and tells nobody; a worker dials its coordinator again, with
//! backoff, until `Spec::fleet`'s deadline, logging how long it has been
//! away. A worker that comes back — the same process after its link
//! dropped, NAT having given it a new address, or a new process — proves
//! its rank in the handshake as at formation; the coordinator's door
//! admits it at any time, and its new link replaces the old. Both ends
//! then start the new link as at formation (`Core::revive`): what the
//! old one delivered and nobody took is dropped, and no credit is owed
//! across it.
//!
//! A link that ended is told from its successor by a generation: the end
//! of a link already replaced changes nothing.

use super::TcpLink;
use crate::auth::handshake::Keys;
use crate::form::{self, FormationError};
use crate::link::{Churn, Core, Gone, Link, Posted, Reservation, Sink};
use crate::spec::Spec;
use crate::wire::Header;
use crate::{LinkKind, Payload, TransportError};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

/// The links of a fleet's rank: every peer's [`Slot`], and how to dial
/// again (a worker) or admit again (the coordinator).
#[derive(Debug)]
pub(crate) struct Fleet {
    core: Weak<Core>,
    spec: Spec,
    slots: Vec<Arc<Slot>>,
    /// The coordinator's door: the ranks it has admitted, released once
    /// each new link is up so that it may come again.
    claimed: Option<Arc<Mutex<std::collections::BTreeSet<u32>>>>,
    /// A worker is dialling its coordinator again now.
    redialling: AtomicBool,
}

/// One peer's link now, and its generation.
#[derive(Debug)]
struct Slot {
    peer: u32,
    now: RwLock<Option<Arc<TcpLink>>>,
    generation: AtomicU64,
    /// This rank is leaving (its goodbye is queued): the link's end is
    /// its own doing, not a reason to dial again, and no link comes back.
    leaving: AtomicBool,
}

impl Slot {
    fn current(&self) -> Option<Arc<TcpLink>> {
        self.now.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Put `link` in its place; the link it had.
    fn replace(&self, link: Option<Arc<TcpLink>>) -> Option<Arc<TcpLink>> {
        std::mem::replace(
            &mut *self.now.write().unwrap_or_else(|e| e.into_inner()),
            link,
        )
    }
}

impl Fleet {
    /// The fleet of `core`'s rank: each peer's `Rejoin` for the table,
    /// with the links formed (`streams`) in place; peers without one are
    /// away from the start.
    pub(crate) fn form(
        core: &Arc<Core>,
        spec: &Spec,
        streams: Vec<(u32, TcpStream, Keys)>,
        claimed: Option<Arc<Mutex<std::collections::BTreeSet<u32>>>>,
    ) -> (Arc<Fleet>, Vec<Option<Arc<dyn Link>>>) {
        let world = spec.world;
        let fleet = Arc::new(Fleet {
            core: Arc::downgrade(core),
            spec: spec.clone(),
            slots: (0..world)
                .map(|peer| {
                    Arc::new(Slot {
                        peer,
                        now: RwLock::new(None),
                        generation: AtomicU64::new(0),
                        leaving: AtomicBool::new(false),
                    })
                })
                .collect(),
            claimed,
            redialling: AtomicBool::new(false),
        });
        for (peer, stream, keys) in streams {
            match fleet.make(core, peer, stream, &keys) {
                Ok(link) => {
                    fleet.slots[peer as usize].replace(Some(link));
                }
                Err(e) => tracing::error!(peer, "cannot set up the link: {e}"),
            }
        }
        let links = (0..world)
            .map(|peer| {
                let linked = peer == 0 || spec.rank == 0;
                (linked && peer != spec.rank).then(|| {
                    if fleet.slots[peer as usize].current().is_none() {
                        core.inbox.set_gone(peer);
                    }
                    Arc::new(Rejoin {
                        slot: Arc::clone(&fleet.slots[peer as usize]),
                    }) as Arc<dyn Link>
                })
            })
            .collect();
        (fleet, links)
    }

    /// A TCP link to `peer` over `stream`, its ends reported as this
    /// generation's.
    fn make(
        self: &Arc<Self>,
        core: &Core,
        peer: u32,
        stream: TcpStream,
        keys: &Keys,
    ) -> std::io::Result<Arc<TcpLink>> {
        let slot = &self.slots[peer as usize];
        let sink = Arc::new(FleetSink {
            fleet: Arc::downgrade(self),
            generation: slot.generation.load(Ordering::Acquire),
        });
        TcpLink::new(core, peer, stream, keys, &self.spec, sink).map(Arc::new)
    }

    /// `peer` is back over the authenticated `stream`: its old link (if
    /// any) is cut and joined, both ends start afresh (`Core::revive`),
    /// and the new link starts.
    pub(crate) fn install(self: &Arc<Self>, peer: u32, stream: TcpStream, keys: &Keys) {
        let Some(core) = self.core.upgrade() else {
            return;
        };
        let Some(slot) = self.slots.get(peer as usize) else {
            return;
        };
        if core.closing.load(Ordering::Acquire) || slot.leaving.load(Ordering::Acquire) {
            return;
        }
        // Ends of the old link are not this one's from here on.
        slot.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(old) = slot.replace(None) {
            old.close_end();
        }
        core.revive(peer);
        match self.make(&core, peer, stream, keys) {
            Ok(link) => {
                slot.replace(Some(Arc::clone(&link)));
                Arc::clone(&link).start(&core);
                // Closing began meanwhile, and may have passed this slot.
                if core.closing.load(Ordering::Acquire) || slot.leaving.load(Ordering::Acquire) {
                    link.close_end();
                    return;
                }
                core.came_back(peer);
                tracing::info!(
                    peer,
                    incarnation = core.incarnation(peer),
                    "rank {peer} is back"
                );
            }
            Err(e) => {
                tracing::error!(peer, "cannot set up the returning link: {e}");
                core.inbox.set_gone(peer);
            }
        }
        if let Some(claimed) = &self.claimed {
            claimed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&peer);
        }
    }

    /// `peer`'s link of `generation` ended.
    fn ended(self: &Arc<Self>, core: &Core, peer: u32, generation: u64) {
        let Some(slot) = self.slots.get(peer as usize) else {
            return;
        };
        if slot.generation.load(Ordering::Acquire) != generation {
            return;
        }
        let goodbye = core.inbox.has_left(peer);
        let leaving = core.closing.load(Ordering::Acquire) || slot.leaving.load(Ordering::Acquire);
        if leaving || core.rank == 0 || goodbye {
            if core.rank == 0 && !goodbye && !leaving {
                tracing::info!(peer, "worker {peer} is away");
            }
            return core.lost(peer);
        }
        // A worker whose coordinator went without a goodbye: dial again.
        if !self.redialling.swap(true, Ordering::AcqRel) {
            self.redial(peer);
        }
    }

    /// A worker dials its coordinator again, with backoff, until
    /// `Spec::fleet`'s deadline; past it the coordinator is gone (calls
    /// naming it fail).
    fn redial(self: &Arc<Self>, peer: u32) {
        let away = self.spec.fleet.unwrap_or(self.spec.timeout);
        let fleet = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("meshwork-redial-{peer}"))
            .spawn(move || {
                let given_up = fleet.dial_back(peer, away);
                if given_up.is_some() {
                    fleet.redialling.store(false, Ordering::Release);
                }
                if let (Some(e), Some(core)) = (given_up, fleet.core.upgrade()) {
                    tracing::error!(peer, "the coordinator stayed away for {away:?}: {e}");
                    core.lost(peer);
                }
            });
        if let Err(e) = spawned {
            tracing::error!(peer, "cannot start dialling the coordinator again: {e}");
            self.redialling.store(false, Ordering::Release);
        }
    }

    /// [`redial`](Self::redial)'s attempts; why it gave up, if it did.
    fn dial_back(self: &Arc<Self>, peer: u32, away: Duration) -> Option<FormationError> {
        let addrs = match self.spec.addrs_of(peer) {
            Ok(a) => a,
            Err(e) => return Some(e),
        };
        let id = form::identity(&self.spec, 0);
        let started = Instant::now();
        let deadline = started
            .checked_add(away)
            .unwrap_or(started + self.spec.timeout);
        // Workers spread their attempts: a coordinator that comes back is
        // not dialled by the whole fleet in the same instant.
        let spread = 1.0 + f64::from(self.spec.rank % 16) / 16.0;
        let mut pause = Duration::from_millis(100);
        let mut tries = 0u32;
        tracing::warn!(
            peer,
            "the coordinator is away; dialling it again for up to {away:?}"
        );
        loop {
            let core = self.core.upgrade()?;
            let attempt = (Instant::now() + self.spec.timeout).min(deadline);
            let dialled = form::dial_until(
                addrs.clone(),
                peer,
                &id,
                attempt,
                self.spec.timeout,
                &core.closing,
            );
            if core.closing.load(Ordering::Acquire) {
                return None;
            }
            drop(core);
            tries += 1;
            match dialled {
                Ok((stream, keys)) => {
                    tracing::info!(
                        peer,
                        tries,
                        "back with the coordinator after {:?} away",
                        started.elapsed()
                    );
                    // Done dialling before the new link starts: if it
                    // ends at once, its end dials again.
                    self.redialling.store(false, Ordering::Release);
                    self.install(peer, stream, &keys);
                    return None;
                }
                Err(e) if Instant::now() >= deadline => return Some(e),
                // Refused with proof (another job, a protocol this build
                // cannot speak): dialling again cannot help.
                Err(
                    e @ (FormationError::ProtocolMismatch { .. }
                    | FormationError::WorldMismatch { .. }
                    | FormationError::TopologyMismatch { .. }
                    | FormationError::HeapMismatch { .. }),
                ) => return Some(e),
                Err(e) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let wait = pause.mul_f64(spread).min(left);
                    tracing::warn!(
                        peer,
                        tries,
                        "the coordinator has been away for {:?} ({e}); next try in {wait:?}, giving up in {left:?}",
                        started.elapsed(),
                    );
                    #[allow(
                        clippy::disallowed_methods,
                        reason = "back-off between dial attempts, not synchronisation"
                    )]
                    std::thread::sleep(wait);
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

impl Churn for Fleet {
    fn silent(&self, peer: u32) {
        if let Some(link) = self.slots.get(peer as usize).and_then(|s| s.current()) {
            tracing::warn!(peer, "cutting the silent link to rank {peer}");
            link.shutdown();
        }
    }
}

/// Where a fleet's TCP link delivers: straight to the core, its end
/// reported with its generation.
#[derive(Debug)]
struct FleetSink {
    fleet: Weak<Fleet>,
    generation: u64,
}

impl Sink for FleetSink {
    fn data(&self, core: &Core, peer: u32, h: Header, payload: Payload) -> bool {
        core.on_data(peer, h, payload)
    }

    fn ended(&self, core: &Core, peer: u32) {
        match self.fleet.upgrade() {
            Some(fleet) => fleet.ended(core, peer, self.generation),
            None => core.lost(peer),
        }
    }

    fn reads_direct(&self) -> bool {
        true
    }
}

/// A fleet peer's place in the core's table: whichever TCP link it has
/// now (none while it is away).
#[derive(Debug)]
struct Rejoin {
    slot: Arc<Slot>,
}

impl Rejoin {
    fn away(&self) -> TransportError {
        TransportError::PeerDisconnected {
            rank: self.slot.peer,
        }
    }
}

impl Link for Rejoin {
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
        match self.slot.current() {
            Some(l) => l.send(core, header, parts, dst),
            None => Err(self.away()),
        }
    }

    fn forward(&self, core: &Core, header: Header, payload: Payload) {
        if let Some(l) = self.slot.current() {
            l.forward(core, header, payload);
        }
    }

    fn reserve(&self, len: usize) -> Option<Reservation> {
        match self.slot.current() {
            Some(l) => l.reserve(len),
            None => Some(Reservation { len, bytes: 0 }),
        }
    }

    fn forward_reserved(&self, core: &Core, header: Header, payload: Payload, room: Reservation) {
        // Room reserved on a link since replaced is given back to its
        // successor's budget, which never goes below nothing.
        match self.slot.current() {
            Some(l) => l.forward_reserved(core, header, payload, room),
            None => drop(room),
        }
    }

    fn unreserve(&self, room: Reservation) {
        if let Some(l) = self.slot.current() {
            l.unreserve(room);
        }
    }

    #[cfg(test)]
    fn queued_bytes(&self) -> usize {
        self.slot.current().map_or(0, |l| l.queued_bytes())
    }

    fn tell_gone(&self, core: &Core, gone: u32, how: Gone, dst: u32) {
        if let Some(l) = self.slot.current() {
            l.tell_gone(core, gone, how, dst);
        }
    }

    fn poll(&self, core: &Core, want_len: Option<usize>) -> bool {
        self.slot.current().is_none_or(|l| l.poll(core, want_len))
    }

    fn poll_into(&self, core: &Core, posted: &mut Posted<'_>) -> bool {
        self.slot
            .current()
            .is_none_or(|l| l.poll_into(core, posted))
    }

    fn caller_polls(&self, core: &Core, on: bool, want_len: Option<usize>) {
        if let Some(l) = self.slot.current() {
            l.caller_polls(core, on, want_len);
        }
    }

    fn want(&self, kind: crate::LaneKind, on: bool) -> bool {
        self.slot.current().is_some_and(|l| l.want(kind, on))
    }

    fn want_standing(&self, kind: crate::LaneKind, on: bool) -> bool {
        self.slot
            .current()
            .is_some_and(|l| l.want_standing(kind, on))
    }

    fn start(self: Arc<Self>, core: &Arc<Core>) {
        if let Some(l) = self.slot.current() {
            l.start(core);
        }
    }

    fn close_begin(&self) {
        self.slot.leaving.store(true, Ordering::Release);
        if let Some(l) = self.slot.current() {
            l.close_begin();
        }
    }

    fn close_flush(&self) {
        if let Some(l) = self.slot.current() {
            l.close_flush();
        }
    }

    fn close_end(&self) {
        if let Some(l) = self.slot.current() {
            l.close_end();
        }
    }
}
