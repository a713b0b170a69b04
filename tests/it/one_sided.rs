//! One-sided operations on the symmetric heap, in 4 processes (the
//! `heap` scenario) over shared memory, QUIC and TCP, in a mesh and a
//! star; and in process, what is refused.

use crate::multiprocess::launch;
use crate::procs::{all_ok, spawn};
use meshwork::{Error, Node, ProcessGroup, ReduceOp};
use std::time::Duration;

const HEAP: usize = 4 << 20;
const COUNTER: usize = 64; // on rank 0
const LOCK: usize = 72; // on rank 1, guarding VALUE
const VALUE: usize = 80;
const SERVED: usize = 128; // on rank 3, written while it waits in a barrier
const BULK: usize = 4099; // 3 MiB, deliberately unaligned
const BULK_LEN: usize = 3 << 20;

/// Where rank `r`'s word to everyone goes.
fn word_of(r: u32) -> usize {
    8 * r as usize
}

fn bad(what: String) -> Error {
    Error::InvalidArgument(what)
}

fn pattern(from: u32) -> Vec<u8> {
    (0..BULK_LEN)
        .map(|i| (i as u32).wrapping_mul(7).wrapping_add(from) as u8)
        .collect()
}

/// What every rank of the `heap` scenario runs (4 ranks, `HEAP_MB=4`).
pub(crate) fn scenario(g: &ProcessGroup) -> meshwork::Result<String> {
    let (me, p) = (g.rank(), g.world_size());
    if g.heap_bytes() != HEAP {
        return Err(bad(format!("heap of {} bytes", g.heap_bytes())));
    }
    // A word to every rank, this one included, then read back.
    for dst in 0..p {
        let v = u64::from(me + 1) * 100 + u64::from(dst);
        g.put(dst, word_of(me), &v.to_le_bytes())?;
    }
    // A same-host peer's heap is mapped here: a put to it is a store into
    // its memory, not a message.
    let links = g.links();
    let same_host: Vec<u32> = (0..p)
        .filter(|&d| links[d as usize] == meshwork::LinkKind::SharedMemory)
        .collect();
    for &dst in &same_host {
        let before = g.stats()[dst as usize].sent_messages;
        let v = u64::from(me + 1) * 100 + u64::from(dst);
        g.put(dst, word_of(me), &v.to_le_bytes())?;
        let after = g.stats()[dst as usize].sent_messages;
        if after != before {
            return Err(bad(format!(
                "a put to same-host rank {dst} sent {} messages",
                after - before
            )));
        }
    }
    g.barrier()?;
    for src in 0..p {
        let mut mine = [0u8; 8];
        g.heap_read(word_of(src), &mut mine)?;
        let mut theirs = [0u8; 8];
        g.get(src, word_of(me), &mut theirs)?;
        let (mine, theirs) = (u64::from_le_bytes(mine), u64::from_le_bytes(theirs));
        if mine != u64::from(src + 1) * 100 + u64::from(me)
            || theirs != u64::from(me + 1) * 100 + u64::from(src)
        {
            return Err(bad(format!("words from/to {src}: {mine} {theirs}")));
        }
    }
    // 3 MiB to the next rank, at an unaligned offset; read where it
    // landed, and fetch it back.
    let next = (me + 1) % p;
    g.put(next, BULK, &pattern(me))?;
    g.barrier()?;
    let mut landed = vec![0u8; BULK_LEN];
    g.heap_read(BULK, &mut landed)?;
    if landed != pattern((me + p - 1) % p) {
        return Err(bad("the 3 MiB put landed wrong".into()));
    }
    let mut back = vec![0u8; BULK_LEN];
    g.get(next, BULK, &mut back)?;
    if back != pattern(me) {
        return Err(bad("the 3 MiB get read wrong".into()));
    }
    // 500 fetch_adds from each rank on one counter: every previous value
    // 0..2000 exactly once.
    let prev: Vec<u64> = (0..500)
        .map(|_| g.fetch_add(0, COUNTER, 1))
        .collect::<meshwork::Result<_>>()?;
    let mut all = vec![0u64; 500 * p as usize];
    g.all_gather(&prev, &mut all)?;
    all.sort_unstable();
    if all != (0..500 * u64::from(p)).collect::<Vec<_>>() {
        return Err(bad("fetch_add's previous values are not 0..2000".into()));
    }
    if me == 0 && g.atomic_load(COUNTER)? != 2000 {
        return Err(bad(format!("counter {}", g.atomic_load(COUNTER)?)));
    }
    // A lock on compare_swap guarding a read-modify-write on rank 1.
    for _ in 0..50 {
        while g.compare_swap(1, LOCK, 0, u64::from(me) + 1)? != 0 {}
        let mut v = [0u8; 8];
        g.get(1, VALUE, &mut v)?;
        g.put(1, VALUE, &(u64::from_le_bytes(v) + 1).to_le_bytes())?;
        let held = g.compare_swap(1, LOCK, u64::from(me) + 1, 0)?;
        if held != u64::from(me) + 1 {
            return Err(bad(format!("the lock was held by {held}")));
        }
    }
    g.barrier()?;
    let mut v = [0u8; 8];
    g.get(1, VALUE, &mut v)?;
    if u64::from_le_bytes(v) != 50 * u64::from(p) {
        return Err(bad(format!("guarded value {}", u64::from_le_bytes(v))));
    }
    // Rank 3 waits in a barrier while the others write to it and read back.
    if me == 3 {
        g.barrier()?;
        for r in 0..3 {
            if g.atomic_load(SERVED + 8 * r)? != 1000 + r as u64 {
                return Err(bad(format!("rank {r}'s write while blocked")));
            }
        }
    } else {
        let at = SERVED + 8 * me as usize;
        g.put(3, at, &(1000 + u64::from(me)).to_le_bytes())?;
        let mut v = [0u8; 8];
        g.get(3, at, &mut v)?;
        if u64::from_le_bytes(v) != 1000 + u64::from(me) {
            return Err(bad("a get from a rank in a barrier".into()));
        }
        g.barrier()?;
    }
    refusals(g)?;
    let mut sum = [me + 1];
    g.all_reduce(&mut sum, ReduceOp::Sum)?;
    Ok(format!(
        "heap of {} ranks, {} mapped",
        sum[0],
        same_host.len()
    ))
}

