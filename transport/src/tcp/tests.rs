//! A `TcpLink` driven by hand over a real socket pair: what its I/O turn
//! (`service`) does with a peer that reads slowly, and with one that has
//! stopped reading.

use super::{Serviced, TcpLink};
use crate::auth::handshake::Keys;
use crate::auth::seal::{Protect, Sealer};
use crate::link::{Core, CoreConfig, Direct, Link, Posted};
use crate::spec::Spec;
use crate::wire::{Assembler, FrameType, Header, HEADER_LEN};
use crate::{LaneKey, LaneKind, Payload};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rank 0's link to rank 1 over a fresh connection, and rank 1's raw end.
fn pair(timeout: Duration) -> (Core, TcpLink, TcpStream) {
    pair_sealed(timeout, false)
}

/// [`pair`]; with `token`, the link authenticates every frame (rank 1's
/// sending key is all zeroes: [`peer_sealer`]).
fn pair_sealed(timeout: Duration, token: bool) -> (Core, TcpLink, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let ours = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    let (theirs, _) = l.accept().unwrap();
    let core = Core::new(&CoreConfig {
        rank: 0,
        world: 2,
        shape: crate::Shape::Mesh,
        timeout,
        liveness: timeout,
        max_message_bytes: 1 << 30,
        peer_budget_bytes: 1 << 30,
        lane_depth: 8,
        ranks_here: 1,
    });
    let mut spec = Spec::tcp(0, 2, vec![addr, addr]);
    spec.timeout = timeout;
    if token {
        spec.token = Some("a token of sixteen bytes or more".into());
    }
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

/// Point-to-point lane `tag` between ranks 1 and 0.
fn p2p(tag: u64) -> LaneKey {
    LaneKey {
        comm: 0,
        kind: LaneKind::PointToPoint,
        tag,
    }
}

/// The header of a message of `len` bytes from rank 1 on lane `p2p(tag)`.
fn from_peer(tag: u64, len: usize) -> Header {
    Header {
        ftype: FrameType::Data,
        kind: LaneKind::PointToPoint,
        src: 1,
        dst: 0,
        comm: 0,
        tag,
        len: len as u64,
        aux: 0,
        seq: 0,
    }
}

/// A receive from rank 1 on lane `p2p(tag)` posted into `body`.
fn posted(tag: u64, body: &mut [u8]) -> Posted<'_> {
    Posted {
        src: 1,
        key: p2p(tag),
        word: None,
        head: &mut [],
        body,
        filled: false,
    }
}

/// Poll `link` with a receive for lane `p2p(tag)` posted into `buf` until
/// the message is read into it, by `until`; it must never be assembled
/// into the inbox instead (`what` names it in a failure).
fn read_in_place(
    core: &Core,
    link: &TcpLink,
    tag: u64,
    buf: &mut [u8],
    until: Instant,
    what: &str,
) {
    loop {
        let mut p = posted(tag, buf);
        assert!(!link.poll_into(core, &mut p), "the link ended");
        if p.filled {
            return;
        }
        assert!(
            core.inbox.try_take(1, p2p(tag), None).is_none(),
            "{what} was assembled, not read into the posted buffers"
        );
        assert!(Instant::now() < until, "{what} never came");
    }
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

/// A rank of `world` whose links to `peers` run over fresh connections
/// (their I/O threads started), each with `budget` bytes of write budget;
/// the peers' raw ends, by rank. `token`: the links seal their frames.
fn hub(
    world: u32,
    peers: &[u32],
    timeout: Duration,
    budget: usize,
    token: bool,
) -> (Arc<Core>, Vec<Arc<TcpLink>>, Vec<TcpStream>) {
    let core = Arc::new(Core::new(&CoreConfig {
        rank: 0,
        world,
        shape: crate::Shape::Mesh,
        timeout,
        liveness: timeout,
        max_message_bytes: 1 << 30,
        peer_budget_bytes: 2 << 20,
        // The default depth: the attacks below queue dozens of requests
        // on one lane, and must meet the bound they test, not this one
        // (the receiver would refuse a sender past it too).
        lane_depth: crate::LANE_DEPTH,
        ranks_here: 1,
    }));
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let mut spec = Spec::tcp(0, world, vec![addr; world as usize]);
    spec.timeout = timeout;
    spec.send_budget_bytes = budget;
    if token {
        spec.token = Some("a token of sixteen bytes or more".into());
    }
    let keys = Keys {
        send: [0; 32],
        recv: [0; 32],
    };
    let mut links = Vec::new();
    let mut table: Vec<Option<Arc<dyn Link>>> = vec![None; world as usize];
    let mut raw = Vec::new();
    for &peer in peers {
        let ours = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        let (theirs, _) = l.accept().unwrap();
        let link =
            Arc::new(TcpLink::new(&core, peer, ours, &keys, &spec, Arc::new(Direct)).unwrap());
        table[peer as usize] = Some(Arc::clone(&link) as Arc<dyn Link>);
        links.push(link);
        raw.push(theirs);
    }
    core.set_links(table);
    for link in &links {
        Arc::clone(link).start(&core);
    }
    (core, links, raw)
}

/// Stop a hub's links (without waiting for goodbyes).
fn stop(links: Vec<Arc<TcpLink>>) {
    for link in links {
        link.close_end();
    }
}

use crate::link::testing::{Get, ANSWER, REQUESTS};

/// Request `id`'s frame from `src`, unsealed.
fn request(src: u32, id: u64) -> Vec<u8> {
    let h = Header {
        ftype: FrameType::Data,
        kind: LaneKind::Rpc,
        src,
        dst: 0,
        comm: 0,
        tag: 0,
        len: 8,
        aux: 0,
        seq: 0,
    };
    [&h.encode()[..], &id.to_le_bytes()].concat()
}

/// A forged credit from `src` for an answer on lane `1 + id` it never
/// read, returning far more bytes than were ever sent to it.
fn forged_credit(src: u32, id: u64) -> Vec<u8> {
    let mut c = Header::control(FrameType::Credit, src, 0);
    (c.kind, c.tag, c.aux, c.len) = (LaneKind::Rpc, 1 + id, 1, 1 << 40);
    c.encode().to_vec()
}

/// Wait (at most 20 s) until `done`.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        std::thread::yield_now();
    }
}

