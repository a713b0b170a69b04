//! TCP transport on loopback: mesh and star formation, lanes between every
//! pair (relayed in star), a departed peer, caps.

mod common;

use common::{
    every_pair_talks_on, form_with, free_addrs, key, lanes_stay_intact, workers_send_at_once, T,
};
use meshwork_transport::{connect, FormationError, LinkTransport, Shape, Spec};
use meshwork_transport::{LaneKey, LaneKind, Transport, TransportError};

use std::time::Duration;

fn form(world: u32, star: bool) -> Vec<LinkTransport> {
    form_sealed(world, star, false)
}

fn form_sealed(world: u32, star: bool, seal: bool) -> Vec<LinkTransport> {
    form_with(world, |r, addrs| {
        let mut cfg = Spec::tcp(r, world, addrs);
        cfg.shape = if star { Shape::Star } else { Shape::Mesh };
        cfg.seal = seal;
        cfg.token = Some("tcp test token".into());
        cfg.timeout = T;
        connect(&cfg)
    })
}

fn every_pair_talks(world: u32, star: bool) {
    every_pair_talks_on(form(world, star));
}

#[test]
fn mesh_every_pair_talks() {
    every_pair_talks(4, false);
}

#[test]
fn star_relays_between_workers() {
    every_pair_talks(4, true);
}

/// `ENCRYPT_BULK` on the TCP transport: every payload sealed, including
/// empty ones and those a star coordinator relays.
#[test]
fn sealed_payloads_arrive_intact() {
    for star in [false, true] {
        let ts = form_sealed(3, star, true);
        ts[1].send(2, key(5), &[]).unwrap();
        assert_eq!(ts[2].recv(1, key(5), T, None).unwrap().len(), 0);
        every_pair_talks_on(ts);
    }
}

#[test]
fn a_closed_peer_is_disconnected_after_its_last_message() {
    for star in [false, true] {
        let mut ts = form(3, star);
        let last = ts.pop().unwrap();
        last.send(1, key(1), &[b"bye"]).unwrap();
        drop(last);
        assert_eq!(ts[1].recv(2, key(1), T, None).unwrap().as_ref(), b"bye");
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

#[test]
fn oversized_messages_are_refused_before_sending() {
    let addrs = free_addrs(2);
    let hs: Vec<_> = (0..2)
        .map(|r| {
            let mut cfg = Spec::tcp(r, 2, addrs.clone());
            cfg.max_message_bytes = 1000;
            std::thread::spawn(move || connect(&cfg).unwrap())
        })
        .collect();
    let ts: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(
        ts[0].send(1, key(0), &[&[0u8; 1001]]),
        Err(TransportError::MessageTooLarge {
            len: 1001,
            max: 1000
        })
    );
    ts[0].send(1, key(0), &[&[0u8; 1000]]).unwrap();
    assert_eq!(ts[1].recv(0, key(0), T, None).unwrap().len(), 1000);
}

#[test]
fn a_missing_rank_is_a_formation_timeout_naming_it() {
    let addrs = free_addrs(3);
    let started = std::time::Instant::now();
    let hs: Vec<_> = (0..2)
        .map(|r| {
            let mut cfg = Spec::tcp(r, 3, addrs.clone());
            cfg.timeout = Duration::from_millis(500);
            std::thread::spawn(move || connect(&cfg))
        })
        .collect();
    for h in hs {
        match h.join().unwrap() {
            Err(FormationError::Timeout { missing }) => assert_eq!(missing, [2]),
            other => panic!("{other:?}"),
        }
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(2500),
        "{took:?}"
    );
}

/// Several threads send messages of mixed sizes (tiny to several MiB) over
/// one link at once, on their own lanes: every byte must arrive in order.
/// This drives partial direct writes, queued tails and writer batches
/// against each other.
#[test]
fn concurrent_senders_of_mixed_sizes_share_a_link_intact() {
    for star in [false, true] {
        let ts = form(3, star);
        let sizes = [1usize, 40, 4096, 70_000, 3 << 20, 17, 1 << 20, 0, 5_000_001];
        lanes_stay_intact(&ts, &sizes, &format!("star={star}"));
    }
}

/// A peer that sends a collective message far beyond the receiver's
/// sequence window is treated as hostile: its link is closed, and what it
/// sent before is still delivered first.
#[test]
fn a_peer_skipping_far_ahead_is_cut_off() {
    let ts = form(2, false);
    ts[0].send(1, key(1), &[b"before"]).unwrap();
    let far = LaneKey {
        comm: 0,
        kind: LaneKind::Collective,
        tag: meshwork_transport::SEQ_WINDOW + 5,
    };
    ts[0].send(1, far, &[b"x"]).unwrap();
    assert_eq!(ts[1].recv(0, key(1), T, None).unwrap().as_ref(), b"before");
    assert_eq!(
        ts[1].recv(0, far, T, None).unwrap_err(),
        TransportError::PeerDisconnected { rank: 0 }
    );
    // Within the window is fine.
    let ts = form(2, false);
    let near = LaneKey {
        comm: 0,
        kind: LaneKind::Collective,
        tag: meshwork_transport::SEQ_WINDOW - 1,
    };
    ts[0].send(1, near, &[b"ok"]).unwrap();
    assert_eq!(ts[1].recv(0, near, T, None).unwrap().as_ref(), b"ok");
}

/// Workers that send the moment they have formed, before the coordinator
/// has started all its links: nothing relayed is lost (a relay used to
/// find no link and drop the frame).
#[test]
fn star_relays_what_workers_send_at_once() {
    workers_send_at_once(6, |r, addrs| {
        let mut cfg = Spec::tcp(r, 6, addrs);
        cfg.shape = Shape::Star;
        cfg.timeout = T;
        connect(&cfg)
    });
}
