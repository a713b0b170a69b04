//! Attackers without the token, on loopback: strangers at every rank's port
//! while a group forms, and a tampering proxy on the path between two
//! ranks. Formation under attack completes as if the attacker were not
//! there; a link whose bytes were altered, cut or reordered fails, naming
//! its peer, and never delivers altered data.

mod common;

use common::{every_pair_talks_on, free_addrs, key, T};
use meshwork_transport::{connect, LinkTransport, Spec, Transport, TransportError};
use meshwork_transport::{PROTOCOL_VERSION, SHM_NEGOTIATION_LEN};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const TOKEN: &str = "attack test cluster token";
/// What a dialer sends before its first frame: hello (64 B) and proof (32 B).
const DIALER_HANDSHAKE: usize = 64 + 32;
const CHALLENGE: usize = 36;

fn spec(quic: bool, rank: u32, world: u32, peers: Vec<SocketAddr>) -> Spec {
    let mut s = if quic {
        Spec::new(rank, world, peers)
    } else {
        Spec::tcp(rank, world, peers)
    };
    s.token = Some(TOKEN.into());
    s.timeout = T;
    s
}

fn dial_retry(addr: SocketAddr) -> TcpStream {
    let deadline = Instant::now() + T;
    loop {
        match TcpStream::connect_timeout(&addr, T) {
            Ok(s) => return s,
            Err(_) if Instant::now() < deadline => std::thread::yield_now(),
            Err(e) => panic!("cannot reach {addr}: {e}"),
        }
    }
}

/// A hello as a stranger writes it: `version`, a world of 4, claiming
/// rank 0, with transport settings `transport`.
fn hello(version: u32, transport: u64) -> [u8; 64] {
    let mut h = [0u8; 64];
    h[..8].copy_from_slice(b"MESHWORK");
    h[8..12].copy_from_slice(&version.to_le_bytes());
    h[12..16].copy_from_slice(&4u32.to_le_bytes());
    h[24..32].copy_from_slice(&transport.to_le_bytes());
    h[40..].copy_from_slice(&[0x42; 24]);
    h
}

/// The stranger's single-shot attacks on `addr`: another version; the
/// right version with the wrong transport settings and a proof of
/// nothing. Each gets the challenge (version and nonce), then the door.
fn strike(addr: SocketAddr, quic: bool) {
    let wrong_settings = if quic { 0 } else { 1 << 63 };
    for (version, proof) in [(999, false), (PROTOCOL_VERSION, true)] {
        let mut s = dial_retry(addr);
        s.set_read_timeout(Some(T)).unwrap();
        s.write_all(&hello(version, wrong_settings)).unwrap();
        let mut got = vec![0u8; CHALLENGE];
        s.read_exact(&mut got).unwrap();
        if proof {
            s.write_all(&[0u8; 32]).unwrap();
        }
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), CHALLENGE, "nothing about the job: {got:?}");
        assert_eq!(&got[..8], b"MESHWORK");
        assert_eq!(got[8..12], PROTOCOL_VERSION.to_le_bytes());
    }
}

/// Strangers that stay: one connection dribbling a hello a byte per
/// 100 ms (dialling again when cut off), and 50 idle connections, until
/// `stop`.
fn besiege(addr: SocketAddr, stop: Arc<AtomicBool>) -> JoinHandle<usize> {
    std::thread::spawn(move || {
        let idle: Vec<TcpStream> = (0..50).map(|_| dial_retry(addr)).collect();
        let h = hello(PROTOCOL_VERSION, 0);
        let mut cut = 0;
        while !stop.load(Ordering::Acquire) {
            let mut s = dial_retry(addr);
            for b in h.iter().cycle() {
                if stop.load(Ordering::Acquire) || s.write_all(&[*b]).is_err() {
                    break;
                }
                #[allow(clippy::disallowed_methods, reason = "the attacker's pacing")]
                std::thread::sleep(Duration::from_millis(100));
            }
            cut += 1;
        }
        drop(idle);
        cut
    })
}

