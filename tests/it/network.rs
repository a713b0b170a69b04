//! Networked groups formed with `Node` inside this process (one thread per
//! rank): the seed design's bring-up, both topologies, and every typed
//! formation failure.

use crate::support::{free_ports, run_nodes};
use meshwork::{Error, Node, ReduceKind, ReduceOp, Topology};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

#[test]
fn seed_design_bring_up() {
    let addrs = free_ports(2);
    let (a0, a1) = (addrs[0], addrs[1]);
    let rank1 = std::thread::spawn(move || -> meshwork::Result<[f32; 3]> {
        let g = Node::new(1, 2).peers([a0, a1])?.connect()?;
        let mut x = [2.0f32; 3];
        g.all_reduce(&mut x, ReduceKind::Sum)?;
        g.barrier()?;
        Ok(x)
    });
    let g = Node::new(0, 2).peers([a0, a1]).unwrap().connect().unwrap();
    let mut x = [1.0f32; 3];
    g.all_reduce(&mut x, ReduceKind::Sum).unwrap();
    g.barrier().unwrap();
    assert_eq!(x, [3.0; 3]);
    assert_eq!(rank1.join().unwrap().unwrap(), [3.0; 3]);
}

#[test]
fn star_runs_every_collective_and_worker_to_worker_messages() {
    let out = run_nodes(4, Topology::Star, |g| {
        let r = g.rank();
        let mut x = vec![r as i64 + 1; 100_003];
        g.all_reduce(&mut x, ReduceOp::Sum)?;
        assert!(x.iter().all(|&v| v == 10));
        let mut b = vec![if r == 2 { 7u8 } else { 0 }; 5000];
        g.broadcast(&mut b, 2)?;
        assert!(b.iter().all(|&v| v == 7));
        let mut all = vec![0u32; 8];
        g.all_gather(&[r, r * 10], &mut all)?;
        assert_eq!(all, [0, 0, 1, 10, 2, 20, 3, 30]);
        let mut mine = [0f64; 2];
        g.reduce_scatter(&[1.0; 8], &mut mine, ReduceOp::Sum)?;
        assert_eq!(mine, [4.0; 2]);
        let mut s = [r as i32 + 1];
        g.scan(&mut s, ReduceOp::Sum)?;
        assert_eq!(s[0], (1..=r as i32 + 1).sum::<i32>());
        g.barrier()?;
        // Workers 1 and 3 talk through the coordinator.
        if r == 1 {
            g.send(&[1.5f32, 2.5], 3, 9)?;
        }
        if r == 3 {
            let mut m = [0f32; 2];
            g.recv(&mut m, 1, 9)?;
            assert_eq!(m, [1.5, 2.5]);
        }
        g.shutdown()
    });
    for o in out {
        o.unwrap();
    }
}

#[test]
fn p2p_length_mismatch_keeps_the_message() {
    let out = run_nodes(2, Topology::Mesh, |g| {
        if g.rank() == 0 {
            g.send(&[1u32, 2, 3], 1, 5)?;
        } else {
            let mut wrong = [0u32; 2];
            match g.recv(&mut wrong, 0, 5) {
                Err(Error::InvalidArgument(m)) => {
                    assert!(m.contains("12 bytes") && m.contains("8"), "{m}")
                }
                other => panic!("{other:?}"),
            }
            let mut right = [0u32; 3];
            g.recv(&mut right, 0, 5)?;
            assert_eq!(right, [1, 2, 3]);
            assert!(matches!(
                g.recv_bytes_timeout(0, 6, Duration::from_millis(50)),
                Err(Error::Timeout { .. })
            ));
        }
        g.shutdown()
    });
    for o in out {
        o.unwrap();
    }
}

fn two_nodes(n0: Node, n1: Node) -> (meshwork::Result<()>, meshwork::Result<()>) {
    let t = std::thread::spawn(move || n1.connect().map(drop));
    let a = n0.connect().map(drop);
    (a, t.join().unwrap())
}

