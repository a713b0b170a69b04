//! The acceptor's bounds, driven turn by turn: short Initials never open
//! a connection; a source's share and the table's size are kept by
//! evicting the oldest; a silent handshake ends at its deadline; and a
//! dialer crowded out dials again and gets in.

use super::*;
use crate::auth::tls::ClusterCa;
use crate::quic::{quiche_config, ALPN};
use std::net::UdpSocket;

const TOKEN: &str = "former test token, 16+ bytes";

/// A rank of a two-rank job's QUIC settings.
fn config(rank: u32) -> quiche::Config {
    let id = ClusterCa::from_token(TOKEN).unwrap().issue(rank).unwrap();
    quiche_config(&id, Duration::from_secs(5), true).unwrap()
}

/// Rank 1's former, listening on loopback (as `connect` binds it) and
/// accepting rank 0, whose address is not known; its address.
fn acceptor(limits: Limits) -> (Former, SocketAddr) {
    let s = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .unwrap();
    s.set_reuse_port(true).unwrap();
    s.set_nonblocking(true).unwrap();
    s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let mut listener = mio::net::UdpSocket::from_std(s.into());
    let addr = listener.local_addr().unwrap();
    let poll = mio::Poll::new().unwrap();
    poll.registry()
        .register(&mut listener, LISTEN, mio::Interest::READABLE)
        .unwrap();
    let mut f = Former::new(1, config(1), Some(listener), poll, BTreeSet::from([0]), []);
    f.limits = limits;
    (f, addr)
}

fn turn(f: &mut Former) -> Turn {
    let mut events = mio::Events::with_capacity(64);
    let until = Instant::now() + Duration::from_millis(20);
    f.turn(until, &BTreeSet::new(), &mut events)
}

/// A stranger: a real QUIC client (the right ALPN, no leaf) that sends
/// its first flight and then goes silent; it only listens for what the
/// acceptor says.
pub(crate) struct Silent {
    sock: UdpSocket,
    conn: quiche::Connection,
    /// Its first flight, one datagram.
    pub initial: Vec<u8>,
}

impl Silent {
    /// A client at `from` (port 0: any) of `to`, its Initial not sent.
    pub(crate) fn new(from: IpAddr, to: SocketAddr) -> Silent {
        let sock = UdpSocket::bind((from, 0)).unwrap();
        sock.connect(to).unwrap();
        let local = sock.local_addr().unwrap();
        let mut cfg = quiche::Config::new(quiche::PROTOCOL_VERSION).unwrap();
        cfg.verify_peer(false);
        cfg.set_application_protos(&[ALPN]).unwrap();
        let scid = random_cid().unwrap();
        let mut conn =
            quiche::connect(Some("rank-1.meshwork"), &scid, local, to, &mut cfg).unwrap();
        let mut buf = vec![0u8; 65_535];
        let (n, _) = conn.send(&mut buf).unwrap();
        assert!(n >= MIN_INITIAL, "quiche pads a client's Initial ({n})");
        Silent {
            sock,
            conn,
            initial: buf[..n].to_vec(),
        }
    }

    /// A client that has sent its Initial.
    pub(crate) fn sent(from: IpAddr, to: SocketAddr) -> Silent {
        let c = Silent::new(from, to);
        c.sock.send(&c.initial).unwrap();
        c
    }

    pub(crate) fn local(&self) -> SocketAddr {
        self.sock.local_addr().unwrap()
    }

