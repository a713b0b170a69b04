//! Setting up a rank's QUIC connections: dial the peers this rank dials,
//! accept the others on the rank's one UDP port, check every leaf, and
//! (after formation) keep refusing whoever comes later.
//!
//! Anyone can start a handshake (Initial keys are public), so what the
//! acceptor holds for connections that have not yet shown a leaf naming
//! an expected rank is bounded ([`Limits`]): a datagram under 1200 bytes
//! never opens one (RFC 9000 §14.1: a client pads its Initial to that);
//! each has a handshake deadline of its own; one source IP holds a few at
//! once and the table a few hundred, beyond the peers expected; and when
//! either is full the oldest gives way to the newcomer, so strangers who
//! start handshakes and go silent cannot lock a real peer out. A
//! connection dropped so is closed with `CONNECTION_REFUSED`, and a
//! dialer told that dials again (until the formation deadline).

use super::engine::STREAMS;
use crate::auth::tls;
use crate::form::{FormationError, Refuser};
use std::collections::{BTreeSet, HashMap};
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one turn of formation brought.
#[derive(Default)]
pub(crate) struct Turn {
    /// Links now up: (peer, connection).
    pub up: Vec<(u32, Pending)>,
    /// Dials that failed for good: (peer, why).
    pub failed: Vec<(u32, String)>,
}

pub(crate) fn fail(rank: u32, reason: impl std::fmt::Display) -> FormationError {
    FormationError::ConnectionFailed {
        rank,
        reason: reason.to_string(),
    }
}

fn unspecified(addr: &SocketAddr) -> SocketAddr {
    let ip = match addr {
        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, 0)
}

pub(crate) fn random_cid() -> Result<quiche::ConnectionId<'static>, getrandom::Error> {
    let mut id = [0u8; quiche::MAX_CONN_ID_LEN];
    getrandom::getrandom(&mut id)?;
    Ok(quiche::ConnectionId::from_vec(id.to_vec()))
}

/// Bounds on accepted connections that have not yet shown a leaf naming
/// an expected rank (strangers' included).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// At once, beyond the peers this rank accepts.
    pub pending: usize,
    /// At once from one source IP, beyond the peers expected from it.
    pub per_source: usize,
    /// How long one may take from its first Initial to its leaf.
    pub handshake: Duration,
}

impl Limits {
    pub(crate) const DEFAULT: Limits = Limits {
        pending: 256,
        per_source: 4,
        handshake: Duration::from_secs(2),
    };
}

/// The smallest datagram that may carry a client's first Initial (RFC
/// 9000 §14.1); a shorter one is dropped before quiche sees it.
pub(crate) const MIN_INITIAL: usize = 1200;
/// Datagrams read off the listening socket in one turn, at most, so that
/// a flood of new ones does not starve the handshakes under way.
const ACCEPT_PER_TURN: usize = 64;
/// The transport error `CONNECTION_REFUSED`: an acceptor closes with it a
/// handshake it drops (too slow, or crowded out); the dialer dials again.
const REFUSED: u64 = 0x2;

/// Whether the other side closed `conn` with [`REFUSED`].
pub(crate) fn refused_by_peer(conn: &quiche::Connection) -> bool {
    conn.peer_error()
        .is_some_and(|e| !e.is_app && e.error_code == REFUSED)
}

/// A connection being set up.
pub(crate) struct Pending {
    pub conn: quiche::Connection,
    pub socket: mio::net::UdpSocket,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Dialled: the rank we expect. Accepted: `None` until its leaf says.
    expect: Option<u32>,
    /// Refused (wrong rank, formation over): close and forget.
    refused: bool,
    /// This side dialled (it writes on client-initiated streams).
    pub dialed: bool,
    /// When it was dialled or its first Initial came.
    opened: Instant,
}