/// Read frames off `s` until the data frame on lane `tag`; its payload.
fn read_answer(s: &mut TcpStream, tag: u64) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut asm = Assembler::new(3, 1 << 30);
    let pool = crate::BufferPool::new();
    loop {
        if let Some((h, body)) = asm.take_frame() {
            if h.tag == tag {
                return body;
            }
            continue;
        }
        let n = s.read(asm.space()).expect("the answer came");
        assert!(n > 0, "the link ended before the answer");
        if let Some(h) = asm.advance(n).unwrap() {
            if h.ftype == FrameType::Data {
                asm.start_body(h, &pool);
            }
        }
    }
}

/// The one-sided amplification attack: a member sends small requests for
/// large answers, returns forged credit for every answer, and never reads
/// its socket. What answers hold queued on its link stays within the
/// link's write budget (the rest of its requests wait in the inbox,
/// untouched), and an honest rank's request is still answered at once.
#[test]
fn answers_to_a_requester_that_never_reads_stay_within_the_link_budget() {
    const BUDGET: usize = 4 << 20;
    const N: u64 = 48;
    let (core, links, mut raw) = hub(3, &[1, 2], Duration::from_secs(60), BUDGET, false);
    core.set_answerer(REQUESTS, Arc::new(Get));
    let mut attack = Vec::new();
    for id in 0..N {
        attack.extend(request(1, id));
        attack.extend(forged_credit(1, id));
    }
    raw[0].write_all(&attack).unwrap();
    wait_for("every request read", || {
        core.inbox.stats()[1].received_messages == N
    });
    let queued = links[0].queued_bytes();
    assert!(
        queued <= BUDGET + ANSWER,
        "{queued} bytes queued for a requester that reads nothing (budget {BUDGET})"
    );
    assert!(
        !core.inbox.lane_is_empty(1, REQUESTS),
        "requests past the budget wait in the inbox"
    );
    // The honest rank on its own link is answered where it is read.
    raw[1].write_all(&request(2, 7)).unwrap();
    let answer = read_answer(&mut raw[1], 8);
    assert_eq!(answer, vec![7u8; ANSWER]);
    stop(links);
}

/// A member that stops reading is failed once it has taken nothing of
/// what is queued for it for a whole deadline: its link is closed, its
/// rank gone (sends to it then fail at once, naming it), and what was
/// queued for it is dropped. (Timing: runs in the serial group.)
#[test]
fn a_peer_that_reads_nothing_for_a_deadline_is_failed_timeout() {
    let (core, links, mut raw) = hub(2, &[1], Duration::from_millis(300), 4 << 20, false);
    core.set_answerer(REQUESTS, Arc::new(Get));
    let mut attack = Vec::new();
    for id in 0..16 {
        attack.extend(request(1, id));
        attack.extend(forged_credit(1, id));
    }
    raw[0].write_all(&attack).unwrap();
    wait_for("the silent reader failed", || core.inbox.is_gone(1));
    assert_eq!(
        links[0].send(&core, Header::control(FrameType::Heartbeat, 0, 1), &[], 1),
        Err(crate::TransportError::PeerDisconnected { rank: 1 })
    );
    stop(links);
}

