//! Peers that must not get in or must be cut off: QUIC clients with a
//! self-signed leaf or one from another cluster's CA; and a hostile
//! member, which holds the token (so it passes the sidecar's handshake
//! and gets a leaf from the cluster CA) and then sends garbage over
//! QUIC. The rank it talks to closes the link and reports the peer
//! gone; nothing panics, nothing is allocated for a claimed length.

use super::*;
use crate::auth::handshake::Identity;
use crate::{LaneKey, LaneKind, Transport};
use std::net::SocketAddr;
use std::net::{TcpListener, TcpStream, UdpSocket};

const TOKEN: &str = "hostile test token";

fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let mut held = Vec::new();
    while held.len() < n {
        let t = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = t.local_addr().unwrap();
        if let Ok(u) = UdpSocket::bind(addr) {
            held.push((t, u, addr));
        }
    }
    held.into_iter().map(|(_, _, a)| a).collect()
}

/// Play rank 0 of 2 against rank 1 at `addr`: the sidecar handshake,
/// then a QUIC connection with a genuine leaf; send `garbage` on
/// stream `stream`. Returns the sidecar so it stays open.
fn impostor(addr: SocketAddr, stream: u64, garbage: &[u8]) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut tcp = loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::yield_now(),
            Err(e) => panic!("cannot reach rank 1: {e}"),
        }
    };
    let id = Identity {
        rank: 0,
        world: 2,
        shape: 0,
        key: handshake::derive_key(Some(TOKEN)),
        version: handshake::PROTOCOL_VERSION,
        transport: handshake::TRANSPORT_QUIC
            | DEFAULT_SIDECAR_THRESHOLD as u64
            | handshake::bounds_word(crate::DEFAULT_PEER_BUDGET, crate::LANE_DEPTH),
        heap: 0,
    };
    let by = Instant::now() + Duration::from_secs(5);
    let admitted = handshake::dial(&mut tcp, &id, by).unwrap();
    assert_eq!(admitted.rank, 1);
    crate::shm::decline(&tcp, &admitted.keys).unwrap();
    let leaf = ClusterCa::from_token(TOKEN).unwrap().issue(0).unwrap();
    let mut cfg = quiche_config(&leaf, Duration::from_secs(10), true).unwrap();
    let conn = client(
        addr,
        &mut cfg,
        &crate::auth::tls::rank_name(1),
        stream,
        garbage,
        deadline,
    );
    assert!(
        conn.is_closed() || conn.is_draining(),
        "rank 1 should close the connection (established {}, peer error {:?})",
        conn.is_established(),
        conn.peer_error()
    );
    tcp
}

/// A plain QUIC client of `addr` under `cfg`, as `name`: once its side
/// is established it sends `garbage` on `stream`; it runs until the
/// connection ends or `until`, and returns it.
fn client(
    addr: SocketAddr,
    cfg: &mut quiche::Config,
    name: &str,
    stream: u64,
    garbage: &[u8],
    until: Instant,
) -> quiche::Connection {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(addr).unwrap();
    let local = sock.local_addr().unwrap();
    let scid = random_cid().unwrap();
    let mut conn = quiche::connect(Some(name), &scid, local, addr, cfg).unwrap();
    let mut buf = vec![0u8; 65_535];
    let mut sent = false;
    while !(conn.is_closed() || conn.is_draining()) && Instant::now() < until {
        while let Ok((n, _)) = conn.send(&mut buf) {
            sock.send(&buf[..n]).unwrap();
        }
        let wait = conn.timeout().unwrap_or(Duration::from_millis(20));
        sock.set_read_timeout(Some(
            wait.clamp(Duration::from_millis(1), Duration::from_millis(20)),
        ))
        .unwrap();
        match sock.recv(&mut buf) {
            Ok(n) => {
                let info = quiche::RecvInfo {
                    from: addr,
                    to: local,
                };
                let _ = conn.recv(&mut buf[..n], info);
            }
            Err(_) => conn.on_timeout(),
        }
        if conn.is_established() && !sent {
            let _ = conn.stream_send(stream, garbage, false);
            sent = true;
        }
    }
    conn
}

