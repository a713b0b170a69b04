//! Quorum in process: worlds over in-memory links whose network a test cuts
//! into sides (`pipe_world_with_net`), each rank's group on a thread of
//! its own under `Recovery::Shrink`.

use super::{ProcessGroup, Recovery};
use crate::error::Error;
use meshwork_collectives::{ReduceOp, Topology};
use meshwork_transport::{pipe_world_with_net, LaneKey, LaneKind, PipeNet, Shape, Transport};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_millis(1500);

/// A world whose groups run `topology`'s algorithms over mesh links: on
/// `Topology::Tree` they agree through a coordinator (`agree.rs`), the
/// protocol a relay tree uses, here under the same cuts as a mesh.
fn world_as(n: u32, topology: Topology) -> (Vec<Arc<ProcessGroup>>, Arc<PipeNet>) {
    let (ranks, net) = pipe_world_with_net(n, Shape::Mesh).unwrap();
    let groups = ranks
        .into_iter()
        .map(|t| {
            let g = ProcessGroup::new(Arc::new(t), 0, DEADLINE, topology);
            g.set_recovery(Recovery::Shrink);
            Arc::new(g)
        })
        .collect();
    (groups, net)
}

/// Every group's `f` at once, each on its own thread; the results by rank.
fn on_each<R: Send + 'static>(
    groups: &[Arc<ProcessGroup>],
    f: impl Fn(&ProcessGroup) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let f = Arc::new(f);
    let handles: Vec<_> = groups
        .iter()
        .map(|g| {
            let (g, f) = (Arc::clone(g), Arc::clone(&f));
            std::thread::spawn(move || f(&g))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// An all_reduce of ones, checked: the group's size everywhere.
fn ones(g: &ProcessGroup) -> crate::Result<u32> {
    let mut x = [1u32; 4];
    g.all_reduce(&mut x, ReduceOp::Sum)?;
    assert!(x.iter().all(|&v| v == g.world_size()), "{x:?}");
    Ok(x[0])
}

/// all_reduce until one succeeds (a stale group retries its agreement
/// once a liveness period), within `within`; every error met on the way.
fn until_ok(g: &ProcessGroup, within: Duration) -> (crate::Result<u32>, Vec<String>) {
    let end = Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        match ones(g) {
            Ok(n) => return (Ok(n), seen),
            Err(e) if Instant::now() < end => {
                let name = format!("{e:?}");
                if seen.last() != Some(&name) {
                    seen.push(name);
                }
                std::thread::yield_now();
            }
            Err(e) => return (Err(e), seen),
        }
    }
}

/// A 2 | 2 cut: neither side carries on. Every rank's call fails with
/// `NoQuorum` naming its own side and the 3 needed, and so does the next
/// one; once the network heals, the stale groups agree again, all four
/// together, and go on whole.
#[test]
fn a_two_two_cut_stops_both_sides_and_the_heal_brings_the_whole_group_back() {
    two_two_cut(Topology::Mesh);
}

#[test]
fn through_a_coordinator_a_two_two_cut_stops_both_sides_and_the_heal_brings_the_group_back() {
    two_two_cut(Topology::Tree { fanout: 2 });
}

fn two_two_cut(topology: Topology) {
    let (groups, net) = world_as(4, topology);
    assert_eq!(on_each(&groups, |g| ones(g).unwrap()), [4; 4]);
    net.partition(&[&[0, 1], &[2, 3]]);
    let got = on_each(&groups, |g| (ones(g), ones(g)));
    for (r, (first, second)) in got.into_iter().enumerate() {
        let side = if r < 2 { vec![0, 1] } else { vec![2, 3] };
        for e in [first, second] {
            match e {
                Err(Error::NoQuorum { reachable, needed }) => {
                    assert_eq!((reachable, needed), (side.clone(), 3), "rank {r}");
                }
                other => panic!("rank {r}: {other:?}"),
            }
        }
    }
    assert!(groups.iter().all(|g| g.is_stale() && g.world_size() == 4));
    net.heal();
    let back = on_each(&groups, |g| until_ok(g, Duration::from_secs(30)));
    for (r, (ok, seen)) in back.into_iter().enumerate() {
        assert_eq!(ok.unwrap(), 4, "rank {r}: {seen:?}");
        assert!(
            seen.iter()
                .any(|e| e.starts_with("GroupShrunk { failed: [] }")),
            "rank {r}: {seen:?}"
        );
    }
    assert!(groups.iter().all(|g| !g.is_stale()));
}

/// A 3 | 1 cut: the three shrink and go on, exact; the one stops with
/// `NoQuorum`. After the heal it tries again and finds the three alive
/// but taking no part: they went on without it, and it says so
/// (`Expelled`: it comes back through the seed, `rejoin`).
#[test]
fn a_three_one_cut_lets_the_three_go_on_and_stops_the_one() {
    three_one_cut(Topology::Mesh, 3);
}

#[test]
fn through_a_coordinator_a_three_one_cut_lets_the_three_go_on_and_stops_the_one() {
    three_one_cut(Topology::Tree { fanout: 2 }, 3);
}

/// The coordinator itself cut off: the three agree through the next one.
#[test]
fn through_a_coordinator_cut_off_the_next_one_leads_the_three() {
    three_one_cut(Topology::Tree { fanout: 2 }, 0);
}

fn three_one_cut(topology: Topology, one: u32) {
    let (groups, net) = world_as(4, topology);
    on_each(&groups, |g| ones(g).unwrap());
    let three: Vec<u32> = (0..4).filter(|&r| r != one).collect();
    net.partition(&[&three, &[one]]);
    let cut = Instant::now();
    let got = on_each(&groups, |g| {
        (ones(g), until_ok(g, Duration::from_secs(5)).0)
    });
    for (r, (first, then)) in got.into_iter().enumerate() {
        let r = r as u32;
        if r != one {
            assert!(
                matches!(first, Err(Error::GroupShrunk { ref failed }) if *failed == [one]),
                "rank {r}: {first:?}"
            );
            assert_eq!(then.unwrap(), 3, "rank {r}");
        } else {
            assert!(
                matches!(first, Err(Error::NoQuorum { ref reachable, needed: 3 }) if *reachable == [one]),
                "{first:?}"
            );
            assert!(matches!(then, Err(Error::NoQuorum { .. })), "{then:?}");
        }
    }
    assert!(cut.elapsed() < Duration::from_secs(10));
    net.heal();
    // The one tries again after the heal; the three, gone on, never answer.
    let lone = &groups[one as usize];
    let (last, seen) = until_ok(lone, 3 * DEADLINE);
    assert!(
        matches!(last, Err(Error::Expelled { rank }) if rank == one),
        "{last:?} after {seen:?}"
    );
    assert!(lone.is_stale());
    let rest: Vec<Arc<ProcessGroup>> = three
        .iter()
        .map(|&r| Arc::clone(&groups[r as usize]))
        .collect();
    let ok = on_each(&rest, |g| ones(g).unwrap());
    assert_eq!(ok, [3, 3, 3]);
}

/// Rank 0 is hostile: it takes no part but sends each of the others the
/// agreement messages `forged` (phase, body) on the first agreement's
/// lane; the others, on `topology`, agree on flags `0b1`. Their results,
/// ranks 1..4.
fn with_a_forger(
    topology: Topology,
    forged: &[(u8, Vec<u8>)],
) -> Vec<crate::Result<(u64, Vec<u32>)>> {
    let (mut ranks, _net) = pipe_world_with_net(4, Shape::Mesh).unwrap();
    let hostile: Arc<dyn Transport> = Arc::new(ranks.remove(0));
    let groups: Vec<Arc<ProcessGroup>> = ranks
        .into_iter()
        .map(|t| Arc::new(ProcessGroup::new(Arc::new(t), 0, DEADLINE, topology)))
        .collect();
    let lane = LaneKey {
        comm: super::agree::agreement_comm(0, 0),
        kind: LaneKind::PointToPoint,
        tag: 0,
    };
    for r in 1..4 {
        for (phase, body) in forged {
            let msg = [0u32.to_le_bytes().as_slice(), &[*phase], body].concat();
            hostile.send(r, lane, &[&msg]).unwrap();
        }
    }
    on_each(&groups, |g| g.agree(0b1))
}

/// A member leading a round of the pairwise agreement sends a forged
/// decision naming a live rank failed. The others' detectors do not
/// vouch for it: nobody takes it, every honest member agrees that nobody
/// failed, and the live rank is not expelled.
#[test]
fn a_forged_decision_naming_a_live_rank_is_not_taken() {
    let mut forged = u64::MAX.to_le_bytes().to_vec();
    forged.extend_from_slice(&2u32.to_le_bytes());
    // Its flags (phase 0), then the decision as leader (1) and as
    // confirmation (2).
    let sends = [
        (0, u64::MAX.to_le_bytes().to_vec()),
        (1, forged.clone()),
        (2, forged),
    ];
    for (i, r) in with_a_forger(Topology::Mesh, &sends)
        .into_iter()
        .enumerate()
    {
        assert_eq!(r.unwrap(), (0b1, vec![]), "rank {}", i + 1);
    }
}

/// The coordinator (rank 0, hostile) proposes a decision naming a live
/// rank failed and says it was confirmed. The members' detectors do not
/// vouch for it: nobody takes it, the live rank is not expelled, and the
/// honest members agree through the next coordinator without the forger.
#[test]
fn through_a_coordinator_a_forged_decision_is_refused_and_the_forger_left_out() {
    // `D`, then flags and rank 2: proposed (phase 2), then "confirmed"
    // (phase 4).
    let mut forged = b"D".to_vec();
    forged.extend_from_slice(&u64::MAX.to_le_bytes());
    forged.extend_from_slice(&2u32.to_le_bytes());
    let sends = [(2, forged.clone()), (4, forged)];
    let tree = Topology::Tree { fanout: 2 };
    for (i, r) in with_a_forger(tree, &sends).into_iter().enumerate() {
        assert_eq!(r.unwrap(), (0b1, vec![0]), "rank {}", i + 1);
    }
}

/// A star: the coordinator counts as the side its workers are on. A
/// worker cut off reaches no one (everything goes through the
/// coordinator): the coordinator and the three workers it still reaches
/// shrink and go on; the one stops with `NoQuorum`.
#[test]
fn in_a_star_the_coordinator_is_on_the_side_of_the_workers_it_reaches() {
    let (ranks, net) = pipe_world_with_net(5, Shape::Star).unwrap();
    let groups: Vec<Arc<ProcessGroup>> = ranks
        .into_iter()
        .map(|t| {
            let g = ProcessGroup::new(Arc::new(t), 0, DEADLINE, Topology::Star);
            g.set_recovery(Recovery::Shrink);
            Arc::new(g)
        })
        .collect();
    assert_eq!(on_each(&groups, |g| ones(g).unwrap()), [5; 5]);
    net.partition(&[&[0, 1, 2, 3], &[4]]);
    let got = on_each(&groups, |g| {
        (ones(g), until_ok(g, Duration::from_secs(5)).0)
    });
    for (r, (first, then)) in got.into_iter().enumerate() {
        if r < 4 {
            assert!(
                matches!(first, Err(Error::GroupShrunk { ref failed }) if *failed == [4]),
                "rank {r}: {first:?}"
            );
            assert_eq!(then.unwrap(), 4, "rank {r}");
        } else {
            assert!(
                matches!(first, Err(Error::NoQuorum { ref reachable, needed: 3 }) if *reachable == [4]),
                "{first:?}"
            );
            assert!(then.is_err(), "{then:?}");
        }
    }
}
