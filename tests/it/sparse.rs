//! Sparse topologies: only neighbours are linked; every other pair's
//! traffic is relayed along a route every rank computes alike. Eight
//! processes as a hypercube and as a 4-regular circulant, five as a ring,
//! over TCP and QUIC, and in-process worlds of 8 and 16: every collective
//! × type × op exact, point-to-point and RPC between every pair,
//! compressed all_reduce identical everywhere, links per rank equal to
//! the degree, and a relay's failure named by the ranks whose traffic it
//! carried.
#![allow(
    clippy::print_stdout,
    reason = "rank processes report to the test on stdout"
)]

use crate::multiprocess::launch;
use crate::procs::{all_ok, spawn};
use meshwork::{Error, LinkKind, ProcessGroup, Topology};
use std::io::Write;
use std::time::Duration;

/// What a rank of a sparse group runs (`MESHWORK_TEST_SCENARIO=sparse`).
pub(crate) fn scenario(g: &ProcessGroup) -> meshwork::Result<String> {
    let links = check_links(g)?;
    every_pair_p2p(g)?;
    every_pair_rpc(g)?;
    let swept = crate::scenarios::all_collectives(g)?;
    let compressed = crate::compress::scenario(g)?;
    Ok(format!(
        "{links} links; every pair p2p and rpc; {swept}; {compressed}"
    ))
}

/// Every rank linked to exactly its neighbours (and `links()` says
/// `Relayed` for every other rank); returns the number of links.
fn check_links(g: &ProcessGroup) -> meshwork::Result<usize> {
    let (me, p) = (g.rank() as usize, g.world_size() as usize);
    let topology = g.topology();
    let links = g.links();
    let mut direct = 0;
    for (r, kind) in links.iter().enumerate() {
        let want_direct = topology.linked(p, me, r);
        let ok = match kind {
            LinkKind::Local => r == me,
            LinkKind::Relayed => !want_direct && r != me,
            _ => want_direct,
        };
        if !ok {
            return Err(Error::InvalidArgument(format!(
                "rank {me}: link to {r} is {kind:?} in a {topology:?} ({links:?})"
            )));
        }
        direct += usize::from(want_direct);
    }
    let want = match topology {
        Topology::KRegular { degree } => degree as usize,
        Topology::Hypercube => p.trailing_zeros() as usize,
        // Its parent and its children.
        Topology::Tree { .. } => (0..p).filter(|&r| topology.linked(p, me, r)).count(),
        other => {
            return Err(Error::InvalidArgument(format!(
                "{other:?} is not a sparse topology"
            )))
        }
    };
    if direct != want {
        return Err(Error::InvalidArgument(format!(
            "rank {me}: {direct} links, the degree is {want}"
        )));
    }
    Ok(direct)
}

/// A message of `len` bytes from `from` to `to`, distinct per pair.
fn fill(from: u32, to: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32 ^ from.wrapping_mul(131) ^ to.wrapping_mul(7)) as u8)
        .collect()
}

/// Every ordered pair exchanges a small message and 1 MiB + 3 B (above
/// QUIC's sidecar threshold: relayed over the sidecars), byte for byte.
fn every_pair_p2p(g: &ProcessGroup) -> meshwork::Result<()> {
    let (me, p) = (g.rank(), g.world_size());
    for len in [5, (1 << 20) + 3] {
        for d in 1..p {
            let (to, from) = ((me + d) % p, (me + p - d) % p);
            g.send(&fill(me, to, len), to, 40 + u64::from(d))?;
            let mut got = vec![0u8; len];
            g.recv(&mut got, from, 40 + u64::from(d))?;
            if got != fill(from, me, len) {
                return Err(Error::InvalidArgument(format!(
                    "rank {me}: {len} B from rank {from} differ"
                )));
            }
        }
    }
    Ok(())
}

/// Every rank calls every other rank's procedure.
fn every_pair_rpc(g: &ProcessGroup) -> meshwork::Result<()> {
    let (me, p) = (g.rank(), g.world_size());
    g.register_rpc(7, move |caller, args| {
        let mut out = args.to_vec();
        out.reverse();
        out.extend_from_slice(&caller.to_le_bytes());
        out.extend_from_slice(&me.to_le_bytes());
        out
    });
    g.barrier()?;
    for d in 1..p {
        let to = (me + d) % p;
        let args = fill(me, to, 100);
        let got = g.rpc(to, 7, &args)?;
        let mut want = args;
        want.reverse();
        want.extend_from_slice(&me.to_le_bytes());
        want.extend_from_slice(&to.to_le_bytes());
        if got != want {
            return Err(Error::InvalidArgument(format!(
                "rank {me}: rpc to {to} answered {} bytes, not the expected",
                got.len()
            )));
        }
    }
    // Nobody leaves while another may still call it.
    g.barrier()
}

