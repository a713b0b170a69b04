//! A fleet (`Spec::fleet`): a TCP star whose workers come and go. A
//! worker's link cut under it (a proxy between it and the coordinator
//! plays the NAT whose mapping went: its next connection comes from a
//! new port) is dialled again and replaces the old; a worker that closed
//! comes back as a new transport with its rank; a worker whose
//! coordinator is away keeps dialling it, then gives up at its deadline.

mod common;

use common::{free_addrs, key, T};
use meshwork_transport::{connect, LinkTransport, Shape, Spec, Transport, TransportError};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN: &str = "fleet test token";

/// Rank `rank` of a fleet of `world` whose coordinator it reaches at
/// `coordinator`, listening (rank 0) at `addrs[0]`.
fn member(
    rank: u32,
    world: u32,
    addrs: &[SocketAddr],
    coordinator: SocketAddr,
    away: Duration,
) -> LinkTransport {
    let mut peers = addrs.to_vec();
    peers[0] = if rank == 0 { addrs[0] } else { coordinator };
    let mut spec = Spec::tcp(rank, world, peers);
    spec.shape = Shape::Star;
    spec.token = Some(TOKEN.into());
    spec.timeout = T;
    spec.fleet = Some(away);
    connect(&spec).unwrap()
}

/// A TCP relay to `upstream` whose connections can be cut, and which can
/// turn callers away (the coordinator's host unreachable).
struct Proxy {
    addr: SocketAddr,
    pairs: Arc<Mutex<Vec<(TcpStream, TcpStream)>>>,
    refusing: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    fn new(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let pairs: Arc<Mutex<Vec<(TcpStream, TcpStream)>>> = Arc::default();
        let (refusing, refused, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (p, r, n, s) = (
            Arc::clone(&pairs),
            Arc::clone(&refusing),
            Arc::clone(&refused),
            Arc::clone(&stop),
        );
        let thread = std::thread::spawn(move || {
            for down in listener.incoming() {
                if s.load(Ordering::Acquire) {
                    return;
                }
                let Ok(down) = down else { continue };
                if r.load(Ordering::Acquire) {
                    n.fetch_add(1, Ordering::AcqRel);
                    let _ = down.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(up) = TcpStream::connect_timeout(&upstream, T) else {
                    continue;
                };
                for (from, to) in [(&down, &up), (&up, &down)] {
                    let (mut from, mut to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                        let _ = from.shutdown(Shutdown::Both);
                    });
                }
                p.lock().unwrap().push((down, up));
            }
        });
        Proxy {
            addr,
            pairs,
            refusing,
            refused,
            stop,
            thread: Some(thread),
        }
    }

    /// Cut every connection through it.
    fn cut(&self) {
        for (a, b) in self.pairs.lock().unwrap().drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = TcpStream::connect_timeout(&self.addr, T);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.cut();
    }
}

/// Wait (at most the deadline) until `done`.
fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + T;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {T:?}");
        std::thread::yield_now();
    }
}

