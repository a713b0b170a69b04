//! In-process failures: a silent rank is a `Timeout` naming it and the
//! operation, a departed rank is `PeerDisconnected` at once, ranks that
//! disagree on the collective get `CollectiveMismatch`, and shutdown
//! confirms or reports.

use crate::support::run_world;
use meshwork::{local, Error, ReduceOp};
use std::time::{Duration, Instant};

const SHORT: Duration = Duration::from_millis(300);

#[test]
fn a_silent_rank_times_out_naming_it_and_the_op() {
    let world = local(3).unwrap();
    let started = Instant::now();
    std::thread::scope(|s| {
        for g in &world[..2] {
            s.spawn(move || {
                g.set_timeout(SHORT);
                let mut x = [1.0f32; 10];
                let e = g.all_reduce(&mut x, ReduceOp::Sum).unwrap_err();
                match e {
                    Error::Timeout { op, waiting_on, .. } => {
                        assert_eq!(op, "all_reduce");
                        assert_eq!(waiting_on.len(), 1);
                    }
                    other => panic!("{other:?}"),
                }
            });
        }
    });
    // Rank 2 never called; the others gave up within the deadline + 2 s.
    assert!(started.elapsed() < SHORT + Duration::from_secs(2));
}

#[test]
fn a_departed_rank_is_a_disconnect_at_once() {
    let mut world = local(3).unwrap();
    let gone = world.pop().unwrap();
    drop(gone);
    let started = Instant::now();
    std::thread::scope(|s| {
        for g in &world {
            s.spawn(move || {
                // A long deadline: the error must come from the disconnect.
                g.set_timeout(Duration::from_secs(30));
                let e = g.barrier().unwrap_err();
                assert!(matches!(e, Error::PeerDisconnected { rank: 2 }), "{e:?}");
            });
        }
    });
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// A star barrier on 6 ranks: `gone` leaves before it; every other member,
/// including the workers that only talk to rank 0, fails at once naming
/// it (the coordinator's release names whom it could not hear from).
fn star_barrier_without(gone: u32) {
    let mut world = local(6).unwrap();
    drop(world.remove(gone as usize));
    let started = Instant::now();
    std::thread::scope(|s| {
        for g in &world {
            s.spawn(move || {
                g.set_algorithm("barrier", Some("star")).unwrap();
                // A long deadline: the error must come from the departure.
                g.set_timeout(Duration::from_secs(30));
                let e = g.barrier().unwrap_err();
                assert!(
                    matches!(e, Error::PeerDisconnected { rank } if rank == gone),
                    "rank {}: {e:?}",
                    g.rank()
                );
            });
        }
    });
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_departed_worker_fails_every_member_of_a_star_barrier_at_once() {
    star_barrier_without(3);
}

#[test]
fn a_departed_coordinator_fails_every_member_of_a_star_barrier_at_once() {
    star_barrier_without(0);
}

#[test]
fn different_collectives_at_one_point_are_a_mismatch_on_both_sides() {
    let out = run_world(2, |g| {
        g.set_timeout(Duration::from_secs(10));
        let mut x = [1.0f32; 3];
        if g.rank() == 0 {
            g.all_reduce(&mut x, ReduceOp::Sum)
        } else {
            g.broadcast(&mut x, 0)
        }
    });
    for (r, o) in out.iter().enumerate() {
        match o {
            Err(Error::CollectiveMismatch {
                op,
                ours,
                theirs,
                rank,
            }) => {
                assert_eq!(*rank as usize, 1 - r);
                let (mine, other) = if r == 0 {
                    ("all_reduce", "broadcast")
                } else {
                    ("broadcast", "all_reduce")
                };
                assert_eq!(op, mine);
                assert!(
                    ours.starts_with(mine) && theirs.starts_with(other),
                    "{ours} / {theirs}"
                );
            }
            other => panic!("rank {r}: {other:?}"),
        }
    }
}

#[test]
fn different_counts_types_and_algorithms_are_mismatches() {
    // Each case: rank 1 deviates in one argument; nobody waits for the deadline.
    let started = Instant::now();
    let out = run_world(3, |g| {
        g.set_timeout(Duration::from_secs(10));
        let odd = g.rank() == 1;
        let mut errs = Vec::new();
        let mut a = vec![1.0f32; if odd { 4 } else { 3 }];
        errs.push(g.all_reduce(&mut a, ReduceOp::Sum).err());
        errs.push(
            if odd {
                g.broadcast(&mut [1u32; 3], 0)
            } else {
                g.broadcast(&mut [1i32; 3], 0)
            }
            .err(),
        );
        if odd {
            g.set_algorithm("all_reduce", Some("ring")).unwrap();
        }
        errs.push(g.all_reduce(&mut [1.0f64; 8], ReduceOp::Sum).err());
        g.set_algorithm("all_reduce", None).unwrap();
        errs.push(
            g.all_reduce(
                &mut [1.0f64; 8],
                if odd { ReduceOp::Max } else { ReduceOp::Sum },
            )
            .err(),
        );
        errs
    });
    for (r, errs) in out.iter().enumerate() {
        for (case, e) in errs.iter().enumerate() {
            // Every rank sees the mismatch: those that hear from the
            // disagreeing rank in the call, and the rest through the abort
            // passed on, or (the broadcast, case 1, where ranks 0 and 2
            // only talk to each other) the rooted call's pre-check.
            assert!(
                matches!(e, Some(Error::CollectiveMismatch { .. })),
                "rank {r} case {case}: {e:?}"
            );
        }
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn shutdown_confirms_then_refuses_further_calls() {
    for _ in 0..50 {
        run_world(3, |g| {
            let mut x = [g.rank() as u64 + 1; 64];
            g.all_reduce(&mut x, ReduceOp::Sum).unwrap();
            // Shut down right after the last collective: nothing is lost.
            g.shutdown().unwrap();
            assert_eq!(x, [6; 64]);
            g.shutdown().unwrap();
            assert!(matches!(g.barrier(), Err(Error::ShutDown)));
            assert!(matches!(
                g.all_reduce_nb(vec![1u8], ReduceOp::Sum).wait(),
                Err(Error::ShutDown)
            ));
        });
    }
}

#[test]
fn shutdown_flushes_pending_non_blocking_work() {
    run_world(2, |g| {
        let w = g.all_reduce_nb(vec![1u32; 1 << 16], ReduceOp::Sum);
        g.shutdown().unwrap();
        assert!(w.is_complete());
        assert_eq!(w.wait().unwrap(), vec![2; 1 << 16]);
    });
}

#[test]
fn shutdown_reports_a_rank_that_never_confirms() {
    let world = local(2).unwrap();
    world[0].set_timeout(SHORT);
    let started = Instant::now();
    match world[0].shutdown() {
        Err(Error::ShutdownIncomplete { ranks }) => assert_eq!(ranks, [1]),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < SHORT + Duration::from_secs(2));
}

/// A revoked group: a rank blocked in a collective fails at once with
/// `Revoked`, and so does every later call; agreement and shrinking still
/// work on it (no one failed: the same four, renumbered identically).
#[test]
fn revoke_fails_pending_and_later_calls_and_the_group_still_shrinks() {
    let world = local(4).unwrap();
    let results: Vec<(u64, Vec<u32>, u32)> = std::thread::scope(|s| {
        let hs: Vec<_> = world
            .iter()
            .map(|g| {
                s.spawn(move || {
                    if g.rank() == 0 {
                        g.revoke();
                    } else {
                        // Waits for rank 0, which never calls: revoked.
                        let mut x = [1u32; 4];
                        let e = g.all_reduce(&mut x, ReduceOp::Sum).unwrap_err();
                        assert!(matches!(e, Error::Revoked), "{e:?}");
                    }
                    assert!(matches!(g.barrier(), Err(Error::Revoked)));
                    assert!(matches!(g.send(&[1u8], 0, 1), Err(Error::Revoked)));
                    let (flags, failed) = g.agree(!(1u64 << g.rank())).unwrap();
                    let s = g.shrink().unwrap();
                    let mut x = [s.rank() + 1];
                    s.all_reduce(&mut x, ReduceOp::Sum).unwrap();
                    assert_eq!(x, [1 + 2 + 3 + 4]);
                    (!flags, failed, s.world_size())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in &results {
        assert_eq!(*r, (0b1111, vec![], 4), "{results:?}");
    }
}

/// `Recovery::Shrink` without a failure: rank 0 revokes the group; the
/// others' pending non-blocking all_reduce (rank 0 never joins it) and
/// rank 0's next call fail with `GroupShrunk { failed: [] }`, the same
/// group objects then hold a fresh communicator of all four, and the
/// retried call works.
#[test]
fn recovery_shrink_after_a_revocation_replaces_the_group_in_place() {
    let world = local(4).unwrap();
    for g in &world {
        g.set_recovery(meshwork::Recovery::Shrink);
    }
    std::thread::scope(|s| {
        for g in &world {
            s.spawn(move || {
                let first = if g.rank() == 0 {
                    g.revoke();
                    let mut x = [1u32];
                    g.all_reduce(&mut x, ReduceOp::Sum)
                } else {
                    g.all_reduce_nb(vec![1u32], ReduceOp::Sum)
                        .wait()
                        .map(|_| ())
                };
                let e = first.unwrap_err();
                assert!(
                    matches!(&e, Error::GroupShrunk { failed } if failed.is_empty()),
                    "rank {}: {e:?}",
                    g.rank()
                );
                let mut x = [g.rank() + 1];
                g.all_reduce(&mut x, ReduceOp::Sum).unwrap();
                assert_eq!((x, g.world_size()), ([10], 4));
            });
        }
    });
}

/// Every rank's outcome of `f` on a world of `p` shaped `topology`.
fn on_world<R: Send>(
    p: u32,
    topology: meshwork::Topology,
    f: impl Fn(&meshwork::ProcessGroup) -> R + Sync,
) -> Vec<R> {
    let world = meshwork::local_with(p, topology).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = world
            .iter()
            .map(|g| {
                g.set_timeout(Duration::from_secs(20));
                s.spawn(|| f(g))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Rank 1 names another root (or, for the scans, another operator) than
/// ranks 0 and 2, in each rooted collective (and each scan), blocking and
/// non-blocking, in a mesh and in a star: every rank's call fails at once
/// with `CollectiveMismatch` — before, the root of a broadcast or scatter
/// returned `Ok` with its own data, the others with rank 0's, and a reduce
/// or gather waited out the deadline on some ranks while one returned.
/// Afterwards the group is in step: a checked all_reduce passes.
#[test]
fn a_mismatched_root_is_a_mismatch_on_every_rank_at_once() {
    use meshwork::Topology;
    type Call = fn(&meshwork::ProcessGroup, u32, bool) -> meshwork::Result<()>;
    let cases: [(&str, Call); 6] = [
        ("broadcast", |g, root, nb| {
            if nb {
                g.broadcast_nb(vec![g.rank(); 4], root).wait().map(drop)
            } else {
                g.broadcast(&mut [g.rank(); 4], root)
            }
        }),
        ("scatter", |g, root, nb| {
            let send = if g.rank() == root {
                vec![7u32; 6]
            } else {
                Vec::new()
            };
            if nb {
                g.scatter_nb(send, 2, root).wait().map(drop)
            } else {
                g.scatter(&send, &mut [0u32; 2], root)
            }
        }),
        ("reduce", |g, root, nb| {
            if nb {
                g.reduce_nb(vec![1u32; 4], ReduceOp::Sum, root)
                    .wait()
                    .map(drop)
            } else {
                g.reduce(&mut [1u32; 4], ReduceOp::Sum, root)
            }
        }),
        ("gather", |g, root, nb| {
            if nb {
                g.gather_nb(vec![g.rank(); 2], root).wait().map(drop)
            } else {
                let mut recv = if g.rank() == root {
                    vec![0u32; 6]
                } else {
                    Vec::new()
                };
                g.gather(&[g.rank(); 2], &mut recv, root)
            }
        }),
        // The scans have no root: rank 1 reduces another way.
        ("scan", |g, odd, nb| {
            let op = if odd == 1 {
                ReduceOp::Max
            } else {
                ReduceOp::Sum
            };
            if nb {
                g.scan_nb(vec![1u32; 4], op).wait().map(drop)
            } else {
                g.scan(&mut [1u32; 4], op)
            }
        }),
        ("exclusive_scan", |g, odd, nb| {
            let op = if odd == 1 {
                ReduceOp::Max
            } else {
                ReduceOp::Sum
            };
            if nb {
                g.exclusive_scan_nb(vec![1u32; 4], op).wait().map(drop)
            } else {
                g.exclusive_scan(&mut [1u32; 4], op)
            }
        }),
    ];
    for topology in [Topology::Mesh, Topology::Star] {
        for (name, call) in cases {
            for nb in [false, true] {
                let started = Instant::now();
                let out = on_world(3, topology, |g| {
                    let root = if g.rank() == 1 { 1 } else { 0 };
                    let got = call(g, root, nb);
                    let mut x = [1u32; 2];
                    g.all_reduce(&mut x, ReduceOp::Sum).unwrap();
                    assert_eq!(x, [3, 3]);
                    got
                });
                let ctx = format!("{name}, {topology:?}, non-blocking {nb}");
                for (r, o) in out.iter().enumerate() {
                    match o {
                        Err(Error::CollectiveMismatch { op, rank, .. }) => {
                            assert_eq!(op, name, "{ctx}");
                            // Rank 1 differs from the others; they from it.
                            let want = if r == 1 { [0, 2] } else { [1, 1] };
                            assert!(want.contains(rank), "{ctx}: rank {r} names {rank}");
                        }
                        other => panic!("{ctx}: rank {r}: {other:?}"),
                    }
                }
                assert!(started.elapsed() < Duration::from_secs(10), "{ctx}");
            }
        }
    }
}

/// A send waiting for room at a receiver that takes nothing (its lane is
/// full) ends as soon as the group is revoked, with `Revoked` — not at
/// the deadline: in process (`local`) and over links with credits (a
/// star of in-memory links).
#[test]
fn a_revocation_ends_a_send_waiting_for_room() {
    use meshwork::Topology;
    for world in [
        meshwork::local(2).unwrap(),
        meshwork::local_with(2, Topology::Star).unwrap(),
    ] {
        for g in &world {
            g.set_timeout(Duration::from_secs(30));
        }
        let (about_to_wait, wait) = std::sync::mpsc::channel();
        let started = Instant::now();
        let got = std::thread::scope(|s| {
            let sender = s.spawn(|| {
                for i in 0..meshwork_transport::LANE_DEPTH + 8 {
                    if i == meshwork_transport::LANE_DEPTH {
                        let _ = about_to_wait.send(());
                    }
                    world[0].send_bytes(&[1], 1, 5)?;
                }
                Ok(())
            });
            wait.recv().unwrap();
            world[1].revoke();
            sender.join().unwrap()
        });
        assert!(matches!(got, Err(Error::Revoked)), "{got:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
}