/// A client with its own context, dialling `addr` as `name`; the
/// error code the server closed its connection with.
fn rogue_dial(addr: SocketAddr, ctx: boring::ssl::SslContextBuilder, name: &str) -> u64 {
    let mut cfg =
        quiche::Config::with_boring_ssl_ctx_builder(quiche::PROTOCOL_VERSION, ctx).unwrap();
    cfg.set_application_protos(&[ALPN]).unwrap();
    cfg.set_max_idle_timeout(3000);
    cfg.set_initial_max_data(1 << 20);
    cfg.set_initial_max_stream_data_uni(1 << 20);
    cfg.set_initial_max_streams_uni(16);
    let until = Instant::now() + Duration::from_secs(8);
    // Garbage where frames belong, in case the handshake let it in.
    let conn = client(addr, &mut cfg, name, 2, &[0xAB; 100], until);
    assert!(
        conn.is_closed() || conn.is_draining(),
        "still open after 8 s"
    );
    let e = conn
        .peer_error()
        .expect("closed by the server, not by a timeout");
    assert!(!e.is_app, "{e:?}");
    e.error_code
}

/// TLS alerts travel as QUIC transport errors 0x100 + alert.
const UNKNOWN_CA: u64 = 0x100 + 48;
const DECRYPT_ERROR: u64 = 0x100 + 51;

fn self_signed_context() -> boring::ssl::SslContextBuilder {
    use boring::ec::{EcGroup, EcKey};
    use boring::pkey::PKey;
    use boring::ssl::{SslContextBuilder, SslMethod, SslVerifyMode};
    use boring::x509::{X509Name, X509};
    let key = PKey::from_ec_key(
        EcKey::generate(&EcGroup::from_curve_name(boring::nid::Nid::X9_62_PRIME256V1).unwrap())
            .unwrap(),
    )
    .unwrap();
    let mut name = X509Name::builder().unwrap();
    name.append_entry_by_nid(boring::nid::Nid::COMMONNAME, "rank-0.meshwork")
        .unwrap();
    let name = name.build();
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_issuer_name(&name).unwrap();
    b.set_pubkey(&key).unwrap();
    let from = boring::asn1::Asn1Time::days_from_now(0).unwrap();
    let until = boring::asn1::Asn1Time::days_from_now(30).unwrap();
    b.set_not_before(&from).unwrap();
    b.set_not_after(&until).unwrap();
    b.sign(&key, boring::hash::MessageDigest::sha256()).unwrap();
    let cert = b.build();
    let mut ctx = SslContextBuilder::new(SslMethod::tls()).unwrap();
    ctx.set_certificate(&cert).unwrap();
    ctx.set_private_key(&key).unwrap();
    ctx.set_verify(SslVerifyMode::NONE);
    ctx
}

/// A client with a self-signed leaf, and one with a leaf from another
/// cluster's CA that claims a real rank, are both refused by a rank's
/// QUIC port; the group goes on undisturbed.
#[test]
fn strangers_and_other_clusters_are_refused() {
    let addrs = free_addrs(2);
    let hs: Vec<_> = (0..2)
        .map(|r| {
            let mut spec = Spec::new(r, 2, addrs.clone());
            spec.token = Some(TOKEN.into());
            spec.timeout = Duration::from_secs(10);
            std::thread::spawn(move || crate::connect(&spec).unwrap())
        })
        .collect();
    let ts: Vec<LinkTransport> = hs.into_iter().map(|h| h.join().unwrap()).collect();

    let code = rogue_dial(addrs[1], self_signed_context(), "rank-1.meshwork");
    assert_eq!(code, UNKNOWN_CA, "a self-signed leaf: unknown CA");

    let other = ClusterCa::from_token("another cluster token")
        .unwrap()
        .issue(0)
        .unwrap();
    let mut ctx = other.ssl_context().unwrap();
    ctx.set_verify(boring::ssl::SslVerifyMode::NONE);
    let code = rogue_dial(addrs[1], ctx, "rank-1.meshwork");
    // Same CA name, another key: the signature does not verify.
    assert_eq!(code, DECRYPT_ERROR, "a leaf from another cluster's CA");

    // The group is undisturbed.
    let t = Duration::from_secs(10);
    let key = |tag| LaneKey {
        comm: 0,
        kind: LaneKind::PointToPoint,
        tag,
    };
    for n in [10usize, 200_000] {
        ts[0].send(1, key(3), &[&vec![5u8; n]]).unwrap();
        assert_eq!(ts[1].recv(0, key(3), t, None).unwrap().len(), n);
        ts[1].send(0, key(4), &[&vec![6u8; n]]).unwrap();
        assert_eq!(ts[0].recv(1, key(4), t, None).unwrap().len(), n);
    }
}