#[test]
fn a_wrong_token_is_named_at_the_deadline_on_both_sides() {
    // Long enough for both sides to derive their keys (Argon2) and try a
    // handshake on a loaded 2-core machine: with 2 s, a CI run under the
    // whole suite once saw only a formation timeout on one side.
    let deadline = Duration::from_secs(5);
    let addrs = free_ports(2);
    let started = Instant::now();
    let (a, b) = two_nodes(
        Node::new(0, 2)
            .peers(addrs.clone())
            .unwrap()
            .cluster_token("alpha cluster token")
            .timeout(deadline),
        Node::new(1, 2)
            .peers(addrs)
            .unwrap()
            .cluster_token("beta cluster token")
            .timeout(deadline),
    );
    assert!(matches!(a, Err(Error::ClusterTokenMismatch)), "{a:?}");
    assert!(matches!(b, Err(Error::ClusterTokenMismatch)), "{b:?}");
    assert!(started.elapsed() >= deadline);
}

/// Authenticated frames on one side only: a setting the peers must share,
/// refused at once on both sides, saying which.
#[test]
fn frame_authentication_must_agree() {
    let addrs = free_ports(2);
    let node = |r: u32| {
        Node::new(r, 2)
            .peers(addrs.clone())
            .unwrap()
            .transport(meshwork::TransportKind::Tcp)
            .cluster_token("frame auth cluster token")
            .timeout(Duration::from_secs(20))
    };
    let started = Instant::now();
    let (a, b) = two_nodes(node(0), node(1).frame_authentication(false));
    for e in [a.unwrap_err(), b.unwrap_err()] {
        assert!(e.to_string().contains("frames unauthenticated"), "{e}");
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Another process on the host, without the token, claims rank 1 before
/// the real rank 1 starts: it is not admitted, and the job forms with the
/// real one.
#[test]
fn a_process_without_the_token_cannot_join() {
    let addrs = free_ports(2);
    let token = "only the job holds this token";
    let (p0, p1, p2) = (addrs.clone(), addrs.clone(), addrs);
    let rank0 = std::thread::spawn(move || {
        Node::new(0, 2)
            .peers(p0)?
            .cluster_token(token)
            .timeout(Duration::from_secs(20))
            .connect()
    });
    // The impostor listens as rank 1 first (rank 0 dials it) and fails;
    // then the real rank 1 takes the port.
    let impostor = Node::new(1, 2)
        .peers(p1)
        .unwrap()
        .timeout(Duration::from_secs(1))
        .connect()
        .map(drop);
    assert!(
        matches!(impostor, Err(Error::ClusterTokenMismatch)),
        "{impostor:?}"
    );
    let g1 = Node::new(1, 2)
        .peers(p2)
        .unwrap()
        .cluster_token(token)
        .timeout(Duration::from_secs(20))
        .connect()
        .unwrap();
    let g0 = rank0.join().unwrap().unwrap();
    let t = std::thread::spawn(move || {
        let mut x = [1u32];
        g1.all_reduce(&mut x, ReduceOp::Sum).map(|()| x)
    });
    let mut x = [2u32];
    g0.all_reduce(&mut x, ReduceOp::Sum).unwrap();
    assert_eq!((x, t.join().unwrap().unwrap()), ([3], [3]));
}

#[test]
fn a_short_token_is_refused_naming_cluster_token() {
    let addrs = free_ports(1);
    let e = Node::new(0, 1)
        .peers(addrs)
        .unwrap()
        .cluster_token("s3cret")
        .connect()
        .map(drop)
        .unwrap_err();
    assert!(matches!(e, Error::TokenTooShort { len: 6 }), "{e:?}");
    assert!(e.to_string().contains("CLUSTER_TOKEN"), "{e}");
}

#[test]
fn world_mismatch_fails_at_once() {
    world_mismatch_fails_at_once_with(None);
}

/// Holders of one token who were given different world sizes: a refusal
/// under the token, so typed and at once.
#[test]
fn world_mismatch_among_holders_fails_at_once() {
    world_mismatch_fails_at_once_with(Some("world mismatch cluster token"));
}

fn world_mismatch_fails_at_once_with(token: Option<&str>) {
    let addrs = free_ports(3);
    let started = Instant::now();
    let with = |n: Node| match token {
        Some(t) => n.cluster_token(t),
        None => n,
    };
    let (a, b) = two_nodes(
        with(Node::new(0, 3))
            .peers(addrs.clone())
            .unwrap()
            .timeout(Duration::from_secs(20)),
        with(Node::new(1, 2))
            .peers(&addrs[..2])
            .unwrap()
            .timeout(Duration::from_secs(20)),
    );
    assert!(
        matches!(a, Err(Error::WorldMismatch { ours: 3, theirs: 2 })),
        "{a:?}"
    );
    assert!(
        matches!(b, Err(Error::WorldMismatch { ours: 2, theirs: 3 })),
        "{b:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A stranger announcing another protocol version gets the version and a
/// nonce back, nothing about the job, and formation goes on as if it had
/// never come.
#[test]
fn another_protocol_version_learns_the_version_and_stops_nothing() {
    let addrs = free_ports(2);
    let a1 = addrs[1];
    let peers = addrs.clone();
    let node = std::thread::spawn(move || {
        Node::new(1, 2)
            .peers(peers)?
            .timeout(Duration::from_secs(20))
            .connect()
    });
    // A later version's hello (this one's length), and an earlier one's
    // (version 7's hello was 56 bytes): each learns the version at once.
    for (version, len) in [(999u32, 64), (7, 56)] {
        let mut s = dial_retry(a1);
        let mut hello = vec![0u8; len];
        hello[..8].copy_from_slice(b"MESHWORK");
        hello[8..12].copy_from_slice(&version.to_le_bytes());
        hello[12..16].copy_from_slice(&2u32.to_le_bytes());
        s.write_all(&hello).unwrap();
        let mut reply = Vec::new();
        s.read_to_end(&mut reply).unwrap();
        assert_eq!(reply.len(), 36, "magic, version and a nonce: {reply:?}");
        assert_eq!(&reply[..8], b"MESHWORK");
        assert_eq!(
            u32::from_le_bytes(reply[8..12].try_into().unwrap()),
            meshwork::WIRE_PROTOCOL_VERSION
        );
    }
    let g0 = Node::new(0, 2).peers(addrs).unwrap().connect().unwrap();
    let g1 = node.join().unwrap().unwrap();
    let (mut a, mut b) = ([1u32, 2], [3u32, 4]);
    let t = std::thread::spawn(move || {
        g1.all_reduce(&mut b, meshwork::ReduceOp::Sum).unwrap();
        b
    });
    g0.all_reduce(&mut a, meshwork::ReduceOp::Sum).unwrap();
    assert_eq!((a, t.join().unwrap()), ([4, 6], [4, 6]));
}

#[test]
fn a_stranger_is_ignored_and_formation_proceeds() {
    let addrs = free_ports(2);
    let a1 = addrs[1];
    let peers = addrs.clone();
    let rank1 = std::thread::spawn(move || {
        Node::new(1, 2)
            .peers(peers)?
            .timeout(Duration::from_secs(20))
            .connect()
    });
    // Garbage first: an HTTP client wandering in.
    let mut s = dial_retry(a1);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
        .unwrap();
    drop(s);
    let g0 = Node::new(0, 2).peers(addrs).unwrap().connect().unwrap();
    let g1 = rank1.join().unwrap().unwrap();
    let t = std::thread::spawn(move || g1.barrier());
    g0.barrier().unwrap();
    t.join().unwrap().unwrap();
}

#[test]
fn a_duplicate_rank_gets_rank_conflict() {
    let addrs = free_ports(3);
    let (p0, p1, p2) = (addrs.clone(), addrs.clone(), addrs.clone());
    let t2 = std::thread::spawn(move || {
        Node::new(2, 3)
            .peers(p2)?
            .timeout(Duration::from_secs(20))
            .connect()
    });
    let t1 = std::thread::spawn(move || {
        Node::new(1, 3)
            .peers(p1)?
            .timeout(Duration::from_secs(20))
            .connect()
    });
    let g0 = Node::new(0, 3)
        .peers(p0)
        .unwrap()
        .timeout(Duration::from_secs(20))
        .connect()
        .unwrap();
    let (g1, g2) = (t1.join().unwrap().unwrap(), t2.join().unwrap().unwrap());
    // A second "rank 1" with the same addresses: its port is taken, and the
    // process holding it answers as rank 1.
    let started = Instant::now();
    let dup = Node::new(1, 3)
        .peers(addrs)
        .unwrap()
        .timeout(Duration::from_secs(20))
        .connect();
    assert!(
        matches!(dup, Err(Error::RankConflict { rank: 1 })),
        "{dup:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    drop((g0, g1, g2));
}

#[test]
fn off_loopback_without_a_token_is_refused() {
    let e = Node::new(0, 2)
        .peers(["10.77.0.1:1", "127.0.0.1:2"])
        .unwrap()
        .connect();
    assert!(matches!(e, Err(Error::TokenRequired)), "{e:?}");
    // Encryption keyed by no secret would protect nothing.
    let e = Node::new(0, 2)
        .peers(["127.0.0.1:1", "127.0.0.1:2"])
        .unwrap()
        .encrypt_bulk(true)
        .connect();
    assert!(matches!(e, Err(Error::TokenRequired)), "{e:?}");
}

fn dial_retry(addr: SocketAddr) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return s;
            }
            // The node binds its port as it starts: poll (bounded by the
            // deadline), never touching the port ourselves.
            Err(_) if Instant::now() < deadline => std::thread::yield_now(),
            Err(e) => panic!("cannot reach {addr}: {e}"),
        }
    }
}

/// Play rank 0 of a world of 2 by hand through the (unauthenticated) TCP
/// handshake, then return the socket for sending raw frames at rank 1
/// (a rank of the TCP transport: the hello's settings word holds only
/// the default receive bounds).
fn impostor_rank0(a1: SocketAddr) -> TcpStream {
    use hmac::{Hmac, Mac};
    use sha2::{Digest, Sha256};
    let mut s = dial_retry(a1);
    let mut hello = [0u8; 64];
    hello[..8].copy_from_slice(b"MESHWORK");
    hello[8..12].copy_from_slice(&meshwork::WIRE_PROTOCOL_VERSION.to_le_bytes());
    hello[12..16].copy_from_slice(&2u32.to_le_bytes());
    let settings = meshwork_transport::hello_bounds_word(
        meshwork::DEFAULT_PEER_BUDGET,
        meshwork_transport::LANE_DEPTH,
    );
    hello[24..32].copy_from_slice(&settings.to_le_bytes());
    s.write_all(&hello).unwrap();
    let mut challenge = [0u8; 36];
    s.read_exact(&mut challenge).unwrap();
    let key: [u8; 32] = Sha256::digest(b"meshwork unauthenticated\0").into();
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
    mac.update(b"dial");
    mac.update(&hello);
    mac.update(&challenge);
    s.write_all(&mac.finalize().into_bytes()).unwrap();
    let mut reply = [0u8; 100];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(reply[64..68], [0; 4], "admitted");
    // The same-host negotiation, spoken with tags that cannot hold (no
    // session keys here): the rank keeps this link on TCP.
    let rounds = [0u8; meshwork_transport::SHM_NEGOTIATION_LEN];
    s.write_all(&rounds).unwrap();
    let mut theirs = [0u8; meshwork_transport::SHM_NEGOTIATION_LEN];
    s.read_exact(&mut theirs).unwrap();
    s
}

fn frame(ftype: u8, kind: u8, tag: u64, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 40];
    h[0] = ftype;
    h[1] = kind;
    h[8..12].copy_from_slice(&1u32.to_le_bytes()); // to rank 1
    h[24..32].copy_from_slice(&tag.to_le_bytes());
    h[32..40].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    h.extend_from_slice(payload);
    h
}

