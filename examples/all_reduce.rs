//! All-reduce across a group formed from the environment; checks the result
//! and prints the bandwidth.
//!
//! `meshrun -n 4 -- target/release/examples/all_reduce [MiB]`
#![allow(clippy::print_stdout, reason = "an example reports its result")]

use meshwork::{Node, ReduceOp};
use std::time::Instant;

fn main() -> meshwork::Result<()> {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64);
    let group = Node::from_env()?.connect()?;
    let (rank, world) = (group.rank(), group.world_size());
    let count = (mib << 20) / 4;
    let mut grads = vec![0f32; count];
    group.all_reduce(&mut grads, ReduceOp::Sum)?; // warm-up
    const ITERS: u32 = 5;
    group.barrier()?;
    let started = Instant::now();
    for _ in 0..ITERS {
        grads.fill(rank as f32 + 1.0);
        group.all_reduce(&mut grads, ReduceOp::Sum)?;
    }
    let seconds = started.elapsed().as_secs_f64() / f64::from(ITERS);
    let expected = (world * (world + 1) / 2) as f32;
    assert!(
        grads.iter().all(|&x| x == expected),
        "rank {rank}: wrong sum"
    );
    if rank == 0 {
        let algbw = (count * 4) as f64 / seconds / 1e9;
        let busbw = algbw * 2.0 * f64::from(world - 1) / f64::from(world);
        println!(
            "all_reduce OK: {world} processes × {mib} MiB f32, every element = {expected}; {:.1} ms per call, algbw {algbw:.2} GB/s, busbw {busbw:.2} GB/s ({:?})",
            seconds * 1e3,
            group.topology()
        );
    }
    group.shutdown()
}
