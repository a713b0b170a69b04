//! QUIC transport on loopback: mesh and star, small messages over QUIC and
//! large ones over the TCP sidecar on the same lanes (in order), a departed
//! peer, settings that differ across ranks, and peers without a leaf from
//! the cluster's CA.

mod common;

use common::{every_pair_talks_on, free_addrs, key, lanes_stay_intact, T};
use meshwork_transport::quic::{ClusterCa, QuicConfig, QuicTransport};
use meshwork_transport::tcp::{FormationError, TcpConfig, TcpTransport};
use meshwork_transport::{Transport, TransportError};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Addresses whose port is free for both TCP and UDP.

fn config(r: u32, world: u32, addrs: &[SocketAddr], star: bool) -> QuicConfig {
    let mut cfg = QuicConfig::new(r, world, addrs.to_vec());
    cfg.tcp.star = star;
    cfg.tcp.timeout = T;
    cfg.tcp.token = Some("quic test token".into());
    cfg
}

fn form(world: u32, star: bool) -> Vec<QuicTransport> {
    form_sealed(world, star, false)
}

/// With `seal`, sidecar payloads are encrypted (`ENCRYPT_BULK`).
fn form_sealed(world: u32, star: bool, seal: bool) -> Vec<QuicTransport> {
    let addrs = free_addrs(world as usize);
    let handles: Vec<_> = (0..world)
        .map(|r| {
            let mut cfg = config(r, world, &addrs, star);
            cfg.tcp.seal = seal;
            std::thread::spawn(move || QuicTransport::connect(cfg))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect()
}

fn every_pair_talks(world: u32, star: bool) {
    every_pair_talks_on(form(world, star));
}

#[test]
fn quic_mesh_every_pair_talks() {
    every_pair_talks(4, false);
}

#[test]
fn quic_star_relays_between_workers() {
    every_pair_talks(4, true);
}

/// `ENCRYPT_BULK`: sealed sidecar payloads arrive intact in mesh and star
/// (a star coordinator opens and re-seals what it relays).
#[test]
fn quic_sealed_sidecar_payloads_arrive_intact() {
    every_pair_talks_on(form_sealed(3, false, true));
    every_pair_talks_on(form_sealed(3, true, true));
}

/// Threads send messages of mixed sizes, below and above the sidecar
/// threshold, on their own lanes at once: each lane's messages arrive
/// whole and in order although they took two different paths.
#[test]
fn quic_lanes_stay_in_order_across_quic_and_the_sidecar() {
    for star in [false, true] {
        let ts = form(3, star);
        let sizes = [
            1usize,
            40,
            4096,
            70_000,
            3 << 20,
            17,
            1 << 20,
            0,
            4095,
            65_535,
            65_536,
            5_000_001,
            9,
            2048,
            1,
            4097,
        ];
        lanes_stay_intact(&ts, &sizes, &format!("star={star}"));
    }
}

#[test]
fn quic_a_closed_peer_is_disconnected_after_its_last_message() {
    for star in [false, true] {
        let mut ts = form(3, star);
        let last = ts.pop().unwrap();
        last.send(1, key(1), &[b"bye"]).unwrap();
        last.send(1, key(1), &[&vec![3u8; 1 << 20]]).unwrap();
        let started = Instant::now();
        drop(last);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "closing took {:?}",
            started.elapsed()
        );
        assert_eq!(ts[1].recv(2, key(1), T, None).unwrap().as_ref(), b"bye");
        let big = ts[1].recv(2, key(1), T, None);
        assert_eq!(big.map(|m| m.len()), Ok(1 << 20), "star={star}");
        let e = ts[1].recv(2, key(1), T, None).unwrap_err();
        assert_eq!(
            e,
            TransportError::PeerDisconnected { rank: 2 },
            "star={star}"
        );
        assert_eq!(
            ts[0].recv(2, key(1), T, None).unwrap_err(),
            TransportError::PeerDisconnected { rank: 2 }
        );
    }
}

/// Ranks that disagree on the transport or the sidecar threshold fail
/// formation at once with an error that says what differs.
#[test]
fn quic_settings_that_differ_fail_formation_saying_so() {
    let addrs = free_addrs(2);
    let mut other = config(1, 2, &addrs, false);
    other.sidecar_threshold = 1 << 20;
    let h = std::thread::spawn(move || QuicTransport::connect(other).map(|_| ()));
    let e = QuicTransport::connect(config(0, 2, &addrs, false)).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("transport settings differ")
            && text.contains("4096")
            && text.contains("1048576"),
        "{text}"
    );
    assert!(h.join().unwrap().is_err());

    let addrs = free_addrs(2);
    let mut sealed = config(1, 2, &addrs, false);
    sealed.tcp.seal = true;
    let h = std::thread::spawn(move || QuicTransport::connect(sealed).map(|_| ()));
    let e = QuicTransport::connect(config(0, 2, &addrs, false)).unwrap_err();
    assert!(e.to_string().contains("payloads encrypted"), "{e}");
    assert!(h.join().unwrap().is_err());

    let addrs = free_addrs(2);
    let mut tcp = TcpConfig::new(1, 2, addrs.clone());
    tcp.timeout = T;
    tcp.token = Some("quic test token".into());
    let h = std::thread::spawn(move || TcpTransport::connect(tcp).map(|_| ()));
    let e = QuicTransport::connect(config(0, 2, &addrs, false)).unwrap_err();
    assert!(
        matches!(&e, FormationError::ConnectionFailed { rank: 1, reason } if reason.contains("theirs TCP")),
        "{e}"
    );
    assert!(h.join().unwrap().is_err());
}