/// Garbage from an authenticated peer never panics a rank or yields
/// garbage results: junk where a collective's descriptor belongs is
/// `CollectiveMismatch`; an unknown frame type, a frame over the size cap
/// or a wrong destination closes the link (`PeerDisconnected`).
#[test]
fn garbage_from_a_peer_is_a_typed_error() {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut junk = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (frame(1, 0, 0, &junk(30)), "CollectiveMismatch"),
        (frame(1, 0, 0, &junk(7)), "CollectiveMismatch"),
        (frame(9, 0, 0, &[]), "PeerDisconnected"),
        (frame(1, 77, 0, &[]), "PeerDisconnected"),
        (
            {
                let mut f = frame(1, 0, 0, &[]);
                f[32..40].copy_from_slice(&(1u64 << 62).to_le_bytes()); // over the cap
                f
            },
            "PeerDisconnected",
        ),
        (
            {
                let mut f = frame(1, 0, 0, &junk(8));
                f[8..12].copy_from_slice(&0u32.to_le_bytes()); // addressed back to rank 0
                f
            },
            "PeerDisconnected",
        ),
    ];
    for (bytes, expect) in cases {
        let addrs = free_ports(2);
        let a1 = addrs[1];
        let node = std::thread::spawn(move || -> meshwork::Result<()> {
            let g = Node::new(1, 2)
                .transport(meshwork::TransportKind::Tcp)
                .peers(addrs)?
                .timeout(Duration::from_secs(5))
                .connect()?;
            let mut buf = [0u32; 4];
            g.broadcast(&mut buf, 0)
        });
        let mut s = impostor_rank0(a1);
        s.write_all(&bytes).unwrap();
        let got = node.join().unwrap();
        let name = format!("{got:?}");
        assert!(
            name.starts_with(&format!("Err({expect}")),
            "{expect} expected, got {name}"
        );
        drop(s);
    }
}