/// A sidecar whose peer went silent, then was heard over another path
/// (a QUIC message, beside it): the silence ends, and falls due again a
/// limit after that word if the sidecar still carries nothing. Before,
/// the link stayed silent in its own eyes, never said so again, and a
/// second cut (after a heal that the sidecar's TCP backoff had not yet
/// seen) went unnoticed until a deadline ran out.
#[test]
fn a_peer_heard_another_way_falls_silent_again_a_limit_later() {
    let limit = Duration::from_millis(100);
    let (core, link, _theirs) = pair(limit);
    let silent = || core.inbox.failed().contains(&1);
    wait_for("the first silence", || {
        link.rx.check_silence(&core);
        silent()
    });
    core.inbox.progress(1);
    let word = Instant::now();
    assert!(!silent(), "a message from the peer ends its silence");
    wait_for("the second silence", || {
        link.rx.check_silence(&core);
        silent()
    });
    assert!(word.elapsed() >= limit - Duration::from_millis(10));
}

/// On an authenticated link the outer header only frames an envelope:
/// bytes of one that claims to come from another rank (rank 2, on the
/// link to rank 1) keep only the link's own peer looking alive until its
/// tag is checked. A member, or anyone on the path, cannot keep a silent
/// rank alive with it.
#[test]
fn an_unverified_envelope_keeps_only_the_links_peer_alive() {
    let (core, links, mut raw) = hub(3, &[1], Duration::from_secs(60), 4 << 20, true);
    core.inbox.set_silent(1, true);
    core.inbox.set_silent(2, true);
    let outer = Header {
        ftype: FrameType::Data,
        kind: LaneKind::Collective,
        src: 2,
        dst: 0,
        comm: 0,
        tag: 0,
        len: 1 << 20,
        aux: 0,
        seq: 0,
    };
    // The outer header and part of a body that never completes.
    raw[0].write_all(&outer.encode()).unwrap();
    raw[0].write_all(&[0u8; 4096]).unwrap();
    wait_for("the bytes read", || core.inbox.failed() != [1, 2]);
    assert_eq!(
        core.inbox.failed(),
        [2],
        "only the link's peer made progress"
    );
    stop(links);
}

/// A direct read of a bulk message from a peer on this host sleeps for
/// batches (`SO_RCVLOWAT`); however it ends — the message whole, or handed
/// to the assembler when its bytes stop coming — the socket's mark is
/// back to 1, so the link's thread hears of every byte after it.
#[test]
fn a_paced_direct_read_leaves_the_socket_as_it_found_it() {
    let (core, link, mut raw) = pair(Duration::from_secs(30));
    let key = p2p(7);
    let len = 1 << 20;
    let header = from_peer(7, len);
    let body: Vec<u8> = (0..len).map(|j| (j * 7 % 251) as u8).collect();
    let read_posted = |buf: &mut [u8]| {
        let mut posted = posted(7, buf);
        assert!(!link.poll_into(&core, &mut posted), "the link ended");
        posted.filled
    };

    // Whole, its bytes coming in 64 KiB pieces while the caller reads.
    let sent = body.clone();
    let writer = std::thread::spawn(move || {
        raw.write_all(&header.encode()).unwrap();
        for piece in sent.chunks(64 << 10) {
            raw.write_all(piece).unwrap();
        }
        raw
    });
    let mut buf = vec![0u8; len];
    let until = Instant::now() + Duration::from_secs(20);
    while !read_posted(&mut buf) {
        assert!(Instant::now() < until, "the message never came whole");
    }
    let mut raw = writer.join().unwrap();
    assert!(buf == body, "the message read as sent");
    assert_eq!(link.rx.low_water(), 1);

    // Stalled: a header and 300 KiB, then nothing; the read sleeps for
    // the next batch, gives up, and the assembler has what was read.
    raw.write_all(&header.encode()).unwrap();
    raw.write_all(&body[..300 << 10]).unwrap();
    let mut buf = vec![0u8; len];
    assert!(!read_posted(&mut buf), "half a message filled the buffer");
    assert_eq!(link.rx.low_water(), 1, "the mark was left raised");
    raw.write_all(&body[300 << 10..]).unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    let got = loop {
        assert!(!link.pump(&core), "the link ended");
        if let Some(msg) = core.inbox.try_take(1, key, None) {
            break msg.unwrap();
        }
        assert!(Instant::now() < until, "the rest never came");
    };
    assert!(got.as_ref() == &body[..], "the message assembled as sent");
}

