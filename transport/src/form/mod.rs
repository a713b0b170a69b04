//! Formation: who dials whom, dialling with back-off until the deadline,
//! accepting and authenticating (`auth::handshake`), and refusing
//! whoever comes after the group has formed. It yields authenticated TCP
//! streams; the backends turn them into links (TCP links, or QUIC's
//! sidecars).
//!
//! * **Mesh**: every pair is linked; rank `r` dials every higher rank and
//!   accepts every lower one. Dials retry until the formation deadline,
//!   so ranks may start in any order.
//! * **Star**: rank 0 (the coordinator) listens and every worker dials it;
//!   workers need no inbound port (NAT, containers).
//! * **Tree**: every child dials its parent; leaves need no inbound port.
//! * **Sparse shapes** (k-regular, hypercube): of each linked pair, the
//!   lower rank dials.

use crate::auth::handshake::{self, HandshakeError, Identity, Keys};
use crate::auth::seal::Protect;
pub(crate) use crate::form_error::io_fail;
pub use crate::form_error::FormationError;
use crate::spec::{Shape, Spec};
pub(crate) use gate::{handshake_time, Doorway, Handshake, PENDING_PER_SOURCE};
use gate::{Accepted, Gate};
use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod gate;

/// A thread that answers whoever dials after formation with a typed
/// refusal, until stopped.
/// Dropping it stops the thread and waits for it, so a formation that
/// fails after the listener started leaves no thread behind.
pub(crate) struct Refuser {
    stop: Box<dyn Fn() + Send + Sync>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Refuser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Refuser")
    }
}

