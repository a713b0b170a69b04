//! An elastic seed: growths of a running job (members asking for their
//! own ranks, new processes taking the next ones), also under attack, and
//! what it refuses — a token holder that is no member, a member's claim
//! for a world of any size.

use super::session::{joiner_proof, seed_key, seed_proof_ok};
use super::tests::{connect_from, four_form, req, start_with, LONG, TOKEN};
use super::wire::{
    encode_claim, encode_proof, CHALLENGE_LEN, NOT_A_MEMBER, REPLY_LEN, SEED_VERSION,
};
use super::*;
use crate::form::FormationError;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn elastic(world: u32) -> Seed {
    start_with(world, LONG, true)
}

/// The `members` of a running job (ranks 0..members, each proving its
/// rank with its membership) grow it by `newcomers` new processes: every
/// one gets its rank (the members their own, the newcomers the next
/// ones), the same table, and the ready barrier passes. How long it
/// took, and the grown group's memberships in rank order.
fn grow(at: SocketAddr, members: &[Membership], newcomers: u32) -> (Duration, Vec<Membership>) {
    let world = members.len() as u32 + newcomers;
    let started = Instant::now();
    let joined: Vec<Joined> = std::thread::scope(|s| {
        let mut hs: Vec<_> = (0..newcomers)
            .map(|i| s.spawn(move || join(at, &req(0, None, TOKEN, LONG, 5000 + i as u16))))
            .collect();
        hs.extend(members.iter().zip(0..).map(|(m, r)| {
            s.spawn(move || {
                let mut q = req(world, Some(r), TOKEN, LONG, 6000 + r as u16);
                q.grow = newcomers;
                q.member = Some(m.clone());
                join(at, &q)
            })
        }));
        hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
    });
    let mut ranks: Vec<u32> = joined.iter().map(|j| j.rank).collect();
    ranks.sort_unstable();
    assert_eq!(ranks, (0..world).collect::<Vec<_>>());
    for j in &joined {
        assert_eq!(j.world, world);
        assert_eq!(j.peers, joined[0].peers);
        assert_eq!(j.identity.rank(), j.rank);
    }
    for r in 0..members.len() as u32 {
        let port = joined
            .iter()
            .find(|j| j.rank == r)
            .map(|j| j.peers[r as usize].port());
        assert_eq!(port, Some(6000 + r as u16), "a member keeps its rank");
    }
    let mut grown: Vec<Membership> = joined.iter().map(Joined::membership).collect();
    grown.sort_by_key(Membership::rank);
    std::thread::scope(|s| {
        for j in joined {
            s.spawn(move || j.ready(true, LONG).unwrap());
        }
    });
    (started.elapsed(), grown)
}

#[test]
fn a_running_job_grows_twice_and_newcomers_take_the_next_ranks() {
    let seed = elastic(4);
    let at = seed.local_addr();
    let (_, members) = four_form(at);
    let (_, members) = grow(at, &members, 2);
    // Shrunk to three (as after a failure: ranks 3 to 5 lost), back to five.
    grow(at, &members[..3], 2);
    drop(seed);
}

#[test]
fn growths_that_do_not_fit_are_refused_by_name() {
    // A seed that is not elastic: a new process is told so at once.
    let plain = start_with(1, LONG, false);
    let at = plain.local_addr();
    let t = Instant::now();
    let e = join(at, &req(0, None, TOKEN, LONG, 1)).unwrap_err();
    assert!(
        e.to_string().contains("serves no running job"),
        "{e} after {:?}",
        t.elapsed()
    );
    drop(plain);
    // An elastic seed whose job still forms refuses a growth; once it
    // runs, a member asking for another size than the growth's is a
    // world mismatch, and one asking for a newcomer's rank a conflict.
    let seed = elastic(2);
    let at = seed.local_addr();
    let mut early = req(3, Some(0), TOKEN, LONG, 1);
    early.grow = 1;
    let e = join(at, &early).unwrap_err();
    assert!(e.to_string().contains("serves no running job"), "{e}");
    let two: Vec<Joined> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| s.spawn(move || join(at, &req(2, Some(r), TOKEN, LONG, 1 + r as u16))))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
    });
    let [zero, one] = [0, 1].map(|r| two[r].membership());
    std::thread::scope(|s| {
        for j in two {
            s.spawn(move || j.ready(true, LONG).unwrap());
        }
    });
    std::thread::scope(|s| {
        let opener = s.spawn(move || {
            let mut q = req(4, Some(0), TOKEN, Duration::from_secs(3), 2);
            q.grow = 2;
            q.member = Some(zero);
            join(at, &q)
        });
        let mut other = req(5, Some(1), TOKEN, LONG, 3);
        other.grow = 3;
        other.member = Some(one.clone());
        let mut e = join(at, &other).unwrap_err();
        // Until the opener's join has reached the seed, this one opens
        // a growth of its own, and the opener is the mismatch.
        if !matches!(e, FormationError::WorldMismatch { .. }) {
            e = opener.join().unwrap().unwrap_err();
            assert!(matches!(e, FormationError::WorldMismatch { .. }), "{e}");
            return;
        }
        assert!(
            matches!(
                e,
                FormationError::WorldMismatch {
                    ours: 5,
                    theirs: 4,
                    ..
                }
            ),
            "{e}"
        );
        let mut taken = req(4, Some(2), TOKEN, LONG, 4);
        taken.grow = 2;
        taken.member = Some(one);
        let e = join(at, &taken).unwrap_err();
        assert!(matches!(e, FormationError::RankConflict { rank: 2 }), "{e}");
        // The opener's growth never fills: it names the ranks missing.
        let e = opener.join().unwrap().unwrap_err();
        assert!(
            matches!(&e, FormationError::Timeout { missing } if missing.is_empty() || missing == &[1, 2, 3]),
            "{e}"
        );
    });
}

