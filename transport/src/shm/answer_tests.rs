//! The one-sided amplification attack from a same-host member, played
//! by hand over the rings (`setup::pair_by_hand`).

use super::setup::{pair_by_hand, Claim};
use crate::auth::handshake;
use crate::link::testing::{Get, ANSWER, REQUESTS};
use crate::wire::{FrameType, Header};
use crate::{LaneKind, LinkKind, LinkTransport, Spec, Transport};
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BUDGET: usize = 4 << 20;
const N: u64 = 48;

/// Rank 1 of 2 (its transport and core), and rank 0 played by hand
/// (its stream and rings), which has written `N` requests for large
/// answers and forged credit for each into the ring rank 1 reads, and
/// reads nothing.
fn attacked() -> (
    LinkTransport,
    Arc<crate::link::Core>,
    TcpStream,
    super::setup::Handmade,
) {
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| {
            TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
        })
        .collect();
    let spec = |rank: u32| {
        let mut s = Spec::tcp(rank, 2, addrs.clone());
        s.token = Some("same-host amplification token".into());
        s.timeout = Duration::from_secs(30);
        s.send_budget_bytes = BUDGET;
        s
    };
    let rank1 = {
        let spec = spec(1);
        std::thread::spawn(move || {
            let (core, refusers) = crate::tcp::form_links(&spec, super::upgrade).unwrap();
            (
                LinkTransport::start(Arc::clone(&core), crate::form::background(refusers)),
                core,
            )
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut sock = loop {
        match TcpStream::connect_timeout(&addrs[1], Duration::from_secs(1)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::yield_now(),
            Err(e) => panic!("cannot reach rank 1: {e}"),
        }
    };
    let admitted =
        handshake::dial(&mut sock, &crate::form::identity(&spec(0), 0), deadline).unwrap();
    let made = pair_by_hand(&sock, &admitted.keys, Claim::Own).unwrap();
    let (t1, core) = rank1.join().unwrap();
    assert_eq!(t1.links()[0], LinkKind::SharedMemory);
    t1.set_answerer(REQUESTS, Arc::new(Get));
    let ring = made.out.as_ref().expect("the ring rank 1 reads");
    let mut head = 0;
    for id in 0..N {
        let mut h = Header::control(FrameType::Data, 0, 1);
        (h.kind, h.len) = (LaneKind::Rpc, 8);
        let mut c = Header::control(FrameType::Credit, 0, 1);
        (c.kind, c.tag, c.aux, c.len) = (LaneKind::Rpc, 1 + id, 1, 1 << 40);
        let bytes = [&h.encode()[..], &id.to_le_bytes(), &c.encode()].concat();
        assert_eq!(ring.write(&mut head, &bytes), Ok(bytes.len()));
    }
    ring.publish(head, None);
    sock.write_all(&[1]).unwrap();
    while t1.stats()[0].received_messages < N {
        assert!(Instant::now() < deadline, "the requests were not read");
        std::thread::yield_now();
    }
    (t1, core, sock, made)
}

/// A member (rank 0 of 2, same host) writes small requests for large
/// answers into the ring rank 1 reads, returns forged credit for each,
/// and never reads the ring rank 1 answers into: what rank 1 holds
/// queued on the link stays within its write budget, and the rest of
/// the requests wait in its inbox.
#[test]
fn answers_to_a_same_host_member_that_never_reads_stay_within_the_link_budget() {
    let (t1, core, _sock, _made) = attacked();
    let queued = core.link(0).unwrap().queued_bytes();
    assert!(
        queued <= BUDGET + ANSWER,
        "{queued} bytes queued for a member that reads nothing (budget {BUDGET})"
    );
    assert!(
        t1.stats()[0].queued_bytes > 0,
        "requests past the budget wait in the inbox"
    );
}

/// Once the ring has taken nothing of what is queued for a whole
/// deadline, the member is failed: its link closed, sends to it fail
/// at once naming it. (Timing: runs in the serial group.)
#[test]
fn a_same_host_member_that_reads_nothing_for_a_deadline_is_failed_timeout() {
    let (t1, core, _sock, _made) = attacked();
    t1.set_timeout(Duration::from_millis(300));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !core.inbox.is_gone(0) {
        assert!(Instant::now() < deadline, "the member was not failed");
        std::thread::yield_now();
    }
    assert_eq!(
        t1.send(0, REQUESTS, &[b"x"]),
        Err(crate::TransportError::PeerDisconnected { rank: 0 })
    );
}

/// While answers wait queued for the ring, the member makes the ring's
/// `tail` say more was read than was ever written. Rank 1's next write of
/// the queue finds the word corrupt: the link ends, the member is failed,
/// and what was queued is dropped with its budget (before, the writer
/// retried the frame behind the corrupt word forever, and the link could
/// not be closed).
#[test]
fn a_ring_corrupted_with_answers_queued_ends_the_link() {
    let (t1, core, mut sock, made) = attacked();
    let link = core.link(0).unwrap();
    assert!(link.queued_bytes() > 0, "answers wait for room");
    let ring = made.inn.as_ref().expect("the ring rank 1 writes");
    ring.free(&super::ring::Cursor::at(u64::MAX / 2));
    // The doorbell: rank 1's I/O thread wakes and writes what is queued.
    sock.write_all(&[1]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !core.inbox.is_gone(0) || link.queued_bytes() > 0 {
        assert!(
            Instant::now() < deadline,
            "the corrupt ring did not end the link ({} bytes still queued)",
            link.queued_bytes()
        );
        std::thread::yield_now();
    }
    assert_eq!(
        t1.send(0, REQUESTS, &[b"x"]),
        Err(crate::TransportError::PeerDisconnected { rank: 0 })
    );
}