fn header(ftype: FrameType, dst: u32, len: u64) -> Header {
    let mut h = Header::control(ftype, 0, dst);
    h.kind = LaneKind::PointToPoint;
    h.len = len;
    h
}

#[test]
fn garbage_over_quic_closes_the_link_and_ends_the_peer() {
    let mut junk = header(FrameType::Data, 1, 0).encode().to_vec();
    junk[0] = 99; // unknown frame type
    let over = header(FrameType::Data, 1, 1 << 40).encode().to_vec(); // over the cap
    let big = header(FrameType::Data, 1, 1 << 20).encode().to_vec(); // belongs on the sidecar
    let misaddressed = {
        let mut f = header(FrameType::Data, 0, 3).encode().to_vec();
        f.extend_from_slice(b"abc");
        f
    };
    let cases: [(u64, Vec<u8>); 5] = [
        (2 + 4, junk),
        (2 + 4, over),
        (2 + 4, big),
        (2 + 4, misaddressed),
        // A stream quiche allows but meshwork does not use.
        (4 * 10 + 2, header(FrameType::Data, 1, 0).encode().to_vec()),
    ];
    for (i, (stream, garbage)) in cases.into_iter().enumerate() {
        let addrs = free_addrs(2);
        let mut spec = Spec::new(1, 2, addrs.clone());
        spec.token = Some(TOKEN.into());
        spec.timeout = Duration::from_secs(10);
        let rank1 = std::thread::spawn(move || {
            let t = crate::connect(&spec).unwrap();
            let key = LaneKey {
                comm: 0,
                kind: LaneKind::PointToPoint,
                tag: 0,
            };
            t.recv(0, key, Duration::from_secs(10), None)
        });
        let _sidecar = impostor(addrs[1], stream, &garbage);
        let got = rank1.join().unwrap();
        assert_eq!(
            got,
            Err(TransportError::PeerDisconnected { rank: 0 }),
            "case {i}"
        );
    }
}

#[test]
fn a_lane_keeps_its_stream_and_credits_have_their_own() {
    let mut h = Header::control(FrameType::Data, 0, 1);
    h.kind = LaneKind::Collective;
    let mut seen = std::collections::BTreeSet::new();
    for tag in 0..64 {
        h.tag = tag;
        let s = engine::stream_of(&h);
        assert_eq!(s, engine::stream_of(&h));
        assert!((1..=engine::LANE_STREAMS).contains(&s));
        seen.insert(s);
    }
    assert_eq!(
        seen.len() as u64,
        engine::LANE_STREAMS,
        "lanes spread over every stream"
    );
    assert_eq!(
        engine::stream_of(&Header::control(FrameType::Credit, 0, 1)),
        0
    );
}

