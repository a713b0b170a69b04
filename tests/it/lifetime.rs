//! A group made from a group outlives it: the recovery idiom
//! `g = g.shrink()?` and `g = g.split(..)?` drop the parent at once, and
//! the new group goes on over the same links, in process and across
//! processes on every link. The links close when the last group over
//! them is shut down or dropped.

use crate::multiprocess::launch;
use crate::procs::{all_ok, spawn};
use meshwork::{Error, ProcessGroup, ReduceOp, Result};
use std::sync::Arc;
use std::time::Duration;

/// Collectives on `g` whose results follow from its ranks alone: small
/// (a frame) and 1 MiB (QUIC's sidecar, shared memory's large path).
fn check(g: &ProcessGroup, what: &str) -> Result<()> {
    let (rank, n) = (g.rank(), g.world_size());
    let wrong = |detail: String| Error::InvalidArgument(format!("{what}: {detail}"));
    let mut x = [rank + 1; 3];
    g.all_reduce(&mut x, ReduceOp::Sum)?;
    if x != [n * (n + 1) / 2; 3] {
        return Err(wrong(format!("all_reduce gave {x:?}")));
    }
    let mut big = vec![rank as f32; 1 << 18];
    g.all_reduce(&mut big, ReduceOp::Max)?;
    if big.iter().any(|&v| v != (n - 1) as f32) {
        return Err(wrong("1 MiB all_reduce wrong".into()));
    }
    let mut all = vec![0u32; n as usize];
    g.all_gather(&[rank], &mut all)?;
    if all != (0..n).collect::<Vec<_>>() {
        return Err(wrong(format!("all_gather gave {all:?}")));
    }
    let mut b = [if rank == n - 1 { 7u64 } else { 0 }; 2];
    g.broadcast(&mut b, n - 1)?;
    if b != [7; 2] {
        return Err(wrong(format!("broadcast gave {b:?}")));
    }
    g.barrier()
}

/// What every rank runs (in process, or as the `reform` scenario): each
/// new group replaces the one it was made from, which is dropped at once
/// (or shut down while its child is in use), and every group's results
/// are checked.
pub(crate) fn reform(g: Arc<ProcessGroup>) -> Result<String> {
    let world = g.world_size();
    let mut g = g;
    // Nothing failed: the same members on a fresh communicator.
    g = g.shrink()?;
    check(&g, "after g = g.shrink()")?;
    g = g.split(0, g.rank())?;
    check(&g, "after g = g.split(0, rank)")?;
    // A view of a view, its parent shut down (every rank does) and then
    // dropped while it works on.
    let half = g.split(g.rank() % 2, g.rank())?;
    check(&half, "a half")?;
    g.shutdown()?;
    check(&half, "a half after its parent's shutdown")?;
    drop(g);
    let mut half = half;
    half = half.shrink()?;
    check(&half, "a shrunk half after its parent was dropped")?;
    let size = half.world_size();
    half.shutdown()?;
    Ok(format!(
        "world {world}, halves of {size}, every group exact"
    ))
}

/// In process: every rank of `local(world)` runs [`reform`].
fn reform_in_process(world: u32) {
    let groups = meshwork::local(world).unwrap();
    let handles: Vec<_> = groups
        .into_iter()
        .map(|g| std::thread::spawn(move || reform(g)))
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        let got = h.join().expect("rank thread");
        assert!(got.is_ok(), "rank {r}: {got:?}");
    }
}

#[test]
fn g_equals_g_shrink_and_split_then_collectives_in_process() {
    reform_in_process(3);
    reform_in_process(4);
}