/// `relay`: ranks 0 and 7 of a hypercube of 8 exchange messages until
/// one fails (0 → 7 goes 0 → 1 → 3 → 7); the others idle. Prints READY
/// after the first exchange.
pub(crate) fn relay_scenario(g: &ProcessGroup) -> meshwork::Result<String> {
    let me = g.rank();
    if me != 0 && me != 7 {
        return Ok("idle".into());
    }
    let other = 7 - me;
    let mut buf = [0u8; 64];
    for i in 0u64.. {
        if me == 0 {
            g.send(&i.to_le_bytes(), other, 1)?;
            g.recv(&mut buf[..8], other, 2)?;
        } else {
            g.recv(&mut buf[..8], other, 1)?;
            g.send(&buf[..8], other, 2)?;
        }
        if i == 0 {
            println!("READY");
            let _ = std::io::stdout().flush();
        }
    }
    unreachable!("the loop ends only with an error")
}

fn every_collective_sparse(world: u32, topology: &str, link: &str) {
    let mut ranks = spawn(&launch(world, topology, 30.0, link), "sparse");
    let results = ranks.results(Duration::from_secs(400));
    all_ok(&results);
}

#[test]
fn a_hypercube_of_8_processes_over_tcp_relays_everything_exactly() {
    every_collective_sparse(8, "hypercube", "tcp");
}

#[test]
fn a_hypercube_of_8_processes_over_quic_relays_everything_exactly() {
    every_collective_sparse(8, "hypercube", "quic");
}

#[test]
fn a_4_regular_graph_of_8_processes_over_tcp_relays_everything_exactly() {
    every_collective_sparse(8, "kregular:4", "tcp");
}

#[test]
fn a_4_regular_graph_of_8_processes_over_quic_relays_everything_exactly() {
    every_collective_sparse(8, "kregular:4", "quic");
}

/// Shared memory between neighbours (the default on one host): a relay
/// reads a frame for another rank off one ring and writes it to another.
#[test]
fn a_hypercube_of_8_processes_over_shared_memory_relays_everything_exactly() {
    every_collective_sparse(8, "hypercube", "shm");
}

/// A relay tree of fanout 2 over 7 processes (0; 1 2; 3 4 under 1, 5 6
/// under 2): children dial their parents; leaves listen for nobody.
#[test]
fn a_tree_of_7_processes_over_tcp_relays_everything_exactly() {
    every_collective_sparse(7, "tree:2", "tcp");
}

#[test]
fn a_tree_of_7_processes_over_quic_relays_everything_exactly() {
    every_collective_sparse(7, "tree:2", "quic");
}

#[test]
fn a_ring_of_5_processes_relays_everything_exactly() {
    every_collective_sparse(5, "kregular:2", "tcp");
}

/// Rank 3 relays rank 0's messages to rank 7 (0 → 1 → 3 → 7); it is
/// killed mid-exchange: ranks 0 and 7, neither linked to it, fail naming
/// rank 3, not each other.
#[test]
fn a_relay_killed_mid_exchange_is_named_by_the_ranks_it_carried() {
    relay_killed("tcp");
}

/// The same over QUIC, whose relays send each notice on every stream:
/// rank 2 passes rank 0 two notices of rank 3's end (one for rank 0, one
/// to relay to rank 4).
#[test]
fn a_relay_killed_mid_exchange_over_quic_is_named_by_the_ranks_it_carried() {
    relay_killed("quic");
}

fn relay_killed(link: &str) {
    let mut l = launch(8, "hypercube", 30.0, link);
    l.set("HOLD_ON_ERROR", "1");
    let mut ranks = spawn(&l, "relay");
    ranks.wait_for(&[0, 7], "READY", Duration::from_secs(60));
    ranks.signal(3, libc::SIGKILL);
    let results = ranks.wait_for(&[0, 7], "RESULT ", Duration::from_secs(20));
    for (r, line) in &results {
        assert!(
            line.starts_with("RESULT err PeerDisconnected") && line.contains("rank 3"),
            "rank {r}: {line}"
        );
    }
}