/// F3: strangers' real QUIC clients (30 from the honest peer's own
/// address on distinct ports, 20 from other addresses) send their Initial
/// to rank 1's port before rank 0 has started, then go silent. Rank 1's
/// strangers over its per-source share give way at once, the rest at
/// their handshake deadline, each told `CONNECTION_REFUSED`; the group
/// forms well before its deadline and works.
#[test]
fn a_rank_forms_while_silent_quic_clients_hold_handshakes() {
    use super::former::tests::Silent;
    use std::net::{IpAddr, Ipv4Addr};
    let addrs = free_addrs(2);
    let timeout = Duration::from_secs(10);
    let spec = |r| {
        let mut s = Spec::new(r, 2, addrs.clone());
        s.token = Some(TOKEN.into());
        s.timeout = timeout;
        s
    };
    let rank1 = {
        let s = spec(1);
        std::thread::spawn(move || crate::connect(&s))
    };
    // Rank 1's UDP port is bound before its TCP formation waits for rank
    // 0: once a probe datagram draws no "port unreachable", it is.
    let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
    probe.connect(addrs[1]).unwrap();
    probe
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let bound_by = Instant::now() + Duration::from_secs(5);
    loop {
        assert!(Instant::now() < bound_by, "rank 1 never bound its UDP port");
        let _ = probe.send(&[0]);
        match probe.recv(&mut [0u8; 16]) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
            _ => break,
        }
    }
    let here = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut strangers: Vec<Silent> = (0..30)
        .map(|_| Silent::sent(here, addrs[1]))
        .chain((1..=20).map(|i| Silent::sent(IpAddr::V4(Ipv4Addr::new(127, 0, 7, i)), addrs[1])))
        .collect();
    let started = Instant::now();
    let rank0 = {
        let s = spec(0);
        std::thread::spawn(move || crate::connect(&s))
    };
    let t0 = rank0.join().unwrap().unwrap();
    let t1 = rank1.join().unwrap().unwrap();
    let formed = started.elapsed();
    assert!(formed < timeout / 2, "formed after {formed:?}");
    let key = LaneKey {
        comm: 0,
        kind: LaneKind::PointToPoint,
        tag: 1,
    };
    t0.send(1, key, &[b"through"]).unwrap();
    assert_eq!(t1.recv(0, key, timeout, None).unwrap().as_ref(), b"through");
    // Every stranger is told, within its deadline (the last ones by the
    // refuser that keeps the port after formation).
    let by = started + former::Limits::DEFAULT.handshake + Duration::from_secs(3);
    for (i, s) in strangers.iter_mut().enumerate() {
        assert!(s.refused(by), "stranger {i} still holds a handshake");
    }
}

/// A member playing rank 0 of 3: its sidecar (kept open, never read) and
/// its QUIC connection to one rank.
struct Member {
    conn: quiche::Connection,
    sock: UdpSocket,
    local: SocketAddr,
    peer: SocketAddr,
    _sidecar: TcpStream,
}

impl Member {
    /// Join rank `to` at `addr` as rank 0 of 3: the sidecar's handshake,
    /// then QUIC with a genuine leaf, until established.
    fn join(addr: SocketAddr, to: u32) -> Member {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut tcp = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => std::thread::yield_now(),
                Err(e) => panic!("cannot reach rank {to}: {e}"),
            }
        };
        let id = Identity {
            rank: 0,
            world: 3,
            shape: 0,
            key: handshake::derive_key(Some(TOKEN)),
            version: handshake::PROTOCOL_VERSION,
            transport: handshake::TRANSPORT_QUIC
                | DEFAULT_SIDECAR_THRESHOLD as u64
                | handshake::bounds_word(crate::DEFAULT_PEER_BUDGET, crate::LANE_DEPTH),
            heap: 0,
        };
        let admitted = handshake::dial(&mut tcp, &id, deadline).unwrap();
        assert_eq!(admitted.rank, to);
        crate::shm::decline(&tcp, &admitted.keys).unwrap();
        let leaf = ClusterCa::from_token(TOKEN).unwrap().issue(0).unwrap();
        let mut cfg = quiche_config(&leaf, Duration::from_secs(30), true).unwrap();
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(1)))
            .unwrap();
        let local = sock.local_addr().unwrap();
        let scid = random_cid().unwrap();
        let name = crate::auth::tls::rank_name(to);
        let conn = quiche::connect(Some(&name), &scid, local, addr, &mut cfg).unwrap();
        let mut m = Member {
            conn,
            sock,
            local,
            peer: addr,
            _sidecar: tcp,
        };
        while !m.conn.is_established() {
            assert!(
                Instant::now() < deadline,
                "rank {to} did not take the member"
            );
            m.drive();
        }
        m
    }

    /// One turn: send what quiche has, take what came (waiting a
    /// millisecond at most), run its timers.
    fn drive(&mut self) {
        let mut buf = vec![0u8; 65_535];
        while let Ok((n, _)) = self.conn.send(&mut buf) {
            let _ = self.sock.send(&buf[..n]);
        }
        match self.sock.recv(&mut buf) {
            Ok(n) => {
                let info = quiche::RecvInfo {
                    from: self.peer,
                    to: self.local,
                };
                let _ = self.conn.recv(&mut buf[..n], info);
            }
            Err(_) => self.conn.on_timeout(),
        }
    }

    /// Write frame `h` (and `payload`) on the QUIC stream its lane takes,
    /// stamped as coming after no sidecar payload.
    fn frame(&mut self, h: Header, payload: &[u8]) {
        let id = engine::stream_of(&h) * 4 + 2;
        let bytes = [&h.encode()[..], payload].concat();
        let mut at = 0;
        while at < bytes.len() {
            match self.conn.stream_send(id, &bytes[at..], false) {
                Ok(n) => at += n,
                Err(quiche::Error::Done) => self.drive(),
                Err(e) => panic!("stream {id}: {e}"),
            }
        }
    }
}

