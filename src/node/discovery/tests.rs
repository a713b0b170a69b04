//! Discovery against replays, stale and misdirected replies, strangers
//! on the port and rogue hosts, and ranks sharing one host.

use super::*;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const TOKEN: &str = "discovery test token, 16+ bytes";
/// A fixed clock for the pure decoder.
const T: u64 = 1_700_000_000_000;

fn job(world: u32) -> Job {
    Job::new(TOKEN, world, 29_600, 29_500)
}

fn announce(rank: u32, addr: &str, sent_ms: u64, nonce: [u8; 16]) -> Datagram {
    Datagram {
        kind: *ANNOUNCE,
        rank,
        addr: addr.parse().unwrap(),
        sent_ms,
        nonce,
    }
}

fn lo() -> Iface {
    Iface {
        name: "lo".into(),
        addr: Ipv4Addr::LOCALHOST,
        broadcast: Ipv4Addr::new(127, 255, 255, 255),
    }
}

/// A free UDP port held by a discovery socket (ranks of this user may
/// share it), so that no other test takes it meanwhile.
fn shared_port() -> (u16, UdpSocket) {
    let s = bind_shared(0, 0).unwrap();
    (s.local_addr().unwrap().port(), s)
}

#[test]
fn a_datagram_is_fresh_for_30_seconds_either_way_and_then_refused() {
    let j = job(4);
    let d = announce(2, "10.0.0.7:29502", T, [0; 16]);
    let bytes = j.encode(&d);
    for now in [T, T - FRESH_MS, T + FRESH_MS] {
        assert_eq!(j.decode(&bytes, now), Some(d), "at {now}");
    }
    // Recorded a minute ago: refused, as is one from the future.
    assert_eq!(j.decode(&bytes, T + 60_000), None);
    assert_eq!(j.decode(&bytes, T + FRESH_MS + 1), None);
    assert_eq!(j.decode(&bytes, T - FRESH_MS - 1), None);
    // The stamp is under the MAC: moving it back into the window breaks it.
    let mut moved = bytes;
    moved[32..40].copy_from_slice(&(T + 60_000).to_le_bytes());
    assert_eq!(j.decode(&moved, T + 60_000), None);
}

#[test]
fn the_job_id_and_key_come_from_the_token_world_and_ports() {
    let a = job(4);
    assert_eq!(a.id(), job(4).id());
    let others = [
        Job::new("another token, 16+ bytes long", 4, 29_600, 29_500),
        Job::new(TOKEN, 5, 29_600, 29_500),
        Job::new(TOKEN, 4, 29_601, 29_500),
        Job::new(TOKEN, 4, 29_600, 29_501),
    ];
    let bytes = a.encode(&announce(1, "10.0.0.1:29501", T, [0; 16]));
    for (i, o) in others.iter().enumerate() {
        assert_ne!(o.id(), a.id(), "job {i}");
        assert_eq!(o.decode(&bytes, T), None, "job {i}");
    }
}

/// A rank's socket bound before anything is sent, and the job's
/// broadcast address on loopback.
fn lo_socket(port: u16) -> UdpSocket {
    bind_shared(port, 0).unwrap()
}

/// An announcement recorded in an earlier run (a minute old, rank 1 at
/// another host) waits in rank 0's socket before anyone announces: rank
/// 0 refuses it and learns rank 1's address from rank 1 itself. Were the
/// stamp not checked, rank 0 would take the stale address at once and
/// finish with it.
#[test]
fn a_replayed_announcement_from_an_earlier_run_does_not_redirect_a_rank() {
    let j = job(2);
    let (port, _hold) = shared_port();
    let to = SocketAddrV4::new(lo().broadcast, port);
    let (s0, s1) = (lo_socket(port), lo_socket(port));
    let stale = j.encode(&announce(1, "127.0.0.9:1", unix_ms() - 60_000, [0; 16]));
    let replayer = UdpSocket::bind("127.0.0.1:0").unwrap();
    replayer.set_broadcast(true).unwrap();
    for _ in 0..3 {
        replayer.send_to(&stale, to).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let me0 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 41_000);
    let me1 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 41_001);
    let want = vec![SocketAddr::V4(me0), SocketAddr::V4(me1)];
    let (j0, j1) = (j.clone(), j.clone());
    let r0 = std::thread::spawn(move || gather(&j0, &s0, 0, me0, to, deadline));
    let r1 = std::thread::spawn(move || gather(&j1, &s1, 1, me1, to, deadline));
    assert_eq!(r0.join().unwrap().unwrap(), want);
    assert_eq!(r1.join().unwrap().unwrap(), want);
}

