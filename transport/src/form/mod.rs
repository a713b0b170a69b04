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

use crate::auth::handshake::{self, HandshakeError, Identity, Keys};
use crate::spec::Spec;
use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Why a group could not form.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormationError {
    #[error("rank {rank} is already taken")]
    RankConflict { rank: u32 },
    #[error("rank {rank} holds another cluster token")]
    TokenMismatch { rank: u32 },
    #[error("rank {rank} speaks protocol {theirs}, we speak {ours}")]
    ProtocolMismatch { rank: u32, ours: u32, theirs: u32 },
    #[error("rank {rank} expects a world of {theirs}, we expect {ours}")]
    WorldMismatch { rank: u32, ours: u32, theirs: u32 },
    #[error("rank {rank} uses the other topology (star vs mesh)")]
    TopologyMismatch { rank: u32 },
    #[error("ranks {missing:?} did not connect before the deadline")]
    Timeout { missing: Vec<u32> },
    #[error("cannot connect to rank {rank}: {reason}")]
    ConnectionFailed { rank: u32, reason: String },
}

impl FormationError {
    fn from_handshake(e: HandshakeError, rank: u32) -> FormationError {
        match e {
            HandshakeError::Protocol { ours, theirs } => {
                FormationError::ProtocolMismatch { rank, ours, theirs }
            }
            HandshakeError::World { ours, theirs } => {
                FormationError::WorldMismatch { rank, ours, theirs }
            }
            HandshakeError::RankConflict { rank } => FormationError::RankConflict { rank },
            HandshakeError::Topology => FormationError::TopologyMismatch { rank },
            HandshakeError::Token => FormationError::TokenMismatch { rank },
            e @ HandshakeError::Transport { .. } => FormationError::ConnectionFailed {
                rank,
                reason: e.to_string(),
            },
            HandshakeError::Stranger => FormationError::ConnectionFailed {
                rank,
                reason: "the peer is not a meshwork node".into(),
            },
            HandshakeError::Io(e) => FormationError::ConnectionFailed {
                rank,
                reason: e.to_string(),
            },
        }
    }
}

/// Handshake I/O deadline per attempt: a peer that says nothing is dropped.
fn handshake_timeout(timeout: Duration) -> Duration {
    timeout.clamp(Duration::from_millis(100), Duration::from_secs(5))
}

fn io_fail(rank: u32, e: std::io::Error) -> FormationError {
    FormationError::ConnectionFailed {
        rank,
        reason: e.to_string(),
    }
}

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

/// The authenticated TCP streams of a formed rank, and the listener's
/// thread that refuses latecomers.
#[derive(Debug)]
pub(crate) struct Formed {
    pub streams: Vec<(u32, TcpStream, Keys)>,
    pub refuser: Option<Refuser>,
}

const WAKE: mio::Token = mio::Token(0);
const LISTEN: mio::Token = mio::Token(1);

/// The identity a rank announces in its handshakes; `transport` is the
/// backend's settings word (`handshake::TRANSPORT_*`), checked equal.
pub(crate) fn identity(spec: &Spec, transport: u64) -> Identity {
    Identity {
        rank: spec.rank,
        world: spec.world,
        star: spec.star(),
        key: handshake::derive_key(spec.token.as_deref()),
        version: spec.protocol_version,
        transport: transport
            | if spec.seal {
                handshake::TRANSPORT_SEALED
            } else {
                0
            },
    }
}

