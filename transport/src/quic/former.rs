//! Setting up a rank's QUIC connections: dial the peers this rank dials,
//! accept the others on the rank's one UDP port, check every leaf, and
//! (after formation) keep refusing whoever comes later.

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

pub(crate) fn random_cid() -> Result<quiche::ConnectionId<'static>, String> {
    let mut id = [0u8; quiche::MAX_CONN_ID_LEN];
    getrandom::getrandom(&mut id).map_err(|e| e.to_string())?;
    Ok(quiche::ConnectionId::from_vec(id.to_vec()))
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
pub(crate) struct Former<'a> {
    rank: u32,
    config: quiche::Config,
    pub listener: Option<mio::net::UdpSocket>,
    pub poll: mio::Poll,
    pending: HashMap<usize, Pending>,
    by_addr: HashMap<SocketAddr, usize>,
    next_token: usize,
    accept_from: &'a BTreeSet<u32>,
    buf: Vec<u8>,
}

/// The acceptor's one-byte "admitted" message: the server-initiated
/// unidirectional stream after the link's own.
const ADMIT_STREAM: u64 = 4 * STREAMS + 3;

pub(crate) const LISTEN: mio::Token = mio::Token(0);
const STOP: mio::Token = mio::Token(1);
/// Connections being set up at once, at most (strangers included).
const MAX_PENDING: usize = 256;

impl<'a> Former<'a> {
    pub(crate) fn new(
        rank: u32,
        config: quiche::Config,
        listener: Option<mio::net::UdpSocket>,
        poll: mio::Poll,
        accept_from: &'a BTreeSet<u32>,
    ) -> Former<'a> {
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
            buf: vec![0; 65_535],
        }
    }

    pub(crate) fn dial(&mut self, peer: u32, addr: SocketAddr) -> Result<(), FormationError> {
        let s = std::net::UdpSocket::bind(unspecified(&addr)).map_err(|e| fail(peer, e))?;
        s.connect(addr).map_err(|e| fail(peer, e))?;
        s.set_nonblocking(true).map_err(|e| fail(peer, e))?;
        size_buffers(&socket2::SockRef::from(&s));
        let local = s.local_addr().map_err(|e| fail(peer, e))?;
        let mut socket = mio::net::UdpSocket::from_std(s);
        let scid = random_cid().map_err(|e| fail(peer, e))?;
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
        };
        p.pump(&mut self.buf);
        self.pending.insert(token, p);
        Ok(())
    }

    /// Take every datagram waiting on the listening socket: a known peer's
    /// goes to its connection, a new peer's Initial opens one.
    fn accept(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        let Ok(local) = listener.local_addr() else {
            return;
        };
        loop {
            let (n, from) = match listener.recv_from(&mut self.buf) {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let info = quiche::RecvInfo { from, to: local };
            if let Some(p) = self
                .by_addr
                .get(&from)
                .and_then(|t| self.pending.get_mut(t))
            {
                let _ = p.conn.recv(&mut self.buf[..n], info);
                continue;
            }
            let Ok(hdr) = quiche::Header::from_slice(&mut self.buf[..n], quiche::MAX_CONN_ID_LEN)
            else {
                continue;
            };
            if hdr.ty != quiche::Type::Initial
                || !quiche::version_is_supported(hdr.version)
                || self.pending.len() >= MAX_PENDING
            {
                continue;
            }
            let opened = connected_socket(local, from).and_then(|mut socket| {
                let token = self.next_token;
                self.poll.registry().register(
                    &mut socket,
                    mio::Token(token),
                    mio::Interest::READABLE,
                )?;
                Ok((token, socket))
            });
            let (token, socket) = match opened {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(%from, "cannot open a socket for a new QUIC peer: {e}");
                    continue;
                }
            };
            let Ok(scid) = random_cid() else { continue };
            let mut conn = match quiche::accept(&scid, None, local, from, &mut self.config) {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(%from, "QUIC accept: {e}");
                    continue;
                }
            };
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
                },
            );
        }
    }

    /// One turn: wait, read, send; what came up and what failed.
    pub(crate) fn turn(
        &mut self,
        until: Instant,
        formed: &BTreeSet<u32>,
        events: &mut mio::Events,
    ) -> Turn {
        let mut wait = until.saturating_duration_since(Instant::now());
        for p in self.pending.values() {
            if let Some(t) = p.conn.timeout() {
                wait = wait.min(t);
            }
        }
        if let Err(e) = self.poll.poll(events, Some(wait)) {
            if e.kind() != ErrorKind::Interrupted {
                tracing::warn!("poll: {e}");
            }
        }
        self.accept();
        let mut turn = Turn::default();
        let mut gone = Vec::new();
        let mut admitted: BTreeSet<u32> = formed.clone();
        for (&token, p) in self.pending.iter_mut() {
            p.pump(&mut self.buf);
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
                self.by_addr.remove(&p.remote);
                let _ = self.poll.registry().deregister(&mut p.socket);
                if !p.conn.is_closed() {
                    if let Some(peer) = p.expect {
                        turn.up.push((peer, p));
                    }
                }
            }
        }
        turn
    }
}

/// After formation the listening socket stays open: whoever completes a
/// handshake (a member's duplicate) is closed with "rank taken or not
/// expected"; a stranger fails the TLS handshake.
pub(crate) fn refuse_latecomers(mut former: Former<'_>) -> Option<Refuser> {
    former.listener.as_ref()?;
    let stop = Arc::new(AtomicBool::new(false));
    let waker = match mio::Waker::new(former.poll.registry(), STOP) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("cannot keep the QUIC port open after formation: {e}");
            return None;
        }
    };
    let (flag, config) = (Arc::clone(&stop), former.config);
    let (listener, poll, rank) = (former.listener.take(), former.poll, former.rank);
    Refuser::spawn(
        format!("meshwork-qlate-{rank}"),
        move || {
            stop.store(true, Ordering::Release);
            let _ = waker.wake();
        },
        move || {
            let none = BTreeSet::new();
            let mut f = Former::new(rank, config, listener, poll, &none);
            let mut events = mio::Events::with_capacity(16);
            while !flag.load(Ordering::Acquire) {
                let until = Instant::now() + Duration::from_secs(1);
                // Nobody is admitted.
                drop(f.turn(until, &none, &mut events));
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