/// Within the window, a replayed announcement older than what the rank
/// itself said does not displace it (newest stamp wins, not last heard).
/// Rank 0 of three hears rank 1, then a replay of rank 1 ten seconds ago
/// elsewhere, then rank 2 (so it is done after reading the replay).
#[test]
fn an_older_announcement_does_not_displace_a_newer_one() {
    let j = job(3);
    let (port, _hold) = shared_port();
    let to = SocketAddrV4::new(lo().broadcast, port);
    let s0 = lo_socket(port);
    let now = unix_ms();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    sender.set_broadcast(true).unwrap();
    let a1 = j.encode(&announce(1, "127.0.0.1:41001", now, [0; 16]));
    let replay = j.encode(&announce(1, "127.0.0.9:1", now - 10_000, [0; 16]));
    let a2 = j.encode(&announce(2, "127.0.0.1:41002", now, [0; 16]));
    for d in [&a1, &replay, &a2] {
        sender.send_to(d, to).unwrap();
    }
    let me0 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 41_000);
    let got = gather(&j, &s0, 0, me0, to, Instant::now() + Duration::from_secs(5)).unwrap();
    assert_eq!(
        got,
        ["127.0.0.1:41000", "127.0.0.1:41001", "127.0.0.1:41002"]
            .map(|a| a.parse::<SocketAddr>().unwrap())
    );
}

/// A fake coordinator: answers every authentic query with an authentic
/// announcement of `data`, echoing `nonce(query's nonce)`, until `stop`.
fn fake_coordinator(
    j: Job,
    sock: UdpSocket,
    data: SocketAddrV4,
    nonce: fn([u8; 16]) -> [u8; 16],
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        while !stop.load(Ordering::Acquire) {
            let Ok((n, from)) = sock.recv_from(&mut buf) else {
                continue;
            };
            if let Some(q) = j.decode(&buf[..n], unix_ms()) {
                let _ = sock.send_to(&j.announcement(0, data, nonce(q.nonce)), from);
            }
        }
    })
}

/// A reply that is authentic and fresh but echoes another nonce (one
/// recorded for another worker's query) is ignored: the worker times
/// out. The same host echoing the nonce is taken.
#[test]
fn a_query_reply_with_another_nonce_is_ignored() {
    let j = job(3);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(PERIOD)).unwrap();
    let port = sock.local_addr().unwrap().port();
    let data = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 41_500);
    let stop = Arc::new(AtomicBool::new(false));
    let other = |n: [u8; 16]| n.map(|b| b ^ 0x5A);
    let fake = fake_coordinator(
        j.clone(),
        sock.try_clone().unwrap(),
        data,
        other,
        Arc::clone(&stop),
    );
    let deadline = Instant::now() + Duration::from_millis(400);
    let got = query(&j, 1, "127.0.0.1", port, deadline);
    stop.store(true, Ordering::Release);
    fake.join().unwrap();
    assert!(
        matches!(got, Err(Error::FormationTimeout { ref missing }) if missing == &[0]),
        "{got:?}"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let fake = fake_coordinator(j.clone(), sock, data, |n| n, Arc::clone(&stop));
    let deadline = Instant::now() + Duration::from_secs(5);
    let got = query(&j, 1, "127.0.0.1", port, deadline);
    stop.store(true, Ordering::Release);
    fake.join().unwrap();
    assert_eq!(got.unwrap(), SocketAddr::V4(data));
}