impl Refuser {
    /// Run `body` on a thread named `name`; `stop` makes it return.
    pub(crate) fn spawn(
        name: String,
        stop: impl Fn() + Send + Sync + 'static,
        body: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<Refuser> {
        let thread = std::thread::Builder::new().name(name).spawn(body)?;
        Ok(Refuser {
            stop: Box::new(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Refuser {
    fn drop(&mut self) {
        (self.stop)();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Refusers as what the endpoint keeps running beside its links, and
/// stops when it closes.
pub(crate) fn background(refusers: Vec<Refuser>) -> Vec<crate::link::Background> {
    refusers
        .into_iter()
        .map(|r| Box::new(r) as crate::link::Background)
        .collect()
}

/// Builds a link once the core exists.
pub(crate) type LinkMaker =
    Box<dyn FnOnce(&Arc<crate::link::Core>) -> Arc<dyn crate::link::Link> + Send>;

/// Turns some of a formed rank's streams into links of another kind
/// before the backend makes its own (the factory hands the backends the
/// same-host upgrade); the streams it takes leave the list.
pub(crate) type Upgrade =
    fn(&Spec, &mut Vec<(u32, TcpStream, Keys)>) -> Result<Vec<(u32, LinkMaker)>, FormationError>;

/// The authenticated TCP streams of a formed rank, the listener's thread
/// that refuses latecomers, and its door for a tree's orphans.
#[derive(Debug)]
pub(crate) struct Formed {
    pub streams: Vec<(u32, TcpStream, Keys)>,
    pub refuser: Option<Refuser>,
    pub door: Option<Door>,
}

/// What a stream admitted after formation becomes (a link the backend
/// makes and starts).
pub(crate) type Adopt = Box<dyn Fn(u32, TcpStream, Keys) + Send + Sync>;

/// The listener's door after formation: the ranks it admits (a tree's
/// orphans re-attaching here), and what their streams become, set once
/// the backend's core exists.
#[derive(Clone)]
pub(crate) struct Door {
    pub expect: Arc<std::sync::Mutex<BTreeSet<u32>>>,
    /// The ranks admitted so far: a rank released from it (a fleet's
    /// worker, once its new link is up) may be admitted again.
    pub claimed: Arc<std::sync::Mutex<BTreeSet<u32>>>,
    pub adopt: Arc<std::sync::OnceLock<Adopt>>,
}

impl std::fmt::Debug for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Door")
            .field("expect", &self.expect)
            .finish()
    }
}

const WAKE: mio::Token = mio::Token(0);
const LISTEN: mio::Token = mio::Token(1);

/// The identity a rank announces in its handshakes; `transport` is the
/// backend's settings word (`handshake::TRANSPORT_*`), checked equal.
pub(crate) fn identity(spec: &Spec, transport: u64) -> Identity {
    Identity {
        rank: spec.rank,
        world: spec.world,
        shape: spec.shape.word(),
        key: handshake::derive_key(spec.token.as_deref()),
        version: spec.protocol_version,
        heap: spec.heap_bytes,
        transport: (transport & !handshake::TRANSPORT_BOUNDS)
            | handshake::bounds_word(spec.peer_budget_bytes, spec.lane_depth)
            | match spec.protect() {
                Some(Protect::Encrypt) => handshake::TRANSPORT_SEALED,
                Some(Protect::Authenticate) => 0,
                None if spec.token.is_some() => handshake::TRANSPORT_UNAUTHENTICATED,
                None => 0,
            },
    }
}

/// What the formation loop hears from its dialers and its gate.
enum Event {
    Dialed(u32, Result<(TcpStream, Keys), FormationError>),
    Accepted(Accepted),
}

/// Form the TCP streams of a group: listen, dial, authenticate.
pub(crate) fn form(spec: &Spec, transport: u64) -> Result<Formed, FormationError> {
    let cfg = spec;
    let id = identity(spec, transport);
    let (rank, world) = (cfg.rank, cfg.world);
    let (accept_from, dial_to) = plan(cfg.shape, rank, world);
    let addr_of = |r: u32| cfg.addr_of(r);
    let deadline = Instant::now() + cfg.timeout;
    let mut gate = match accept_from.is_empty() {
        true => None,
        false => {
            let addr = cfg.bind.map_or_else(|| addr_of(rank), Ok)?;
            let bound = cfg.sockets.as_ref().and_then(|s| s.take_tcp(addr));
            let l = match bound {
                Some(l) => {
                    l.set_nonblocking(true).map_err(|e| io_fail(rank, e))?;
                    l
                }
                None => listen(addr, &id, cfg.timeout)?,
            };
            // Room beyond the per-source bound for the peers expected from
            // each address (ranks on one host share one).
            let expected = accept_from
                .iter()
                .flat_map(|&r| cfg.addrs_of(r).unwrap_or_default())
                .map(|a| a.ip());
            Some(Gate::new(
                l,
                id.clone(),
                accept_from.clone(),
                expected,
                cfg.timeout,
            ))
        }
    };

    let mut poll = mio::Poll::new().map_err(|e| io_fail(rank, e))?;
    let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE).map_err(|e| io_fail(rank, e))?);
    if let Some(g) = &gate {
        poll.registry()
            .register(
                &mut mio::unix::SourceFd(&g.listener().as_raw_fd()),
                LISTEN,
                mio::Interest::READABLE,
            )
            .map_err(|e| io_fail(rank, e))?;
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let (events_tx, events_rx) = crossbeam_channel::unbounded();
    let (accepted_tx, accepted_rx) = crossbeam_channel::unbounded();
    let mut dialers = Vec::new();
    for &peer in &dial_to {
        let addrs = cfg.addrs_of(peer)?;
        let (id, tx, waker, cancel) = (
            id.clone(),
            events_tx.clone(),
            Arc::clone(&waker),
            Arc::clone(&cancel),
        );
        let timeout = cfg.timeout;
        let t = std::thread::Builder::new()
            .name(format!("meshwork-dial-{peer}"))
            .spawn(move || {
                let res = dial_until(addrs, peer, &id, deadline, timeout, &cancel);
                let _ = tx.send(Event::Dialed(peer, res));
                let _ = waker.wake();
            })
            .map_err(|e| io_fail(rank, e))?;
        dialers.push(t);
    }
    let wake: Arc<dyn Fn() + Send + Sync> = {
        let waker = Arc::clone(&waker);
        Arc::new(move || {
            let _ = waker.wake();
        })
    };

    let mut formed: Vec<(u32, TcpStream, Keys)> = Vec::new();
    let mut dials_left = dial_to.len();
    let mut accepted: BTreeSet<u32> = BTreeSet::new();
    // What could not be authenticated, by the rank it concerned: reported
    // at the deadline if that rank never formed a link.
    let mut suspects: BTreeMap<u32, FormationError> = BTreeMap::new();
    let mut events = mio::Events::with_capacity(16);
    // The gate left connections in the listener's queue (it takes a
    // bounded number a turn): poll without waiting.
    let mut backlog = false;
    let outcome: Result<(), FormationError> = loop {
        let mut failed = None;
        let heard = events_rx
            .try_iter()
            .chain(accepted_rx.try_iter().map(Event::Accepted));
        for event in heard.collect::<Vec<_>>() {
            let res = match event {
                Event::Dialed(peer, res) => {
                    dials_left -= 1;
                    res.map(|(s, keys)| formed.push((peer, s, keys)))
                }
                Event::Accepted(a) => on_accepted(a, &mut accepted, &mut formed, &mut suspects),
            };
            if let Err(e) = res {
                failed = failed.or(Some(e));
            }
        }
        if let Some(e) = failed {
            break Err(e);
        }
        let now = Instant::now();
        if accepted.len() == accept_from.len() && dials_left == 0 || now >= deadline {
            let mut missing: Vec<u32> = accept_from.difference(&accepted).copied().collect();
            missing.extend(
                dial_to
                    .iter()
                    .filter(|&&p| !formed.iter().any(|(r, ..)| *r == p)),
            );
            missing.sort_unstable();
            break match missing.iter().find_map(|r| suspects.remove(r)) {
                None if missing.is_empty() => Ok(()),
                // A fleet's coordinator goes on with the workers present:
                // the others are away, and come when they come.
                None if cfg.fleet.is_some() && rank == 0 => {
                    tracing::warn!(
                        ?missing,
                        "{} of {} workers are not here yet; going on without them",
                        missing.len(),
                        world - 1
                    );
                    Ok(())
                }
                Some(e) => Err(e),
                None => Err(FormationError::Timeout { missing }),
            };
        }
        let wait = if backlog {
            Duration::ZERO
        } else {
            deadline - now
        };
        if let Err(e) = poll.poll(&mut events, Some(wait)) {
            if e.kind() != ErrorKind::Interrupted {
                break Err(io_fail(rank, e));
            }
        }
        if let Some(g) = &mut gate {
            backlog = g.accept_ready(&accepted_tx, &wake);
        }
    };
    cancel.store(true, Ordering::Release);
    for t in dialers {
        let _ = t.join();
    }
    outcome?;
    tracing::info!(
        rank,
        world,
        shape = %cfg.shape.name(),
        links = formed.len(),
        "TCP streams formed"
    );
    let mut door = None;
    let refuser = gate.and_then(|mut g| {
        // Handshakes still under way (strangers, duplicates) end by their
        // deadlines; every rank is now taken.
        g.admit_nobody();
        let d = Door {
            expect: g.expecting(),
            claimed: g.claimed(),
            adopt: Arc::default(),
        };
        let adopt = Arc::clone(&d.adopt);
        door = Some(d);
        let (stop, stopped) = (Arc::new(AtomicBool::new(false)), Arc::clone(&waker));
        let flag = Arc::clone(&stop);
        Refuser::spawn(
            format!("meshwork-late-{rank}"),
            move || {
                flag.store(true, Ordering::Release);
                let _ = stopped.wake();
            },
            move || refuse_latecomers(g, poll, wake, &stop, &adopt),
        )
        .map_err(|e| tracing::warn!("cannot keep the listener open after formation: {e}"))
        .ok()
    });
    Ok(Formed {
        streams: formed,
        refuser,
        door,
    })
}

/// Act on one accepted handshake: a link, a verdict from a holder of the
/// token (fatal at once, but a taken rank is the claimant's problem), or
/// a suspicion about the rank a stranger claimed.
fn on_accepted(
    a: Accepted,
    accepted: &mut BTreeSet<u32>,
    formed: &mut Vec<(u32, TcpStream, Keys)>,
    suspects: &mut BTreeMap<u32, FormationError>,
) -> Result<(), FormationError> {
    let from = a.from;
    match a.result {
        Ok((stream, admitted)) => {
            accepted.insert(admitted.rank);
            formed.push((admitted.rank, stream, admitted.keys));
            Ok(())
        }
        Err((_, HandshakeError::RankConflict { rank })) => {
            tracing::warn!(%from, "refused a process claiming rank {rank}, which is taken or not expected here");
            Ok(())
        }
        Err((claimed, e)) if e.is_proven() => Err(FormationError::from_handshake(
            e,
            claimed.unwrap_or(u32::MAX),
        )),
        Err((claimed, e)) => {
            tracing::warn!(%from, ?claimed, "dropped a connection that did not complete the handshake: {e}");
            if let (Some(r), HandshakeError::Token | HandshakeError::Protocol { .. }) =
                (claimed, &e)
            {
                suspects.insert(r, FormationError::from_handshake(e, r));
            }
            Ok(())
        }
    }
}

/// Whom `rank` accepts links from and whom it dials: of each linked
/// pair, the lower rank dials (in a mesh, every pair; on a sparse shape,
/// neighbours) — but in a star workers dial rank 0, and in a tree every
/// child its parent, so that leaves need no inbound port.
pub(crate) fn plan(shape: Shape, rank: u32, world: u32) -> (BTreeSet<u32>, Vec<u32>) {
    match (shape, rank) {
        (Shape::Star, 0) => ((1..world).collect(), Vec::new()),
        (Shape::Star, _) => (BTreeSet::new(), vec![0]),
        (Shape::Mesh, _) => ((0..rank).collect(), (rank + 1..world).collect()),
        // A child dials its parent: a leaf, like a star's worker, needs
        // no inbound port.
        (Shape::Tree { .. }, _) => (
            shape
                .neighbours(world, rank)
                .into_iter()
                .filter(|&p| p > rank)
                .collect(),
            shape.parent(rank).into_iter().collect(),
        ),
        (shape, _) => {
            let near = shape.neighbours(world, rank);
            let (below, above) = near.into_iter().partition::<Vec<u32>, _>(|&p| p < rank);
            (below.into_iter().collect(), above)
        }
    }
}

/// After formation every rank is taken: whoever dials and proves the
/// token gets a typed refusal (`RankConflict`), strangers nothing, until
/// the waker says the transport is closing — but a rank the door admits
/// (a tree's orphan) is let in, and its stream goes to `adopt`.
fn refuse_latecomers(
    mut gate: Gate,
    mut poll: mio::Poll,
    wake: Arc<dyn Fn() + Send + Sync>,
    stop: &AtomicBool,
    adopt: &std::sync::OnceLock<Adopt>,
) {
    let mut events = mio::Events::with_capacity(8);
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<Accepted>();
    // Handshake threads wake the same waker as `stop`: only the flag says
    // the transport is closing.
    let mut backlog = false;
    while !stop.load(Ordering::Acquire) {
        let wait = backlog.then_some(Duration::ZERO);
        if let Err(e) = poll.poll(&mut events, wait) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        for a in done_rx.try_iter() {
            match a.result {
                Ok((stream, admitted)) => match adopt.get() {
                    Some(adopt) => adopt(admitted.rank, stream, admitted.keys),
                    None => tracing::warn!(rank = admitted.rank, "no link can be made yet"),
                },
                Err((claimed, e)) => {
                    tracing::warn!(from = %a.from, ?claimed, "a latecomer was refused: {e}");
                }
            }
        }
        backlog = gate.accept_ready(&done_tx, &wake);
    }
}

/// Bind `addr`. If it is taken, ask whoever holds it whether it is this
/// rank: a meshwork node answering so means a duplicate rank.
fn listen(
    addr: SocketAddr,
    id: &Identity,
    timeout: Duration,
) -> Result<TcpListener, FormationError> {
    match TcpListener::bind(addr) {
        Ok(l) => {
            l.set_nonblocking(true).map_err(|e| io_fail(id.rank, e))?;
            Ok(l)
        }
        Err(e) if e.kind() == ErrorKind::AddrInUse => {
            let hs = handshake_time(timeout);
            let probe = TcpStream::connect_timeout(&addr, hs)
                .map(|mut s| handshake::dial(&mut s, id, Instant::now() + hs));
            match probe {
                Ok(Err(HandshakeError::RankConflict { rank })) => {
                    Err(FormationError::RankConflict { rank })
                }
                _ => Err(FormationError::ConnectionFailed {
                    rank: id.rank,
                    reason: format!("cannot listen on {addr}: address in use by another program"),
                }),
            }
        }
        Err(e) => Err(FormationError::ConnectionFailed {
            rank: id.rank,
            reason: format!("cannot listen on {addr}: {e}"),
        }),
    }
}

/// Dial `peer` until admitted, refused by a holder of the token, or past
/// the deadline (then: what could not be authenticated, if anything, else
/// a timeout). A peer known by several addresses is dialled at each in
/// turn (see [`Addresses`]).
pub(crate) fn dial_until(
    addrs: Vec<SocketAddr>,
    peer: u32,
    id: &Identity,
    deadline: Instant,
    timeout: Duration,
    cancel: &AtomicBool,
) -> Result<(TcpStream, Keys), FormationError> {
    let mut addrs = Addresses::new(addrs);
    let mut backoff = Backoff::new();
    let mut suspect = None;
    loop {
        for addr in addrs.round() {
            let now = Instant::now();
            if now >= deadline || cancel.load(Ordering::Acquire) {
                return Err(suspect.unwrap_or(FormationError::Timeout {
                    missing: vec![peer],
                }));
            }
            let mut s = match addrs.connect(addr, deadline - now) {
                Ok(s) => s,
                Err(e) => {
                    tracing::trace!(peer, "dial {addr}: {e}");
                    continue;
                }
            };
            // Twice the acceptor's time: an acceptor that claimed this
            // rank and answered is never left holding a stream its
            // dialer gave up on (it would refuse the retry as taken).
            let by = (Instant::now() + 2 * handshake_time(timeout)).min(deadline);
            match handshake::dial(&mut s, id, by) {
                Ok(a) if a.rank == peer => {
                    let _ = s.set_read_timeout(None);
                    let _ = s.set_write_timeout(None);
                    return Ok((s, a.keys));
                }
                Ok(a) if addrs.is_single() => {
                    return Err(FormationError::ConnectionFailed {
                        rank: peer,
                        reason: format!("{addr} answered as rank {}", a.rank),
                    })
                }
                // One of several addresses may be another host's.
                Ok(a) => {
                    tracing::debug!(
                        peer,
                        "{addr} answered as rank {}; trying the others",
                        a.rank
                    );
                    suspect = Some(FormationError::ConnectionFailed {
                        rank: peer,
                        reason: format!("{addr} answered as rank {}", a.rank),
                    });
                }
                Err(e) if e.is_proven() => return Err(FormationError::from_handshake(e, peer)),
                Err(e) => {
                    tracing::debug!(
                        peer,
                        "handshake with {addr} did not complete: {e}; retrying"
                    );
                    if matches!(e, HandshakeError::Token | HandshakeError::Protocol { .. }) {
                        suspect = Some(FormationError::from_handshake(e, peer));
                    }
                }
            }
        }
        backoff.pause(deadline);
    }
}

/// The addresses of one peer (or of the seed), dialled in turn on each
/// attempt: a host known by several — a name that resolves to several, a
/// dead bridge's address listed first — is reached over the first that
/// takes the connection and completes the handshake, not stalled on a
/// dead one until the deadline. An address that answered (took the
/// connection, or refused it: the host is there) is tried first from then
/// on; one that stays silent costs at most a second an attempt.
#[derive(Debug)]
pub(crate) struct Addresses {
    all: Vec<SocketAddr>,
    /// Index of the address that answered last.
    first: usize,
}

impl Addresses {
    pub(crate) fn new(mut all: Vec<SocketAddr>) -> Addresses {
        let mut seen = std::collections::HashSet::new();
        all.retain(|a| seen.insert(*a));
        Addresses { all, first: 0 }
    }

    /// Whether there is one address only (dialled as before there were
    /// several: up to two seconds an attempt).
    pub(crate) fn is_single(&self) -> bool {
        self.all.len() <= 1
    }

    /// This attempt's order: the one that answered last, then the others
    /// as listed.
    pub(crate) fn round(&self) -> Vec<SocketAddr> {
        let first = self.all.get(self.first).copied();
        first
            .into_iter()
            .chain(
                self.all
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != self.first)
                    .map(|(_, a)| *a),
            )
            .collect()
    }

    /// Connect to `addr` within `left` (and a per-address bound), noting
    /// whether it answered.
    pub(crate) fn connect(
        &mut self,
        addr: SocketAddr,
        left: Duration,
    ) -> std::io::Result<TcpStream> {
        let per_address = if self.is_single() {
            Duration::from_secs(2)
        } else {
            Duration::from_secs(1)
        };
        let res = TcpStream::connect_timeout(&addr, left.min(per_address));
        let answered = match &res {
            Ok(_) => true,
            Err(e) => e.kind() == ErrorKind::ConnectionRefused,
        };
        if answered {
            if let Some(i) = self.all.iter().position(|a| *a == addr) {
                self.first = i;
            }
        }
        res
    }
}

/// The pause between attempts to dial a peer that is not up yet: 5 ms,
/// doubling to 200 ms, never past the deadline.
#[derive(Debug)]
pub(crate) struct Backoff(Duration);

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff(Duration::from_millis(5))
    }

    pub(crate) fn pause(&mut self, deadline: Instant) {
        let pause = self
            .0
            .min(deadline.saturating_duration_since(Instant::now()));
        #[allow(
            clippy::disallowed_methods,
            reason = "back-off between dial attempts, not synchronisation"
        )]
        std::thread::sleep(pause);
        self.0 = (self.0 * 2).min(Duration::from_millis(200));
    }
}

