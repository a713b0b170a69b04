//! TCP transport on loopback: mesh and star formation, lanes between every
//! pair (relayed in star), a departed peer, caps.

use meshwork_transport::tcp::{FormationError, TcpConfig, TcpTransport};
use meshwork_transport::{LaneKey, LaneKind, Transport, TransportError};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap()).collect()
}

fn form(world: u32, star: bool) -> Vec<TcpTransport> {
    form_sealed(world, star, false)
}

fn form_sealed(world: u32, star: bool, seal: bool) -> Vec<TcpTransport> {
    let addrs = free_addrs(world as usize);
    let handles: Vec<_> = (0..world)
        .map(|r| {
            let mut cfg = TcpConfig::new(r, world, addrs.clone());
            cfg.star = star;
            cfg.seal = seal;
            cfg.token = Some("tcp test token".into());
            cfg.timeout = T;
            std::thread::spawn(move || TcpTransport::connect(cfg))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect()
}

fn key(tag: u64) -> LaneKey {
    LaneKey {
        comm: 0,
        kind: LaneKind::PointToPoint,
        tag,
    }
}

fn every_pair_talks(world: u32, star: bool) {
    every_pair_talks_on(form(world, star));
}

fn every_pair_talks_on(ts: Vec<TcpTransport>) {
    let world = ts.len() as u32;
    for a in 0..world {
        for b in 0..world {
            let msg = format!("{a}->{b}");
            ts[a as usize].send(b, key(7), &[msg.as_bytes()]).unwrap();
            let big = vec![a as u8; 3 << 20];
            ts[a as usize].send(b, key(8), &[&big]).unwrap();
        }
    }
    for b in 0..world {
        for a in 0..world {
            let got = ts[b as usize].recv(a, key(7), T, None).unwrap();
            assert_eq!(got.as_ref(), format!("{a}->{b}").as_bytes());
            let big = ts[b as usize].recv(a, key(8), T, None).unwrap();
            assert_eq!(big.len(), 3 << 20);
            assert!(big.as_ref().iter().all(|&x| x == a as u8));
        }
    }
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
            let mut cfg = TcpConfig::new(r, 2, addrs.clone());
            cfg.max_message_bytes = 1000;
            std::thread::spawn(move || TcpTransport::connect(cfg).unwrap())
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
            let mut cfg = TcpConfig::new(r, 3, addrs.clone());
            cfg.timeout = Duration::from_millis(500);
            std::thread::spawn(move || TcpTransport::connect(cfg))
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
        std::thread::scope(|s| {
            for lane in 0..4u64 {
                let t = &ts[1];
                s.spawn(move || {
                    for (i, &n) in sizes.iter().enumerate() {
                        let fill = (lane * 16 + i as u64) as u8;
                        t.send(2, key(100 + lane), &[&vec![fill; n]]).unwrap();
                    }
                });
            }
        });
        for lane in 0..4u64 {
            for (i, &n) in sizes.iter().enumerate() {
                let m = ts[2].recv(1, key(100 + lane), T, None).unwrap();
                let fill = (lane * 16 + i as u64) as u8;
                assert_eq!(m.len(), n, "star={star} lane {lane} message {i}");
                assert!(
                    m.as_ref().iter().all(|&b| b == fill),
                    "star={star} lane {lane} message {i}"
                );
            }
        }
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
