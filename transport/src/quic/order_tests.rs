//! The order keeper under seeded interleavings of its two paths: a lane's
//! messages come out in the order they were sent, whichever path each
//! took and however the paths raced, through more than 2^16 payloads of
//! one stream (the 16-bit stamps wrap).

use super::order::{In, Out};
use crate::link::{Core, CoreConfig};
use crate::wire::{FrameType, Header};
use crate::{LaneKey, LaneKind, Payload};
use std::collections::VecDeque;
use std::time::Duration;

fn core() -> Core {
    Core::new(&CoreConfig {
        rank: 0,
        world: 2,
        shape: crate::Shape::Mesh,
        timeout: Duration::from_secs(5),
        liveness: Duration::from_secs(5),
        max_message_bytes: 1 << 20,
        peer_budget_bytes: 1 << 20,
        lane_depth: 8,
        ranks_here: 1,
    })
}

fn header(tag: u64) -> Header {
    Header {
        ftype: FrameType::Data,
        kind: LaneKind::Collective,
        src: 1,
        dst: 0,
        comm: 0,
        tag,
        len: 4,
        aux: 0,
        seq: 0,
    }
}

/// Send `n` messages on one stream, each over QUIC or the sidecar as
/// `big(i)` says, deliver the two paths interleaved by `seed`, and check
/// the lane's order at the receiver.
fn run(n: u32, seed: u64, big: impl Fn(u32) -> bool) {
    run_taking(n, seed, big, false);
}

/// [`run`]; with `direct`, a sidecar payload whose turn has come
/// (`payload_is_next`) is, every other time, taken as a posted receive
/// takes it off the sidecar: read past the inbox, then `payload_taken`.
fn run_taking(n: u32, seed: u64, big: impl Fn(u32) -> bool, direct: bool) {
    const S: usize = 3;
    let core = core();
    let (mut out, mut inn) = (Out::new(8), In::new(8));
    let (mut quic, mut sidecar) = (VecDeque::new(), VecDeque::new());
    for i in 0..n {
        let mut h = header(5);
        if big(i) {
            out.payload(S, &mut h);
            sidecar.push_back((h, i));
        } else {
            out.frame(S, &mut h);
            quic.push_back((h, i));
        }
    }
    let mut rng = seed.max(1);
    let key = LaneKey {
        comm: 0,
        kind: LaneKind::Collective,
        tag: 5,
    };
    let mut next = 0u32;
    let mut taken_direct = 0;
    let take = |core: &Core, next: &mut u32| {
        while let Some(m) = core.inbox.try_take(1, key, None) {
            let m = m.unwrap();
            assert_eq!(m.as_ref(), next.to_le_bytes(), "seed {seed}");
            *next += 1;
        }
    };
    while !(quic.is_empty() && sidecar.is_empty()) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Runs of one path, as a burst of datagrams or a large read would.
        let from_quic = (rng.is_multiple_of(2) && !quic.is_empty()) || sidecar.is_empty();
        for _ in 0..(rng >> 8) % 5 + 1 {
            if from_quic {
                let Some((h, i)) = quic.pop_front() else {
                    break;
                };
                let p = Payload::from_parts(&[&u32::to_le_bytes(i)]);
                inn.frame(&core, 1, S, h, Some(p)).unwrap();
            } else {
                let Some((h, i)) = sidecar.pop_front() else {
                    break;
                };
                // A posted receive takes it only when the lane holds
                // nothing before it (`Posted::wants`).
                take(&core, &mut next);
                if direct && rng & 0x100 != 0 && inn.payload_is_next(S, &h) {
                    assert_eq!(i, next, "seed {seed}: taken out of turn");
                    next += 1;
                    inn.payload_taken(&core, 1, S).unwrap();
                    taken_direct += 1;
                    continue;
                }
                let p = Payload::from_parts(&[&u32::to_le_bytes(i)]);
                inn.payload(&core, 1, S, h, p).unwrap();
            }
        }
        take(&core, &mut next);
    }
    take(&core, &mut next);
    assert_eq!(next, n, "seed {seed}: every message delivered");
    if direct {
        assert!(taken_direct > 0, "seed {seed}: no payload taken directly");
    }
}

#[test]
fn mixed_paths_keep_the_lane_in_order() {
    for seed in 1..=50 {
        run(2_000, seed, |i| (i * 7 + seed as u32).is_multiple_of(3));
    }
}

#[test]
fn payloads_taken_straight_off_the_sidecar_keep_the_lane_in_order() {
    for seed in 1..=50 {
        // Two in three over the sidecar: it lags, and many payloads find
        // their frames delivered when they come.
        run_taking(
            2_000,
            seed,
            |i| !(i * 5 + seed as u32).is_multiple_of(3),
            true,
        );
    }
}

#[test]
fn stamps_wrap_around_without_losing_order() {
    // Payloads on one stream pass 2^16 (twice, in the second run), with
    // frames between them dense and sparse. As on real links, the paths
    // never drift 2^16 payloads apart: the byte budgets bound what is in
    // flight far below that (the module docs of `order.rs`).
    run(90_000, 11, |i| !i.is_multiple_of(9));
    run(140_000, 12, |i| !i.is_multiple_of(1000));
}

#[test]
fn a_peer_whose_stamps_never_line_up_is_refused_not_buffered_forever() {
    let core = core();
    let mut inn = In::new(8);
    // A frame claiming one sidecar payload before it, which never comes.
    let mut h = header(1);
    h.seq = 1;
    let mut refused = false;
    for _ in 0..(1 << 16) + 1 {
        if inn.frame(&core, 1, 2, h, Some(Payload::default())).is_err() {
            refused = true;
            break;
        }
    }
    assert!(refused, "the waiting frames are bounded");
}