/// A read at a frame boundary takes what has come, several frames at
/// once: a posted receive gets its message out of them, and the frames
/// read with it are in the inbox when the call returns (none waits in the
/// stage for a readiness event that would not come); the start of one
/// larger than the stage stays staged, and a receive posted for it next
/// reads it straight into its buffers.
#[test]
fn frames_read_in_one_go_all_arrive_when_one_was_posted() {
    let (core, link, mut raw) = pair(Duration::from_secs(30));
    let message = |tag: u64, len: usize| {
        let body: Vec<u8> = (0..len).map(|j| (j as u64 * 13 + tag) as u8).collect();
        (from_peer(tag, len), body)
    };
    let sent = [
        message(1, 8),
        message(2, 100),
        message(3, 8),
        message(4, 0),
        message(5, 40_000),
    ];
    let mut bytes = Vec::new();
    for (h, p) in &sent {
        bytes.extend_from_slice(&h.encode());
        bytes.extend_from_slice(p);
    }
    // On loopback the bytes are in the receiving socket when this returns.
    raw.write_all(&bytes).unwrap();

    let mut buf = vec![0u8; 100];
    let mut first = posted(2, &mut buf);
    assert!(!link.poll_into(&core, &mut first), "the link ended");
    assert!(first.filled, "the posted message was in the first read");
    assert_eq!(buf, sent[1].1);
    for i in [0, 2, 3] {
        let got = core.inbox.try_take(1, p2p(sent[i].0.tag), None);
        let got = got.unwrap_or_else(|| panic!("message {} was left staged", sent[i].0.tag));
        assert_eq!(got.unwrap().as_ref(), &sent[i].1[..]);
    }
    // The large one's start stayed staged: a receive posted for it now
    // reads it straight into its buffers.
    let mut big = vec![0u8; 40_000];
    let until = Instant::now() + Duration::from_secs(20);
    read_in_place(&core, &link, 5, &mut big, until, "the large message");
    assert_eq!(big, sent[4].1);
}

/// A posted message whose start the link's thread had already read is
/// assembled and handed over, and the reading stops there: the message
/// behind it on the lane stays in the socket for its own receive, which
/// reads it straight into its buffers (read on, the first receive could
/// take no frame behind its own, and every later message was assembled
/// and copied too: a third of `osu_bw`'s 4 MiB messages over TCP).
#[test]
fn a_posted_message_assembled_ends_the_read_and_the_next_goes_direct() {
    let (core, link, mut raw) = pair(Duration::from_secs(30));
    const LEN: usize = 60_000;
    let body = |tag: u64| -> Vec<u8> { (0..LEN).map(|j| (j as u64 * 7 + tag) as u8).collect() };
    let (a, b) = (body(1), body(2));
    let mut first = from_peer(7, LEN).encode().to_vec();
    first.extend_from_slice(&a[..10_000]);
    raw.write_all(&first).unwrap();
    // The link's thread reads the start of the first message (on
    // loopback its bytes are in the socket when `write_all` returns).
    assert!(!link.pump(&core), "the link ended");
    let mut rest = a[10_000..].to_vec();
    rest.extend_from_slice(&from_peer(7, LEN).encode());
    rest.extend_from_slice(&b);
    raw.write_all(&rest).unwrap();
    let mut buf = vec![0u8; LEN];
    let until = Instant::now() + Duration::from_secs(20);
    let got = loop {
        let mut p = posted(7, &mut buf);
        assert!(!link.poll_into(&core, &mut p), "the link ended");
        assert!(!p.filled, "its start was read already: it is assembled");
        if let Some(m) = core.inbox.try_take(1, p2p(7), None) {
            break m.unwrap();
        }
        assert!(Instant::now() < until, "the first message never came");
    };
    assert_eq!(got.as_ref(), &a[..]);
    assert!(
        core.inbox.try_take(1, p2p(7), None).is_none(),
        "the second message was assembled behind the first"
    );
    read_in_place(&core, &link, 7, &mut buf, until, "the second message");
    assert_eq!(buf, b);
}