#[test]
fn lane_depth_and_peer_budget_are_configurable() {
    let addrs = free_ports(2);
    let (a0, a1) = (addrs.clone(), addrs);
    let receiver = std::thread::spawn(move || -> meshwork::Result<()> {
        let g = Node::new(1, 2)
            .peers(a1)?
            .lane_depth(8)
            .peer_budget_bytes(1 << 20)
            .timeout(Duration::from_secs(20))
            .connect()?;
        // Wait (bounded) until the sender has filled its 8 slots.
        let deadline = Instant::now() + Duration::from_secs(20);
        while g.stats()[0].received_messages < 8 {
            assert!(Instant::now() < deadline);
            std::thread::yield_now();
        }
        // The message on tag 2 cannot come while tag 1 is full.
        assert!(matches!(
            g.recv_bytes_timeout(0, 2, Duration::from_millis(300)),
            Err(Error::Timeout { .. })
        ));
        assert!(g.stats()[0].received_messages <= 8, "{:?}", g.stats()[0]);
        for i in 0..20u8 {
            assert_eq!(g.recv_bytes(0, 1)?, [i]);
        }
        assert_eq!(g.recv_bytes(0, 2)?, b"late");
        g.barrier()
    });
    let g = Node::new(0, 2)
        .peers(a0)
        .unwrap()
        .lane_depth(8)
        .peer_budget_bytes(1 << 20)
        .timeout(Duration::from_secs(20))
        .connect()
        .unwrap();
    for i in 0..20u8 {
        g.send_bytes(&[i], 1, 1).unwrap();
    }
    g.send_bytes(b"late", 1, 2).unwrap();
    g.barrier().unwrap();
    receiver.join().unwrap().unwrap();
}

