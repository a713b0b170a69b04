//! split, federated averaging and RPC, in-process and over TCP (mesh and
//! star).

use crate::support::run_nodes_with;
use crate::support::{run_nodes, run_world, run_world_with};
use meshwork::{Error, ProcessGroup, ReduceOp, Topology};
use std::time::{Duration, Instant};

/// Split into evens and odds ordered by descending parent rank, then run a
/// collective in the sub-group and one in the parent at the same time.
fn split_and_overlap(g: &ProcessGroup) -> meshwork::Result<()> {
    let (r, p) = (g.rank(), g.world_size());
    let sub = g.split(r % 2, p - r)?;
    let mates: Vec<u32> = (0..p).filter(|q| q % 2 == r % 2).rev().collect();
    assert_eq!(sub.world_size() as usize, mates.len());
    assert_eq!(mates[sub.rank() as usize], r, "ordered by key");
    std::thread::scope(|s| {
        let t = s.spawn(|| -> meshwork::Result<()> {
            for i in 0..50u64 {
                let mut x = [u64::from(r) + i];
                sub.all_reduce(&mut x, ReduceOp::Sum)?;
                let want: u64 = mates.iter().map(|&q| u64::from(q) + i).sum();
                assert_eq!(x, [want]);
            }
            Ok(())
        });
        for i in 0..50u64 {
            let mut y = [i; 3];
            g.all_reduce(&mut y, ReduceOp::Max)?;
            assert_eq!(y, [i; 3]);
        }
        t.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
    })?;
    // Tags are per communicator: the same tag in parent and child never mix.
    if sub.world_size() > 1 {
        let next = (sub.rank() + 1) % sub.world_size();
        let prev = (sub.rank() + sub.world_size() - 1) % sub.world_size();
        sub.send(&[1u8], next, 5)?;
        g.send(&[2u8], (r + 1) % p, 5)?;
        let mut a = [0u8];
        g.recv(&mut a, (r + p - 1) % p, 5)?;
        let mut b = [0u8];
        sub.recv(&mut b, prev, 5)?;
        assert_eq!((a, b), ([2], [1]));
    }
    sub.shutdown()?;
    // The parent is unaffected by the child's shutdown.
    g.barrier()
}

#[test]
fn split_groups_run_concurrently_with_the_parent_in_process() {
    for o in run_world(5, split_and_overlap) {
        o.unwrap();
    }
}

#[test]
fn split_groups_over_tcp_mesh_and_star() {
    for topology in [Topology::Mesh, Topology::Star] {
        for o in run_nodes(4, topology, |g| {
            split_and_overlap(g)?;
            g.shutdown()
        }) {
            o.unwrap();
        }
    }
}

/// Over a mesh (an f64 all_reduce), a star and relay trees (leaves send
/// f32, parents fold in f64, rank 0 divides): the weighted average of the
/// independent f64 computation, the same bits on every rank, across
/// segment boundaries (200 001 elements: four segments of f64).
#[test]
fn federated_average_is_weighted_and_bitwise_equal() {
    let value = |r: usize, i: usize| r as f32 * 1.37 + (i % 101) as f32 * 0.11;
    for (p, topology) in [
        (4, Topology::Mesh),
        (5, Topology::Star),
        (7, Topology::Tree { fanout: 2 }),
        (13, Topology::Tree { fanout: 3 }),
        (1, Topology::Star),
    ] {
        let len = 200_001;
        let out = run_world_with(p, topology, |g| {
            let r = g.rank() as usize;
            let mut x: Vec<f32> = (0..len).map(|i| value(r, i)).collect();
            g.federated_average(&mut x, r as f32 + 1.0).unwrap();
            x
        });
        let want: Vec<f32> = (0..len)
            .map(|i| {
                let (mut num, mut den) = (0f64, 0f64);
                for r in 0..p as usize {
                    num += (r as f64 + 1.0) * f64::from(value(r, i));
                    den += r as f64 + 1.0;
                }
                (num / den) as f32
            })
            .collect();
        for x in &out {
            assert!(
                x.iter()
                    .zip(&out[0])
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{topology:?}"
            );
            for (a, b) in x.iter().zip(&want) {
                assert!((a - b).abs() <= b.abs() * 1e-6, "{topology:?}: {a} vs {b}");
            }
        }
        // Weights summing to zero: refused everywhere, buffers untouched.
        let out = run_world_with(p.max(2), topology, |g| {
            let mut x = [5.0f32, 6.0];
            let w = match g.rank() {
                0 => 1.0,
                1 => -1.0,
                _ => 0.0,
            };
            (g.federated_average(&mut x, w), x)
        });
        for (e, x) in out {
            assert!(
                matches!(e, Err(Error::InvalidArgument(ref m)) if m.contains("sum")),
                "{topology:?}: {e:?}"
            );
            assert_eq!(x, [5.0, 6.0]);
        }
    }
}

