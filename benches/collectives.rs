//! Collective benchmarks on an in-process world, printed in the nccl-tests
//! convention (size, count, type, redop, root, time, algbw, busbw, #wrong),
//! every result verified after timing.
//!
//! ```text
//! cargo bench --bench collectives                 # default algorithms, 4 KiB … 64 MiB
//! cargo bench --bench collectives -- --algorithms # every algorithm (the switch points)
//! cargo bench --bench collectives -- --quick      # fewer sizes and iterations
//! ```
//!
//! busbw factors, from nccl-tests' PERFORMANCE.md: all_reduce 2(n−1)/n;
//! reduce_scatter and all_gather (n−1)/n (size = the full gathered buffer);
//! all_to_all (n−1)/n; broadcast and reduce 1.
//!
//! Open MPI's numbers belong beside these once meshwork crosses processes
//! (the TCP transport); an in-process world has no MPI counterpart.
#![allow(clippy::print_stdout, reason = "a benchmark prints its table")]

use meshwork::{local, ProcessGroup, ReduceOp};
use std::time::{Duration, Instant};

const WORLD: u32 = 4;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Coll {
    AllReduce,
    Broadcast,
    AllGather,
    ReduceScatter,
    AllToAll,
}

impl Coll {
    fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "all_reduce",
            Coll::Broadcast => "broadcast",
            Coll::AllGather => "all_gather",
            Coll::ReduceScatter => "reduce_scatter",
            Coll::AllToAll => "all_to_all",
        }
    }

    fn bus_factor(self, n: f64) -> f64 {
        match self {
            Coll::AllReduce => 2.0 * (n - 1.0) / n,
            Coll::Broadcast => 1.0,
            Coll::AllGather | Coll::ReduceScatter | Coll::AllToAll => (n - 1.0) / n,
        }
    }
}

/// One rank's buffers for a collective whose nccl-tests size is `bytes`.
struct Bufs {
    send: Vec<f32>,
    recv: Vec<f32>,
}

fn bufs(coll: Coll, rank: u32, bytes: usize) -> Bufs {
    let total = bytes / 4;
    let p = WORLD as usize;
    let block = total / p;
    let val = |i: usize| ((rank as usize * 31 + i) % 97) as f32;
    match coll {
        Coll::AllReduce | Coll::Broadcast => Bufs {
            send: (0..total).map(val).collect(),
            recv: Vec::new(),
        },
        Coll::AllGather => Bufs {
            send: (0..block).map(val).collect(),
            recv: vec![0.0; block * p],
        },
        Coll::ReduceScatter => Bufs {
            send: (0..block * p).map(val).collect(),
            recv: vec![0.0; block],
        },
        Coll::AllToAll => Bufs {
            send: (0..block * p).map(val).collect(),
            recv: vec![0.0; block * p],
        },
    }
}

fn run(g: &ProcessGroup, coll: Coll, b: &mut Bufs) {
    let r = match coll {
        Coll::AllReduce => g.all_reduce(&mut b.send, ReduceOp::Sum),
        Coll::Broadcast => g.broadcast(&mut b.send, 0),
        Coll::AllGather => g.all_gather(&b.send, &mut b.recv),
        Coll::ReduceScatter => g.reduce_scatter(&b.send, &mut b.recv, ReduceOp::Sum),
        Coll::AllToAll => g.all_to_all(&b.send, &mut b.recv),
    };
    r.expect("collective failed during the benchmark");
}

/// Count wrong elements of one fresh run (checked on every rank).
fn wrong(g: &ProcessGroup, coll: Coll, bytes: usize) -> usize {
    let p = WORLD as usize;
    let r = g.rank() as usize;
    let val = |rank: usize, i: usize| ((rank * 31 + i) % 97) as f32;
    let mut b = bufs(coll, g.rank(), bytes);
    run(g, coll, &mut b);
    let block = bytes / 4 / p;
    match coll {
        Coll::AllReduce => (0..b.send.len())
            .filter(|&i| b.send[i] != (0..p).map(|q| val(q, i)).sum::<f32>())
            .count(),
        Coll::Broadcast => (0..b.send.len())
            .filter(|&i| b.send[i] != val(0, i))
            .count(),
        Coll::AllGather => (0..b.recv.len())
            .filter(|&i| b.recv[i] != val(i / block, i % block))
            .count(),
        Coll::ReduceScatter => (0..block)
            .filter(|&i| b.recv[i] != (0..p).map(|q| val(q, r * block + i)).sum::<f32>())
            .count(),
        Coll::AllToAll => (0..b.recv.len())
            .filter(|&i| b.recv[i] != val(i / block, r * block + i % block))
            .count(),
    }
}

struct Row {
    seconds: f64,
    wrong: usize,
}