/// 50 idle connections, a dribbler and a stream of garbage at the seed's
/// port while four ranks form, and while they grow to six: each finishes
/// long before an admission deadline, as if nobody were there.
#[test]
fn formation_and_growth_under_siege_finish_as_if_nobody_were_there() {
    let seed = elastic(4);
    let at = seed.local_addr();
    let stop = AtomicBool::new(false);
    let (formed, grown) = std::thread::scope(|s| {
        let stop = &stop;
        let (up_tx, up_rx) = crossbeam_channel::bounded(3);
        let idle_up = up_tx.clone();
        // Dropped when the test is done: the idle connections go then.
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
        s.spawn(move || {
            let idle: Vec<_> = (0..50u8)
                .map(|i| connect_from([127, 0, 0, 2 + i % 7], at))
                .collect();
            idle_up.send(()).unwrap();
            let _ = done_rx.recv();
            drop(idle);
        });
        for ip in [[127, 0, 0, 9], [127, 0, 0, 10]] {
            let up = up_tx.clone();
            s.spawn(move || {
                // Garbage as fast as the seed takes it, from a new
                // connection whenever it is cut off.
                let mut x = 0x2545_f491_4f6c_dd1du64;
                let mut told = false;
                while !stop.load(Ordering::Acquire) {
                    let mut c = connect_from(ip, at);
                    if !told {
                        up.send(()).unwrap();
                        told = true;
                    }
                    loop {
                        let chunk: Vec<u8> = (0..512)
                            .map(|_| {
                                x ^= x << 13;
                                x ^= x >> 7;
                                x ^= x << 17;
                                x as u8
                            })
                            .collect();
                        if stop.load(Ordering::Acquire) || c.write_all(&chunk).is_err() {
                            break;
                        }
                    }
                }
            });
        }
        for _ in 0..3 {
            up_rx.recv_timeout(LONG).unwrap();
        }
        let (formed, members) = four_form(at);
        let (grown, _) = grow(at, &members, 2);
        stop.store(true, Ordering::Release);
        drop(done_tx);
        (formed, grown)
    });
    // About 50 ms each here; a seed the strangers held up would take at
    // least an admission deadline (1 s).
    assert!(formed < Duration::from_millis(750), "formed in {formed:?}");
    assert!(grown < Duration::from_millis(750), "grew in {grown:?}");
    drop(seed);
}

/// A growth's claim by hand, as a hostile holder of the token plays it:
/// a Join for `want` of `world` adding `grow`, then the membership `claim`
/// makes of the Join, the Challenge and the advertised address (a rank
/// of the running group and its tag), under a valid proof of the token.
/// The seed's verdict, its proof checked.
fn claim_by_hand(
    at: SocketAddr,
    (world, want, grow): (u32, u32, u32),
    claim: impl FnOnce(&[u8], &[u8], &[u8]) -> (u32, [u8; 32]),
) -> ReplyMsg {
    let key = seed_key(Some(TOKEN));
    let mut c = connect_from([127, 0, 0, 5], at);
    let join = JoinMsg {
        version: SEED_VERSION,
        world,
        want,
        star: false,
        grow,
        nonce: [6; 24],
        share: session::Ephemeral::new().unwrap().share(),
    }
    .encode();
    c.write_all(&join).unwrap();
    let mut challenge = [0u8; CHALLENGE_LEN];
    c.read_exact(&mut challenge).unwrap();
    let advertise: SocketAddr = "127.0.0.5:9".parse().unwrap();
    let mut addr = Vec::new();
    crate::wire::codec::put_addr(&mut addr, advertise);
    let (member, tag) = claim(&join, &challenge, &addr);
    let claim = encode_claim(advertise, member, &tag);
    let proof = encode_proof(&claim, &joiner_proof(&key, &join, &challenge, &claim));
    c.write_all(&proof).unwrap();
    let mut reply = [0u8; REPLY_LEN];
    c.read_exact(&mut reply).unwrap();
    let (body, tag) = reply.split_at(12);
    assert!(seed_proof_ok(&key, &join, &challenge, &proof, body, tag));
    ReplyMsg::decode(body).unwrap()
}