impl Pending {
    fn pump(&mut self, buf: &mut [u8]) {
        loop {
            match self.socket.recv(buf) {
                Ok(n) => {
                    let info = quiche::RecvInfo {
                        from: self.remote,
                        to: self.local,
                    };
                    let _ = self.conn.recv(&mut buf[..n], info);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                Err(_) => break,
            }
        }
        if self.conn.timeout() == Some(Duration::ZERO) {
            self.conn.on_timeout();
        }
        while let Ok((n, _)) = self.conn.send(buf) {
            let _ = self.socket.send(&buf[..n]);
        }
    }
}

/// Sets up the QUIC links of one rank (and, after formation, refuses
/// latecomers on the listening socket).
pub(crate) struct Former {
    rank: u32,
    config: quiche::Config,
    pub listener: Option<mio::net::UdpSocket>,
    pub poll: mio::Poll,
    pending: HashMap<usize, Pending>,
    by_addr: HashMap<SocketAddr, usize>,
    next_token: usize,
    accept_from: BTreeSet<u32>,
    /// How many of the accepted peers have each address (room is kept
    /// for them beyond the limits).
    expected: HashMap<IpAddr, usize>,
    limits: Limits,
    /// The listening socket may hold more: the last turn read its quota.
    backlog: bool,
    buf: Vec<u8>,
    /// Evictions' buffer (`buf` may hold the datagram being accepted).
    spare: Vec<u8>,
}

/// The acceptor's one-byte "admitted" message: the server-initiated
/// unidirectional stream after the link's own.
const ADMIT_STREAM: u64 = 4 * STREAMS + 3;

pub(crate) const LISTEN: mio::Token = mio::Token(0);
const STOP: mio::Token = mio::Token(1);

impl Former {
    /// A rank's former: it accepts the ranks in `accept_from`, whose
    /// addresses are `expected` (as far as known).
    pub(crate) fn new(
        rank: u32,
        config: quiche::Config,
        listener: Option<mio::net::UdpSocket>,
        poll: mio::Poll,
        accept_from: BTreeSet<u32>,
        expected: impl IntoIterator<Item = IpAddr>,
    ) -> Former {
        let mut by_ip = HashMap::new();
        for ip in expected {
            *by_ip.entry(ip.to_canonical()).or_insert(0) += 1;
        }
        Former {
            rank,
            config,
            listener,
            poll,
            pending: HashMap::new(),
            by_addr: HashMap::new(),
            // Tokens 0 and 1: the listener and the stop waker.
            next_token: 2,
            accept_from,
            expected: by_ip,
            limits: Limits::DEFAULT,
            backlog: false,
            buf: vec![0; 65_535],
            spare: vec![0; 65_535],
        }
    }

    pub(crate) fn dial(&mut self, peer: u32, addr: SocketAddr) -> Result<(), FormationError> {
        let s = std::net::UdpSocket::bind(unspecified(&addr)).map_err(|e| fail(peer, e))?;
        s.connect(addr).map_err(|e| fail(peer, e))?;
        s.set_nonblocking(true).map_err(|e| fail(peer, e))?;
        size_buffers(&socket2::SockRef::from(&s));
        let local = s.local_addr().map_err(|e| fail(peer, e))?;
        let mut socket = mio::net::UdpSocket::from_std(s);
        let scid = random_cid().map_err(|e| fail(peer, format!("QUIC connection id: {e}")))?;
        let name = tls::rank_name(peer);
        let conn = quiche::connect(Some(&name), &scid, local, addr, &mut self.config)
            .map_err(|e| fail(peer, format!("QUIC: {e}")))?;
        let token = self.next_token;
        self.next_token += 1;
        self.poll
            .registry()
            .register(&mut socket, mio::Token(token), mio::Interest::READABLE)
            .map_err(|e| fail(peer, e))?;
        let mut p = Pending {
            conn,
            socket,
            local,
            remote: addr,
            expect: Some(peer),
            refused: false,
            dialed: true,
            opened: Instant::now(),
        };
        p.pump(&mut self.buf);
        self.pending.insert(token, p);
        Ok(())
    }

