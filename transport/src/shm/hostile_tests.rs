//! A hostile same-host member: it holds the token and shares the host, so
//! it passes the handshake and speaks the same-host rounds itself
//! (`setup::pair_by_hand`), then lies. A real rank (rank 1 of 2, over
//! TCP) must keep the network link when the ring named is not bound to
//! the link, survive the member shrinking the ring it maps, and meet a
//! single copy of bytes the member does not have with a typed error,
//! having allocated for what it read, not for what was claimed.

use super::copy::{Descriptor, MARK};
use super::setup::{pair_by_hand, Claim, Handmade};
use crate::auth::handshake;
use crate::form::identity;
use crate::wire::{FrameType, Header, HEADER_LEN};
use crate::{LaneKey, LaneKind, LinkKind, LinkTransport, Spec, Transport, TransportError};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const TOKEN: &str = "hostile same-host member token";

fn key(tag: u64) -> LaneKey {
    LaneKey {
        comm: 0,
        kind: LaneKind::PointToPoint,
        tag,
    }
}

/// Rank 1 of 2 over TCP forming in a thread, and rank 0 played by hand:
/// the handshake, then the same-host rounds naming what `claim` says.
/// Returns rank 1's transport, rank 0's stream (held open) and what it
/// ended the rounds with.
fn against(claim: Claim) -> (LinkTransport, TcpStream, Handmade) {
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| {
            TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
        })
        .collect();
    let spec = |rank: u32| {
        let mut s = Spec::tcp(rank, 2, addrs.clone());
        s.token = Some(TOKEN.into());
        s.timeout = Duration::from_secs(10);
        s
    };
    let rank1 = {
        let spec = spec(1);
        std::thread::spawn(move || crate::connect(&spec).expect("rank 1 forms"))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut sock = loop {
        match TcpStream::connect_timeout(&addrs[1], Duration::from_secs(1)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::yield_now(),
            Err(e) => panic!("cannot reach rank 1: {e}"),
        }
    };
    let admitted = handshake::dial(&mut sock, &identity(&spec(0), 0), deadline).expect("admitted");
    assert_eq!(admitted.rank, 1);
    let made = pair_by_hand(&sock, &admitted.keys, claim).expect("the rounds");
    (rank1.join().expect("rank 1"), sock, made)
}

/// The member names, as the ring rank 1 is to write, rank 1's own inbound
/// ring (so rank 1 would read its own frames as the member's), or a ring
/// bound to another link: both refused, and rank 1 keeps the TCP link.
#[test]
fn a_ring_not_bound_to_the_link_is_refused() {
    for claim in [Claim::Peers, Claim::OtherLinks] {
        let (t, sock, made) = against(claim);
        assert!(
            made.out.is_some(),
            "{claim:?}: rank 1's own ring is genuine"
        );
        assert!(!made.mapped, "{claim:?}: rank 1 mapped the ring named");
        assert_eq!(t.links()[0], LinkKind::Tcp, "{claim:?}");
        drop(sock);
    }
    // The honest pairing, for contrast: a shared-memory link.
    let (t, _sock, made) = against(Claim::Own);
    assert!(made.mapped);
    assert_eq!(t.links()[0], LinkKind::SharedMemory);
}

/// The member shrinks the ring rank 1 writes into, after rank 1 mapped
/// it. Before rings were sealed memfds this succeeded and rank 1's next
/// send raised SIGBUS, ending the process; now the kernel refuses it and
/// the send arrives.
#[test]
fn a_member_cannot_shrink_the_ring_its_peer_writes() {
    let (t, _sock, made) = against(Claim::Own);
    assert_eq!(t.links()[0], LinkKind::SharedMemory);
    let inn = made.inn.expect("its ring");
    let fd = inn.locator().expect("still offered").1 as libc::c_int;
    // SAFETY: the member's own open descriptor.
    let shrunk = unsafe { libc::ftruncate(fd, 0) };
    let why = std::io::Error::last_os_error();
    t.send(0, key(9), &[b"after the attempt"]).expect("send");
    assert_ne!(shrunk, 0, "the ring was shrunk");
    assert_eq!(why.raw_os_error(), Some(libc::EPERM), "{why}");
    let mut frame = [0u8; HEADER_LEN + 17];
    assert_eq!(
        inn.read(&mut super::ring::Cursor::default(), &mut frame),
        Ok(frame.len())
    );
    assert_eq!(&frame[HEADER_LEN..], b"after the attempt");
}

/// The peak of this process's resident memory, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kb * 1024
}

/// Bytes the member claims to offer by single copy: it has 1 MiB of them.
const CLAIMED: u64 = 2 << 30;

/// See [`a_single_copy_of_bytes_the_member_does_not_have_is_a_typed_error`];
/// run in a process of its own, so that its memory is its own to measure.
#[test]
#[ignore = "run by a_single_copy_of_bytes_the_member_does_not_have_is_a_typed_error"]
fn single_copy_lie_in_a_process_of_its_own() {
    let (t, _sock, made) = against(Claim::Own);
    assert_eq!(t.links()[0], LinkKind::SharedMemory);
    let out = made.out.expect("rank 1's ring");
    // 1 MiB that exists, then a range of the same message at an address
    // below `mmap_min_addr`, which no process ever has mapped.
    let real = vec![0x5au8; 1 << 20];
    let desc = Descriptor {
        ticket: 1,
        parts: vec![
            (real.as_ptr() as u64, real.len() as u64),
            (4096, CLAIMED - (1 << 20)),
        ],
    };
    let h = Header {
        ftype: FrameType::Data,
        kind: LaneKind::PointToPoint,
        src: 0,
        dst: 1,
        comm: 0,
        tag: 3,
        len: CLAIMED,
        aux: 0,
        seq: MARK,
    };
    let before = peak_rss();
    out.offer_copy(desc.ticket);
    let mut head = 0;
    let bytes = [&h.encode()[..], &desc.encode()].concat();
    assert_eq!(out.write(&mut head, &bytes), Ok(bytes.len()));
    out.publish(head, None);
    let started = Instant::now();
    let got = t.recv(0, key(3), Duration::from_secs(10), None);
    assert!(
        matches!(got, Err(TransportError::PeerDisconnected { rank: 0 })),
        "{:?}",
        got.map(|p| p.len())
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let grew = peak_rss().saturating_sub(before);
    assert!(
        grew < 256 << 20,
        "a claim of {CLAIMED} bytes cost {grew} bytes of memory"
    );
    drop(real);
}

/// The member announces a single copy of 2 GiB of which it has 1 MiB.
/// Rank 1 refuses the link at the first missing byte (`PeerDisconnected`
/// naming rank 0, at once) and its memory grows by what it read, not by
/// the claim (before, it allocated and zeroed the whole claim first).
#[test]
fn a_single_copy_of_bytes_the_member_does_not_have_is_a_typed_error() {
    let out = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "shm::hostile_tests::single_copy_lie_in_a_process_of_its_own",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .output()
        .expect("run the test in a process of its own");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