/// Every rank holds its senders to its own lane depth and byte budget,
/// so ranks whose settings differ are refused at formation, naming them,
/// instead of one closing the other's link when it first sends past them.
#[test]
fn ranks_with_other_receive_bounds_are_refused_at_formation() {
    for (depth, budget) in [(8, meshwork::DEFAULT_PEER_BUDGET), (256, 1 << 20)] {
        let addrs = free_ports(2);
        let (a0, a1) = (addrs.clone(), addrs);
        let other = std::thread::spawn(move || {
            Node::new(1, 2)
                .peers(a1)
                .and_then(|n| n.timeout(Duration::from_secs(5)).connect())
                .map(|_| ())
        });
        let got = Node::new(0, 2)
            .peers(a0)
            .unwrap()
            .lane_depth(depth)
            .peer_budget_bytes(budget)
            .timeout(Duration::from_secs(5))
            .connect()
            .map(|_| ());
        let theirs = other.join().unwrap();
        for e in [got, theirs] {
            let e = e.expect_err("settings differ").to_string();
            assert!(
                e.contains("PEER_BUDGET_BYTES, LANE_DEPTH"),
                "depth {depth}, budget {budget}: {e}"
            );
        }
    }
}

/// A message whose bytes pause midway — longer than a receiver waiting
/// for it reads them straight into its buffer — still arrives whole, and
/// so does the message after it on the same link.
#[test]
fn a_message_that_pauses_midway_arrives_whole() {
    let addrs = free_ports(2);
    let a1 = addrs[1];
    let node = std::thread::spawn(move || -> meshwork::Result<(Vec<u8>, Vec<u8>)> {
        let g = Node::new(1, 2)
            .transport(meshwork::TransportKind::Tcp)
            .peers(addrs)?
            .timeout(Duration::from_secs(10))
            .connect()?;
        let mut big = vec![0u8; 1 << 20];
        g.recv(&mut big, 0, 7)?;
        let mut next = [0u8; 4];
        g.recv(&mut next, 0, 7)?;
        Ok((big, next.to_vec()))
    });
    let mut s = impostor_rank0(a1);
    let payload: Vec<u8> = (0..1usize << 20).map(|i| (i * 7 + 3) as u8).collect();
    let f = frame(1, 1, 7, &payload);
    let half = 40 + payload.len() / 2;
    s.write_all(&f[..half]).unwrap();
    // The pause is what is tested (it outlasts a direct read's patience),
    // not a synchronisation: the result is the same however it falls.
    #[allow(clippy::disallowed_methods, reason = "the sender's pacing")]
    std::thread::sleep(Duration::from_millis(50));
    s.write_all(&f[half..]).unwrap();
    s.write_all(&frame(1, 1, 7, b"next")).unwrap();
    let (big, next) = node.join().unwrap().unwrap();
    assert!(big == payload, "the paused message arrived altered");
    assert_eq!(next, b"next");
    drop(s);
}