    /// Take the datagrams waiting on the listening socket (up to a
    /// quota): a known peer's goes to its connection, a new peer's
    /// Initial may open one.
    fn accept(&mut self) {
        self.backlog = false;
        let Some(Ok(local)) = self.listener.as_ref().map(|l| l.local_addr()) else {
            return;
        };
        for _ in 0..ACCEPT_PER_TURN {
            let got = match &self.listener {
                Some(l) => l.recv_from(&mut self.buf),
                None => return,
            };
            let (n, from) = match got {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            if let Some(p) = self
                .by_addr
                .get(&from)
                .and_then(|t| self.pending.get_mut(t))
            {
                let info = quiche::RecvInfo { from, to: local };
                let _ = p.conn.recv(&mut self.buf[..n], info);
                continue;
            }
            self.open(local, from, n);
        }
        self.backlog = true;
    }

    /// The `n`-byte datagram in `buf` from `from`, a source without a
    /// connection: a client's first Initial opens one, within the limits.
    fn open(&mut self, local: SocketAddr, from: SocketAddr, n: usize) {
        if n < MIN_INITIAL {
            return;
        }
        let Ok(hdr) = quiche::Header::from_slice(&mut self.buf[..n], quiche::MAX_CONN_ID_LEN)
        else {
            return;
        };
        if hdr.ty != quiche::Type::Initial || !quiche::version_is_supported(hdr.version) {
            return;
        }
        self.make_room(from.ip());
        let opened = connected_socket(local, from).and_then(|mut socket| {
            let token = self.next_token;
            self.poll.registry().register(
                &mut socket,
                mio::Token(token),
                mio::Interest::READABLE,
            )?;
            Ok((token, socket))
        });
        let (token, mut socket) = match opened {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(%from, "cannot open a socket for a new QUIC peer: {e}");
                return;
            }
        };
        let accepted = match random_cid() {
            Ok(scid) => match quiche::accept(&scid, None, local, from, &mut self.config) {
                Ok(conn) => Some(conn),
                Err(e) => {
                    tracing::debug!(%from, "QUIC accept: {e}");
                    None
                }
            },
            Err(e) => {
                tracing::debug!(%from, "QUIC accept: no connection id: {e}");
                None
            }
        };
        let Some(mut conn) = accepted else {
            let _ = self.poll.registry().deregister(&mut socket);
            return;
        };
        let info = quiche::RecvInfo { from, to: local };
        let _ = conn.recv(&mut self.buf[..n], info);
        self.next_token += 1;
        self.by_addr.insert(from, token);
        self.pending.insert(
            token,
            Pending {
                conn,
                socket,
                local,
                remote: from,
                expect: None,
                refused: false,
                dialed: false,
                opened: Instant::now(),
            },
        );
    }

    /// Room for one more accepted connection from `ip`: where that source
    /// or the table is at its limit, its oldest accepted one gives way.
    fn make_room(&mut self, ip: IpAddr) {
        let ip = ip.to_canonical();
        let oldest = |pending: &HashMap<usize, Pending>, same_source: bool| {
            let accepted = pending
                .iter()
                .filter(|(_, p)| !p.dialed && (!same_source || p.remote.ip().to_canonical() == ip));
            let count = accepted.clone().count();
            (
                count,
                accepted.min_by_key(|(_, p)| p.opened).map(|(&t, _)| t),
            )
        };
        let share = self.limits.per_source + self.expected.get(&ip).copied().unwrap_or(0);
        if let (count, Some(token)) = oldest(&self.pending, true) {
            if count >= share {
                self.evict(token, b"too many handshakes from one address");
            }
        }
        let room = self.limits.pending + self.accept_from.len();
        if let (count, Some(token)) = oldest(&self.pending, false) {
            if count >= room {
                self.evict(token, b"too many handshakes");
            }
        }
    }