/// The coordinator answers a worker's query (through its own bound
/// socket), echoing the worker's nonce.
#[test]
fn a_worker_finds_the_coordinator_by_query() {
    let j = job(2);
    let (port, hold) = shared_port();
    let data = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 41_600);
    let until = Instant::now() + Duration::from_secs(1);
    let served = serve_queries(j.clone(), hold, data, until, ());
    let got = query(&j, 1, "127.0.0.1", port, until);
    served.join().unwrap();
    assert_eq!(got.unwrap(), SocketAddr::V4(data));
}

/// mDNS's part without mDNS: the first host found is a rogue that
/// answers with a recorded reply (another nonce); the worker keeps
/// looking and takes the coordinator found later. A search that stopped
/// at the first host found would time out.
#[test]
fn a_star_search_passes_over_a_rogue_host_to_the_coordinator() {
    let j = job(2);
    let (port, hold) = shared_port();
    let rogue_ip = Ipv4Addr::new(127, 0, 0, 2);
    // Same user, so it may share the port; its address is more specific
    // than the coordinator's 0.0.0.0, so it takes what is sent to it.
    let rogue = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    rogue.set_reuse_port(true).unwrap();
    rogue
        .bind(&SocketAddr::from((rogue_ip, port)).into())
        .unwrap();
    let rogue: UdpSocket = rogue.into();
    rogue.set_read_timeout(Some(PERIOD)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let bogus = SocketAddrV4::new(rogue_ip, 9);
    let fake = fake_coordinator(
        j.clone(),
        rogue,
        bogus,
        |n| n.map(|b| b ^ 0xA5),
        Arc::clone(&stop),
    );
    let data = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 41_700);
    let deadline = Instant::now() + Duration::from_secs(3);
    let served = serve_queries(j.clone(), hold, data, deadline, ());
    let mut calls = 0;
    let found = ask_each(
        &j,
        1,
        port,
        || {
            calls += 1;
            match calls {
                1 => vec![rogue_ip],
                // Found a few periods later (the rogue was asked by then).
                4 => vec![rogue_ip, Ipv4Addr::new(127, 0, 0, 3)],
                _ => vec![],
            }
        },
        deadline,
    );
    stop.store(true, Ordering::Release);
    fake.join().unwrap();
    served.join().unwrap();
    assert_eq!(found.unwrap(), data);
    assert!(calls >= 4, "{calls}");
}

/// Ranks of one user on one host share the discovery port and each hears
/// every broadcast (three ranks form a mesh on loopback); a socket
/// without `SO_REUSEPORT` — what another user's program gets, since the
/// kernel admits only the same user to the group — cannot bind it, on any
/// address, even with `SO_REUSEADDR`.
#[test]
fn ranks_share_the_discovery_port_and_strangers_cannot() {
    let (port, hold) = shared_port();
    for ip in [Ipv4Addr::UNSPECIFIED, Ipv4Addr::LOCALHOST] {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        s.set_reuse_address(true).unwrap();
        let e = s
            .bind(&SocketAddr::from((IpAddr::V4(ip), port)).into())
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{ip}");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let j = job(3);
    let ranks: Vec<_> = (0..3)
        .map(|r| {
            let j = j.clone();
            std::thread::spawn(move || broadcast(&j, r, port, 41_800, deadline, Some(&lo())))
        })
        .collect();
    let want: Vec<SocketAddr> = (0..3)
        .map(|r| SocketAddr::from((Ipv4Addr::LOCALHOST, 41_800 + r)))
        .collect();
    for (r, h) in ranks.into_iter().enumerate() {
        assert_eq!(h.join().unwrap().unwrap(), want, "rank {r}");
    }
    drop(hold);
}