/// A mesh of four forms while strangers strike every listening rank
/// before its peers connect and besiege it throughout.
fn formation_under_siege(quic: bool) {
    let addrs = free_addrs(4);
    let stop = Arc::new(AtomicBool::new(false));
    let mut ranks: Vec<(u32, JoinHandle<_>)> = Vec::new();
    let mut sieges = Vec::new();
    // Rank r accepts from every lower rank: start 3, 2, 1 in turn, each
    // attacked before the ranks that dial it exist.
    for r in [3u32, 2, 1] {
        let peers = addrs.clone();
        ranks.push((
            r,
            std::thread::spawn(move || connect(&spec(quic, r, 4, peers))),
        ));
        strike(addrs[r as usize], quic);
        sieges.push(besiege(addrs[r as usize], Arc::clone(&stop)));
    }
    let started = Instant::now();
    let peers = addrs.clone();
    ranks.push((
        0,
        std::thread::spawn(move || connect(&spec(quic, 0, 4, peers))),
    ));
    let mut formed: Vec<(u32, LinkTransport)> = ranks
        .into_iter()
        .map(|(r, h)| {
            (
                r,
                h.join()
                    .unwrap()
                    .unwrap_or_else(|e| panic!("rank {r}: {e}")),
            )
        })
        .collect();
    let took = started.elapsed();
    stop.store(true, Ordering::Release);
    let cut: usize = sieges.into_iter().map(|s| s.join().unwrap()).sum();
    // Unattacked, this takes milliseconds; a stranger that held up a
    // handshake would cost at least its one-second deadline.
    assert!(took < Duration::from_secs(1), "formed in {took:?}");
    assert!(cut >= 3, "the dribblers were cut off, not served");
    formed.sort_by_key(|(r, _)| *r);
    every_pair_talks_on(formed.into_iter().map(|(_, t)| t).collect());
}

#[test]
fn formation_completes_under_siege_tcp() {
    formation_under_siege(false);
}

#[test]
fn formation_completes_under_siege_quic() {
    formation_under_siege(true);
}

/// What the proxy does to the dialer's stream after the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tamper {
    Nothing,
    /// Flip a bit in the payload of the first large frame.
    FlipPayload,
    /// Flip a bit in the first large frame's own header (its tag field).
    FlipHeader,
    /// Leave out the first large frame.
    Drop,
}

/// A TCP proxy from `listen` to `target`: the dialer's stream is parsed
/// into frames (envelopes if `sealed`) and `tamper` applied; the other
/// direction is copied. Returns whether it tampered.
fn tcp_proxy(
    listen: TcpListener,
    target: SocketAddr,
    tamper: Tamper,
    sealed: bool,
) -> JoinHandle<bool> {
    std::thread::spawn(move || {
        listen.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + T;
        let mut from = loop {
            match listen.accept() {
                Ok((s, _)) => break s,
                Err(_) if Instant::now() < deadline => std::thread::yield_now(),
                Err(e) => panic!("nobody dialled the proxy: {e}"),
            }
        };
        from.set_nonblocking(false).unwrap();
        let mut to = dial_retry(target);
        for s in [&from, &to] {
            s.set_read_timeout(Some(T)).unwrap();
            s.set_write_timeout(Some(T)).unwrap();
        }
        let (mut back_from, mut back_to) = (to.try_clone().unwrap(), from.try_clone().unwrap());
        let back = std::thread::spawn(move || {
            let _ = std::io::copy(&mut back_from, &mut back_to);
            let _ = back_to.shutdown(Shutdown::Write);
        });
        // The hello, then (after the challenge came back) the proof.
        let (mut hello, mut proof) = ([0u8; 64], [0u8; DIALER_HANDSHAKE - 64]);
        let mut tampered = false;
        let handshake = from.read_exact(&mut hello).is_ok()
            && to.write_all(&hello).is_ok()
            && from.read_exact(&mut proof).is_ok()
            && to.write_all(&proof).is_ok();
        // The same-host negotiation (shared memory off: the link stays
        // on TCP, through this proxy), passed on as it is.
        // Each round waits for the other side's: pass on what comes.
        let mut rounds = [0u8; SHM_NEGOTIATION_LEN];
        let mut passed = 0;
        while handshake && passed < rounds.len() {
            match from.read(&mut rounds[passed..]) {
                Ok(n) if n > 0 && to.write_all(&rounds[passed..passed + n]).is_ok() => passed += n,
                _ => break,
            }
        }
        let handshake = handshake && passed == rounds.len();
        if handshake {
            let mut head = [0u8; 40];
            let mut chunk = vec![0u8; 64 << 10];
            'frames: while from.read_exact(&mut head).is_ok() {
                let len = u64::from_le_bytes(head[32..40].try_into().unwrap()) as usize;
                let body_len = if sealed || head[0] == 1 { len } else { 0 };
                let mut forward = true;
                // Where in the body a bit is flipped, and which.
                let mut flip = None;
                if !tampered && body_len > 1000 {
                    tampered = tamper != Tamper::Nothing;
                    let payload_at = if sealed { 40 } else { 0 };
                    match tamper {
                        Tamper::Nothing => {}
                        Tamper::FlipPayload => flip = Some((payload_at + 500, 0x10)),
                        Tamper::FlipHeader if sealed => flip = Some((24, 1)),
                        Tamper::FlipHeader => head[24] ^= 1,
                        Tamper::Drop => forward = false,
                    }
                }
                if forward && to.write_all(&head).is_err() {
                    break;
                }
                // The body streams through as it comes (a receiver reading
                // it sees its first bytes at once), altered on the way.
                let mut at = 0;
                while at < body_len {
                    let n = (body_len - at).min(chunk.len());
                    if from.read_exact(&mut chunk[..n]).is_err() {
                        break 'frames;
                    }
                    if let Some((i, bit)) = flip.filter(|&(i, _)| (at..at + n).contains(&i)) {
                        chunk[i - at] ^= bit;
                    }
                    if forward && to.write_all(&chunk[..n]).is_err() {
                        break 'frames;
                    }
                    at += n;
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
        let _ = back.join();
        tampered
    })
}

/// A UDP relay from `listen` to `target` (QUIC's datagrams, untouched),
/// until `stop`.
fn udp_relay(listen: UdpSocket, target: SocketAddr, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        listen
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let mut client = None;
        let mut buf = vec![0u8; 65536];
        while !stop.load(Ordering::Acquire) {
            if let Ok((n, src)) = listen.recv_from(&mut buf) {
                let dst = if src == target {
                    client
                } else {
                    client = Some(src);
                    Some(target)
                };
                if let Some(d) = dst {
                    let _ = listen.send_to(&buf[..n], d);
                }
            }
        }
    })
}