/// Form the TCP streams of a group: listen, dial, authenticate.
pub(crate) fn form(spec: &Spec, transport: u64) -> Result<Formed, FormationError> {
    let cfg = spec;
    let id = identity(spec, transport);
    let (rank, world) = (cfg.rank, cfg.world);
    let (accept_from, dial_to) = plan(cfg.star(), rank, world);
    let addr_of = |r: u32| cfg.addr_of(r);
    let deadline = Instant::now() + cfg.timeout;
    let listener = match accept_from.is_empty() {
        true => None,
        false => Some(listen(
            cfg.bind.map_or_else(|| addr_of(rank), Ok)?,
            &id,
            cfg.timeout,
        )?),
    };

    let mut poll = mio::Poll::new().map_err(|e| io_fail(rank, e))?;
    let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE).map_err(|e| io_fail(rank, e))?);
    if let Some(l) = &listener {
        poll.registry()
            .register(
                &mut mio::unix::SourceFd(&l.as_raw_fd()),
                LISTEN,
                mio::Interest::READABLE,
            )
            .map_err(|e| io_fail(rank, e))?;
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let (results_tx, results_rx) = crossbeam_channel::unbounded();
    for &peer in &dial_to {
        let addr = addr_of(peer)?;
        let (id, tx, waker, cancel) = (
            id.clone(),
            results_tx.clone(),
            Arc::clone(&waker),
            Arc::clone(&cancel),
        );
        let timeout = cfg.timeout;
        std::thread::Builder::new()
            .name(format!("meshwork-dial-{peer}"))
            .spawn(move || {
                let res = dial_until(addr, peer, &id, deadline, timeout, &cancel);
                let _ = tx.send((peer, res));
                let _ = waker.wake();
            })
            .map_err(|e| io_fail(rank, e))?;
    }

    let mut formed: Vec<(u32, TcpStream, Keys)> = Vec::new();
    let mut dials_left = dial_to.len();
    let mut accepted: BTreeSet<u32> = BTreeSet::new();
    let mut events = mio::Events::with_capacity(16);
    let outcome: Result<(), FormationError> = loop {
        let mut failed = None;
        while let Ok((peer, res)) = results_rx.try_recv() {
            dials_left -= 1;
            match res {
                Ok((s, keys)) => formed.push((peer, s, keys)),
                Err(FormationError::Timeout { .. }) => {}
                Err(e) => failed = failed.or(Some(e)),
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
            break if missing.is_empty() {
                Ok(())
            } else {
                Err(FormationError::Timeout { missing })
            };
        }
        if let Err(e) = poll.poll(&mut events, Some(deadline - now)) {
            if e.kind() != ErrorKind::Interrupted {
                break Err(io_fail(rank, e));
            }
        }
        if let Some(l) = &listener {
            if let Err(e) = accept_ready(
                l,
                &id,
                &accept_from,
                &mut accepted,
                &mut formed,
                cfg.timeout,
            ) {
                break Err(e);
            }
        }
    };
    cancel.store(true, Ordering::Release);
    outcome?;
    tracing::info!(
        rank,
        world,
        star = cfg.star(),
        links = formed.len(),
        "TCP streams formed"
    );
    let refuser = listener.and_then(|l| {
        let timeout = cfg.timeout;
        let stop = Arc::clone(&waker);
        Refuser::spawn(
            format!("meshwork-late-{rank}"),
            move || {
                let _ = stop.wake();
            },
            move || refuse_latecomers(l, poll, &id, timeout),
        )
        .map_err(|e| tracing::warn!("cannot keep the listener open after formation: {e}"))
        .ok()
    });
    Ok(Formed {
        streams: formed,
        refuser,
    })
}

/// Whom `rank` accepts links from and whom it dials: in a mesh, every
/// lower rank dials every higher one; in a star, workers dial rank 0.
pub(crate) fn plan(star: bool, rank: u32, world: u32) -> (BTreeSet<u32>, Vec<u32>) {
    match (star, rank) {
        (true, 0) => ((1..world).collect(), Vec::new()),
        (true, _) => (BTreeSet::new(), vec![0]),
        (false, _) => ((0..rank).collect(), (rank + 1..world).collect()),
    }
}

/// After formation every rank is taken: anyone who dials gets a typed
/// refusal (`RankConflict`, or the protocol/world mismatch it has), until
/// the waker says the transport is closing.
fn refuse_latecomers(listener: TcpListener, mut poll: mio::Poll, id: &Identity, timeout: Duration) {
    let mut events = mio::Events::with_capacity(8);
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if events.iter().any(|e| e.token() == WAKE) {
            return;
        }
        let (mut none, mut refused) = (BTreeSet::new(), Vec::new());
        if let Err(e) = accept_ready(
            &listener,
            id,
            &BTreeSet::new(),
            &mut none,
            &mut refused,
            timeout,
        ) {
            tracing::warn!("a latecomer was refused: {e}");
        }
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
            let probe =
                TcpStream::connect_timeout(&addr, handshake_timeout(timeout)).and_then(|mut s| {
                    s.set_read_timeout(Some(handshake_timeout(timeout)))?;
                    Ok(handshake::dial(&mut s, id))
                });
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

/// Accept and authenticate every pending connection.
fn accept_ready(
    listener: &TcpListener,
    id: &Identity,
    accept_from: &BTreeSet<u32>,
    accepted: &mut BTreeSet<u32>,
    formed: &mut Vec<(u32, TcpStream, Keys)>,
    timeout: Duration,
) -> Result<(), FormationError> {
    loop {
        let (mut stream, from) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                return Ok(());
            }
        };
        let hs = handshake_timeout(timeout);
        let configured = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_read_timeout(Some(hs)))
            .and_then(|()| stream.set_write_timeout(Some(hs)));
        if let Err(e) = configured {
            tracing::warn!(%from, "cannot configure an accepted socket: {e}");
            continue;
        }
        let wanted = |r: u32| accept_from.contains(&r) && !accepted.contains(&r);
        match handshake::accept(&mut stream, id, wanted) {
            Ok(admitted) => {
                let _ = stream.set_read_timeout(None);
                let _ = stream.set_write_timeout(None);
                accepted.insert(admitted.rank);
                formed.push((admitted.rank, stream, admitted.keys));
            }
            Err((_, HandshakeError::Stranger | HandshakeError::Io(_))) => {
                tracing::warn!(%from, "dropped a connection that did not complete the handshake");
            }
            Err((_, HandshakeError::RankConflict { rank })) => {
                tracing::warn!(%from, "refused a process claiming rank {rank}, which is taken or not expected here");
            }
            Err((claimed, e)) => {
                return Err(FormationError::from_handshake(
                    e,
                    claimed.unwrap_or(u32::MAX),
                ))
            }
        }
    }
}