/// A header that will not decode, read with a posted message, is refused
/// in the same call, not kept staged until the peer sends again.
#[test]
fn a_bad_header_read_with_a_posted_message_ends_the_link_at_once() {
    let (core, link, mut raw) = pair(Duration::from_secs(30));
    let good = from_peer(3, 8);
    // Over the link's cap (1 GiB): it cannot be a frame.
    let bad = Header {
        len: 2 << 30,
        ..good
    };
    let mut bytes = good.encode().to_vec();
    bytes.extend_from_slice(&[5; 8]);
    bytes.extend_from_slice(&bad.encode());
    raw.write_all(&bytes).unwrap();
    let mut buf = [0u8; 8];
    let mut posted = posted(3, &mut buf);
    let ended = link.poll_into(&core, &mut posted);
    assert!(posted.filled, "the posted message was read");
    assert!(ended, "the bad header was kept, not refused");
    assert_eq!(buf, [5; 8]);
}

/// Rank 1's side of a sealed [`pair_sealed`]: its envelopes, as its link
/// would write them.
fn peer_sealer() -> Sealer {
    Sealer::new([0; 32], Protect::Authenticate)
}

/// The bytes on the wire of message `h` with payload `body`, sealed by
/// `sealer`.
fn sealed(sealer: &mut Sealer, h: &Header, body: &[u8], pool: &Arc<crate::BufferPool>) -> Vec<u8> {
    let env = sealer.seal(h, &[body], pool).unwrap();
    env.pieces(&[body]).flatten().copied().collect()
}

/// Poll with a receive posted into `buf` until the link ends; whether the
/// message was read into it.
fn poll_until_ended(core: &Core, link: &TcpLink, tag: u64, buf: &mut [u8]) -> bool {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let mut posted = posted(tag, buf);
        let ended = link.poll_into(core, &mut posted);
        if ended || posted.filled {
            return posted.filled;
        }
        assert!(Instant::now() < until, "the link never ended");
    }
}

/// An on-path attacker flips a bit in a message a receive is posted for.
/// Its bytes are read straight into the caller's buffer and checked as
/// they come; the tag fails, the link ends and the call with it — and the
/// caller's buffer holds none of the attacker's bytes.
#[test]
fn a_posted_receive_keeps_no_bytes_of_an_envelope_whose_tag_fails() {
    let (core, link, mut raw) = pair_sealed(Duration::from_secs(30), true);
    let len = 64 << 10;
    let body: Vec<u8> = (0..len).map(|j| (j * 7 % 251) as u8 | 1).collect();
    let mut bytes = sealed(&mut peer_sealer(), &from_peer(7, len), &body, &core.pool);
    bytes[2 * HEADER_LEN + 500] ^= 0x10;
    raw.write_all(&bytes).unwrap();
    let mut buf = vec![0u8; len];
    assert!(
        !poll_until_ended(&core, &link, 7, &mut buf),
        "altered data delivered"
    );
    let kept = buf.iter().filter(|&&b| b != 0).count();
    assert_eq!(kept, 0, "{kept} bytes of the altered message in the buffer");
}

/// A receive posted for lane 7 meets a message of its length for lane 8:
/// it is read into the posted buffer before its inner header says whose
/// it is, then handed to the reader. The posted buffer keeps none of it —
/// whether the message is honest (it reaches the inbox whole) or altered
/// (the reader's check fails and the link ends).
#[test]
fn a_posted_receive_keeps_no_bytes_of_another_message_of_its_length() {
    let len = 64 << 10;
    let body: Vec<u8> = (0..len).map(|j| (j * 11 % 251) as u8 | 1).collect();
    for altered in [false, true] {
        let (core, link, mut raw) = pair_sealed(Duration::from_secs(30), true);
        let mut bytes = sealed(&mut peer_sealer(), &from_peer(8, len), &body, &core.pool);
        if altered {
            bytes[2 * HEADER_LEN + 500] ^= 0x10;
        }
        raw.write_all(&bytes).unwrap();
        let mut buf = vec![0u8; len];
        let until = Instant::now() + Duration::from_secs(20);
        let (mut ended, mut delivered) = (false, None);
        while !ended && delivered.is_none() {
            assert!(Instant::now() < until, "neither delivered nor refused");
            let mut posted = posted(7, &mut buf);
            ended = link.poll_into(&core, &mut posted);
            assert!(!posted.filled, "another lane's message filled the buffer");
            delivered = core.inbox.try_take(1, p2p(8), None);
        }
        assert_eq!(ended, altered, "the altered message ends the link");
        if let Some(m) = delivered {
            assert_eq!(m.unwrap().as_ref(), &body[..], "lane 8's message, whole");
        }
        let kept = buf.iter().filter(|&&b| b != 0).count();
        assert_eq!(
            kept, 0,
            "altered {altered}: {kept} bytes of lane 8's message kept"
        );
    }
}