    /// Whether the acceptor has closed this handshake with
    /// `CONNECTION_REFUSED`, reading what came until it has or `until`
    /// (a time already past: what is there now).
    pub(crate) fn refused(&mut self, until: Instant) -> bool {
        let mut buf = vec![0u8; 65_535];
        let (local, peer) = (self.local(), self.sock.peer_addr().unwrap());
        loop {
            if refused_by_peer(&self.conn) {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            let got = if left.is_zero() {
                self.sock.set_nonblocking(true).unwrap();
                self.sock.recv(&mut buf)
            } else {
                self.sock.set_nonblocking(false).unwrap();
                self.sock.set_read_timeout(Some(left)).unwrap();
                self.sock.recv(&mut buf)
            };
            let Ok(n) = got else {
                return refused_by_peer(&self.conn);
            };
            let info = quiche::RecvInfo {
                from: peer,
                to: local,
            };
            let _ = self.conn.recv(&mut buf[..n], info);
        }
    }
}

fn localhost() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

/// Initial-shaped datagrams under 1200 bytes (a real client's Initial
/// cut short) open nothing and get no answer; the whole Initial does.
#[test]
fn short_initials_are_dropped_before_quiche_sees_them() {
    let (mut f, addr) = acceptor(Limits::DEFAULT);
    let c = Silent::new(localhost(), addr);
    for len in [MIN_INITIAL - 1, 600, 64] {
        c.sock.send(&c.initial[..len]).unwrap();
    }
    drop(turn(&mut f));
    assert_eq!(f.pending.len(), 0);
    let mut buf = [0u8; 2048];
    c.sock.set_nonblocking(true).unwrap();
    assert!(
        c.sock.recv(&mut buf).is_err(),
        "a short Initial was answered"
    );
    c.sock.send(&c.initial).unwrap();
    drop(turn(&mut f));
    assert_eq!(f.pending.len(), 1, "the whole Initial opens a connection");
}

/// One source holds its share; the oldest of its handshakes give way to
/// newer ones, and are told so.
#[test]
fn a_source_holds_its_share_and_its_oldest_give_way() {
    let limits = Limits {
        per_source: 2,
        ..Limits::DEFAULT
    };
    let (mut f, addr) = acceptor(limits);
    let mut cs: Vec<Silent> = (0..5).map(|_| Silent::sent(localhost(), addr)).collect();
    drop(turn(&mut f));
    assert_eq!(f.pending.len(), 2);
    let now = Instant::now();
    for (i, c) in cs.iter_mut().enumerate() {
        let kept = f.by_addr.contains_key(&c.local());
        assert_eq!(kept, i >= 3, "client {i}");
        assert_eq!(c.refused(now), !kept, "client {i}");
    }
}

/// The table holds its size (beyond the peers expected); the oldest
/// handshake, whatever its source, gives way to the newcomer.
#[test]
fn a_full_table_evicts_its_oldest_handshake() {
    let limits = Limits {
        pending: 3,
        ..Limits::DEFAULT
    };
    let (mut f, addr) = acceptor(limits);
    // Room: 3 + the one peer accepted.
    let mut cs: Vec<Silent> = (1..=6)
        .map(|i| Silent::sent(IpAddr::V4(Ipv4Addr::new(127, 0, 9, i)), addr))
        .collect();
    drop(turn(&mut f));
    assert_eq!(f.pending.len(), 4);
    let now = Instant::now();
    for (i, c) in cs.iter_mut().enumerate() {
        let kept = f.by_addr.contains_key(&c.local());
        assert_eq!(kept, i >= 2, "client {i}");
        assert_eq!(c.refused(now), !kept, "client {i}");
    }
}

/// A handshake that stalls is dropped at its deadline, not before, and
/// is told so.
#[test]
fn a_silent_handshake_ends_at_its_deadline() {
    let (mut f, addr) = acceptor(Limits::DEFAULT);
    let mut c = Silent::sent(localhost(), addr);
    drop(turn(&mut f));
    assert_eq!(f.pending.len(), 1);
    let opened = Instant::now();
    f.expire(opened + Limits::DEFAULT.handshake / 2);
    assert_eq!(f.pending.len(), 1);
    assert!(!c.refused(Instant::now()));
    f.expire(opened + Limits::DEFAULT.handshake + Duration::from_millis(1));
    assert_eq!(f.pending.len(), 0);
    assert!(c.refused(Instant::now()));
}

/// Rank 0 dials rank 1 from the same address as a stranger whose Initial
/// comes right after its own; with a share of one, the stranger's
/// crowds rank 0's out. Rank 0 is told, dials again, crowds the
/// stranger out in turn, and both ranks come up.
#[test]
fn a_dialer_crowded_out_dials_again_and_gets_in() {
    let limits = Limits {
        per_source: 1,
        ..Limits::DEFAULT
    };
    let (mut a, addr) = acceptor(limits);
    let mut d = Former::new(
        0,
        config(0),
        None,
        mio::Poll::new().unwrap(),
        BTreeSet::new(),
        [],
    );
    d.dial(1, addr).unwrap();
    let mut stranger = Silent::sent(localhost(), addr);
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut a_up, mut d_up) = (Vec::new(), Vec::new());
    while (a_up.is_empty() || d_up.is_empty()) && Instant::now() < deadline {
        let t = turn(&mut a);
        assert!(t.failed.is_empty(), "{:?}", t.failed);
        a_up.extend(t.up.into_iter().map(|(r, _)| r));
        let t = turn(&mut d);
        assert!(t.failed.is_empty(), "rank 0 gave up: {:?}", t.failed);
        d_up.extend(t.up.into_iter().map(|(r, _)| r));
    }
    assert_eq!((a_up, d_up), (vec![0], vec![1]));
    // Crowded out by rank 0's second Initial.
    assert!(stranger.refused(Instant::now()));
}
