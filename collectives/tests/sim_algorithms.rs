//! Every algorithm on the deterministic simulated world: many interleavings
//! and link delays, exact results (i64 sums, checked against i128), and
//! faults that must end in errors on every other rank, never a hang.

use meshwork_collectives::sim::{self, Fault, SimComm, SimConfig, SimError};
use meshwork_collectives::{
    all_gather, all_reduce, all_to_all, barrier, broadcast, gather, reduce, reduce_scatter, scan,
    scatter, Algorithm, Collective, ReduceOp,
};

/// Rank `r`'s input element `i`: small, distinct, sign-varying.
fn input(r: usize, i: usize) -> i64 {
    ((r * 7 + i * 13) % 23) as i64 - 11
}

fn inputs(r: usize, n: usize) -> Vec<i64> {
    (0..n).map(|i| input(r, i)).collect()
}

/// Run `coll` with `algo` on rank `comm`; returns the rank's output buffer
/// (empty where the collective leaves it unspecified).
fn run_one(
    comm: &mut SimComm<'_>,
    coll: Collective,
    algo: Algorithm,
    n: usize,
) -> Result<Vec<i64>, SimError> {
    use meshwork_collectives::Comm;
    let (p, r) = (comm.size(), comm.rank());
    let root = p / 2;
    let op = ReduceOp::Sum;
    Ok(match coll {
        Collective::AllReduce => {
            let mut b = inputs(r, n);
            all_reduce::all_reduce(comm, &mut b, op, algo)?;
            b
        }
        Collective::Broadcast => {
            let mut b = if r == root { inputs(r, n) } else { vec![0; n] };
            broadcast::broadcast(comm, &mut b, root, algo)?;
            b
        }
        Collective::AllGather => {
            let mut out = vec![0; n * p];
            all_gather::all_gather(comm, &inputs(r, n), &mut out, algo)?;
            out
        }
        Collective::ReduceScatter => {
            let mut out = vec![0; n];
            reduce_scatter::reduce_scatter(comm, &inputs(r, n * p), &mut out, op, algo)?;
            out
        }
        Collective::Reduce => {
            let mut b = inputs(r, n);
            reduce::reduce(comm, &mut b, op, root, algo)?;
            if r == root {
                b
            } else {
                Vec::new()
            }
        }
        Collective::AllToAll => {
            let mut out = vec![0; n * p];
            all_to_all::all_to_all(comm, &inputs(r, n * p), &mut out, algo)?;
            out
        }
        Collective::Gather => {
            let mut out = if r == root {
                vec![0; n * p]
            } else {
                Vec::new()
            };
            gather::gather(comm, &inputs(r, n), &mut out, root, algo)?;
            out
        }
        Collective::Scatter => {
            let send = if r == root {
                inputs(r, n * p)
            } else {
                Vec::new()
            };
            let mut out = vec![0; n];
            scatter::scatter(comm, &send, &mut out, root, algo)?;
            out
        }
        Collective::Scan | Collective::ExclusiveScan => {
            let mut b = inputs(r, n);
            scan::scan(comm, &mut b, op, coll == Collective::ExclusiveScan, algo)?;
            b
        }
        Collective::Barrier => {
            barrier::barrier(comm, algo)?;
            Vec::new()
        }
    })
}