/// A plain QUIC client: its own context, dialling `addr` as `name`.
/// Returns the error code the server closed its connection with.
fn rogue_dial(addr: SocketAddr, ctx: boring::ssl::SslContextBuilder, name: &str) -> u64 {
    let mut cfg =
        quiche::Config::with_boring_ssl_ctx_builder(quiche::PROTOCOL_VERSION, ctx).unwrap();
    cfg.set_application_protos(&[b"meshwork/2"]).unwrap();
    cfg.set_max_idle_timeout(3000);
    cfg.set_initial_max_data(1 << 20);
    cfg.set_initial_max_stream_data_uni(1 << 20);
    cfg.set_initial_max_streams_uni(16);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(addr).unwrap();
    let local = sock.local_addr().unwrap();
    let scid = quiche::ConnectionId::from_vec(vec![7u8; 16]);
    let mut conn = quiche::connect(Some(name), &scid, local, addr, &mut cfg).unwrap();
    let mut buf = vec![0u8; 65_535];
    let until = Instant::now() + Duration::from_secs(8);
    let mut sent_data = false;
    while !conn.is_closed() && Instant::now() < until {
        while let Ok((n, _)) = conn.send(&mut buf) {
            sock.send(&buf[..n]).unwrap();
        }
        let wait = conn
            .timeout()
            .unwrap_or(Duration::from_millis(50))
            .max(Duration::from_millis(1));
        sock.set_read_timeout(Some(wait.min(Duration::from_millis(50))))
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
        if conn.is_established() && !sent_data {
            // Garbage where frames belong, in case the handshake let it in.
            let _ = conn.stream_send(2, &[0xAB; 100], false);
            sent_data = true;
        }
    }
    assert!(conn.is_closed(), "still open after 8 s");
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
    use boring::nid::Nid;
    use boring::pkey::PKey;
    use boring::ssl::{SslContextBuilder, SslMethod, SslVerifyMode};
    use boring::x509::{X509Name, X509};
    let key = PKey::from_ec_key(
        EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap()).unwrap(),
    )
    .unwrap();
    let mut name = X509Name::builder().unwrap();
    name.append_entry_by_nid(Nid::COMMONNAME, "rank-0.meshwork")
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
/// cluster's CA that claims a real rank, are both refused by a rank's QUIC
/// port; the group goes on undisturbed.
#[test]
fn quic_strangers_and_other_clusters_are_refused() {
    let addrs = free_addrs(2);
    let hs: Vec<_> = (0..2)
        .map(|r| {
            let cfg = config(r, 2, &addrs, false);
            std::thread::spawn(move || QuicTransport::connect(cfg).unwrap())
        })
        .collect();
    let ts: Vec<QuicTransport> = hs.into_iter().map(|h| h.join().unwrap()).collect();

    let code = rogue_dial(addrs[1], self_signed_context(), "rank-1.meshwork");
    assert_eq!(code, UNKNOWN_CA, "a self-signed leaf: unknown CA");

    let other = ClusterCa::from_token("another cluster")
        .unwrap()
        .issue(0)
        .unwrap();
    let mut ctx = other.ssl_context().unwrap();
    ctx.set_verify(boring::ssl::SslVerifyMode::NONE);
    let code = rogue_dial(addrs[1], ctx, "rank-1.meshwork");
    // Same CA name, another key: the signature does not verify.
    assert_eq!(code, DECRYPT_ERROR, "a leaf from another cluster's CA");

    // The group is undisturbed.
    for n in [10usize, 200_000] {
        ts[0].send(1, key(3), &[&vec![5u8; n]]).unwrap();
        assert_eq!(ts[1].recv(0, key(3), T, None).unwrap().len(), n);
        ts[1].send(0, key(4), &[&vec![6u8; n]]).unwrap();
        assert_eq!(ts[0].recv(1, key(4), T, None).unwrap().len(), n);
    }
}