/// The matched lane (the MPI ABI's): every message's word travels in its
/// frame header and comes back as the message's first bytes, whichever
/// way it is received — read in place (the word into its own buffer, or
/// run on into the body), queued behind another lane's message, from any
/// rank — over shared memory (through the ring, and a large message by
/// single copy), TCP plain, authenticated and encrypted, QUIC with its
/// sidecar, and a star's relay. A message shorter than its word is
/// refused; tag `u64::MAX` stays a plain tag.
#[test]
fn the_matched_lane_gives_every_message_its_word_back_on_every_link() {
    use meshwork::{LinkKind, Node, TransportKind};
    let token = |n: Node| {
        n.shared_memory(false)
            .cluster_token("matched lane cluster token")
    };
    type Tweak = Box<dyn Fn(Node) -> Node + Sync>;
    let configs: Vec<(&str, Topology, Tweak)> = vec![
        ("shared memory", Topology::Mesh, Box::new(|n| n)),
        (
            "shared memory, single copy",
            Topology::Mesh,
            Box::new(|n: Node| n.shm_single_copy(64 << 10)),
        ),
        (
            "tcp",
            Topology::Mesh,
            Box::new(|n: Node| n.shared_memory(false).transport(TransportKind::Tcp)),
        ),
        (
            "tcp, authenticated",
            Topology::Mesh,
            Box::new(move |n| token(n).transport(TransportKind::Tcp)),
        ),
        (
            "tcp, encrypted",
            Topology::Mesh,
            Box::new(move |n| token(n).transport(TransportKind::Tcp).encrypt_bulk(true)),
        ),
        (
            "quic and its sidecar",
            Topology::Mesh,
            Box::new(|n: Node| n.shared_memory(false).transport(TransportKind::Quic)),
        ),
        (
            "a star's relay",
            Topology::Star,
            Box::new(|n: Node| n.shared_memory(false).transport(TransportKind::Tcp)),
        ),
    ];
    // (word, payload length): empty, one line, past it, over the
    // sidecar's and single copy's thresholds.
    let sizes = [0usize, 1, 8, 9, 4096, 1 << 20];
    let word = |i: usize| (0x5157_4f52_4400_0000u64 | i as u64).to_le_bytes();
    let body = |i: usize, n: usize| -> Vec<u8> { (0..n).map(|b| (b * 7 + i) as u8).collect() };
    for (name, topology, tweak) in &configs {
        let out = crate::support::run_nodes_with(3, *topology, tweak, |g| {
            let (from, to) = (1, 2);
            if name.starts_with("shared memory") && g.rank() != 0 {
                let peer = from + to - g.rank();
                assert_eq!(g.links()[peer as usize], LinkKind::SharedMemory);
            }
            if g.rank() == from {
                // Sent twice over: once received in place, once queued.
                for round in 0..2 {
                    for (i, &n) in sizes.iter().enumerate() {
                        let data = body(i + round, n);
                        g.matched().send_parts(&[&word(i + round), &data], to)?;
                    }
                    g.send(&[round as u8], to, 1)?;
                }
                if name.ends_with("single copy") {
                    // Both 1 MiB messages, the one read in place and the
                    // one queued, went straight from this process's memory.
                    assert!(g.stats()[to as usize].single_copy_messages >= 2, "{name}");
                }
                // Every tag stays the user's: u64::MAX is no matched lane.
                g.send(&[7u8; 3], to, u64::MAX)?;
                // A word split across parts, and one too short.
                g.matched()
                    .send_parts(&[&[1, 2, 3], &[4, 5, 6, 7, 8, 9]], to)?;
                match g.matched().send_parts(&[b"short"], to) {
                    Err(Error::InvalidArgument(m)) => assert!(m.contains("word"), "{m}"),
                    other => panic!("{name}: a 5-byte matched message gave {other:?}"),
                }
            } else if g.rank() == to {
                let mut go = [0u8];
                for (i, &n) in sizes.iter().enumerate() {
                    // In place, the word into a buffer of its own, or
                    // (odd sizes) run on from a 3-byte head into the body.
                    let split = if n % 2 == 1 { 3 } else { 8 };
                    let mut whole = vec![0u8; 8 + n];
                    let (head, rest) = whole.split_at_mut(split);
                    let got =
                        g.matched()
                            .recv_message_into(from, Duration::from_secs(10), head, rest)?;
                    assert_eq!(got, Some(true), "{name}: size {n}");
                    assert_eq!(whole[..8], word(i), "{name}: size {n} in place");
                    assert!(whole[8..] == body(i, n), "{name}: size {n} in place");
                }
                g.recv(&mut go, from, 1)?;
                // Queued (they came before round 1's go), then taken
                // whole or from any rank.
                g.recv(&mut go, from, 1)?;
                for (i, &n) in sizes.iter().enumerate() {
                    let msg = if i % 2 == 0 {
                        g.matched().recv_message(from, Duration::from_secs(10))?
                    } else {
                        g.matched()
                            .recv_any_message(Duration::from_secs(10))?
                            .map(|(src, m)| {
                                assert_eq!(src, from);
                                m
                            })
                    };
                    let msg = msg.unwrap_or_else(|| panic!("{name}: size {n} queued never came"));
                    assert_eq!(msg.len(), 8 + n, "{name}: size {n} queued");
                    assert_eq!(msg.as_ref()[..8], word(i + 1), "{name}: size {n} queued");
                    assert!(
                        msg.as_ref()[8..] == body(i + 1, n),
                        "{name}: size {n} queued"
                    );
                }
                let mut plain = [0u8; 3];
                g.recv(&mut plain, from, u64::MAX)?;
                assert_eq!(plain, [7; 3], "{name}");
                let msg = g.matched().recv_message(from, Duration::from_secs(10))?;
                assert_eq!(msg.unwrap().as_ref(), [1, 2, 3, 4, 5, 6, 7, 8, 9], "{name}");
            }
            g.shutdown()
        });
        for o in out {
            o.unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}