    /// Close an accepted connection with `CONNECTION_REFUSED` and forget it.
    fn evict(&mut self, token: usize, why: &[u8]) {
        let Some(mut p) = self.pending.remove(&token) else {
            return;
        };
        tracing::debug!(
            remote = %p.remote,
            "dropped a QUIC handshake: {}",
            String::from_utf8_lossy(why)
        );
        // What it owes first: quiche cannot seal a close on a connection
        // that has sent nothing yet (CryptoFail), and the close must reach
        // a dialer crowded out, so that it dials again.
        p.pump(&mut self.spare);
        let _ = p.conn.close(false, REFUSED, why);
        p.pump(&mut self.spare);
        self.forget(&mut p);
    }

    fn forget(&mut self, p: &mut Pending) {
        if !p.dialed {
            self.by_addr.remove(&p.remote);
        }
        let _ = self.poll.registry().deregister(&mut p.socket);
    }

    /// Drop the accepted connections whose handshake deadline is past at
    /// `now`.
    pub(crate) fn expire(&mut self, now: Instant) {
        let late: Vec<usize> = self
            .pending
            .iter()
            .filter(|(_, p)| !p.dialed && now >= p.opened + self.limits.handshake)
            .map(|(&t, _)| t)
            .collect();
        for token in late {
            self.evict(token, b"handshake too slow");
        }
    }

