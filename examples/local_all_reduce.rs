//! All-reduce 64 MiB of f32 gradients across a 4-rank world inside this
//! process, check the result, and print the bandwidth.
//!
//! `cargo run --release --example local_all_reduce`
#![allow(clippy::print_stdout, reason = "an example reports its result")]

use meshwork::{local, ReduceOp};
use std::time::Instant;

fn main() -> meshwork::Result<()> {
    const WORLD: u32 = 4;
    const COUNT: usize = 16 << 20; // 64 MiB of f32 per rank
    const ITERS: usize = 5;
    let world = local(WORLD)?;
    let per_rank: Vec<meshwork::Result<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = world
            .iter()
            .map(|g| {
                s.spawn(move || {
                    let mut grads = vec![0f32; COUNT];
                    g.all_reduce(&mut grads, ReduceOp::Sum)?; // warm-up
                    g.barrier()?;
                    let started = Instant::now();
                    for _ in 0..ITERS {
                        grads.fill(g.rank() as f32 + 1.0);
                        g.all_reduce(&mut grads, ReduceOp::Sum)?;
                    }
                    let seconds = started.elapsed().as_secs_f64() / ITERS as f64;
                    // 1 + 2 + 3 + 4, on every rank, in every element.
                    assert!(
                        grads.iter().all(|&x| x == 10.0),
                        "rank {} got a wrong sum",
                        g.rank()
                    );
                    g.shutdown()?;
                    Ok(seconds)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    });
    let mut slowest = 0f64;
    for r in per_rank {
        slowest = slowest.max(r?);
    }
    let bytes = (COUNT * 4) as f64;
    let algbw = bytes / slowest / 1e9;
    let busbw = algbw * 2.0 * f64::from(WORLD - 1) / f64::from(WORLD);
    println!(
        "all_reduce OK: {WORLD} ranks × {} MiB f32, every element = 10; {:.1} ms per call, algbw {algbw:.2} GB/s, busbw {busbw:.2} GB/s",
        (COUNT * 4) >> 20,
        slowest * 1e3
    );
    Ok(())
}
