//! Point-to-point ping-pong (8 B … 64 MiB) and RPC round trips: in-process,
//! between two processes over shared memory (the default on one host),
//! and with `SHM=0` over QUIC (with the TCP sidecar from 4 KiB), QUIC alone
//! and the TCP transport; Open MPI's ping-pong over TCP and over its
//! shared memory (vader) on the same sizes and iteration counts, in the
//! same run.
//!
//! ```text
//! cargo bench --bench p2p
//! ```
//!
//! One-way time is half the round trip; bandwidth is size ÷ one-way time.
//! Open MPI runs from `benches/baselines/mpi_pingpong.c` with the same
//! flags as `benches/net.rs`; without `mpicc`/`mpirun` its column reads "-".
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark prints its table"
)]

mod common;

use common::{join, parse_list};
use meshwork::{local, Node, ProcessGroup};
use std::collections::BTreeMap;
use std::time::Instant;

/// One-way microseconds per size, and the number of wrong bytes.
type Rows = BTreeMap<usize, (f64, u64)>;

/// A column: its ping-pong rows and its RPC round trip (µs).
type Measured = (Rows, Option<f64>);

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7) as u8).collect()
}

/// Ping-pong between ranks 0 and 1 of `g`; rank 0's rows.
fn pingpong(g: &ProcessGroup, sizes: &[usize], iters: &[usize]) -> meshwork::Result<Rows> {
    let mut rows = Rows::new();
    for (&n, &it) in sizes.iter().zip(iters) {
        let mut buf = pattern(n);
        g.barrier()?;
        // Untimed warm-up rounds, a tenth as many as timed (OSU's skip):
        // the first thousands of a fresh pair run slower.
        let warm = it / 10 + 2;
        let mut t = Instant::now();
        for r in 0..it + warm {
            if r == warm {
                t = Instant::now();
            }
            if g.rank() == 0 {
                g.send(&buf, 1, 0)?;
                g.recv(&mut buf, 1, 0)?;
            } else {
                g.recv(&mut buf, 0, 0)?;
                g.send(&buf, 0, 0)?;
            }
        }
        let one_way = t.elapsed().as_secs_f64() / it as f64 / 2.0 * 1e6;
        let wrong = buf
            .iter()
            .zip(pattern(n))
            .filter(|(a, b)| **a != *b)
            .count() as u64;
        rows.insert(n, (one_way, wrong));
    }
    Ok(rows)
}

/// RPC round trips of 8 bytes from rank 0 to rank 1, in microseconds.
fn rpc_round_trip(g: &ProcessGroup, iters: usize) -> meshwork::Result<f64> {
    g.register_rpc(1, |_, args| args.to_vec());
    g.barrier()?;
    let mut us = 0.0;
    if g.rank() == 0 {
        for _ in 0..10 {
            g.rpc(1, 1, &[0; 8])?;
        }
        let t = Instant::now();
        for _ in 0..iters {
            g.rpc(1, 1, &[0; 8])?;
        }
        us = t.elapsed().as_secs_f64() / iters as f64 * 1e6;
    }
    g.barrier()?;
    Ok(us)
}

fn print_rows(rows: &Rows, rpc: f64) {
    for (n, (t, w)) in rows {
        println!("ROW pingpong {n} {t:.3} {w}");
    }
    println!("ROW rpc 8 {rpc:.3} 0");
}

fn rank_main(sizes: &[usize], iters: &[usize]) -> meshwork::Result<()> {
    let g = Node::from_env()?.connect()?;
    let rows = pingpong(&g, sizes, iters)?;
    let rpc = rpc_round_trip(&g, 2000)?;
    if g.rank() == 0 {
        print_rows(&rows, rpc);
    }
    g.shutdown()
}

/// Ping-pong rows and the RPC round trip from a run's ROW lines.
fn split_rows(rows: common::Rows) -> (Rows, Option<f64>) {
    let rpc = rows
        .iter()
        .find(|((name, _), _)| name == "rpc")
        .map(|(_, (t, _))| *t);
    let pp = rows
        .into_iter()
        .filter(|((name, _), _)| name == "pingpong")
        .map(|((_, n), v)| (n, v))
        .collect();
    (pp, rpc)
}

