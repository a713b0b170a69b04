//! What the transport tests share: free ports, a lane, and a check that
//! every pair of ranks talks.

#![allow(dead_code, reason = "each test binary uses its own part")]

use meshwork_transport::{LaneKey, LaneKind, Transport};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::time::Duration;

pub const T: Duration = Duration::from_secs(10);

/// `n` loopback addresses whose port is free right now for both TCP and
/// UDP (QUIC and its TCP sidecar share the number).
///
/// The ranks bind these ports later (the addresses must be known to every
/// rank before any of them binds), so another socket may take one in
/// between. Three things keep that window narrow:
/// - the ports come from 20000..29000, below Linux's ephemeral range
///   (32768–60999 by default), which the kernel draws on for `bind(:0)`
///   and for the source port of every outgoing connection, the links'
///   own dials among them; so nothing the kernel assigns lands on them
///   (and the defaults 29400/29500/29600 lie above);
/// - nextest runs every test in a process of its own, many at once: each
///   process starts at its own place in that range (spread by pid) and
///   walks on from call to call, so concurrent tests try different ports,
///   and a port an earlier test of this process just released is not
///   offered again soon;
/// - every candidate is bound for TCP and for UDP and held until all `n`
///   are chosen, so a port someone holds is skipped and none repeats.
///
/// (`tests/it/support.rs` `free_ports` is the same for the facade's tests.)
pub fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let mut held = Vec::new();
    let mut tried = 0;
    while held.len() < n {
        tried += 1;
        assert!(tried <= FREE_SPAN, "no {n} ports free in {FREE_LOW}..");
        let addr = SocketAddr::from(([127, 0, 0, 1], next_free_candidate()));
        if let Ok(t) = TcpListener::bind(addr) {
            if let Ok(u) = UdpSocket::bind(addr) {
                held.push((t, u, addr));
            }
        }
    }
    held.into_iter().map(|(_, _, a)| a).collect()
}

const FREE_LOW: u16 = 20_000;
const FREE_SPAN: u16 = 9_000;
/// The next candidate is `FREE_LOW + FREE_CURSOR % FREE_SPAN`; `u32::MAX`
/// until the first call places it by pid.
static FREE_CURSOR: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);

fn next_free_candidate() -> u16 {
    use std::sync::atomic::Ordering::Relaxed;
    // Slots of 64 ports, one per process (modulo the number of slots).
    let slots = u32::from(FREE_SPAN / 64);
    let start = std::process::id() % slots * 64;
    let _ = FREE_CURSOR.compare_exchange(u32::MAX, start, Relaxed, Relaxed);
    let i = FREE_CURSOR.fetch_add(1, Relaxed) % u32::from(FREE_SPAN);
    FREE_LOW + i as u16
}

/// A `world`-rank group on free loopback ports, formed by `connect(rank,
/// addresses)` in one thread per rank; in rank order.
pub fn form_with<T: Send, E: std::fmt::Debug + Send>(
    world: u32,
    connect: impl Fn(u32, Vec<SocketAddr>) -> Result<T, E> + Sync,
) -> Vec<T> {
    let addrs = free_addrs(world as usize);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|r| {
                let (connect, addrs) = (&connect, addrs.clone());
                s.spawn(move || connect(r, addrs))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    })
}

pub fn key(tag: u64) -> LaneKey {
    LaneKey {
        comm: 0,
        kind: LaneKind::PointToPoint,
        tag,
    }
}

/// Every rank sends every rank (itself too) a small and a 3 MiB message on
/// two lanes; each arrives intact.
pub fn every_pair_talks_on<T: Transport>(ts: Vec<T>) {
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
            let got = ts[b as usize].recv(a, key(7), self::T, None).unwrap();
            assert_eq!(got.as_ref(), format!("{a}->{b}").as_bytes());
            let big = ts[b as usize].recv(a, key(8), self::T, None).unwrap();
            assert_eq!(big.len(), 3 << 20);
            assert!(big.as_ref().iter().all(|&x| x == a as u8));
        }
    }
}

/// Four threads of rank 1 send `sizes` to rank 2 at once, each on its own
/// lane: every lane's messages arrive whole and in order.
pub fn lanes_stay_intact<T: Transport + Sync>(ts: &[T], sizes: &[usize], ctx: &str) {
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
            let m = ts[2].recv(1, key(100 + lane), self::T, None).unwrap();
            let fill = (lane * 16 + i as u64) as u8;
            assert_eq!(m.len(), n, "{ctx} lane {lane} message {i}");
            assert!(
                m.as_ref().iter().all(|&b| b == fill),
                "{ctx} lane {lane} message {i}"
            );
        }
    }
}

/// Star workers send to the next worker the moment their own formation
/// ends, while the coordinator may still be starting its links: every
/// message is relayed, none dropped. Ten rounds of `world` ranks.
pub fn workers_send_at_once<T: Transport + Send, E: std::fmt::Debug + Send>(
    world: u32,
    connect: impl Fn(u32, Vec<SocketAddr>) -> Result<T, E> + Sync,
) {
    let workers = world - 1;
    for round in 0..10 {
        let ts = form_with(world, |r, addrs| {
            let t = connect(r, addrs)?;
            if r != 0 {
                t.send(r % workers + 1, key(9), &[&[r as u8]]).unwrap();
            }
            Ok::<T, E>(t)
        });
        for r in 1..world {
            let from = if r == 1 { workers } else { r - 1 };
            let got = ts[r as usize].recv(from, key(9), Duration::from_secs(5), None);
            assert_eq!(
                got.map(|m| m.as_ref().to_vec()),
                Ok(vec![from as u8]),
                "round {round}: rank {r} from {from}"
            );
        }
    }
}