/// The expected output of rank `r`, from first principles in i128.
fn expected(coll: Collective, p: usize, r: usize, n: usize) -> Vec<i64> {
    let root = p / 2;
    let sum = |ranks: std::ops::Range<usize>, i: usize| {
        ranks.map(|q| i128::from(input(q, i))).sum::<i128>() as i64
    };
    match coll {
        Collective::AllReduce => (0..n).map(|i| sum(0..p, i)).collect(),
        Collective::Broadcast => inputs(root, n),
        Collective::AllGather => (0..p).flat_map(|q| inputs(q, n)).collect(),
        Collective::ReduceScatter => (r * n..(r + 1) * n).map(|i| sum(0..p, i)).collect(),
        Collective::Reduce if r == root => (0..n).map(|i| sum(0..p, i)).collect(),
        Collective::AllToAll => (0..p)
            .flat_map(|q| (r * n..(r + 1) * n).map(move |i| input(q, i)))
            .collect(),
        Collective::Gather if r == root => (0..p).flat_map(|q| inputs(q, n)).collect(),
        Collective::Scatter => (r * n..(r + 1) * n).map(|i| input(root, i)).collect(),
        Collective::Scan => (0..n).map(|i| sum(0..r + 1, i)).collect(),
        Collective::ExclusiveScan => (0..n).map(|i| sum(0..r, i)).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn every_algorithm_many_interleavings() {
    let delays: [fn(usize, usize) -> u64; 3] = [
        |_, _| 1,
        |f, t| ((f * 5 + t * 3) % 7) as u64,
        |f, _| if f == 0 { 20 } else { 1 },
    ];
    for coll in Collective::ALL {
        for &algo in coll.algorithms() {
            for p in 1..=9 {
                for n in [0, 1, p + 1, 37] {
                    for seed in 0..3u64 {
                        let config = SimConfig {
                            seed: seed * 31 + p as u64,
                            link_delay: delays[seed as usize % 3],
                            ..SimConfig::default()
                        };
                        let out = sim::run(p, config, |c| run_one(c, coll, algo, n));
                        for (r, got) in out.into_iter().enumerate() {
                            let got = got.unwrap_or_else(|e| {
                                panic!("{coll:?}/{algo:?} P={p} n={n} seed={seed} rank {r}: {e:?}")
                            });
                            assert_eq!(
                                got,
                                expected(coll, p, r, n),
                                "{coll:?}/{algo:?} P={p} n={n} seed={seed} rank {r}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The tree algorithms (all_reduce, broadcast, reduce, barrier, gather,
/// scatter, all_gather) over trees of fanout 1 (a chain), 2 and 3, on
/// worlds that fill their last level and worlds that do not, with
/// segments small enough that relays pipeline: exact everywhere.
#[test]
fn tree_algorithms_on_trees_of_every_shape() {
    use meshwork_collectives::{
        all_reduce::all_reduce_tree, broadcast::broadcast_tree, reduce::reduce_tree,
    };
    for fanout in [1, 2, 3] {
        for p in 1..=13 {
            for seed in 0..3u64 {
                let config = || SimConfig {
                    seed: seed * 17 + p as u64,
                    link_delay: |f, t| ((f * 5 + t * 3) % 7) as u64,
                    fanout,
                    ..SimConfig::default()
                };
                for coll in [
                    Collective::AllReduce,
                    Collective::Broadcast,
                    Collective::Reduce,
                    Collective::Barrier,
                    Collective::Gather,
                    Collective::Scatter,
                    Collective::AllGather,
                ] {
                    let out = sim::run(p, config(), |c| {
                        use meshwork_collectives::Comm;
                        let r = c.rank();
                        let root = p / 2;
                        let mut b = inputs(r, 100);
                        match coll {
                            Collective::AllReduce => all_reduce_tree(c, &mut b, ReduceOp::Sum, 16)?,
                            Collective::Broadcast => {
                                if r != root {
                                    b = vec![0; 100];
                                }
                                broadcast_tree(c, &mut b, root, 16)?
                            }
                            Collective::Reduce => {
                                reduce_tree(c, &mut b, ReduceOp::Sum, root, 16)?;
                                if r != root {
                                    b.clear();
                                }
                            }
                            Collective::Barrier => {
                                barrier::barrier(c, meshwork_collectives::Algorithm::Tree)?;
                                b.clear();
                            }
                            other => {
                                b = run_one(c, other, meshwork_collectives::Algorithm::Tree, 100)?
                            }
                        }
                        Ok(b)
                    });
                    for (r, got) in out.into_iter().enumerate() {
                        let got = got.unwrap_or_else(|e| {
                            panic!("{coll:?} fanout {fanout} P={p} rank {r}: {e:?}")
                        });
                        let want = match coll {
                            Collective::Barrier => Vec::new(),
                            c => expected(c, p, r, 100),
                        };
                        assert_eq!(
                            got, want,
                            "{coll:?} fanout {fanout} P={p} seed {seed} rank {r}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn ring_pipelines_many_segments() {
    // 1000 i64 = 8000 bytes per rank; 64-element segments force pipelining
    // with ragged chunk and segment boundaries.
    for p in [2, 3, 5, 8] {
        for seed in 0..4 {
            let out = sim::run(
                p,
                SimConfig {
                    seed,
                    ..SimConfig::default()
                },
                |c| {
                    let mut b = inputs(meshwork_collectives::Comm::rank(c), 1000);
                    all_reduce::all_reduce_ring(c, &mut b, ReduceOp::Sum, 64)?;
                    Ok(b)
                },
            );
            for (r, got) in out.into_iter().enumerate() {
                assert_eq!(
                    got.unwrap(),
                    expected(Collective::AllReduce, p, r, 1000),
                    "P={p} rank {r}"
                );
            }
        }
        let out = sim::run(
            p,
            SimConfig {
                seed: 3,
                ..SimConfig::default()
            },
            |c| {
                let mut out = vec![0; 101];
                let send = inputs(meshwork_collectives::Comm::rank(c), 101 * p);
                reduce_scatter::reduce_scatter_ring(c, &send, &mut out, ReduceOp::Sum, 16)?;
                Ok(out)
            },
        );
        for (r, got) in out.into_iter().enumerate() {
            assert_eq!(
                got.unwrap(),
                expected(Collective::ReduceScatter, p, r, 101),
                "P={p} rank {r}"
            );
        }
        let out = sim::run(p, SimConfig::default(), |c| {
            let mut b = inputs(meshwork_collectives::Comm::rank(c), 1000);
            broadcast::broadcast_chain(c, &mut b, 1, 64)?;
            Ok(b)
        });
        for got in out {
            assert_eq!(got.unwrap(), inputs(1, 1000));
        }
    }
}

/// A rank that crashes or freezes mid-algorithm: it fails, and so does every
/// rank that depends on it, and nobody hangs; ranks that finished before
/// the fault may succeed, but their results are still right.
#[test]
fn faults_end_in_errors_not_hangs() {
    for coll in Collective::ALL {
        for &algo in coll.algorithms() {
            for p in [2, 3, 4, 7] {
                for victim in [0, p - 1] {
                    for after in [0, 1, 2] {
                        for freeze in [false, true] {
                            let fault = if freeze {
                                Fault::Freeze {
                                    rank: victim,
                                    after,
                                }
                            } else {
                                Fault::Crash {
                                    rank: victim,
                                    after,
                                }
                            };
                            let config = SimConfig {
                                seed: 7,
                                fault: Some(fault),
                                step_budget: 100_000,
                                ..SimConfig::default()
                            };
                            let out = sim::run(p, config, |c| run_one(c, coll, algo, 5));
                            let victim_failed = out[victim].is_err();
                            let mut others_failed = 0;
                            for (r, res) in out.into_iter().enumerate() {
                                match res {
                                    Ok(got) => assert_eq!(
                                        got,
                                        expected(coll, p, r, 5),
                                        "{coll:?}/{algo:?} {fault:?} rank {r}"
                                    ),
                                    Err(e) => {
                                        if r == victim {
                                            assert!(
                                                matches!(e, SimError::Crashed | SimError::Frozen),
                                                "{e:?}"
                                            );
                                        } else {
                                            others_failed += 1;
                                            assert!(
                                                matches!(
                                                    e,
                                                    SimError::Deadlock { .. }
                                                        | SimError::PeerDead { .. }
                                                ),
                                                "{coll:?}/{algo:?} {fault:?} rank {r}: {e:?}"
                                            );
                                        }
                                    }
                                }
                            }
                            // A victim that failed withheld a message some peer waits for.
                            if victim_failed {
                                assert!(
                                    others_failed > 0,
                                    "{coll:?}/{algo:?} {fault:?}: nobody noticed"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn crash_names_the_dead_peer_and_freeze_ends_in_deadlock() {
    let out = sim::run(
        4,
        SimConfig {
            fault: Some(Fault::Crash { rank: 2, after: 0 }),
            ..SimConfig::default()
        },
        |c| run_one(c, Collective::AllReduce, Algorithm::Ring, 8),
    );
    assert_eq!(out[2], Err(SimError::Crashed));
    assert_eq!(
        out[3],
        Err(SimError::PeerDead { rank: 2 }),
        "rank 3 receives from 2 in the ring"
    );
    let out = sim::run(
        4,
        SimConfig {
            fault: Some(Fault::Freeze { rank: 2, after: 0 }),
            ..SimConfig::default()
        },
        |c| run_one(c, Collective::AllReduce, Algorithm::Ring, 8),
    );
    assert_eq!(out[2], Err(SimError::Frozen));
    assert!(
        out.iter().enumerate().all(|(r, o)| r == 2 || o.is_err()),
        "{out:?}"
    );
}

#[test]
fn step_budget_stops_a_run_that_never_ends() {
    // Ping-pong forever: only the budget ends it.
    let out = sim::run(
        2,
        SimConfig {
            step_budget: 1000,
            ..SimConfig::default()
        },
        |c| -> Result<(), SimError> {
            use meshwork_collectives::Comm;
            let peer = 1 - c.rank();
            loop {
                c.send(peer, &[1])?;
                c.recv(peer, 1)?;
            }
        },
    );
    assert!(
        out.iter().all(|o| *o == Err(SimError::StepBudget)),
        "{out:?}"
    );
}

#[test]
fn same_seed_same_interleaving() {
    let trace = |seed| {
        sim::run(
            5,
            SimConfig {
                seed,
                link_delay: |f, t| (f + t) as u64 % 3,
                ..SimConfig::default()
            },
            |c| {
                use meshwork_collectives::Comm;
                // Record the order in which messages from anyone arrive at rank 0.
                let (p, r) = (c.size(), c.rank());
                if r == 0 {
                    let mut order = Vec::new();
                    for q in 1..p {
                        order.push(c.recv(q, 1)?[0]);
                    }
                    Ok(order)
                } else {
                    c.send(0, &[r as u8])?;
                    Ok(Vec::new())
                }
            },
        )
    };
    assert_eq!(trace(11), trace(11));
}