/// `m`'s own claim of membership.
fn as_member(m: &Membership) -> impl FnOnce(&[u8], &[u8], &[u8]) -> (u32, [u8; 32]) + '_ {
    move |join, challenge, addr| (m.rank(), m.tag(join, challenge, addr))
}

fn no_claim(_: &[u8], _: &[u8], _: &[u8]) -> (u32, [u8; 32]) {
    (NOT_A_MEMBER, [0; 32])
}

/// Before: any holder of the token joined a growth as a member's rank
/// (rank 1 of 4 here, before the real one came) and was handed rank 1's
/// leaf and key and wired in its place. Now a growth's member proves the
/// rank it holds in the group the seed formed last, once per growth.
#[test]
fn a_token_holder_that_is_no_member_cannot_take_a_members_rank() {
    let seed = elastic(4);
    let at = seed.local_addr();
    let (_, members) = four_form(at);
    let status = |r: ReplyMsg| r.status;
    let not_member = Status::NotMember as u32;
    // No membership; a forged one; rank 1's tag from another join.
    assert_eq!(status(claim_by_hand(at, (6, 1, 2), no_claim)), not_member);
    let forged = |_: &[u8], _: &[u8], _: &[u8]| (1, [7; 32]);
    assert_eq!(status(claim_by_hand(at, (6, 1, 2), forged)), not_member);
    let replayed =
        |join: &[u8], _: &[u8], addr: &[u8]| (1, members[1].tag(join, &[0; CHALLENGE_LEN], addr));
    assert_eq!(status(claim_by_hand(at, (6, 1, 2), replayed)), not_member);
    // Through the joiner: refused at once, by name.
    let started = Instant::now();
    let mut impostor = req(6, Some(1), TOKEN, LONG, 7);
    impostor.grow = 2;
    let e = admit_me(at, &impostor).map(|a| a.rank).unwrap_err();
    assert!(
        e.to_string()
            .contains("does not take this process for a member"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // The members grow as if nobody had tried: rank 1 keeps its rank.
    let (_, grown) = grow(at, &members, 2);
    // A membership of the group before is no longer one; one of this
    // group claims one rank of a growth, not two.
    let stale = claim_by_hand(at, (7, 1, 1), as_member(&members[1]));
    assert_eq!(status(stale), not_member);
    let first = claim_by_hand(at, (7, 0, 1), as_member(&grown[0]));
    assert_eq!((first.status, first.rank), (Status::Ok as u32, 0));
    let again = claim_by_hand(at, (7, 1, 1), as_member(&grown[0]));
    assert_eq!(status(again), not_member);
    drop(seed);
}

/// Before: one member's claim of a growth to a world near 2^32 made the
/// seed allocate a slot per rank and abort the process hosting it (rank
/// 0's: the whole job). Now every number of a claim is checked against
/// the running group first: the seed refuses it and serves on.
#[test]
fn a_members_claim_of_any_size_is_refused_and_the_seed_serves_on() {
    let seed = elastic(4);
    let at = seed.local_addr();
    let (_, members) = four_form(at);
    let world = Status::World as u32;
    let too_big = [
        (u32::MAX, 1, 1),
        (u32::MAX, 1, (1 << 24) - 1),
        (4 + GROW_MAX + 1, 1, GROW_MAX + 1),
        (4 + (1 << 24) - 1, 1, (1 << 24) - 1),
        // More members than the group has.
        (7, 1, 2),
        (u32::MAX, 1, 0xff_ffff),
        // No member at all, or no new process.
        (1, 0, 1),
        (4, 1, 0),
    ];
    for (n, want, grow) in too_big {
        let r = claim_by_hand(at, (n, want, grow), as_member(&members[1]));
        // A claim of no new process is not a growth: a formation's join.
        let expected = if grow == 0 {
            Status::RankConflict as u32
        } else {
            world
        };
        assert_eq!(r.status, expected, "world {n}, grow {grow}");
        if grow > 0 {
            assert_eq!(r.world, 4, "the running world, to compare with");
        }
    }
    let mut q = req(4 + GROW_MAX + 1, Some(1), TOKEN, LONG, 8);
    q.grow = GROW_MAX + 1;
    q.member = Some(members[1].clone());
    let e = join(at, &q).unwrap_err();
    assert!(e.to_string().contains("at most 65536"), "{e}");
    // The most a growth may add is still a growth.
    let r = claim_by_hand(at, (4 + GROW_MAX, 3, GROW_MAX), as_member(&members[3]));
    assert_eq!((r.status, r.world), (Status::Ok as u32, 4 + GROW_MAX));
    drop(seed);
    // And the job grows as before, none of these having used a claim.
    let seed = elastic(4);
    let at = seed.local_addr();
    let (_, members) = four_form(at);
    for (n, want, grow) in too_big.into_iter().filter(|c| c.2 > 0) {
        let r = claim_by_hand(at, (n, want, grow), as_member(&members[1]));
        assert_eq!(r.status, world);
    }
    grow(at, &members, 2);
    drop(seed);
}