/// Which of `fds` are readable (or closed), waiting at most `timeout`;
/// `None` if `poll(2)` itself failed.
pub(crate) fn poll_readable(fds: &[std::os::fd::RawFd], timeout: Duration) -> Option<Vec<bool>> {
    let mut ps: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `ps` is a valid array of `ps.len()` pollfds for the call.
    let n = unsafe { libc::poll(ps.as_mut_ptr(), ps.len() as libc::nfds_t, ms) };
    (n >= 0).then(|| ps.iter().map(|p| p.revents != 0).collect())
}

#[cfg(test)]
mod tests {
    use super::Addresses;
    use std::net::{SocketAddr, TcpListener};
    use std::time::Duration;

    #[test]
    fn the_address_that_answered_is_dialled_first_from_then_on() {
        let open = TcpListener::bind("127.0.0.1:0").unwrap();
        let refused = {
            // A port nobody listens on (bound, then let go).
            let l = TcpListener::bind("127.0.0.2:0").unwrap();
            l.local_addr().unwrap()
        };
        let live = open.local_addr().unwrap();
        let other: SocketAddr = "127.0.0.3:9".parse().unwrap();
        let mut addrs = Addresses::new(vec![other, refused, other, live]);
        assert!(!addrs.is_single());
        assert_eq!(
            addrs.round(),
            vec![other, refused, live],
            "deduplicated, in order"
        );
        // Refused: the host is there, so it goes first next time.
        assert!(addrs.connect(refused, Duration::from_secs(1)).is_err());
        assert_eq!(addrs.round(), vec![refused, other, live]);
        assert!(addrs.connect(live, Duration::from_secs(1)).is_ok());
        assert_eq!(addrs.round(), vec![live, other, refused]);
        assert!(Addresses::new(vec![live, live]).is_single());
    }
}
