//! An elastic seed: growths of a running job (members asking for their
//! own ranks, new processes taking the next ones), also under attack, and
//! what it refuses.

use super::tests::{connect_from, four_form, req, start_with, LONG, TOKEN};
use super::*;
use crate::form::FormationError;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn elastic(world: u32) -> Seed {
    start_with(world, LONG, true)
}

/// The `members` of a running job (ranks 0..members) grow it by
/// `newcomers` new processes: every one gets its rank (the members their
/// own, the newcomers the next ones), the same table, and the ready
/// barrier passes. How long it took.
fn grow(at: SocketAddr, members: u32, newcomers: u32) -> Duration {
    let world = members + newcomers;
    let started = Instant::now();
    let joined: Vec<Joined> = std::thread::scope(|s| {
        let mut hs: Vec<_> = (0..newcomers)
            .map(|i| s.spawn(move || join(at, &req(0, None, TOKEN, LONG, 5000 + i as u16))))
            .collect();
        hs.extend((0..members).map(|r| {
            s.spawn(move || {
                let mut q = req(world, Some(r), TOKEN, LONG, 6000 + r as u16);
                q.grow = newcomers;
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
    for r in 0..members {
        let port = joined
            .iter()
            .find(|j| j.rank == r)
            .map(|j| j.peers[r as usize].port());
        assert_eq!(port, Some(6000 + r as u16), "a member keeps its rank");
    }
    std::thread::scope(|s| {
        for j in joined {
            s.spawn(move || j.ready(true, LONG).unwrap());
        }
    });
    started.elapsed()
}

#[test]
fn a_running_job_grows_twice_and_newcomers_take_the_next_ranks() {
    let seed = elastic(4);
    let at = seed.local_addr();
    four_form(at);
    grow(at, 4, 2);
    // Shrunk to three (as after a failure), back to five.
    grow(at, 3, 2);
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
    let seed = elastic(1);
    let at = seed.local_addr();
    let mut early = req(2, Some(0), TOKEN, LONG, 1);
    early.grow = 1;
    let e = join(at, &early).unwrap_err();
    assert!(e.to_string().contains("serves no running job"), "{e}");
    let one = join(at, &req(1, Some(0), TOKEN, LONG, 1)).unwrap();
    one.ready(true, LONG).unwrap();
    std::thread::scope(|s| {
        let opener = s.spawn(move || {
            let mut q = req(3, Some(0), TOKEN, Duration::from_secs(3), 2);
            q.grow = 2;
            join(at, &q)
        });
        let mut other = req(4, Some(1), TOKEN, LONG, 3);
        other.grow = 2;
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
                    ours: 4,
                    theirs: 3,
                    ..
                }
            ),
            "{e}"
        );
        let mut taken = req(3, Some(2), TOKEN, LONG, 4);
        taken.grow = 2;
        let e = join(at, &taken).unwrap_err();
        assert!(matches!(e, FormationError::RankConflict { rank: 2 }), "{e}");
        // The opener's growth never fills: it names the ranks missing.
        let e = opener.join().unwrap().unwrap_err();
        assert!(
            matches!(&e, FormationError::Timeout { missing } if missing.is_empty() || missing == &[1, 2]),
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
        let formed = four_form(at);
        let grown = grow(at, 4, 2);
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