/// Ranks 0 and 1 of a pair whose stream from rank 0 to rank 1 runs
/// through a proxy doing `tamper` (QUIC's datagrams pass untouched); the
/// proxy's threads, to join once both transports are dropped.
struct Proxied {
    t0: LinkTransport,
    t1: LinkTransport,
    stop: Arc<AtomicBool>,
    tcp: JoinHandle<bool>,
    udp: JoinHandle<()>,
}

fn form_through_proxy(quic: bool, token: bool, tamper: Tamper) -> Proxied {
    // Rank 1 is known to rank 0 by the proxy's address and listens on
    // its own.
    let addrs = free_addrs(3);
    let (a0, proxy, a1) = (addrs[0], addrs[1], addrs[2]);
    let stop = Arc::new(AtomicBool::new(false));
    let tcp = tcp_proxy(TcpListener::bind(proxy).unwrap(), a1, tamper, token);
    let udp = udp_relay(UdpSocket::bind(proxy).unwrap(), a1, Arc::clone(&stop));
    let make = move |r: u32| {
        let mut s = spec(quic, r, 2, vec![a0, proxy]);
        // Loopback is one host: without this the pair would share memory
        // and never send the proxy a frame.
        s.shared_memory = false;
        if !token {
            s.token = None;
        }
        if r == 1 {
            s.bind = Some(a1);
        }
        s
    };
    let r1 = std::thread::spawn(move || connect(&make(1)));
    let t0 = connect(&make(0)).unwrap();
    let t1 = r1.join().unwrap().unwrap();
    Proxied {
        t0,
        t1,
        stop,
        tcp,
        udp,
    }
}

impl Proxied {
    /// Close both ranks and stop the proxy: whether it tampered.
    fn end(self) -> bool {
        drop(self.t0);
        drop(self.t1);
        self.stop.store(true, Ordering::Release);
        self.udp.join().unwrap();
        self.tcp.join().unwrap()
    }
}

/// The `i`th message rank 0 sends: 64 KiB (on QUIC, over the sidecar).
fn message(i: u8) -> Vec<u8> {
    (0..64 << 10).map(|j: usize| (j as u8) ^ i).collect()
}