fn measure(
    world: &[std::sync::Arc<ProcessGroup>],
    coll: Coll,
    algo: Option<&str>,
    bytes: usize,
    quick: bool,
) -> Row {
    let budget = if quick { 64usize << 20 } else { 512 << 20 };
    let iters = (budget / bytes.max(1)).clamp(3, if quick { 50 } else { 500 });
    let warmup = (iters / 10).max(2);
    let results: Vec<(Duration, usize)> = std::thread::scope(|s| {
        let hs: Vec<_> = world
            .iter()
            .map(|g| {
                s.spawn(move || {
                    g.set_algorithm(coll.name(), algo).expect("algorithm");
                    let mut b = bufs(coll, g.rank(), bytes);
                    for _ in 0..warmup {
                        run(g, coll, &mut b);
                    }
                    g.barrier().expect("barrier");
                    let t = Instant::now();
                    for _ in 0..iters {
                        run(g, coll, &mut b);
                    }
                    g.barrier().expect("barrier");
                    let elapsed = t.elapsed();
                    let w = wrong(g, coll, bytes);
                    g.set_algorithm(coll.name(), None).expect("reset");
                    (elapsed, w)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank panicked"))
            .collect()
    });
    let slowest = results.iter().map(|r| r.0).max().unwrap_or_default();
    Row {
        seconds: slowest.as_secs_f64() / iters as f64,
        wrong: results.iter().map(|r| r.1).sum(),
    }
}

fn table(
    world: &[std::sync::Arc<ProcessGroup>],
    coll: Coll,
    algo: Option<&str>,
    sizes: &[usize],
    quick: bool,
) {
    println!();
    println!(
        "# {} on local({WORLD}), f32, algorithm: {}",
        coll.name(),
        algo.unwrap_or("default selection")
    );
    println!(
        "{:>12} {:>12} {:>6} {:>6} {:>5} {:>11} {:>9} {:>9} {:>7}",
        "size(B)", "count", "type", "redop", "root", "time(us)", "algbw", "busbw", "#wrong"
    );
    for &bytes in sizes {
        let row = measure(world, coll, algo, bytes, quick);
        let algbw = bytes as f64 / row.seconds / 1e9;
        let (redop, root) = match coll {
            Coll::AllReduce | Coll::ReduceScatter => ("sum", "-1"),
            Coll::Broadcast => ("none", "0"),
            _ => ("none", "-1"),
        };
        println!(
            "{:>12} {:>12} {:>6} {:>6} {:>5} {:>11.1} {:>9.2} {:>9.2} {:>7}",
            bytes,
            bytes / 4,
            "float",
            redop,
            root,
            row.seconds * 1e6,
            algbw,
            algbw * coll.bus_factor(f64::from(WORLD)),
            row.wrong
        );
    }
}

/// The f32 Sum kernel against memcpy on 16 MiB: the kernel reads two
/// inputs and writes one; it is judged by bytes of one input per second,
/// memcpy by bytes copied per second.
fn kernels(quick: bool) {
    use meshwork::Element;
    const N: usize = 4 << 20; // 16 MiB of f32
    let reps = if quick { 20 } else { 100 };
    let mut acc = vec![1.0f32; N];
    let x = vec![2.0f32; N];
    let mut dst = vec![0.0f32; N];
    for _ in 0..3 {
        f32::reduce(ReduceOp::Sum, &mut acc, &x);
        dst.copy_from_slice(&x);
    }
    let t = Instant::now();
    for _ in 0..reps {
        f32::reduce(
            ReduceOp::Sum,
            std::hint::black_box(&mut acc),
            std::hint::black_box(&x),
        );
    }
    let kernel = (N * 4 * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(&mut dst).copy_from_slice(std::hint::black_box(&x));
    }
    let memcpy = (N * 4 * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;
    println!();
    println!("# reduction kernel, 16 MiB");
    println!("{:>24} {:>10}", "what", "GB/s");
    println!("{:>24} {:>10.2}", "f32 sum (input bytes/s)", kernel);
    println!("{:>24} {:>10.2}", "memcpy (copied bytes/s)", memcpy);
    println!("{:>24} {:>10.2}", "kernel / memcpy", kernel / memcpy);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let algorithms = args.iter().any(|a| a == "--algorithms");
    let sizes: Vec<usize> = if quick {
        vec![4 << 10, 64 << 10, 1 << 20, 16 << 20]
    } else {
        (0..=7).map(|k| (4 << 10) << (2 * k)).collect() // 4 KiB … 64 MiB
    };
    let world = local(WORLD).expect("local world");
    println!(
        "meshwork collectives benchmark: local({WORLD}), {} CPUs",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    kernels(quick);
    if algorithms {
        let sweep: Vec<usize> = (0..=12).map(|k| (1 << 10) << k).collect(); // 1 KiB … 4 MiB
        for a in [
            "recursive_doubling",
            "ring",
            "ring_pipelined",
            "reduce_broadcast",
        ] {
            table(&world, Coll::AllReduce, Some(a), &sweep, quick);
        }
        for a in ["binomial", "chain"] {
            table(&world, Coll::Broadcast, Some(a), &sweep, quick);
        }
        return;
    }
    for coll in [
        Coll::AllReduce,
        Coll::Broadcast,
        Coll::AllGather,
        Coll::ReduceScatter,
        Coll::AllToAll,
    ] {
        table(&world, coll, None, &sizes, quick);
    }
    println!();
    println!(
        "# Open MPI: no in-process counterpart; its TCP numbers appear beside the TCP transport's."
    );
}