use crate::link::testing::{Get, ANSWER, REQUESTS};

/// The one-sided amplification attack over QUIC: a member (rank 0 of 3)
/// sends small requests for large answers on QUIC, returns forged credit
/// for each, and never reads its sidecar, which large answers take. What
/// rank 1 holds queued on the link stays within its write budget (the
/// rest of the requests wait in its inbox), and an honest rank 2 still
/// gets its answer from rank 1 at once.
#[test]
fn answers_to_a_member_that_never_reads_stay_within_the_link_budget_quic() {
    const BUDGET: usize = 4 << 20;
    const N: u64 = 48;
    let addrs = free_addrs(3);
    let spec = |rank| {
        let mut s = Spec::new(rank, 3, addrs.clone());
        s.token = Some(TOKEN.into());
        s.timeout = Duration::from_secs(30);
        s.shared_memory = false;
        s.send_budget_bytes = BUDGET;
        s
    };
    let (s1, s2) = (spec(1), spec(2));
    let rank1 = std::thread::spawn(move || {
        let (core, refusers) =
            form_links(&s1, DEFAULT_SIDECAR_THRESHOLD, crate::shm::upgrade).unwrap();
        (
            LinkTransport::start(Arc::clone(&core), crate::form::background(refusers)),
            core,
        )
    });
    let rank2 = std::thread::spawn(move || crate::connect(&s2).unwrap());
    let to2 = std::thread::spawn({
        let a = addrs[2];
        move || Member::join(a, 2)
    });
    let attacker = Member::join(addrs[1], 1);
    let idle = to2.join().unwrap();
    // The member's thread: drives both connections, writes what it is
    // told to on the one to rank 1; never reads its sidecars.
    let (frames, told) = crossbeam_channel::unbounded::<(Header, Vec<u8>)>();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let member = std::thread::spawn({
        let stop = Arc::clone(&stop);
        move || {
            let (mut attacker, mut idle) = (attacker, idle);
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                while let Ok((h, payload)) = told.try_recv() {
                    attacker.frame(h, &payload);
                }
                attacker.drive();
                idle.drive();
            }
        }
    });
    let (t1, core) = rank1.join().unwrap();
    let t2 = rank2.join().unwrap();
    t1.set_answerer(REQUESTS, Arc::new(Get));
    for id in 0..N {
        let mut h = Header::control(FrameType::Data, 0, 1);
        (h.kind, h.len) = (LaneKind::Rpc, 8);
        frames.send((h, id.to_le_bytes().to_vec())).unwrap();
        let mut c = Header::control(FrameType::Credit, 0, 1);
        (c.kind, c.tag, c.aux, c.len) = (LaneKind::Rpc, 1 + id, 1, 1 << 40);
        frames.send((c, Vec::new())).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while t1.stats()[0].received_messages < N {
        assert!(Instant::now() < deadline, "the requests were not read");
        std::thread::yield_now();
    }
    let link = core.link(0).unwrap();
    let queued = link.queued_bytes();
    assert!(
        queued <= BUDGET + ANSWER,
        "{queued} bytes queued for a member that reads nothing (budget {BUDGET})"
    );
    assert!(
        t1.stats()[0].queued_bytes > 0,
        "requests past the budget wait in the inbox"
    );
    // The honest rank is answered at once, over its own link.
    t2.send(1, REQUESTS, &[&7u64.to_le_bytes()]).unwrap();
    let lane = LaneKey { tag: 8, ..REQUESTS };
    let answer = t2.recv(1, lane, Duration::from_secs(20), None).unwrap();
    assert_eq!(answer.as_ref(), vec![7u8; ANSWER]);
    // The member goes (its sockets close), then the ranks.
    stop.store(true, std::sync::atomic::Ordering::Release);
    member.join().unwrap();
    drop((t1, t2));
}
