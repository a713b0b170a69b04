//! Seed bootstrap on loopback: ranks assigned by the seed (hosted by rank
//! 0, or by `meshrun seed`), mesh and star, a taken rank, a wrong token.

use meshwork::{Error, Node, ReduceOp, Topology};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

fn seed_addr() -> SocketAddr {
    crate::support::free_ports(1)[0]
}

/// Every rank's all-reduce of its rank + 1: proves they formed one group
/// with distinct ranks.
fn sum_of_ranks(g: &meshwork::ProcessGroup) -> meshwork::Result<u32> {
    let mut x = [g.rank() + 1];
    g.all_reduce(&mut x, ReduceOp::Sum)?;
    Ok(x[0])
}

#[test]
fn seed_assigns_ranks_and_the_group_forms_in_mesh_and_star() {
    for topology in [Topology::Mesh, Topology::Star] {
        let at = seed_addr();
        let results: Vec<(u32, u32)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|i| {
                    s.spawn(move || {
                        // Rank 0 asks for its rank (and hosts the seed);
                        // the others let the seed pick.
                        let node = if i == 0 {
                            Node::new(0, 4)
                        } else {
                            Node::join(4)
                        };
                        let g = node
                            .seed(at)
                            .topology(topology)
                            .cluster_token("seed test")
                            .timeout(T)
                            .connect()
                            .unwrap();
                        let sum = sum_of_ranks(&g).unwrap();
                        g.shutdown().unwrap();
                        (g.rank(), sum)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut ranks: Vec<u32> = results.iter().map(|r| r.0).collect();
        ranks.sort_unstable();
        assert_eq!(ranks, [0, 1, 2, 3], "{topology:?}");
        assert!(results.iter().all(|r| r.1 == 10), "{results:?}");
    }
}

#[test]
fn a_rank_asked_for_twice_is_a_rank_conflict_for_one_of_them() {
    let at = seed_addr();
    let results: Vec<meshwork::Result<u32>> = std::thread::scope(|s| {
        let hs: Vec<_> = [0u32, 1, 1]
            .into_iter()
            .map(|r| {
                s.spawn(move || {
                    let g = Node::new(r, 2)
                        .seed(at)
                        .cluster_token("seed test")
                        .timeout(T)
                        .connect()?;
                    sum_of_ranks(&g)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let conflicts = results
        .iter()
        .filter(|r| matches!(r, Err(Error::RankConflict { rank: 1 })))
        .count();
    let formed = results.iter().filter(|r| matches!(r, Ok(3))).count();
    assert_eq!((conflicts, formed), (1, 2), "{results:?}");
}

#[test]
fn a_joiner_with_the_wrong_token_fails_at_once_and_the_others_form() {
    let at = seed_addr();
    std::thread::scope(|s| {
        let host = s.spawn(move || {
            let g = Node::new(0, 2)
                .seed(at)
                .cluster_token("right")
                .timeout(T)
                .connect()?;
            sum_of_ranks(&g)
        });
        let started = Instant::now();
        let wrong = Node::join(2)
            .seed(at)
            .cluster_token("wrong")
            .timeout(T)
            .connect();
        assert!(
            matches!(wrong, Err(Error::ClusterTokenMismatch)),
            "{wrong:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        let g = Node::join(2)
            .seed(at)
            .cluster_token("right")
            .timeout(T)
            .connect()
            .unwrap();
        assert_eq!(g.rank(), 1);
        assert_eq!(sum_of_ranks(&g).unwrap(), 3);
        assert_eq!(host.join().unwrap().unwrap(), 3);
    });
}

#[test]
fn a_seed_that_never_fills_is_a_formation_timeout_naming_the_missing_ranks() {
    let at = seed_addr();
    let e = Node::new(0, 3)
        .seed(at)
        .cluster_token("t")
        .timeout(Duration::from_secs(1))
        .connect()
        .unwrap_err();
    assert!(
        matches!(&e, Error::FormationTimeout { missing } if missing == &vec![1, 2]),
        "{e:?}"
    );
}

#[test]
fn join_without_a_seed_is_an_invalid_argument() {
    let e = Node::join(2).connect().unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
}
