//! The inbox's decisions on made-up instants and hand-set peers: a wait's
//! deadline counted from progress, what dooms a wait and in which order,
//! which changes wake which waiters, credits in batches, revocations held
//! and applied, a forgotten communicator.

use super::*;

const P2P: LaneKey = LaneKey {
    comm: 7,
    kind: LaneKind::PointToPoint,
    tag: 1,
};
const COLL: LaneKey = LaneKey {
    comm: 7,
    kind: LaneKind::Collective,
    tag: 0,
};
const S: Duration = Duration::from_secs(1);

fn msg(bytes: &[u8]) -> Payload {
    Payload::from_parts(&[bytes])
}

/// An inbox of a world of 4 whose peers all made progress at `t0`.
fn inbox_at(t0: Instant) -> Inbox {
    let inbox = Inbox::new(4, Cores::Shared);
    for p in &mut inbox.lock().peers {
        p.last_progress = t0;
    }
    inbox
}

fn verdict(inbox: &Inbox, src: u32, key: LaneKey, start: Instant, now: Instant) -> Verdict {
    inbox.lock().verdict(src, key, None, start, now, 2 * S)
}

fn failed_with(v: Verdict) -> TransportError {
    match v {
        Verdict::Done(Err(e)) => e,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_deadline_counts_from_the_later_of_the_start_and_the_last_progress() {
    let t0 = Instant::now();
    let inbox = inbox_at(t0);
    // Started at t0, nothing since: waits until t0 + 2 s, then fails.
    assert!(matches!(verdict(&inbox, 1, P2P, t0, t0 + S), Verdict::Wait(u) if u == t0 + 2 * S));
    assert_eq!(
        failed_with(verdict(&inbox, 1, P2P, t0, t0 + 2 * S)),
        TransportError::Timeout { waiting_on: 1 }
    );
    // A byte at t0 + 1.5 s moves the deadline to t0 + 3.5 s.
    inbox.lock().peers[1].last_progress = t0 + S + S / 2;
    let at = t0 + 3 * S;
    assert!(matches!(verdict(&inbox, 1, P2P, t0, at), Verdict::Wait(u) if u == t0 + 3 * S + S / 2));
    // A wait started after the last progress counts from its start.
    assert!(matches!(
        verdict(&inbox, 1, P2P, t0 + 4 * S, t0 + 5 * S),
        Verdict::Wait(_)
    ));
    // A peer said silent fails a wait at once.
    inbox.set_silent(1, true);
    assert_eq!(
        failed_with(verdict(&inbox, 1, P2P, t0, t0)),
        TransportError::Timeout { waiting_on: 1 }
    );
}

#[test]
fn a_queued_message_is_taken_before_any_failure_but_a_revocation() {
    let t0 = Instant::now();
    let inbox = inbox_at(t0);
    inbox.deliver(2, P2P, msg(b"last words"));
    inbox.set_gone(2);
    // What the peer sent before it went is still taken ...
    match verdict(&inbox, 2, P2P, t0, t0 + 10 * S) {
        Verdict::Done(Ok(m)) => assert_eq!(m.as_ref(), b"last words"),
        other => panic!("{other:?}"),
    }
    // ... then its end is named.
    assert_eq!(
        failed_with(verdict(&inbox, 2, P2P, t0, t0)),
        TransportError::PeerDisconnected { rank: 2 }
    );
    // A revoked communicator fails every wait, queued messages or not.
    inbox.deliver(3, P2P, msg(b"x"));
    inbox.revoke(7);
    assert_eq!(
        failed_with(verdict(&inbox, 3, P2P, t0, t0)),
        TransportError::Revoked
    );
    assert_eq!(
        failed_with(verdict(&inbox, 9, P2P, t0, t0)),
        TransportError::Revoked,
        "revocation is checked first, even for a rank out of range"
    );
}

#[test]
fn a_relay_gone_or_silent_is_named_and_a_collective_fails_with_any_member() {
    let t0 = Instant::now();
    let inbox = inbox_at(t0);
    // Rank 3 is reached through rank 1.
    inbox.set_relays(vec![vec![], vec![], vec![], vec![1]]);
    inbox.set_silent(1, true);
    assert_eq!(
        failed_with(verdict(&inbox, 3, P2P, t0, t0)),
        TransportError::Timeout { waiting_on: 1 }
    );
    inbox.set_gone(1);
    assert_eq!(
        failed_with(verdict(&inbox, 3, P2P, t0, t0)),
        TransportError::PeerDisconnected { rank: 1 }
    );
    // A collective of ranks 0, 2 and 3: rank 2 silent dooms a wait on
    // rank 0's message there — not a point-to-point wait on rank 0.
    let inbox = inbox_at(t0);
    assert!(!inbox.set_members(7, vec![0, 2, 3]));
    inbox.set_silent(2, true);
    assert_eq!(
        failed_with(verdict(&inbox, 0, COLL, t0, t0)),
        TransportError::Timeout { waiting_on: 2 }
    );
    assert!(matches!(verdict(&inbox, 0, P2P, t0, t0), Verdict::Wait(_)));
    // A member that left (said goodbye) dooms nothing.
    let inbox = inbox_at(t0);
    inbox.set_members(7, vec![0, 2]);
    inbox.set_left(2);
    inbox.set_gone(2);
    assert!(matches!(verdict(&inbox, 0, COLL, t0, t0), Verdict::Wait(_)));
}

#[test]
fn a_change_wakes_only_the_waits_it_concerns() {
    let other = LaneKey { tag: 2, ..P2P };
    let cases = [
        (Wait::From(1, P2P), Change::Delivered(1, P2P), true),
        (Wait::From(1, P2P), Change::Delivered(2, P2P), false),
        (Wait::From(1, P2P), Change::Delivered(1, other), false),
        (Wait::Any(P2P), Change::Delivered(3, P2P), true),
        (Wait::Any(P2P), Change::Delivered(3, other), false),
        (Wait::Room(1), Change::Taken(1), true),
        (Wait::Room(1), Change::Taken(2), false),
        (Wait::Room(1), Change::Delivered(1, P2P), false),
        (Wait::News, Change::Delivered(1, P2P), false),
    ];
    for (wait, change, wakes) in cases {
        assert_eq!(wait.concerns(change), wakes, "{wait:?} by {change:?}");
    }
    for wait in [
        Wait::From(0, COLL),
        Wait::Any(P2P),
        Wait::Room(3),
        Wait::News,
    ] {
        assert!(wait.concerns(Change::All), "{wait:?}");
    }
}

#[test]
fn credit_goes_back_in_batches_or_when_the_sender_waits() {
    let inbox = Inbox::new(2, Cores::Shared);
    let take = |n: usize| {
        for _ in 0..n {
            inbox.deliver(1, P2P, msg(&[0; 100]));
            inbox.try_take(1, P2P, None).unwrap().unwrap();
        }
    };
    // Three messages taken: owed, but below the batch (1 000 bytes) and
    // under half of the lane depth (8): nothing yet.
    take(3);
    assert_eq!(inbox.take_credit(1, P2P, 1000, 8), None);
    // A fourth: half the lane depth consumed: all of it goes back.
    take(1);
    let c = inbox.take_credit(1, P2P, 1000, 8).unwrap();
    assert_eq!((c.bytes, c.lanes), (400, vec![(P2P, 4)]));
    // Owed again, and the sender says it waits: paid at once.
    take(1);
    assert_eq!(inbox.take_credit(1, P2P, 1000, 8), None);
    inbox.want_credit(1);
    let c = inbox.take_credit(1, P2P, 1000, 8).unwrap();
    assert_eq!((c.bytes, c.lanes), (100, vec![(P2P, 1)]));
    // Collective traffic is not credited.
    inbox.deliver(1, COLL, msg(&[0; 5000]));
    inbox.try_take(1, COLL, None).unwrap().unwrap();
    assert_eq!(inbox.take_credit(1, COLL, 1, 1), None);
}

#[test]
fn credit_counts_each_lane_whatever_order_their_messages_come_in() {
    let inbox = Inbox::new(3, Cores::Shared);
    let other = LaneKey { tag: 2, ..P2P };
    let take = |src: u32, key: LaneKey| {
        inbox.deliver(src, key, msg(&[0; 10]));
        inbox.try_take(src, key, None).unwrap().unwrap();
    };
    // Runs on one lane, switches, and back; another sender between.
    for key in [P2P, P2P, other, P2P, other, other, P2P] {
        take(1, key);
    }
    take(2, other);
    // Half of lane `other`'s depth (6) is three messages: due, though the
    // lane it was asked for on holds its count in the map.
    assert_eq!(
        inbox.take_credit(1, other, 1000, 6).map(|c| c.bytes),
        Some(70)
    );
    assert_eq!(inbox.take_credit(1, P2P, 1, 1), None, "all of it went back");
    let c = inbox.take_credit(2, other, 1, 6).unwrap();
    assert_eq!((c.bytes, c.lanes), (10, vec![(other, 1)]));
    // The counts per lane: four on P2P, three on `other`, in one credit.
    for key in [P2P, other, other, P2P, P2P, P2P, other] {
        take(1, key);
    }
    let mut lanes = inbox.take_credit(1, P2P, 1000, 8).unwrap().lanes;
    lanes.sort_by_key(|(k, _)| k.tag);
    assert_eq!(lanes, vec![(P2P, 4), (other, 3)]);
}

#[test]
fn a_sender_is_owed_on_no_more_lanes_than_it_may_have_in_flight() {
    let inbox = Inbox::new(2, Cores::Shared);
    let lane = |tag: usize| LaneKey {
        tag: tag as u64,
        ..P2P
    };
    let take = |key: LaneKey| {
        inbox.deliver(1, key, msg(&[0; 1]));
        inbox.try_take(1, key, None).unwrap().unwrap();
    };
    // A message taken on each of just under half the lanes a sender may
    // have in flight: below any batch, nothing goes back yet.
    let half = LANES_PER_SENDER / 2;
    (0..half - 1).for_each(|t| take(lane(t)));
    assert_eq!(inbox.take_credit(1, P2P, u64::MAX, u32::MAX), None);
    // Half of them: paid back with the next receive, as if it asked.
    take(lane(half - 1));
    let c = inbox.take_credit(1, P2P, u64::MAX, u32::MAX).unwrap();
    assert_eq!((c.bytes, c.lanes.len()), (half as u64, half));
    // What comes for a forgotten communicator is taken by no receive:
    // an honest sender's lanes in flight fit, one lane more is refused.
    inbox.forget(7);
    for t in 0..LANES_PER_SENDER {
        assert_eq!(inbox.deliver_checked(1, lane(t), msg(&[])), Ok(()));
    }
    assert!(inbox
        .deliver_checked(1, lane(LANES_PER_SENDER), msg(&[]))
        .is_err());
    // All of it goes back in one credit; then it is owed afresh.
    let c = inbox.take_credit(1, P2P, u64::MAX, u32::MAX).unwrap();
    assert_eq!(c.lanes.len(), LANES_PER_SENDER + 1);
    assert_eq!(inbox.deliver_checked(1, lane(0), msg(&[])), Ok(()));
}

#[test]
fn revocations_of_communicators_not_yet_here_are_held_until_made() {
    let inbox = Inbox::new(3, Cores::Shared);
    assert_eq!(inbox.revoke_from(1, 40), None, "held");
    assert!(!inbox.is_revoked(40));
    assert!(inbox.set_members(40, vec![0, 1, 2]), "applied when made");
    assert_eq!(inbox.revoke_from(2, 40), Some(true), "now it is here");
    assert_eq!(inbox.revoke_from(2, 40), Some(false), "once");
    // One peer's held revocations are bounded; another's are its own.
    for comm in 100..100 + 3 * PENDING_REVOCATIONS as u64 {
        inbox.revoke_from(1, comm);
    }
    inbox.revoke_from(2, 500);
    let held = (100..100 + 3 * PENDING_REVOCATIONS as u64)
        .filter(|&c| inbox.set_members(c, vec![0, 1]))
        .count();
    assert_eq!(held, PENDING_REVOCATIONS);
    assert!(inbox.set_members(500, vec![0, 2]));
}

#[test]
fn a_forgotten_communicator_ends_its_waits_and_credits_what_comes_for_it() {
    let t0 = Instant::now();
    let inbox = inbox_at(t0);
    inbox.deliver(1, P2P, msg(&[1; 10]));
    inbox.forget(7);
    assert_eq!(
        failed_with(verdict(&inbox, 1, P2P, t0, t0)),
        TransportError::Closed
    );
    // What came, and what comes later, is owed back to its sender.
    inbox.deliver(1, P2P, msg(&[2; 30]));
    inbox.want_credit(1);
    let c = inbox.take_credit(1, P2P, u64::MAX, u32::MAX).unwrap();
    assert_eq!(c.bytes, 40);
    assert_eq!(inbox.stats()[1].queued_bytes, 0);
}

#[test]
fn what_the_inbox_tells_without_its_lock_follows_its_state() {
    let inbox = Inbox::new(4, Cores::Shared);
    assert!(inbox.try_take(1, P2P, None).is_none());
    assert!(inbox.lane_is_empty(1, P2P));
    inbox.deliver(1, P2P, msg(b"abc"));
    assert!(!inbox.lane_is_empty(1, P2P));
    assert!(inbox.lane_is_empty(2, P2P), "another sender's lane");
    let got = inbox
        .try_take(1, P2P, None)
        .expect("queued")
        .expect("taken");
    assert_eq!(got.as_ref(), b"abc");
    assert!(inbox.lane_is_empty(1, P2P));
    assert!(inbox.unreachable(3).is_none());
    inbox.set_gone(3);
    assert!(matches!(
        inbox.unreachable(3),
        Some(TransportError::PeerDisconnected { rank: 3 })
    ));
    assert!(inbox.unreachable(2).is_none());
    assert!(!inbox.is_revoked(7));
    inbox.revoke(7);
    assert!(inbox.is_revoked(7) && !inbox.is_revoked(8));
    assert!(!inbox.is_closed());
    inbox.close();
    assert!(inbox.is_closed());
}
