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
//! own as OSU 7.4 does, from a send buffer into a receive buffer made
//! once on page boundaries, as OSU's. `bw`: a window of 64 messages then
//! a 1-byte answer, each window timed, MB/s (10^6 bytes). `allreduce`:
//! f32 sums of `size` bytes from a send into a receive buffer (the call
//! entry's `Buffers::SendRecv`, as OSU's), each call timed with a barrier
//! after it, the mean over ranks (µs), as OSU's `Avg Latency`. Sizes 1 B
//! (4 B for `allreduce`), or `MIN_SIZE`, to `MAX_SIZE` (4 MiB); like OSU, 10 000
//! iterations below 8 KiB and 1 000 from it (100 and 20 for `bw`'s
//! windows), after warm-up.

#![allow(
    clippy::print_stdout,
    reason = "a benchmark that prints its table, as OSU's do"
)]

use meshwork::{Buffers, Call, Node, ProcessGroup, ReduceOp};
use std::time::{Duration, Instant};

const WINDOW: usize = 64;

fn max_size() -> usize {
    std::env::var("MAX_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4 << 20)
}

/// Sizes from `from` (or `MIN_SIZE`, if larger) doubling to `MAX_SIZE`,
/// as OSU's `-m min:max`.
fn sizes(from: usize) -> impl Iterator<Item = usize> {
    let max = max_size();
    let min = std::env::var("MIN_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(from, |m: usize| m.max(from));
    std::iter::successors(Some(from), |s| Some(s * 2))
        .skip_while(move |&s| s < min)
        .take_while(move |&s| s <= max)
}

/// A buffer of the largest size on a page boundary, made once, as OSU
/// makes its send and receive buffers.
struct Paged {
    bytes: Vec<u8>,
    at: usize,
}

impl Paged {
    fn new() -> Paged {
        let bytes = vec![0u8; max_size() + 4096];
        let at = bytes.as_ptr().align_offset(4096);
        Paged { bytes, at }
    }

    /// Its first `n` bytes, set to `fill` (OSU sets them for each size).
    fn first(&mut self, n: usize, fill: u8) -> &mut [u8] {
        let b = &mut self.bytes[self.at..self.at + n];
        b.fill(fill);
        b
    }
}

/// Iterations and warm-up for `size`, as OSU's defaults (`ITERS` sets
/// the iterations, as OSU's `-i`).
fn rounds(size: usize, small: (usize, usize), large: (usize, usize)) -> (usize, usize) {
    let (iters, skip) = if size < 8192 { small } else { large };
    let iters = std::env::var("ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(iters);
    (iters, skip)
}

fn latency(g: &ProcessGroup) -> meshwork::Result<()> {
    let me = g.rank();
    if me == 0 {
        println!(
            "# meshwork Rust API: latency (send/recv ping-pong)\n# Size       Avg Latency(us)"
        );
    }
    // A send and a receive buffer, as OSU's.
    let (mut sbuf, mut rbuf) = (Paged::new(), Paged::new());
    for size in sizes(1) {
        let (s, r) = (sbuf.first(size, b'a'), rbuf.first(size, b'b'));
        let (iters, skip) = rounds(size, (10_000, 100), (1_000, 10));
        // Each round timed on its own and summed, as OSU 7.4 does (two
        // clock reads a round, in the measured time).
        let mut total = Duration::ZERO;
        for i in 0..iters + skip {
            if me == 0 {
                let start = Instant::now();
                g.send(s, 1, 1)?;
                g.recv(r, 1, 1)?;
                if i >= skip {
                    total += start.elapsed();
                }
            } else if me == 1 {
                g.recv(r, 0, 1)?;
                g.send(s, 0, 1)?;
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
    let mut answer = [0u8; 1];
    let (mut sbuf, mut rbuf) = (Paged::new(), Paged::new());
    for size in sizes(1) {
        let (s, r) = (sbuf.first(size, b'a'), rbuf.first(size, b'b'));
        let (iters, skip) = rounds(size, (100, 10), (20, 2));
        // Each window timed on its own, as OSU 7.4 does.
        let mut total = Duration::ZERO;
        for i in 0..iters + skip {
            if me == 0 {
                let start = Instant::now();
                for _ in 0..WINDOW {
                    g.send(s, 1, 100)?;
                }
                g.recv(&mut answer, 1, 101)?;
                if i >= skip {
                    total += start.elapsed();
                }
            } else if me == 1 {
                for _ in 0..WINDOW {
                    g.recv(r, 0, 100)?;
                }
                g.send(&answer, 0, 101)?;
            }
        }
        if me == 0 {
            let mb = (size * WINDOW * iters) as f64 / 1e6 / total.as_secs_f64();
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
        // A send and a receive buffer, as OSU's (not in place).
        let (send, mut recv) = (vec![1.0f32; size / 4], vec![0.0f32; size / 4]);
        let (iters, skip) = rounds(size, (10_000, 100), (1_000, 10));
        g.barrier()?;
        // As OSU 7.4: each call timed on its own, a barrier after it
        // (not timed), and the ranks' mean times averaged.
        let mut total = Duration::ZERO;
        for i in 0..iters + skip {
            let start = Instant::now();
            let bufs = Buffers::SendRecv {
                send: &send[..],
                recv: &mut recv[..],
            };
            g.call(Call::AllReduce { op: ReduceOp::Sum }, bufs)?;
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