/// Rank 0 sends rank 1 eight 64 KiB messages (on QUIC: over the sidecar,
/// from 4 KiB) through a proxy doing `tamper`; what rank 1 received,
/// message by message.
fn through_proxy(
    quic: bool,
    token: bool,
    tamper: Tamper,
) -> (Vec<Result<bool, TransportError>>, bool) {
    let p = form_through_proxy(quic, token, tamper);
    for i in 0..8u8 {
        // A send may fail once rank 1 has cut the link.
        let _ = p.t0.send(1, key(3), &[&message(i)]);
    }
    let got: Vec<Result<bool, TransportError>> = (0..8u8)
        .map(|i| {
            p.t1.recv(0, key(3), T, None)
                .map(|m| m.as_ref() == message(i).as_slice())
        })
        .collect();
    (got, p.end())
}

/// Rank 1 has posted a receive (`recv_into`) for the message the proxy
/// alters when its bytes come: they are read straight into the caller's
/// buffer and checked as they come. The call fails, naming rank 0, and
/// the buffer holds none of the altered bytes: as it was before the call.
fn a_posted_receive_keeps_none_of_the_altered_bytes(quic: bool) {
    // Large, so that the receiving thread reads its link itself for long
    // enough (a few ms) to be reading when the first bytes come.
    const LEN: usize = 16 << 20;
    let p = form_through_proxy(quic, true, Tamper::FlipPayload);
    let sent: Vec<u8> = (0..LEN).map(|j| (j % 251) as u8 | 1).collect();
    std::thread::scope(|s| {
        let posted = s.spawn(|| {
            let mut buf = vec![0u8; LEN];
            let got = p.t1.recv_into(0, key(3), T, &mut [], &mut buf);
            (got, buf)
        });
        // The receive is posted, and its caller reading, before the
        // bytes come (nothing outside the transport shows when it is).
        #[allow(clippy::disallowed_methods, reason = "a receive posted first")]
        std::thread::sleep(Duration::from_millis(2));
        let _ = p.t0.send(1, key(3), &[&sent]);
        let (got, buf) = posted.join().unwrap();
        assert_eq!(got, Err(TransportError::PeerDisconnected { rank: 0 }));
        let kept = buf.iter().filter(|&&b| b != 0).count();
        assert_eq!(kept, 0, "{kept} altered bytes left in the caller's buffer");
    });
    assert!(p.end(), "the proxy did nothing");
}

#[test]
fn a_posted_receive_keeps_none_of_the_altered_bytes_tcp() {
    a_posted_receive_keeps_none_of_the_altered_bytes(false);
}

#[test]
fn a_posted_receive_keeps_none_of_the_altered_bytes_quic() {
    a_posted_receive_keeps_none_of_the_altered_bytes(true);
}

fn tampering_is_refused(quic: bool) {
    let (clean, tampered) = through_proxy(quic, true, Tamper::Nothing);
    assert!(!tampered);
    assert!(clean.iter().all(|r| r == &Ok(true)), "{clean:?}");
    for tamper in [Tamper::FlipPayload, Tamper::FlipHeader, Tamper::Drop] {
        let (got, tampered) = through_proxy(quic, true, tamper);
        assert!(tampered, "{tamper:?}: the proxy did nothing");
        assert!(
            got.iter().all(|r| !matches!(r, Ok(false))),
            "{tamper:?}: altered data delivered: {got:?}"
        );
        assert!(
            got.contains(&Err(TransportError::PeerDisconnected { rank: 0 })),
            "{tamper:?}: the link to rank 0 must fail: {got:?}"
        );
    }
}

#[test]
fn a_tampering_proxy_is_refused_tcp() {
    tampering_is_refused(false);
}

#[test]
fn a_tampering_proxy_is_refused_quic() {
    tampering_is_refused(true);
}

/// The proxy does alter what it carries: without a token (loopback
/// only), nothing stops it — which is why a token makes every frame
/// authenticated.
#[test]
fn without_a_token_the_proxy_alters_data() {
    let (got, tampered) = through_proxy(false, false, Tamper::FlipPayload);
    assert!(tampered);
    assert!(got.contains(&Ok(false)), "{got:?}");
}
