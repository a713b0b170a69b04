//! QUIC transport on loopback: mesh and star, small messages over QUIC and
//! large ones over the TCP sidecar on the same lanes (in order), a departed
//! peer, settings that differ across ranks. (Strangers and hostile
//! members: the unit tests of `quic/mod.rs`.)

mod common;

use common::{
    every_pair_talks_on, form_with, free_addrs, key, lanes_stay_intact, workers_send_at_once, T,
};
use meshwork_transport::{
    connect, Backend, FormationError, LinkTransport, Shape, Spec, Transport, TransportError,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn config(r: u32, world: u32, addrs: &[SocketAddr], star: bool) -> Spec {
    let mut cfg = Spec::new(r, world, addrs.to_vec());
    cfg.shape = if star { Shape::Star } else { Shape::Mesh };
    cfg.timeout = T;
    cfg.token = Some("quic test token".into());
    cfg
}

fn form(world: u32, star: bool) -> Vec<LinkTransport> {
    form_sealed(world, star, false)
}

/// With `seal`, sidecar payloads are encrypted (`ENCRYPT_BULK`).
fn form_sealed(world: u32, star: bool, seal: bool) -> Vec<LinkTransport> {
    form_with(world, |r, addrs| {
        let mut cfg = config(r, world, &addrs, star);
        cfg.seal = seal;
        connect(&cfg)
    })
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
    other.backend = Backend::Quic {
        sidecar_threshold: 1 << 20,
    };
    let h = std::thread::spawn(move || connect(&other).map(|_| ()));
    let e = connect(&config(0, 2, &addrs, false)).unwrap_err();
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
    sealed.seal = true;
    let h = std::thread::spawn(move || connect(&sealed).map(|_| ()));
    let e = connect(&config(0, 2, &addrs, false)).unwrap_err();
    assert!(e.to_string().contains("payloads encrypted"), "{e}");
    assert!(h.join().unwrap().is_err());

    let addrs = free_addrs(2);
    let mut tcp = Spec::tcp(1, 2, addrs.clone());
    tcp.timeout = T;
    tcp.token = Some("quic test token".into());
    let h = std::thread::spawn(move || connect(&tcp).map(|_| ()));
    let e = connect(&config(0, 2, &addrs, false)).unwrap_err();
    assert!(
        matches!(&e, FormationError::ConnectionFailed { rank: 1, reason } if reason.contains("theirs TCP")),
        "{e}"
    );
    assert!(h.join().unwrap().is_err());
}

/// Workers that send the moment they have formed, before the coordinator
/// has started all its links: nothing relayed is lost.
#[test]
fn quic_star_relays_what_workers_send_at_once() {
    workers_send_at_once(6, |r, addrs| connect(&config(r, 6, &addrs, true)));
}