    /// One turn: wait, read, send; what came up and what failed.
    pub(crate) fn turn(
        &mut self,
        until: Instant,
        formed: &BTreeSet<u32>,
        events: &mut mio::Events,
    ) -> Turn {
        let now = Instant::now();
        let mut wait = until.saturating_duration_since(now);
        for p in self.pending.values() {
            if let Some(t) = p.conn.timeout() {
                wait = wait.min(t);
            }
            if !p.dialed {
                wait = wait.min((p.opened + self.limits.handshake).saturating_duration_since(now));
            }
        }
        if self.backlog {
            wait = Duration::ZERO;
        }
        if let Err(e) = self.poll.poll(events, Some(wait)) {
            if e.kind() != ErrorKind::Interrupted {
                tracing::warn!("poll: {e}");
            }
        }
        self.accept();
        self.expire(Instant::now());
        let mut turn = Turn::default();
        let mut gone = Vec::new();
        let mut again = Vec::new();
        let mut admitted: BTreeSet<u32> = formed.clone();
        for (&token, p) in self.pending.iter_mut() {
            p.pump(&mut self.buf);
            if p.dialed && refused_by_peer(&p.conn) {
                // The acceptor dropped the handshake (too slow, or crowded
                // out by strangers): dial again.
                again.push(token);
                continue;
            }
            if p.conn.is_closed() {
                gone.push(token);
                if let (Some(peer), false) = (p.expect, p.refused) {
                    let why = match (p.conn.peer_error(), p.conn.local_error()) {
                        (Some(e), _) | (None, Some(e)) => format!(
                            "QUIC handshake refused: code {:#x} {}",
                            e.error_code,
                            String::from_utf8_lossy(&e.reason)
                        ),
                        (None, None) => "QUIC handshake timed out".into(),
                    };
                    turn.failed.push((peer, why));
                }
                continue;
            }
            if p.refused || !p.conn.is_established() {
                continue;
            }
            let named = p.conn.peer_cert().and_then(tls::rank_of);
            let ok = match (p.expect, named) {
                (Some(want), Some(got)) => want == got,
                (None, Some(got)) => {
                    self.accept_from.contains(&got) && admitted.insert(got) && {
                        p.expect = Some(got);
                        true
                    }
                }
                _ => false,
            };
            if ok && !p.dialed {
                // The acceptor has checked the dialer's leaf (a TLS 1.3
                // client is "established" before that): say so.
                let _ = p.conn.stream_send(ADMIT_STREAM, &[1], true);
                p.pump(&mut self.buf);
                gone.push(token);
            } else if ok {
                // The dialer waits for that word before its link is up.
                let mut word = [0u8; 1];
                if matches!(p.conn.stream_recv(ADMIT_STREAM, &mut word), Ok((1, _))) && word[0] == 1
                {
                    gone.push(token);
                }
            } else {
                tracing::warn!(
                    remote = %p.remote,
                    ?named,
                    "refused a QUIC peer: its leaf names no rank expected here"
                );
                let _ = p.conn.close(true, 0x2, b"rank taken or not expected");
                p.refused = true;
                p.pump(&mut self.buf);
            }
        }
        for token in gone {
            if let Some(mut p) = self.pending.remove(&token) {
                self.forget(&mut p);
                if !p.conn.is_closed() {
                    if let Some(peer) = p.expect {
                        turn.up.push((peer, p));
                    }
                }
            }
        }
        for token in again {
            if let Some(mut p) = self.pending.remove(&token) {
                self.forget(&mut p);
                if let Some(peer) = p.expect {
                    tracing::debug!(
                        peer,
                        "the QUIC handshake was refused for now; dialling again"
                    );
                    if let Err(e) = self.dial(peer, p.remote) {
                        turn.failed.push((peer, e.to_string()));
                    }
                }
            }
        }
        turn
    }
}

/// After formation the listening socket stays open: whoever completes a
/// handshake (a member's duplicate) is closed with "rank taken or not
/// expected"; a stranger fails the TLS handshake. The same limits hold,
/// and the handshakes still under way keep their deadlines.
pub(crate) fn refuse_latecomers(mut former: Former) -> Option<Refuser> {
    former.listener.as_ref()?;
    let stop = Arc::new(AtomicBool::new(false));
    let waker = match mio::Waker::new(former.poll.registry(), STOP) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("cannot keep the QUIC port open after formation: {e}");
            return None;
        }
    };
    // Nobody is admitted any more, and nobody is owed room.
    former.accept_from.clear();
    former.expected.clear();
    let (flag, rank) = (Arc::clone(&stop), former.rank);
    Refuser::spawn(
        format!("meshwork-qlate-{rank}"),
        move || {
            stop.store(true, Ordering::Release);
            let _ = waker.wake();
        },
        move || {
            let none = BTreeSet::new();
            let mut events = mio::Events::with_capacity(16);
            while !flag.load(Ordering::Acquire) {
                let until = Instant::now() + Duration::from_secs(1);
                drop(former.turn(until, &none, &mut events));
            }
        },
    )
    .map_err(|e| tracing::warn!("cannot keep the QUIC port open after formation: {e}"))
    .ok()
}

/// The datagram socket of an accepted link: bound to the rank's port
/// beside its listening socket (`SO_REUSEPORT`) and connected to the
/// peer, so the kernel hands it that peer's datagrams.
pub(crate) fn connected_socket(
    local: SocketAddr,
    remote: SocketAddr,
) -> std::io::Result<mio::net::UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(local),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&local.into())?;
    s.connect(&remote.into())?;
    size_buffers(&s);
    Ok(mio::net::UdpSocket::from_std(s.into()))
}

/// Ask for large socket buffers (root may exceed `rmem_max`).
pub(crate) fn size_buffers(s: &socket2::Socket) {
    const WANT: usize = 8 << 20;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        let v = libc::c_int::try_from(WANT).unwrap_or(libc::c_int::MAX);
        let set = |opt| {
            // SAFETY: a valid socket and a c_int option value of the size
            // passed.
            unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(s),
                    libc::SOL_SOCKET,
                    opt,
                    (&v as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            }
        };
        if set(force) != 0 {
            set(plain);
        }
    }
}

#[cfg(test)]
#[path = "former_tests.rs"]
pub(super) mod tests;