/// Dial `peer` until admitted, refused for good, or past the deadline.
fn dial_until(
    addr: SocketAddr,
    peer: u32,
    id: &Identity,
    deadline: Instant,
    timeout: Duration,
    cancel: &AtomicBool,
) -> Result<(TcpStream, Keys), FormationError> {
    let mut backoff = Backoff::new();
    loop {
        let now = Instant::now();
        if now >= deadline || cancel.load(Ordering::Acquire) {
            return Err(FormationError::Timeout {
                missing: vec![peer],
            });
        }
        let attempt = (deadline - now).min(Duration::from_secs(2));
        match TcpStream::connect_timeout(&addr, attempt) {
            Ok(mut s) => {
                let hs = handshake_timeout(timeout);
                let _ = s.set_read_timeout(Some(hs));
                let _ = s.set_write_timeout(Some(hs));
                match handshake::dial(&mut s, id) {
                    Ok(a) if a.rank == peer => {
                        let _ = s.set_read_timeout(None);
                        let _ = s.set_write_timeout(None);
                        return Ok((s, a.keys));
                    }
                    Ok(a) => {
                        return Err(FormationError::ConnectionFailed {
                            rank: peer,
                            reason: format!("{addr} answered as rank {}", a.rank),
                        })
                    }
                    Err(HandshakeError::Io(e)) => {
                        tracing::debug!(peer, "handshake interrupted: {e}; retrying")
                    }
                    Err(e) => return Err(FormationError::from_handshake(e, peer)),
                }
            }
            Err(e) => tracing::trace!(peer, "dial {addr}: {e}"),
        }
        backoff.pause(deadline);
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