fn main() {
    let parse = parse_list;
    if common::as_rank(|| {
        let sizes = parse(&std::env::var("BENCH_SIZES").unwrap_or_default());
        let iters = parse(&std::env::var("BENCH_ITERS").unwrap_or_default());
        rank_main(&sizes, &iters)
    }) {
        return;
    }
    let sizes: Vec<usize> = std::iter::once(8)
        .chain((0..=7).map(|k| (4usize << 10) << (2 * k)))
        .collect();
    // Small messages take long enough (tens of ms on shared memory) that
    // a timer tick or a preemption is noise, not the result.
    let iters: Vec<usize> = sizes
        .iter()
        .map(|&b| ((256usize << 20) / b.max(1)).clamp(5, 50_000))
        .collect();

    // In-process.
    let world = local(2).expect("local world");
    let mem: Vec<(Rows, f64)> = std::thread::scope(|s| {
        let hs: Vec<_> = world
            .iter()
            .map(|g| {
                let (sizes, iters) = (&sizes, &iters);
                s.spawn(move || {
                    let rows = pingpong(g, sizes, iters).expect("ping-pong");
                    (rows, rpc_round_trip(g, 2000).expect("rpc"))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank")).collect()
    });
    let (mem_rows, mem_rpc) = mem.into_iter().next().expect("rank 0");

    // Two processes through meshrun, per transport; Open MPI on the same
    // sizes.
    // meshrun gives its ranks a fresh token, so frames over TCP are
    // authenticated unless FRAME_AUTH=0.
    let configs: [(&str, &[(&str, &str)]); 8] = [
        ("shm", &[("SHM", "1")]),
        ("shm-ring", &[("SHM", "1"), ("SHM_SINGLE_COPY", "0")]),
        ("quic", &[("TRANSPORT", "quic"), ("SHM", "0")]),
        (
            "quic-noauth",
            &[("TRANSPORT", "quic"), ("FRAME_AUTH", "0"), ("SHM", "0")],
        ),
        (
            "quic-enc",
            &[
                ("SHM", "0"),
                ("TRANSPORT", "quic"),
                ("ENCRYPT_BULK", "1"),
                ("CLUSTER_TOKEN", "bench cluster token"),
            ],
        ),
        (
            "quic-only",
            &[
                ("TRANSPORT", "quic"),
                ("SIDECAR_THRESHOLD", "18446744073709551615"),
                ("SHM", "0"),
            ],
        ),
        ("tcp", &[("TRANSPORT", "tcp"), ("SHM", "0")]),
        (
            "tcp-noauth",
            &[("TRANSPORT", "tcp"), ("FRAME_AUTH", "0"), ("SHM", "0")],
        ),
    ];
    let mut columns: Vec<(&str, Option<Measured>)> = vec![("mem", Some((mem_rows, Some(mem_rpc))))];
    for (name, env) in configs {
        let rows = common::meshrun(2, "mesh").and_then(|mut c| {
            c.env("BENCH_SIZES", join(&sizes))
                .env("BENCH_ITERS", join(&iters))
                .envs(env.iter().copied());
            common::run_rows(c).map(split_rows)
        });
        columns.push((name, rows));
    }
    let args = [join(&sizes), join(&iters)];
    let mpi = common::mpi("mpi_pingpong.c", 2, &args).map(split_rows);
    columns.push(("ompi", mpi));
    let sm = common::mpi_over("mpi_pingpong.c", 2, &args, common::Btl::SharedMemory);
    columns.push(("ompi-sm", sm.map(split_rows)));

    println!("# ping-pong, one-way time (µs) and bandwidth (GB/s); #w = wrong bytes");
    println!("# shm: shared memory (the default on one host); shm-ring: without single copy (SHM_SINGLE_COPY=0); the rest with SHM=0: quic: QUIC + TCP sidecar (frames over TCP authenticated); -noauth: FRAME_AUTH=0; quic-enc: with the sidecar encrypted (ENCRYPT_BULK); quic-only: no sidecar; tcp: the TCP transport; ompi: Open MPI TCP; ompi-sm: Open MPI shared memory (vader)");
    let mut head = format!("{:>10}", "size(B)");
    for (name, _) in &columns {
        head += &format!(" | {:>9} {:>7} {:>3}", format!("{name}(us)"), "GB/s", "#w");
    }
    head += &format!(" {:>9} {:>9} {:>9}", "tcp/quic", "ompi/quic", "shm/sm");
    println!("{head}");
    let time = |name: &str, n: usize| -> Option<f64> {
        columns
            .iter()
            .find(|(c, _)| *c == name)
            .and_then(|(_, r)| r.as_ref())
            .and_then(|(r, _)| r.get(&n))
            .map(|(t, _)| *t)
    };
    for &n in &sizes {
        let mut line = format!("{n:>10}");
        for (_, rows) in &columns {
            line += &match rows.as_ref().and_then(|(r, _)| r.get(&n)) {
                Some((t, w)) => format!(" | {t:>9.2} {:>7.3} {w:>3}", n as f64 / (t * 1e-6) / 1e9),
                None => format!(" | {:>9} {:>7} {:>3}", "-", "-", "-"),
            };
        }
        for other in ["tcp", "ompi"] {
            line += &match (time("quic", n), time(other, n)) {
                // Time ratio: > 1 means QUIC is slower.
                (Some(q), Some(o)) => format!(" {:>9.2}", q / o),
                _ => format!(" {:>9}", "-"),
            };
        }
        // Shared memory against Open MPI's: > 1 means ours is slower.
        line += &match (time("shm", n), time("ompi-sm", n)) {
            (Some(a), Some(b)) => format!(" {:>9.2}", a / b),
            _ => format!(" {:>9}", "-"),
        };
        println!("{line}");
    }
    println!();
    println!("# cost of frame authentication: one-way time authenticated ÷ FRAME_AUTH=0");
    println!("{:>10} {:>10} {:>10}", "size(B)", "quic", "tcp");
    for &n in &sizes {
        let ratio = |a: &str, b: &str| match (time(a, n), time(b, n)) {
            (Some(x), Some(y)) => format!("{:>10.3}", x / y),
            _ => format!("{:>10}", "-"),
        };
        println!(
            "{n:>10} {} {}",
            ratio("quic", "quic-noauth"),
            ratio("tcp", "tcp-noauth")
        );
    }
    println!();
    println!("# RPC round trip, 8-byte echo (µs)");
    let mut names = String::new();
    let mut values = String::new();
    for (name, rows) in columns.iter().filter(|(c, _)| !c.starts_with("ompi")) {
        names += &format!("{name:>10} ");
        values += &match rows.as_ref().and_then(|(_, r)| *r) {
            Some(v) => format!("{v:>10.2} "),
            None => format!("{:>10} ", "-"),
        };
    }
    println!("{names}");
    println!("{values}");
}