/// Ranks 0, 1 (through `proxy`) and 2 of a fleet.
fn fleet(away: Duration) -> (Vec<LinkTransport>, Proxy, Vec<SocketAddr>) {
    let addrs = free_addrs(3);
    let proxy = Proxy::new(addrs[0]);
    let via = [addrs[0], proxy.addr, addrs[0]];
    let ts = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3u32)
            .map(|r| {
                let addrs = addrs.clone();
                s.spawn(move || member(r, 3, &addrs, via[r as usize], away))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (ts, proxy, addrs)
}

fn exchange(ts: &[LinkTransport], worker: usize, tag: u64) {
    let msg = format!("{worker} says {tag}");
    ts[worker].send(0, key(tag), &[msg.as_bytes()]).unwrap();
    let got = ts[0].recv(worker as u32, key(tag), T, None).unwrap();
    assert_eq!(got.as_ref(), msg.as_bytes());
    ts[0].send(worker as u32, key(tag), &[b"back"]).unwrap();
    let got = ts[worker].recv(0, key(tag), T, None).unwrap();
    assert_eq!(got.as_ref(), b"back");
}

#[test]
fn a_worker_whose_link_was_cut_dials_again_and_its_new_link_replaces_the_old() {
    let (ts, proxy, _) = fleet(T);
    exchange(&ts, 1, 1);
    // Something the coordinator sent and the worker never took is
    // dropped with the old link; credit owed on it is not waited for.
    ts[0].send(1, key(2), &[b"stale"]).unwrap();
    proxy.cut();
    until("the worker is back", || {
        ts[0].incarnation(1) == 1 && ts[1].incarnation(0) == 1
    });
    exchange(&ts, 1, 3);
    assert!(
        ts[1].recv(0, key(2), Duration::ZERO, None).is_err(),
        "what the old link delivered and nobody took is dropped"
    );
    // Its neighbour heard nothing of it, and talks on.
    assert!(ts[2].failed().is_empty());
    exchange(&ts, 2, 4);
    // Cut again: each return is one more incarnation.
    proxy.cut();
    until("the worker is back again", || {
        ts[0].incarnation(1) == 2 && ts[1].incarnation(0) == 2
    });
    exchange(&ts, 1, 5);
}

#[test]
fn a_worker_that_closed_comes_back_as_a_new_transport_with_its_rank() {
    let (mut ts, proxy, addrs) = fleet(T);
    exchange(&ts, 2, 1);
    drop(ts.pop());
    until("the coordinator saw it leave", || {
        matches!(
            ts[0].recv(2, key(9), Duration::ZERO, None),
            Err(TransportError::PeerDisconnected { rank: 2 })
        )
    });
    // Away, not failed: the coordinator lives on with worker 1.
    assert!(ts[0].failed().is_empty(), "{:?}", ts[0].failed());
    exchange(&ts, 1, 2);
    ts.push(member(2, 3, &addrs, addrs[0], T));
    until("the new worker 2 is in", || ts[0].incarnation(2) == 1);
    exchange(&ts, 2, 3);
    drop(proxy);
}

#[test]
fn a_worker_whose_coordinator_is_away_keeps_dialling_until_it_is_back() {
    let (ts, proxy, _) = fleet(T);
    exchange(&ts, 1, 1);
    proxy.refusing.store(true, Ordering::Release);
    proxy.cut();
    // The worker waits for the coordinator rather than failing.
    until("the worker dialled twice in vain", || {
        proxy.refused.load(Ordering::Acquire) >= 2
    });
    assert!(ts[1].failed().is_empty(), "{:?}", ts[1].failed());
    proxy.refusing.store(false, Ordering::Release);
    until("the worker is back", || {
        ts[0].incarnation(1) == 1 && ts[1].incarnation(0) == 1
    });
    exchange(&ts, 1, 2);
}

#[test]
fn a_worker_gives_up_on_its_coordinator_at_its_own_deadline() {
    let away = Duration::from_millis(700);
    let (ts, proxy, _) = fleet(away);
    exchange(&ts, 1, 1);
    proxy.refusing.store(true, Ordering::Release);
    proxy.cut();
    let cut = Instant::now();
    let got = ts[1].recv(0, key(2), T, None);
    assert!(
        matches!(got, Err(TransportError::PeerDisconnected { rank: 0 })),
        "{got:?}"
    );
    let waited = cut.elapsed();
    assert!(
        waited >= away && waited < T,
        "gave up after {waited:?} (away {away:?})"
    );
    // The other worker is unaffected.
    exchange(&ts, 2, 3);
}

#[test]
fn a_worker_absent_at_formation_joins_later_with_no_group_wide_step() {
    let addrs = free_addrs(3);
    let quick = |rank: u32| {
        let mut spec = Spec::tcp(rank, 3, addrs.clone());
        spec.shape = Shape::Star;
        spec.token = Some(TOKEN.into());
        spec.timeout = Duration::from_millis(500);
        spec.fleet = Some(T);
        connect(&spec).unwrap()
    };
    // The coordinator goes on at its deadline with worker 1 alone.
    let (coordinator, one) = std::thread::scope(|s| {
        let c = s.spawn(|| quick(0));
        let w = s.spawn(|| quick(1));
        (c.join().unwrap(), w.join().unwrap())
    });
    assert!(matches!(
        coordinator.send(2, key(1), &[b"anyone?"]),
        Err(TransportError::PeerDisconnected { rank: 2 })
    ));
    let two = quick(2);
    until("worker 2 is in", || coordinator.incarnation(2) == 1);
    exchange(&[coordinator, one, two], 2, 2);
}
