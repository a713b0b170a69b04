//! The OSU micro-benchmarks' three loops on meshwork's own Rust API, for
//! the table beside OSU's numbers for Open MPI and for meshwork's MPI
//! (`benches/mpi_abi.sh`): the same sizes, iterations and timing, the
//! same output columns.
//!
//! ```sh
//! cargo build --release --examples
//! target/release/meshrun -n 2 -- target/release/examples/osu_rust latency
//! target/release/meshrun -n 2 -- target/release/examples/osu_rust bw
//! target/release/meshrun -n 4 -- target/release/examples/osu_rust allreduce
//! ```
//!
//! `latency`: ping-pong, half the round trip (µs), each round timed on its
//! own as OSU 7.4 does. `bw`: a window of 64 messages then a 4-byte
//! answer, MB/s (10^6 bytes). `allreduce`: f32 sums of `size` bytes, each
//! call timed with a barrier after it, the mean over ranks (µs), as OSU's
//! `Avg Latency`. Sizes 1 B (4 B for
//! `allreduce`) to `MAX_SIZE` (4 MiB); like OSU, 10 000 iterations below
//! 8 KiB and 1 000 from it (100 and 20 for `bw`'s windows), after
//! warm-up.

#![allow(
    clippy::print_stdout,
    reason = "a benchmark that prints its table, as OSU's do"
)]

use meshwork::{Node, ProcessGroup, ReduceOp};
use std::time::{Duration, Instant};

const WINDOW: usize = 64;

fn sizes(from: usize) -> impl Iterator<Item = usize> {
    let max: usize = std::env::var("MAX_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4 << 20);
    std::iter::successors(Some(from), |s| Some(s * 2)).take_while(move |&s| s <= max)
}

/// Iterations and warm-up for `size`, as OSU's defaults.
fn rounds(size: usize, small: (usize, usize), large: (usize, usize)) -> (usize, usize) {
    if size < 8192 {
        small
    } else {
        large
    }
}

fn latency(g: &ProcessGroup) -> meshwork::Result<()> {
    let me = g.rank();
    if me == 0 {
        println!(
            "# meshwork Rust API: latency (send/recv ping-pong)\n# Size       Avg Latency(us)"
        );
    }
    for size in sizes(1) {
        let mut buf = vec![0u8; size];
        let (iters, skip) = rounds(size, (10_000, 100), (1_000, 10));
        // Each round timed on its own and summed, as OSU 7.4 does (two
        // clock reads a round, in the measured time).
        let mut total = Duration::ZERO;
        for i in 0..iters + skip {
            if me == 0 {
                let start = Instant::now();
                g.send(&buf, 1, 1)?;
                g.recv(&mut buf, 1, 1)?;
                if i >= skip {
                    total += start.elapsed();
                }
            } else if me == 1 {
                g.recv(&mut buf, 0, 1)?;
                g.send(&buf, 0, 1)?;
            }
        }
        let us = total.as_secs_f64() * 1e6 / (2.0 * iters as f64);
        if me == 0 {
            println!("{size:<10}{us:>18.2}");
        }
    }
    Ok(())
}

fn bw(g: &ProcessGroup) -> meshwork::Result<()> {
    let me = g.rank();
    if me == 0 {
        println!("# meshwork Rust API: bandwidth (windows of {WINDOW} sends)\n# Size      Bandwidth (MB/s)");
    }
    let mut ack = [0u8; 4];
    for size in sizes(1) {
        let mut buf = vec![0u8; size];
        let (iters, skip) = rounds(size, (100, 10), (20, 2));
        let mut start = Instant::now();
        for i in 0..iters + skip {
            if i == skip {
                start = Instant::now();
            }
            if me == 0 {
                for _ in 0..WINDOW {
                    g.send(&buf, 1, 100)?;
                }
                g.recv(&mut ack, 1, 101)?;
            } else if me == 1 {
                for _ in 0..WINDOW {
                    g.recv(&mut buf, 0, 100)?;
                }
                g.send(&ack, 0, 101)?;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        if me == 0 {
            let mb = (size * WINDOW * iters) as f64 / 1e6 / secs;
            println!("{size:<10}{mb:>18.2}");
        }
    }
    Ok(())
}

fn allreduce(g: &ProcessGroup) -> meshwork::Result<()> {
    if g.rank() == 0 {
        println!("# meshwork Rust API: all_reduce (f32 sum)\n# Size       Avg Latency(us)");
    }
    for size in sizes(4) {
        let mut buf = vec![1.0f32; size / 4];
        let (iters, skip) = rounds(size, (10_000, 100), (1_000, 10));
        g.barrier()?;
        // As OSU 7.4: each call timed on its own, a barrier after it
        // (not timed), and the ranks' mean times averaged.
        let mut total = Duration::ZERO;
        for i in 0..iters + skip {
            let start = Instant::now();
            g.all_reduce(&mut buf, ReduceOp::Sum)?;
            if i >= skip {
                total += start.elapsed();
            }
            g.barrier()?;
        }
        let mut us = [total.as_secs_f64() * 1e6 / iters as f64];
        g.all_reduce(&mut us, ReduceOp::Sum)?;
        if g.rank() == 0 {
            println!("{size:<10}{:>18.2}", us[0] / g.world_size() as f64);
        }
    }
    Ok(())
}

fn main() -> meshwork::Result<()> {
    let which = std::env::args().nth(1).unwrap_or_else(|| "latency".into());
    let g = Node::from_env()?.connect()?;
    match which.as_str() {
        "latency" => latency(&g)?,
        "bw" => bw(&g)?,
        "allreduce" => allreduce(&g)?,
        other => {
            return Err(meshwork::Error::InvalidArgument(format!(
                "unknown benchmark {other}: latency, bw or allreduce"
            )))
        }
    }
    g.shutdown()
}