/// A relay tree of fanout 3 over 13 processes (1, 2, 3 under the root,
/// 4–6 under 1, 7–9 under 2, 10–12 under 3) under `RECOVERY=shrink`, an
/// interior rank killed mid-collective: its children re-attach to the
/// root, every other rank gets `GroupShrunk` naming it, and the twelve go
/// on with exact results (mixed collectives, then a federated average).
#[test]
fn faults_tree_an_interior_rank_killed_leaves_the_rest_exact() {
    for (seed, victim) in [(0u64, 1u32), (1, 3)] {
        let ready_after = 3 + 7 * seed;
        let mut l = launch(13, "tree:3", 5.0, "tcp");
        l.set("RECOVERY", "shrink");
        l.set("HOLD_ON_ERROR", "1");
        l.set("READY_AFTER", &ready_after.to_string());
        let mut ranks = spawn(&l, "retry");
        let all: Vec<u32> = (0..13).collect();
        ranks.wait_for(&all, "READY", Duration::from_secs(60));
        ranks.signal(victim, libc::SIGKILL);
        let survivors: Vec<u32> = all.iter().copied().filter(|&r| r != victim).collect();
        let results = ranks.wait_for(&survivors, "RESULT ", Duration::from_secs(60));
        for (r, line) in &results {
            assert_eq!(
                *line,
                format!("RESULT ok shrunk [{victim}] world 12"),
                "victim {victim}, rank {r}: {results:#?}"
            );
        }
    }
}

/// Every rank of an in-process world shaped as `topology` runs the
/// scenario on its own thread.
fn in_process(world: u32, topology: Topology) {
    let groups = meshwork::local_with(world, topology).unwrap();
    let results: Vec<meshwork::Result<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .iter()
            .map(|g| {
                s.spawn(move || {
                    g.set_timeout(Duration::from_secs(60));
                    let r = scenario(g)?;
                    g.shutdown().map(|()| r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, result) in results.iter().enumerate() {
        assert!(result.is_ok(), "rank {r}: {result:?}");
    }
}

#[test]
fn an_in_process_hypercube_of_8_relays_everything_exactly() {
    in_process(8, Topology::Hypercube);
}

#[test]
fn an_in_process_4_regular_graph_of_8_relays_everything_exactly() {
    in_process(8, Topology::KRegular { degree: 4 });
}

#[test]
fn an_in_process_hypercube_of_16_relays_everything_exactly() {
    in_process(16, Topology::Hypercube);
}

#[test]
fn an_in_process_4_regular_graph_of_16_relays_everything_exactly() {
    in_process(16, Topology::KRegular { degree: 4 });
}

/// A tree of fanout 3 over 13 ranks, three levels: every route through
/// the lowest common ancestor.
#[test]
fn an_in_process_tree_of_13_relays_everything_exactly() {
    in_process(13, Topology::Tree { fanout: 3 });
}

#[test]
fn shapes_a_world_cannot_take_and_shrinking_a_sparse_group_are_refused() {
    for (world, topology) in [
        (8, Topology::KRegular { degree: 3 }),
        (8, Topology::KRegular { degree: 8 }),
        (8, Topology::KRegular { degree: 0 }),
        (12, Topology::Hypercube),
    ] {
        let e = meshwork::local_with(world, topology).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument(_)),
            "{topology:?}: {e:?}"
        );
        // A node refuses them before it dials anyone.
        let e = meshwork::Node::new(0, world)
            .topology(topology)
            .connect()
            .unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument(_)),
            "{topology:?}: {e:?}"
        );
    }
    // Routes do not go around failed ranks: shrinking is refused, up
    // front for RECOVERY=shrink.
    let e = meshwork::Node::new(0, 8)
        .topology(Topology::Hypercube)
        .recovery(meshwork::Recovery::Shrink)
        .connect()
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("sparse")),
        "{e:?}"
    );
    // A tree re-attaches around a failed rank over TCP only.
    let e = meshwork::Node::new(0, 8)
        .topology(Topology::Tree { fanout: 2 })
        .recovery(meshwork::Recovery::Shrink)
        .connect()
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("TRANSPORT=tcp")),
        "{e:?}"
    );
    let world = meshwork::local_with(4, Topology::KRegular { degree: 2 }).unwrap();
    let e = world[0].shrink().unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("sparse")),
        "{e:?}"
    );
    // Nor does a group made from one: its ranks use the same routes.
    let halves: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = world
            .iter()
            .map(|g| s.spawn(move || g.split(g.rank() % 2, g.rank())))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let half = halves[0].as_ref().unwrap();
    let e = half.shrink().unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("sparse")),
        "{e:?}"
    );
}
