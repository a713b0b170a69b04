//! One-sided operations beside two-sided messages, in the same run: two
//! processes on one host, over shared memory (the default), QUIC and TCP
//! (`SHM=0`). Rank 0 times, against rank 1's heap (which does nothing to
//! serve it):
//!
//! - latency at 8 B: a send/recv ping-pong's round trip, a blocking
//!   `put` (it returns once the bytes are in the target's heap: a round
//!   trip too), a `get`, a `fetch_add`;
//! - bandwidth at 1 and 16 MiB: `put` and `get` against a send whose
//!   receiver answers with one byte (the same completion: the data is at
//!   the target when the call returns).
//!
//! Open MPI's one-sided operations (`benches/baselines/mpi_rma.c`:
//! `MPI_Put` / `MPI_Get` / `MPI_Fetch_and_op`, each flushed to the target
//! before the next, passive target) and its two-sided figures run beside:
//! `mpi-sm` with the window in shared memory (`osc sm`: a put is a store
//! into the target's memory), `mpi-tcp` over TCP (`osc pt2pt`); without
//! `mpicc`/`mpirun` their rows read "(no run)".
//!
//! ```text
//! cargo build --release --bin meshrun && cargo bench --bench one_sided
//! ```
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark prints its table"
)]

#[allow(dead_code, reason = "this benchmark uses the launchers only")]
mod common;

use meshwork::Node;
use std::time::Instant;

const SMALL_ITERS: usize = 5000;
const SIZES: [usize; 2] = [1 << 20, 16 << 20];

fn row(name: &str, bytes: usize, us: f64) {
    println!("ROW {name} {bytes} {us:.3} 0");
}

/// Microseconds per call of `f` over `iters` calls (after 10 untimed).
fn timed(iters: usize, mut f: impl FnMut() -> meshwork::Result<()>) -> meshwork::Result<f64> {
    for _ in 0..10 {
        f()?;
    }
    let t = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    Ok(t.elapsed().as_secs_f64() / iters as f64 * 1e6)
}

fn rank_main() -> meshwork::Result<()> {
    let g = Node::from_env()?.heap_bytes(32 << 20).connect()?;
    let me = g.rank();
    // Two-sided first: rank 1 answers.
    let mut small = [0u8; 8];
    g.barrier()?;
    if me == 0 {
        let rtt = timed(SMALL_ITERS, || {
            g.send(&small, 1, 0)?;
            g.recv(&mut small, 1, 0)
        })?;
        row("rtt", 8, rtt);
    } else {
        for _ in 0..SMALL_ITERS + 10 {
            g.recv(&mut small, 0, 0)?;
            g.send(&small, 0, 0)?;
        }
    }
    for &n in &SIZES {
        let iters = ((256usize << 20) / n).clamp(10, 200);
        let mut buf = vec![7u8; n];
        let mut ack = [0u8; 1];
        g.barrier()?;
        if me == 0 {
            let us = timed(iters, || {
                g.send(&buf, 1, 1)?;
                g.recv(&mut ack, 1, 2)
            })?;
            row("send", n, us);
        } else {
            for _ in 0..iters + 10 {
                g.recv(&mut buf, 0, 1)?;
                g.send(&ack, 0, 2)?;
            }
        }
    }
    // One-sided: rank 1 only waits in a barrier meanwhile.
    g.barrier()?;
    if me == 0 {
        row("put", 8, timed(SMALL_ITERS, || g.put(1, 0, &small))?);
        row("get", 8, timed(SMALL_ITERS, || g.get(1, 0, &mut small))?);
        row(
            "fetch_add",
            8,
            timed(SMALL_ITERS, || g.fetch_add(1, 0, 1).map(drop))?,
        );
        for &n in &SIZES {
            let iters = ((256usize << 20) / n).clamp(10, 200);
            let mut buf = vec![7u8; n];
            row("put", n, timed(iters, || g.put(1, 0, &buf))?);
            row("get", n, timed(iters, || g.get(1, 0, &mut buf))?);
        }
    }
    g.barrier()?;
    g.shutdown()
}

fn main() {
    if common::as_rank(rank_main) {
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut runs = Vec::new();
    for (name, env) in common::LINKS {
        let rows = common::meshrun(2, "mesh").and_then(|mut c| {
            c.envs(env.iter().copied());
            common::run_rows(c)
        });
        runs.push((name, rows));
    }
    for (name, btl) in [
        ("mpi-sm", common::Btl::SharedMemory),
        ("mpi-tcp", common::Btl::TcpOneSided),
    ] {
        runs.push((name, common::mpi_over("mpi_rma.c", 2, &[], btl)));
    }
    let at =
        |rows: &common::Rows, name: &str, n: usize| rows.get(&(name.to_string(), n)).map(|r| r.0);
    println!("# 2 processes, one host; rank 0 against rank 1's heap (rank 1 waits in a barrier)");
    println!("# latency, 8 B, µs: ping-pong round trip (send + recv) beside blocking put, get, fetch_add");
    println!(
        "{:>7} | {:>9} {:>9} {:>9} {:>9} | {:>7}",
        "link", "rtt", "put", "get", "fetch_add", "put/rtt"
    );
    for (link, rows) in &runs {
        let Some(rows) = rows else {
            println!("{link:>7} | (no run)");
            continue;
        };
        let v = |name| at(rows, name, 8).unwrap_or(f64::NAN);
        println!(
            "{link:>7} | {:>9.1} {:>9.1} {:>9.1} {:>9.1} | {:>7.2}",
            v("rtt"),
            v("put"),
            v("get"),
            v("fetch_add"),
            v("put") / v("rtt")
        );
    }
    println!();
    println!("# bandwidth, GB/s: a send answered by one byte beside put and get");
    println!(
        "{:>7} {:>6} | {:>8} {:>8} {:>8} | {:>8}",
        "link", "size", "send", "put", "get", "put/send"
    );
    for (link, rows) in &runs {
        let Some(rows) = rows else { continue };
        for n in SIZES {
            let gbs = |name| at(rows, name, n).map_or(f64::NAN, |us| n as f64 / us / 1e3);
            println!(
                "{link:>7} {:>5}M | {:>8.2} {:>8.2} {:>8.2} | {:>8.2}",
                n >> 20,
                gbs("send"),
                gbs("put"),
                gbs("get"),
                gbs("put") / gbs("send")
            );
        }
    }
}