/// A member flooding notices that a rank is gone, each about a rank and
/// for a rank of its choosing and saying anything (never all eight copies
/// a real notice has): the order keeper counts copies of only those the
/// link may carry (about another rank of the world, for this rank, of a
/// kind that exists), so what it holds is bounded by the world, not by
/// the flood. The others are refused as the protocol errors they are.
#[test]
fn a_flood_of_peer_gone_notices_is_bounded_by_the_world() {
    const WORLD: u32 = 4;
    let core = Core::new(&CoreConfig {
        rank: 0,
        world: WORLD,
        shape: crate::Shape::Mesh,
        timeout: Duration::from_secs(5),
        liveness: Duration::from_secs(5),
        max_message_bytes: 1 << 20,
        peer_budget_bytes: 1 << 20,
        lane_depth: 8,
        ranks_here: 1,
    });
    let mut inn = In::new(8);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut refused = 0;
    for i in 0..50_000u32 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let (src, dst) = if i % 2 == 0 {
            // Anything at all.
            (rng as u32, (rng >> 32) as u32)
        } else {
            // About a rank of the world, for this rank.
            (rng as u32 % WORLD, 0)
        };
        let mut h = Header::control(FrameType::PeerGone, src, dst);
        h.aux = (rng >> 16) as u32;
        if inn.frame(&core, 1, 1 + (i % 7) as usize, h, None).is_err() {
            refused += 1;
        }
    }
    // Ranks 2 and 3 (not this rank, not the link's peer), four kinds.
    assert!(
        inn.gone_marks() <= 2 * 4,
        "{} notices held",
        inn.gone_marks()
    );
    assert!(refused >= 25_000, "the forged ones are refused");
}

fn point_to_point(tag: u64) -> Header {
    Header {
        kind: LaneKind::PointToPoint,
        ..header(tag)
    }
}

/// A member stamping its sidecar payloads for a frame it never sends
/// (`aux` one ahead): they wait here, before the inbox and its
/// `PEER_BUDGET_BYTES` see them. Past the budget (1 MiB here) the link
/// is refused, as TCP's is when the inbox refuses, instead of holding
/// whatever the member sends.
#[test]
fn payloads_stamped_for_a_frame_never_sent_are_held_to_the_peer_budget() {
    for kind in [LaneKind::PointToPoint, LaneKind::Rpc] {
        let core = core();
        let mut inn = In::new(8);
        let body = vec![7u8; 1 << 20];
        let mut refused = None;
        for i in 0..2_000u64 {
            let mut h = Header {
                kind,
                ..header(i % 4)
            };
            (h.aux, h.len) = (1, body.len() as u64);
            if let Err(e) = inn.payload(&core, 1, 2, h, Payload::from_parts(&[&body])) {
                refused = Some((i, e));
                break;
            }
        }
        let (i, e) = refused.expect("2 GiB held for a frame that never comes");
        // One message of any size is admitted, as the inbox admits it.
        assert_eq!(i, 1, "{kind:?}");
        assert!(e.to_string().contains("PEER_BUDGET_BYTES"), "{e}");
    }
}

/// The same on QUIC: frames whose `seq` claims a sidecar payload before
/// them that never comes wait, counted against the same budget, with
/// what their sender has queued in the inbox already.
#[test]
fn frames_waiting_for_a_payload_never_sent_are_held_to_the_peer_budget() {
    let core = core();
    let mut inn = In::new(8);
    // 768 KiB delivered and queued in the inbox (not taken).
    let queued = vec![1u8; 768 << 10];
    inn.frame(
        &core,
        1,
        3,
        point_to_point(9),
        Some(Payload::from_parts(&[&queued])),
    )
    .unwrap();
    let frame = vec![2u8; 4 << 10];
    let mut h = point_to_point(1);
    h.seq = 1;
    let mut waiting = 0usize;
    while inn
        .frame(&core, 1, 2, h, Some(Payload::from_parts(&[&frame])))
        .is_ok()
    {
        waiting += frame.len();
        assert!(waiting <= 1 << 20, "held past the budget");
    }
    assert_eq!(waiting + queued.len(), 1 << 20);
    // Collective bytes are held to the inbox's bounds on messages only:
    // the same frames on a collective lane still wait.
    let mut c = header(1);
    c.seq = 1;
    let mut inn = In::new(8);
    for _ in 0..512 {
        inn.frame(&core, 1, 2, c, Some(Payload::from_parts(&[&frame])))
            .unwrap();
    }
}

/// What is held counts only while it waits: an honest sender that keeps
/// within the budget, whose paths race, is never refused.
#[test]
fn held_bytes_are_given_back_as_they_are_delivered() {
    let core = core();
    let key = LaneKey {
        comm: 0,
        kind: LaneKind::PointToPoint,
        tag: 5,
    };
    let mut out = Out::new(8);
    let mut inn = In::new(8);
    let body = vec![3u8; 256 << 10];
    for _ in 0..64 {
        // A small frame, then a 256 KiB payload behind it that comes
        // first: it waits for the frame, then both go to the inbox and
        // are taken, as a receiver keeping up takes them.
        let (mut f, mut p) = (point_to_point(5), point_to_point(5));
        out.frame(3, &mut f);
        out.payload(3, &mut p);
        p.len = body.len() as u64;
        inn.payload(&core, 1, 3, p, Payload::from_parts(&[&body]))
            .unwrap();
        inn.frame(&core, 1, 3, f, Some(Payload::from_parts(&[b"ping"])))
            .unwrap();
        assert_eq!(core.inbox.try_take(1, key, None).unwrap().unwrap().len(), 4);
        assert_eq!(
            core.inbox.try_take(1, key, None).unwrap().unwrap().len(),
            body.len()
        );
    }
}