/// Bad input is `InvalidArgument` naming the heap's size; nothing is
/// written.
fn refusals(g: &ProcessGroup) -> meshwork::Result<()> {
    let before = g.atomic_load(COUNTER)?;
    let size = format!("heap of {HEAP} bytes");
    let refused = |r: meshwork::Result<()>, what: &str| match r {
        Err(Error::InvalidArgument(m)) if m.contains(&size) => Ok(()),
        other => Err(bad(format!("{what}: {other:?}"))),
    };
    refused(g.put(0, HEAP - 4, &[1u8; 8]), "a put past the end")?;
    refused(g.get(1, usize::MAX, &mut [0u8; 2]), "a get past the end")?;
    refused(
        g.fetch_add(2, COUNTER + 4, 1).map(drop),
        "a misaligned fetch_add",
    )?;
    refused(g.compare_swap(9, COUNTER, 0, 1).map(drop), "rank 9 of 4")?;
    refused(g.atomic_load(HEAP).map(drop), "an atomic_load past the end")?;
    let mut last = [0u8; 8];
    g.heap_read(HEAP - 8, &mut last)?;
    if last != [0u8; 8] || g.atomic_load(COUNTER)? != before {
        return Err(bad("a refused operation wrote".into()));
    }
    Ok(())
}

/// `mapped`: the same-host peers whose heaps each rank maps; `cap`: a
/// `MAX_MESSAGE_BYTES` (puts and gets then travel in pieces under it).
fn heap_run(topology: &str, link: &str, mapped: usize, cap: Option<u64>) {
    let mut l = launch(4, topology, 20.0, link);
    l.set("HEAP_MB", "4");
    if let Some(cap) = cap {
        l.set("MAX_MESSAGE_BYTES", &cap.to_string());
    }
    let mut ranks = spawn(&l, "heap");
    let results = ranks.results(Duration::from_secs(120));
    all_ok(&results);
    assert!(
        results
            .iter()
            .all(|(_, l)| *l == format!("RESULT ok heap of 10 ranks, {mapped} mapped")),
        "{results:#?}"
    );
}

#[test]
fn multiprocess_one_sided_operations_in_a_mesh_over_shared_memory() {
    heap_run("mesh", "shm", 3, None);
}

/// With a message cap of 1 MiB the 3 MiB puts and gets go in pieces
/// under it.
#[test]
fn multiprocess_one_sided_operations_under_a_small_message_cap() {
    heap_run("mesh", "tcp", 0, Some(1 << 20));
}

#[test]
fn multiprocess_one_sided_operations_in_a_mesh_over_quic() {
    heap_run("mesh", "quic", 0, None);
}

#[test]
fn multiprocess_one_sided_operations_in_a_mesh_over_tcp() {
    heap_run("mesh", "tcp", 0, None);
}

#[test]
fn multiprocess_one_sided_operations_in_a_star_relayed_by_the_coordinator() {
    heap_run("star", "quic", 0, None);
}

/// Two ranks with heaps of `sizes` bytes fail to form, both naming the
/// other's size, within the deadline.
fn heaps_refused(sizes: [usize; 2]) {
    let peers = crate::support::free_ports(2);
    let errors: Vec<Error> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2u32)
            .map(|r| {
                let peers = peers.clone();
                s.spawn(move || {
                    Node::new(r, 2)
                        .peers(peers)
                        .unwrap()
                        .heap_bytes(sizes[r as usize])
                        .timeout(Duration::from_secs(20))
                        .connect()
                        .unwrap_err()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, e) in errors.iter().enumerate() {
        let theirs = format!("has {} bytes, this rank {}", sizes[1 - r], sizes[r]);
        assert!(
            matches!(e, Error::InvalidArgument(m) if m.contains("the heap differs between ranks") && m.contains(&theirs)),
            "{e:?}"
        );
    }
}

/// Ranks that give different heap sizes (none on one of them included)
/// all fail to form, naming it; a group without a heap refuses every
/// operation by name.
#[test]
fn heaps_of_different_sizes_and_no_heap_are_refused() {
    heaps_refused([64, 128]);
    heaps_refused([0, 64]);
    let world = meshwork::local(2).unwrap();
    assert_eq!(world[0].heap_bytes(), 0);
    let e = world[0].put(1, 0, &[1]).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("no heap")),
        "{e:?}"
    );
    assert!(world[1].atomic_load(0).is_err());
}
