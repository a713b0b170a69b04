//! A `TcpLink` driven by hand over a real socket pair: what its I/O turn
//! (`service`) does with a peer that reads slowly, and with one that has
//! stopped reading.

use super::{Serviced, TcpLink};
use crate::auth::handshake::Keys;
use crate::link::{Core, CoreConfig, Direct, Link};
use crate::spec::Spec;
use crate::wire::{Assembler, FrameType, Header};
use crate::{LaneKind, Payload};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rank 0's link to rank 1 over a fresh connection, and rank 1's raw end.
fn pair(timeout: Duration) -> (Core, TcpLink, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let ours = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    let (theirs, _) = l.accept().unwrap();
    let core = Core::new(&CoreConfig {
        rank: 0,
        world: 2,
        shape: crate::Shape::Mesh,
        timeout,
        max_message_bytes: 1 << 30,
        peer_budget_bytes: 1 << 30,
        lane_depth: 8,
        ranks_here: 1,
    });
    let mut spec = Spec::tcp(0, 2, vec![addr, addr]);
    spec.timeout = timeout;
    let keys = Keys {
        send: [0; 32],
        recv: [0; 32],
    };
    let link = TcpLink::new(&core, 1, ours, &keys, &spec, Arc::new(Direct)).unwrap();
    (core, link, theirs)
}

fn frame(i: u64, len: usize) -> (Header, Payload) {
    let h = Header {
        ftype: FrameType::Data,
        kind: LaneKind::Collective,
        src: 0,
        dst: 1,
        comm: 0,
        tag: i,
        len: len as u64,
        aux: 0,
        seq: 0,
    };
    let body: Vec<u8> = (0..len).map(|j| (i as usize + j) as u8).collect();
    (h, Payload::from_parts(&[&body]))
}

/// Frames queued beyond what the socket holds go out whole and in order
/// as the peer reads, over many turns; the goodbye comes last.
#[test]
fn queued_frames_go_out_in_order_as_the_peer_reads() {
    let (core, link, mut theirs) = pair(Duration::from_secs(10));
    const N: u64 = 24;
    const LEN: usize = 1 << 20;
    for i in 0..N {
        let (h, p) = frame(i, LEN);
        assert!(link.enqueue(&core, h, p));
    }
    link.begin_close();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        theirs.read_to_end(&mut all).unwrap();
        all
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !link.flushed.is_set() {
        assert!(Instant::now() < deadline, "the queue did not drain");
        match link.service(&core, false) {
            Serviced::Ended => break,
            Serviced::Within(_) => std::thread::yield_now(),
        }
    }
    let all = reader.join().unwrap();
    let mut asm = Assembler::new(2, 1 << 30);
    let pool = crate::BufferPool::new();
    let (mut at, mut got) = (0, 0u64);
    let mut bye = false;
    while at < all.len() {
        if let Some((h, body)) = asm.take_frame() {
            let (want_h, want_p) = frame(got, LEN);
            assert_eq!((h, body.as_slice()), (want_h, want_p.as_ref()));
            got += 1;
            continue;
        }
        let space = asm.space();
        let n = space.len().min(all.len() - at);
        space[..n].copy_from_slice(&all[at..at + n]);
        at += n;
        if let Some(h) = asm.advance(n).unwrap() {
            match h.ftype {
                FrameType::Data => asm.start_body(h, &pool),
                FrameType::Bye => bye = true,
                FrameType::Heartbeat => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    if let Some((h, _)) = asm.take_frame() {
        assert_eq!(h.tag, got);
        got += 1;
    }
    assert_eq!(got, N, "every frame, in order");
    assert!(bye, "the goodbye came last");
}

/// Closing does not wait a fresh deadline for a peer that stopped
/// reading long ago: the wait counts from when the socket last took
/// anything. (Timing: runs in the serial group.)
#[test]
fn closing_gives_up_on_a_peer_stalled_past_the_deadline_at_once_timeout() {
    let (core, link, theirs) = pair(Duration::from_millis(300));
    for i in 0..64 {
        let (h, p) = frame(i, 1 << 20);
        assert!(link.enqueue(&core, h, p));
    }
    // Turns until the socket takes nothing more: the stall begins.
    let deadline = Instant::now() + Duration::from_secs(10);
    while link.flusher.lock().unwrap().stalled_since.is_none() {
        assert!(Instant::now() < deadline);
        link.service(&core, false);
    }
    let stalled = Instant::now();
    // Let the stall outlast the deadline, still turning as a thread would.
    while stalled.elapsed() < Duration::from_millis(400) {
        link.service(&core, false);
        std::thread::yield_now();
    }
    link.begin_close();
    let t = Instant::now();
    link.close_flush();
    assert!(
        t.elapsed() < Duration::from_millis(150),
        "waited {:?} for a peer stalled past the deadline",
        t.elapsed()
    );
    drop(theirs);
}

/// Once the link has ended (the peer hung up), nothing more is queued:
/// a relay or a credit is refused at once rather than left to wait.
#[test]
fn an_ended_link_queues_nothing() {
    let (core, link, theirs) = pair(Duration::from_secs(5));
    let (h, p) = frame(1, 16);
    assert!(link.enqueue(&core, h, p), "a live link queues");
    drop(theirs);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !matches!(link.service(&core, true), Serviced::Ended) {
        assert!(Instant::now() < deadline, "the hang-up was not noticed");
        std::thread::yield_now();
    }
    let (h, p) = frame(2, 16);
    assert!(!link.enqueue(&core, h, p), "an ended link refuses");
}
