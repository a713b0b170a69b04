//! Seed bootstrap on loopback: ranks assigned by the seed (hosted by rank
//! 0, or by `meshrun seed`), mesh and star, a taken rank, a wrong token,
//! a job without a token.

use meshwork::{Error, Node, ReduceOp, Topology, TransportKind};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);
const TOKEN: &str = "seed integration test token";

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
                            .cluster_token(TOKEN)
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
                        .cluster_token(TOKEN)
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

/// Nothing authenticates the seed's silence towards a wrong token (a
/// stranger gets the same), so the joiner retries and names it at its
/// deadline; the others form meanwhile.
#[test]
fn a_joiner_with_the_wrong_token_fails_at_its_deadline_and_the_others_form() {
    let at = seed_addr();
    std::thread::scope(|s| {
        let host = s.spawn(move || {
            let g = Node::new(0, 2)
                .seed(at)
                .cluster_token(TOKEN)
                .timeout(T)
                .connect()?;
            sum_of_ranks(&g)
        });
        let started = Instant::now();
        let wrong = Node::join(2)
            .seed(at)
            .cluster_token("a wrong seed test token")
            .timeout(Duration::from_secs(2))
            .connect();
        assert!(
            matches!(wrong, Err(Error::ClusterTokenMismatch)),
            "{wrong:?}"
        );
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(4),
            "{took:?}"
        );
        let g = Node::join(2)
            .seed(at)
            .cluster_token(TOKEN)
            .timeout(T)
            .connect()
            .unwrap();
        assert_eq!(g.rank(), 1);
        assert_eq!(sum_of_ranks(&g).unwrap(), 3);
        assert_eq!(host.join().unwrap().unwrap(), 3);
    });
}

/// Without a token the handshake key is public, so a seed job listens on
/// loopback only: rank 1's port answers on 127.0.0.1 and on no other
/// address of this host (a listener on 0.0.0.0 would answer 127.0.0.2
/// too); an address off loopback needs the token.
#[test]
fn a_tokenless_seed_job_listens_on_loopback_only() {
    let at = seed_addr();
    let port = crate::support::free_ports(1)[0].port();
    let on = |ip: [u8; 4]| TcpStream::connect_timeout(&SocketAddr::from((ip, port)), T);
    std::thread::scope(|s| {
        let zero = s.spawn(move || {
            let g = Node::new(0, 2)
                .seed(at)
                .transport(TransportKind::Tcp)
                .timeout(T)
                .connect()?;
            sum_of_ranks(&g)
        });
        let one = Node::new(1, 2)
            .seed(at)
            .transport(TransportKind::Tcp)
            .advertise(SocketAddr::from(([127, 0, 0, 1], port)))
            .timeout(T)
            .connect()
            .unwrap();
        assert!(on([127, 0, 0, 1]).is_ok());
        let other = on([127, 0, 0, 2]);
        assert!(
            matches!(&other, Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused),
            "{other:?}"
        );
        assert_eq!(sum_of_ranks(&one).unwrap(), 3);
        assert_eq!(zero.join().unwrap().unwrap(), 3);
    });
    let e = Node::new(1, 2)
        .seed(at)
        .advertise("10.77.0.1:0".parse().unwrap())
        .connect();
    assert!(matches!(e, Err(Error::TokenRequired)), "{e:?}");
}

#[test]
fn a_seed_that_never_fills_is_a_formation_timeout_naming_the_missing_ranks() {
    let at = seed_addr();
    let e = Node::new(0, 3)
        .seed(at)
        .cluster_token(TOKEN)
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

/// A job of three formed through rank 0's seed grows to five: two new
/// processes (`join_running`, started while the job forms) take ranks 3
/// and 4, the old ranks keep theirs, and the
/// grown group's all-reduce is exact. The old group still works.
#[test]
fn grow_admits_new_processes_and_old_ranks_keep_their_numbers() {
    for topology in [Topology::Mesh, Topology::Star] {
        let at = seed_addr();
        let node = |n: Node| {
            n.seed(at)
                .topology(topology)
                .cluster_token(TOKEN)
                .timeout(T)
        };
        let (started_tx, started_rx) = crossbeam_channel::unbounded::<()>();
        let results: Vec<(u32, u32, u32, u32)> = std::thread::scope(|s| {
            let mut hs: Vec<_> = (0..3u32)
                .map(|r| {
                    let started = started_rx.clone();
                    s.spawn(move || {
                        let g = node(Node::new(r, 3)).connect().unwrap();
                        let before = sum_of_ranks(&g).unwrap();
                        // The first new process is waiting at the seed.
                        started.recv_timeout(T).unwrap();
                        let big = g.grow(2).unwrap();
                        assert_eq!(big.rank(), r);
                        let after = sum_of_ranks(&big).unwrap();
                        assert_eq!(sum_of_ranks(&g).unwrap(), before);
                        big.shutdown().unwrap();
                        (big.rank(), big.world_size(), before, after)
                    })
                })
                .collect();
            for _ in 0..2 {
                hs.push(s.spawn(move || {
                    let g = node(Node::join_running()).connect().unwrap();
                    let sum = sum_of_ranks(&g).unwrap();
                    g.shutdown().unwrap();
                    (g.rank(), g.world_size(), 0, sum)
                }));
            }
            // Not a synchronisation: the members grow whether or not the
            // new processes have reached the seed yet.
            for _ in 0..3 {
                started_tx.send(()).unwrap();
            }
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut ranks: Vec<u32> = results.iter().map(|r| r.0).collect();
        ranks.sort_unstable();
        assert_eq!(ranks, [0, 1, 2, 3, 4], "{topology:?}: {results:?}");
        for (rank, world, before, after) in &results {
            assert_eq!(*world, 5, "{topology:?} rank {rank}: {results:?}");
            assert_eq!(*after, 15, "{topology:?} rank {rank}: {results:?}");
            if *rank < 3 {
                assert_eq!(*before, 6);
            }
        }
    }
}

/// `grow` needs a job formed through a seed, and at least one new process.
#[test]
fn grow_without_a_seed_or_by_nobody_is_an_invalid_argument() {
    let world = meshwork::local(1).unwrap();
    let e = world[0].grow(1).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("did not form through a seed")),
        "{e:?}"
    );
    let at = seed_addr();
    let g = Node::new(0, 1)
        .seed(at)
        .cluster_token(TOKEN)
        .timeout(T)
        .heap_bytes(64)
        .connect()
        .unwrap();
    let e = g.grow(0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    // At most 65536 new processes a growth (the seed's bound).
    let e = g.grow(65_537).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("between 1 and 65536")),
        "{e:?}"
    );
    // A world of one grows by itself and a new process; the member's heap
    // carries over, the newcomer's is new.
    g.heap_write(8, &42u64.to_le_bytes()).unwrap();
    let grown = std::thread::scope(|s| {
        let newcomer = s.spawn(|| {
            let n = Node::join_running()
                .seed(at)
                .cluster_token(TOKEN)
                .timeout(T);
            let g = n.heap_bytes(64).connect().unwrap();
            let mut w = [0u8; 8];
            g.get(0, 8, &mut w).unwrap();
            let sum = sum_of_ranks(&g).unwrap();
            (
                g.rank(),
                sum,
                u64::from_le_bytes(w),
                g.atomic_load(8).unwrap(),
            )
        });
        let big = g.grow(1).unwrap();
        let sum = sum_of_ranks(&big).unwrap();
        (
            big.rank(),
            sum,
            big.atomic_load(8).unwrap(),
            newcomer.join().unwrap(),
        )
    });
    assert_eq!(grown, (0, 3, 42, (1, 3, 42, 0)));
}