/// Echo, unknown, panic, timeout, nested and re-registered handlers; each
/// failure is prompt and leaves every rank working.
fn rpc_suite(g: &ProcessGroup) -> meshwork::Result<()> {
    let (r, p) = (g.rank(), g.world_size());
    let (release_tx, release_rx) = crossbeam_channel::unbounded::<()>();
    g.register_rpc(1, |caller, args| [args, &caller.to_le_bytes()].concat());
    g.register_rpc(2, |_, _| panic!("handler two exploded"));
    g.register_rpc(3, move |_, _| {
        // Blocks until the test releases it (never a sleep).
        let _ = release_rx.recv_timeout(Duration::from_secs(10));
        b"late".to_vec()
    });
    g.barrier()?; // every rank has registered
    let peer = (r + 1) % p;
    let echo = g.rpc(peer, 1, b"hi")?;
    assert_eq!(echo, [b"hi".as_slice(), &r.to_le_bytes()].concat());
    assert_eq!(
        g.rpc(r, 1, b"self")?,
        [b"self".as_slice(), &r.to_le_bytes()].concat()
    );
    let t = Instant::now();
    assert!(
        matches!(g.rpc(peer, 99, b""), Err(Error::RpcUnknown { fn_id: 99, rank }) if rank == peer)
    );
    match g.rpc(peer, 2, b"") {
        Err(Error::RpcFailed {
            fn_id: 2, reason, ..
        }) => assert!(reason.contains("exploded"), "{reason}"),
        other => panic!("{other:?}"),
    }
    match g.rpc_with_timeout(peer, 3, b"", Duration::from_millis(200)) {
        Err(Error::Timeout { op, waiting_on, .. }) => {
            assert_eq!((op.as_str(), waiting_on), ("rpc", vec![peer]))
        }
        other => panic!("{other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(3));
    // Release the blocked handlers only once every rank's call timed out.
    g.barrier()?;
    let _ = release_tx.send(());
    g.register_rpc(4, |caller, args| {
        args.iter().map(|b| b + caller as u8).collect()
    });
    g.barrier()?;
    // Replacing a handler takes effect.
    g.register_rpc(1, |_, _| b"v2".to_vec());
    g.barrier()?;
    assert_eq!(g.rpc(peer, 1, b"x")?, b"v2");
    assert_eq!(g.rpc(peer, 4, &[10, 20])?, [10 + r as u8, 20 + r as u8]);
    g.barrier()
}

#[test]
fn rpc_in_process() {
    for o in run_world(3, rpc_suite) {
        o.unwrap();
    }
}

#[test]
fn rpc_over_tcp_mesh_and_star() {
    for topology in [Topology::Mesh, Topology::Star] {
        for o in run_nodes(3, topology, |g| {
            rpc_suite(g)?;
            g.shutdown()
        }) {
            o.unwrap();
        }
    }
}

#[test]
fn a_handler_may_call_rpc_itself() {
    // Worker 1 calls worker 2 (relayed by the coordinator), whose handler
    // calls the coordinator before answering.
    let (addrs, held) = crate::support::bound_ports(3);
    let out: Vec<meshwork::Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .zip(held)
            .map(|(r, (tcp, udp))| {
                let addrs = addrs.clone();
                s.spawn(move || {
                    let g = meshwork::Node::new(r, 3)
                        .peers(addrs)?
                        .listen_on(tcp, Some(udp))
                        .topology(Topology::Star)
                        .timeout(Duration::from_secs(20))
                        .connect()?;
                    let weak = std::sync::Arc::downgrade(&g);
                    g.register_rpc(7, move |_, args| {
                        let Some(g) = weak.upgrade() else {
                            return Vec::new();
                        };
                        let mut out = g.rpc(0, 8, args).unwrap_or_default();
                        out.push(g.rank() as u8);
                        out
                    });
                    g.register_rpc(8, |_, args| args.iter().rev().copied().collect());
                    g.barrier()?;
                    if g.rank() == 1 {
                        assert_eq!(g.rpc(2, 7, &[1, 2, 3])?, [3, 2, 1, 2]);
                    }
                    g.barrier()?;
                    g.shutdown()
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    for o in out {
        o.unwrap();
    }
}

/// Rank 0 floods rank 1 with 1 MiB messages while rank 1 does not read:
/// rank 1's queued bytes stop at the peer budget and rank 0 is held back;
/// then rank 1 drains everything, intact and in order.
fn flood(g: &ProcessGroup) -> meshwork::Result<()> {
    const MSG: usize = 1 << 20;
    let budget = meshwork::DEFAULT_PEER_BUDGET;
    let count = (budget as usize / MSG) * 3;
    let done = std::sync::atomic::AtomicBool::new(false);
    if g.rank() == 0 {
        for i in 0..count {
            g.send_bytes(&vec![i as u8; MSG], 1, 42)?;
        }
        done.store(true, std::sync::atomic::Ordering::Release);
    } else {
        // Wait (bounded) until the sender has filled the budget.
        let deadline = Instant::now() + Duration::from_secs(20);
        while g.stats()[0].queued_bytes + MSG as u64 <= budget {
            assert!(
                Instant::now() < deadline,
                "the sender never filled the budget: {:?}",
                g.stats()[0]
            );
            std::thread::yield_now();
        }
        let before = g.stats()[0];
        assert!(
            before.received_messages < count as u64,
            "nothing held the sender back: {before:?}"
        );
        for i in 0..count {
            let m = g.recv_bytes(0, 42)?;
            assert!(
                m.len() == MSG && m.iter().all(|&b| b == i as u8),
                "message {i}"
            );
        }
        let after = g.stats()[0];
        assert!(after.max_queued_bytes <= budget + MSG as u64, "{after:?}");
        assert!(
            after.queued_bytes < 64,
            "only control traffic may remain: {after:?}"
        );
    }
    g.barrier()
}

#[test]
fn back_pressure_bounds_the_receivers_queue() {
    for o in run_world(2, flood) {
        o.unwrap();
    }
    for topology in [Topology::Mesh, Topology::Star] {
        for o in run_nodes(3, topology, |g| {
            if g.rank() < 2 {
                flood(g)?;
            } else {
                g.barrier()?;
            }
            let s = g.stats();
            assert_eq!(s.len(), 3);
            g.shutdown()
        }) {
            o.unwrap();
        }
    }
}

/// Rank 0 queues eight 1 MiB broadcasts (the pipelined chain) before the
/// other ranks call any: each rank's predecessor in the chain still never
/// has more than one call's bytes queued at it, because a rank sends
/// nothing of a call before its successor has entered that call.
fn broadcast_loop(g: &ProcessGroup) -> meshwork::Result<()> {
    const ELEMS: usize = 1 << 18;
    const CALLS: usize = 8;
    if g.rank() == 0 {
        let work: Vec<_> = (0..CALLS)
            .map(|i| g.broadcast_nb(vec![i as f32; ELEMS], 0))
            .collect();
        for peer in 1..g.world_size() {
            g.send_bytes(b"go", peer, 7)?;
        }
        for w in work {
            w.wait()?;
        }
    } else {
        g.recv_bytes(0, 7)?;
        for i in 0..CALLS {
            let mut buf = vec![0f32; ELEMS];
            g.broadcast(&mut buf, 0)?;
            assert!(buf.iter().all(|&x| x == i as f32), "call {i}");
        }
        let from_pred = g.stats()[g.rank() as usize - 1];
        // One call's payload, its segments' descriptors and the "go".
        let one_call = (ELEMS * 4 + 4096) as u64;
        assert!(
            from_pred.max_queued_bytes <= one_call,
            "rank {} had {} bytes queued from its predecessor",
            g.rank(),
            from_pred.max_queued_bytes
        );
    }
    g.barrier()
}

#[test]
fn a_broadcast_loop_runs_at_most_one_call_ahead() {
    for o in run_world(4, broadcast_loop) {
        o.unwrap();
    }
    for o in run_nodes(4, Topology::Mesh, broadcast_loop) {
        o.unwrap();
    }
}

#[test]
fn faults_shutdown_right_after_the_last_collective_loses_nothing_over_tcp() {
    for round in 0..10 {
        for topology in [Topology::Mesh, Topology::Star] {
            for o in run_nodes(3, topology, |g| {
                let mut x = vec![g.rank() as u64 + round; 10_000];
                g.all_reduce(&mut x, ReduceOp::Sum)?;
                if g.rank() == 2 {
                    g.send(&x[..3], 0, 1)?;
                }
                g.shutdown()?;
                // Everything the peers sent before their goodbye is here.
                assert!(x.iter().all(|&v| v == 3 + 3 * round));
                Ok(())
            }) {
                o.unwrap();
            }
        }
    }
}

/// A message past every 32-bit limit, intact, in-process and over TCP. The
/// sender's buffer is dropped before the receive to keep the peak near
/// three copies. Runs one at a time (the `faults` group).
#[test]
fn faults_a_message_over_4_gib_arrives_intact() {
    const LEN: usize = (4 << 30) + (256 << 20) + 7;
    fn byte(i: usize) -> u8 {
        (i ^ (i >> 13) ^ (i >> 29)) as u8
    }
    let body = |g: &ProcessGroup| -> meshwork::Result<()> {
        // Filling and checking 4.3 GB takes a while on 2 cores.
        g.set_timeout(Duration::from_secs(180));
        if g.rank() == 0 {
            let data: Vec<u8> = (0..LEN).map(byte).collect();
            g.send(&data, 1, 9)?;
        } else {
            let mut got = vec![0u8; LEN];
            g.recv(&mut got, 0, 9)?;
            let bad = got.iter().enumerate().position(|(i, &b)| b != byte(i));
            assert_eq!(bad, None, "first wrong byte");
        }
        g.barrier()
    };
    for o in run_world(2, body) {
        o.unwrap();
    }
    for o in run_nodes(2, Topology::Mesh, |g| {
        body(g)?;
        g.shutdown()
    }) {
        o.unwrap();
    }
}

/// Point-to-point rules: tags are independent lanes, FIFO within a tag, a
/// timed-out receive consumes nothing and the message is received later,
/// and one lane holds at most `LANE_DEPTH` unreceived messages per sender.
fn p2p_rules(g: &ProcessGroup) -> meshwork::Result<()> {
    let depth = meshwork_transport::LANE_DEPTH as usize;
    if g.rank() == 0 {
        for i in 0..5u32 {
            g.send(&[i], 1, 10)?;
            g.send(&[100 + i], 1, 11)?;
        }
        g.barrier()?; // rank 1 has timed out on tag 12
        g.send(&[7u64], 1, 12)?;
        // Flood one lane past its depth, then a message on another lane.
        for i in 0..depth + 40 {
            g.send_bytes(&(i as u32).to_le_bytes(), 1, 20)?;
        }
        g.send_bytes(b"after", 1, 21)?;
    } else {
        // Tag 11 first: the other lane waits without blocking this one.
        for i in 0..5u32 {
            let mut x = [0u32];
            g.recv(&mut x, 0, 11)?;
            assert_eq!(x, [100 + i]);
        }
        for i in 0..5u32 {
            let mut x = [0u32];
            g.recv(&mut x, 0, 10)?;
            assert_eq!(x, [i], "FIFO within a tag");
        }
        assert!(matches!(
            g.recv_bytes_timeout(0, 12, Duration::from_millis(50)),
            Err(Error::Timeout { .. })
        ));
        g.barrier()?;
        let mut y = [0u64];
        g.recv(&mut y, 0, 12)?;
        assert_eq!(y, [7]);
        // The sender stops at the lane's depth: tag 21 cannot arrive until
        // tag 20 is drained.
        let deadline = Instant::now() + Duration::from_secs(20);
        while g.stats()[0].received_messages < (10 + 1 + depth) as u64 {
            assert!(Instant::now() < deadline, "{:?}", g.stats()[0]);
            std::thread::yield_now();
        }
        assert!(matches!(
            g.recv_bytes_timeout(0, 21, Duration::from_millis(300)),
            Err(Error::Timeout { .. })
        ));
        assert!(
            g.stats()[0].received_messages <= (10 + 1 + depth + 2) as u64,
            "{:?}",
            g.stats()[0]
        );
        for i in 0..depth + 40 {
            assert_eq!(g.recv_bytes(0, 20)?, (i as u32).to_le_bytes());
        }
        assert_eq!(g.recv_bytes(0, 21)?, b"after");
    }
    g.barrier()
}

#[test]
fn point_to_point_rules_in_process_and_over_tcp() {
    for o in run_world(2, p2p_rules) {
        o.unwrap();
    }
    for topology in [Topology::Mesh, Topology::Star] {
        for o in run_nodes(3, topology, |g| {
            if g.rank() < 2 {
                p2p_rules(g)?;
            } else {
                g.barrier()?;
                g.barrier()?;
            }
            g.shutdown()
        }) {
            o.unwrap();
        }
    }
}

#[test]
fn dropping_a_group_flushes_what_it_sent() {
    // Rank 0 sends 32 MiB and drops its group at once; rank 1 still gets
    // every byte, then sees rank 0 leave.
    let (addrs, mut held) = crate::support::bound_ports(2);
    let (a0, a1) = (addrs.clone(), addrs);
    let (tcp1, udp1) = held.pop().expect("rank 1's sockets");
    let (tcp0, udp0) = held.pop().expect("rank 0's sockets");
    let receiver = std::thread::spawn(move || -> meshwork::Result<()> {
        let g = meshwork::Node::new(1, 2)
            .peers(a1)?
            .listen_on(tcp1, Some(udp1))
            .timeout(Duration::from_secs(20))
            .connect()?;
        let got = g.recv_bytes(0, 3)?;
        assert!(
            got.len() == 32 << 20 && got.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8)
        );
        assert!(matches!(
            g.recv_bytes(0, 3),
            Err(Error::PeerDisconnected { rank: 0 })
        ));
        Ok(())
    });
    let g = meshwork::Node::new(0, 2)
        .peers(a0)
        .unwrap()
        .listen_on(tcp0, Some(udp0))
        .timeout(Duration::from_secs(20))
        .connect()
        .unwrap();
    let data: Vec<u8> = (0..32 << 20).map(|i| (i % 251) as u8).collect();
    g.send_bytes(&data, 1, 3).unwrap();
    drop(g);
    receiver.join().unwrap().unwrap();
}

/// A response that arrives after its call timed out does not stay queued:
/// the next call discards it.
fn late_rpc_response_is_discarded(g: &ProcessGroup) -> meshwork::Result<()> {
    let (release_tx, release_rx) = crossbeam_channel::unbounded::<()>();
    g.register_rpc(5, move |_, _| {
        let _ = release_rx.recv_timeout(Duration::from_secs(10));
        vec![0u8; 100_000]
    });
    g.register_rpc(6, |_, _| b"ok".to_vec());
    g.barrier()?;
    if g.rank() == 0 {
        assert!(matches!(
            g.rpc_with_timeout(1, 5, b"", Duration::from_millis(100)),
            Err(Error::Timeout { .. })
        ));
    }
    g.barrier()?;
    let _ = release_tx.send(());
    if g.rank() == 0 {
        // Wait (bounded) for the late 100 kB response to land here.
        let deadline = Instant::now() + Duration::from_secs(20);
        while g.stats()[1].queued_bytes < 100_000 {
            assert!(Instant::now() < deadline, "{:?}", g.stats()[1]);
            std::thread::yield_now();
        }
        assert_eq!(g.rpc(1, 6, b"")?, b"ok");
        assert!(
            g.stats()[1].queued_bytes < 1_000,
            "the late response was kept: {:?}",
            g.stats()[1]
        );
    }
    g.barrier()
}

#[test]
fn late_rpc_responses_do_not_accumulate() {
    for o in run_world(2, late_rpc_response_is_discarded) {
        o.unwrap();
    }
    for o in run_nodes(2, Topology::Mesh, |g| {
        late_rpc_response_is_discarded(g)?;
        g.shutdown()
    }) {
        o.unwrap();
    }
}

/// `links()` says what carries each rank's traffic: its own rank Local, a
/// direct QUIC link in a mesh, and through the coordinator in a star.
#[test]
fn links_report_what_carries_each_peer() {
    use meshwork::LinkKind::{Local, Quic, Relayed, SharedMemory};
    // Ranks of one host share memory (the default)...
    for o in run_nodes(3, Topology::Mesh, |g| {
        let mut want = vec![SharedMemory; 3];
        want[g.rank() as usize] = Local;
        assert_eq!(g.links(), want, "rank {}", g.rank());
        g.shutdown()
    }) {
        o.unwrap();
    }
    for o in run_nodes(3, Topology::Star, |g| {
        let want = match g.rank() {
            0 => vec![Local, SharedMemory, SharedMemory],
            1 => vec![SharedMemory, Local, Relayed],
            _ => vec![SharedMemory, Relayed, Local],
        };
        assert_eq!(g.links(), want, "rank {}", g.rank());
        g.shutdown()
    }) {
        o.unwrap();
    }
    // ...unless it is off.
    for o in run_nodes_with(
        3,
        Topology::Mesh,
        |n| n.shared_memory(false),
        |g| {
            let mut want = vec![Quic; 3];
            want[g.rank() as usize] = Local;
            assert_eq!(g.links(), want, "rank {}", g.rank());
            g.shutdown()
        },
    ) {
        o.unwrap();
    }
    for o in run_nodes_with(
        3,
        Topology::Star,
        |n| n.shared_memory(false),
        |g| {
            let want = match g.rank() {
                0 => vec![Local, Quic, Quic],
                1 => vec![Quic, Local, Relayed],
                _ => vec![Quic, Relayed, Local],
            };
            assert_eq!(g.links(), want, "rank {}", g.rank());
            g.shutdown()
        },
    ) {
        o.unwrap();
    }
}