/// The links stay up while any group over them is in use, and close when
/// the last one is dropped: rank 0 drops its world group and keeps a
/// split of it (rank 1 still reaches it), then drops that too (rank 1
/// sees it leave).
#[test]
fn the_links_close_with_the_last_group_over_them() {
    let mut world = meshwork::local(2).unwrap().into_iter();
    let (g0, g1) = (world.next().unwrap(), world.next().unwrap());
    let (dropped_world, dropped_all) = (
        crossbeam_channel::bounded::<()>(1),
        crossbeam_channel::bounded::<()>(1),
    );
    let rank0 = std::thread::spawn(move || -> Result<()> {
        let sub = g0.split(0, 0)?;
        drop(g0);
        dropped_world.0.send(()).unwrap();
        sub.barrier()?;
        let mut x = [1u8; 4];
        sub.all_reduce(&mut x, ReduceOp::Sum)?;
        assert_eq!(x, [2; 4]);
        sub.barrier()?;
        drop(sub);
        dropped_all.0.send(()).unwrap();
        Ok(())
    });
    let sub = g1.split(0, 1).unwrap();
    dropped_world.1.recv().unwrap();
    // Rank 0's world group is gone; its split, over the same links, is not.
    sub.barrier().unwrap();
    let mut x = [1u8; 4];
    sub.all_reduce(&mut x, ReduceOp::Sum).unwrap();
    assert_eq!(x, [2; 4]);
    sub.barrier().unwrap();
    dropped_all.1.recv().unwrap();
    rank0.join().unwrap().unwrap();
    // Rank 0 dropped every group: its links closed, and rank 1 is told
    // at once rather than at the deadline.
    g1.set_timeout(Duration::from_secs(30));
    let started = std::time::Instant::now();
    let got = g1.recv_bytes(0, 5);
    assert!(
        matches!(got, Err(Error::PeerDisconnected { rank: 0 })),
        "{got:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Shutting a group down ends only that group: its split keeps working,
/// and calls on the shut-down group say `ShutDown`.
#[test]
fn a_shutdown_parent_leaves_its_split_working() {
    let results = crate::support::run_world(3, |g| -> Result<()> {
        let sub = g.split(0, g.rank())?;
        g.shutdown()?;
        assert!(matches!(g.barrier(), Err(Error::ShutDown)));
        check(&sub, "split after the parent's shutdown")?;
        sub.shutdown()
    });
    for (r, got) in results.into_iter().enumerate() {
        assert!(got.is_ok(), "rank {r}: {got:?}");
    }
}

fn reform_across(link: &str) {
    let mut ranks = spawn(&launch(4, "mesh", 20.0, link), "reform");
    let results = ranks.results(Duration::from_secs(120));
    all_ok(&results);
    for (r, line) in &results {
        assert!(
            line.ends_with("world 4, halves of 2, every group exact"),
            "rank {r}: {line}"
        );
    }
}

#[test]
fn g_equals_g_shrink_and_split_across_processes_over_quic() {
    reform_across("quic");
}

#[test]
fn g_equals_g_shrink_and_split_across_processes_over_tcp() {
    reform_across("tcp");
}

#[test]
fn g_equals_g_shrink_and_split_across_processes_over_shared_memory() {
    reform_across("shm");
}

/// `subgroup` needs no collective: two pairs of a world of four, each
/// made by its members only (in the order given: rank 3 is rank 0 of
/// its pair), run at once; bad member lists are refused by name.
#[test]
fn subgroups_are_made_by_their_members_only() {
    let results = crate::support::run_world(4, |g| -> Result<(u32, u32, u64)> {
        let members: &[u32] = if g.rank() % 2 == 1 { &[3, 1] } else { &[0, 2] };
        let pair = g.subgroup(members, 10 + u64::from(g.rank() % 2))?;
        let mut x = [u64::from(g.rank()); 4];
        pair.all_reduce(&mut x, ReduceOp::Sum)?;
        let mut b = [u64::from(g.rank()) * 100];
        pair.broadcast(&mut b, 0)?;
        assert_eq!(x[0], members.iter().map(|&m| u64::from(m)).sum::<u64>());
        Ok((pair.rank(), pair.world_size(), b[0]))
    });
    let got: Vec<_> = results.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(got, [(0, 2, 0), (1, 2, 300), (1, 2, 0), (0, 2, 300)]);
    let world = meshwork::local(2).unwrap();
    for (members, says) in [
        (&[0u32, 2][..], "out of range"),
        (&[0, 0][..], "listed twice"),
        (&[1][..], "not among the members"),
    ] {
        let e = world[0].subgroup(members, 1).unwrap_err().to_string();
        assert!(e.contains(says), "{members:?}: {e}");
    }
}
