//! Collectives across 4 processes on loopback — meshwork's QUIC transport
//! (the default: QUIC plus the TCP sidecar from 4 KiB), QUIC alone (no
//! sidecar), the TCP transport, and QUIC in a star — beside Open MPI over
//! TCP on the same sizes, iteration counts, timing and verification, in the
//! same run.
//!
//! ```text
//! cargo bench --bench net              # 4 KiB … 64 MiB
//! cargo bench --bench net -- --quick   # 4 KiB, 1 MiB, 16 MiB
//! cargo bench --bench net -- --only all_reduce,barrier
//! cargo bench --bench net -- --sizes 262144,1048576   # these sizes, in bytes
//! cargo bench --bench net -- --configs quic,tcp   # a subset of the columns
//! NET_WORLD=16 cargo bench --bench net -- --quick --only barrier,all_reduce
//! NET_WORLD=8 cargo bench --bench net -- --only all_reduce --configs tcp,tcp-cube,tcp-k4
//! ```
//!
//! Timing, for both: a barrier, N calls, the mean per call, the maximum
//! over ranks. Sizes follow nccl-tests (all_gather: the gathered buffer;
//! reduce_scatter and all_to_all: the send buffer); busbw factors from
//! nccl-tests' PERFORMANCE.md. Open MPI runs as
//! `mpirun --allow-run-as-root --oversubscribe -np 4 --mca pml ob1 --mca btl
//! tcp,self --mca btl_tcp_if_include lo`, built from
//! `benches/baselines/mpi_bench.c` with `mpicc` (apt `openmpi-bin
//! libopenmpi-dev`); without them its columns read "-".
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark prints its table"
)]

mod common;

use common::{join, parse_list, Rows};
use meshwork::{Node, ProcessGroup, ReduceOp};
use std::time::Instant;

/// Processes: 4, or `NET_WORLD` (e.g. 16 for many ranks per core).
fn world() -> u32 {
    std::env::var("NET_WORLD")
        .ok()
        .and_then(|w| w.parse().ok())
        .filter(|&w: &u32| w >= 2)
        .unwrap_or(4)
}
const COLLS: [&str; 6] = [
    "all_reduce",
    "broadcast",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "barrier",
];

fn val(rank: usize, i: usize) -> f32 {
    ((rank * 31 + i) % 97) as f32
}

fn call(g: &ProcessGroup, coll: &str, a: &mut [f32], b: &mut [f32]) -> meshwork::Result<()> {
    match coll {
        "all_reduce" => g.all_reduce(a, ReduceOp::Sum),
        "broadcast" => g.broadcast(a, 0),
        "all_gather" => {
            let block = a.len() / g.world_size() as usize;
            g.all_gather(&a[..block], &mut b[..block * g.world_size() as usize])
        }
        "reduce_scatter" => {
            let block = a.len() / g.world_size() as usize;
            g.reduce_scatter(
                &a[..block * g.world_size() as usize],
                &mut b[..block],
                ReduceOp::Sum,
            )
        }
        "all_to_all" => {
            let n = a.len() / g.world_size() as usize * g.world_size() as usize;
            g.all_to_all(&a[..n], &mut b[..n])
        }
        _ => g.barrier(),
    }
}

fn wrong(g: &ProcessGroup, coll: &str, a: &mut [f32], b: &mut [f32]) -> meshwork::Result<u64> {
    let (r, p) = (g.rank() as usize, g.world_size() as usize);
    for (i, x) in a.iter_mut().enumerate() {
        *x = val(r, i);
    }
    call(g, coll, a, b)?;
    let block = a.len() / p;
    let sum = |i: usize| (0..p).map(|q| val(q, i)).sum::<f32>();
    Ok(match coll {
        "all_reduce" => (0..a.len()).filter(|&i| a[i] != sum(i)).count(),
        "broadcast" => (0..a.len()).filter(|&i| a[i] != val(0, i)).count(),
        "all_gather" => (0..block * p)
            .filter(|&i| b[i] != val(i / block, i % block))
            .count(),
        "reduce_scatter" => (0..block).filter(|&i| b[i] != sum(r * block + i)).count(),
        "all_to_all" => (0..block * p)
            .filter(|&i| b[i] != val(i / block, r * block + i % block))
            .count(),
        _ => 0,
    } as u64)
}

/// A rank process: measure every collective at every size, print ROW lines.
fn rank_main(sizes: &[usize], iters: &[usize], colls: &[String]) -> meshwork::Result<()> {
    let g = Node::from_env()?.connect()?;
    for coll in colls.iter().map(String::as_str) {
        for (k, (&bytes, &it)) in sizes.iter().zip(iters).enumerate() {
            if coll == "barrier" && k > 0 {
                break;
            }
            let total = bytes / 4;
            let (mut a, mut b) = (vec![0f32; total], vec![0f32; total]);
            let rank = g.rank() as usize;
            for (i, x) in a.iter_mut().enumerate() {
                *x = val(rank, i);
            }
            for _ in 0..2 {
                call(&g, coll, &mut a, &mut b)?;
            }
            g.barrier()?;
            let t = Instant::now();
            for _ in 0..it {
                call(&g, coll, &mut a, &mut b)?;
            }
            let mut slowest = [t.elapsed().as_secs_f64() / it as f64];
            g.all_reduce(&mut slowest, ReduceOp::Max)?;
            let mut w = [wrong(&g, coll, &mut a, &mut b)?];
            g.all_reduce(&mut w, ReduceOp::Sum)?;
            if g.rank() == 0 {
                println!(
                    "ROW {coll} {} {:.3} {}",
                    if coll == "barrier" { 0 } else { bytes },
                    slowest[0] * 1e6,
                    w[0]
                );
            }
        }
    }
    g.shutdown()
}

/// The meshwork configurations measured: column name, topology, and the
/// environment that selects the transport.
/// Environment variables, as (name, value).
type Env = &'static [(&'static str, &'static str)];

const CONFIGS: [(&str, &str, Env); 12] = [
    ("quic", "mesh", &[("TRANSPORT", "quic"), ("SHM", "0")]),
    (
        "quic-only",
        "mesh",
        &[
            ("TRANSPORT", "quic"),
            ("SIDECAR_THRESHOLD", "18446744073709551615"),
            ("SHM", "0"),
        ],
    ),
    ("tcp", "mesh", &[("TRANSPORT", "tcp"), ("SHM", "0")]),
    ("star", "star", &[("TRANSPORT", "quic"), ("SHM", "0")]),
    // The cost of frame authentication: as quic and tcp, with FRAME_AUTH=0
    // (only when asked: --configs tcp,tcp-noauth).
    (
        "quic-noauth",
        "mesh",
        &[("TRANSPORT", "quic"), ("FRAME_AUTH", "0"), ("SHM", "0")],
    ),
    (
        "tcp-noauth",
        "mesh",
        &[("TRANSPORT", "tcp"), ("FRAME_AUTH", "0"), ("SHM", "0")],
    ),
    ("shm", "mesh", &[("SHM", "1")]),
    (
        "shm-ring",
        "mesh",
        &[("SHM", "1"), ("SHM_SINGLE_COPY", "0")],
    ),
    // Sparse topologies (only neighbours linked, the rest relayed); run
    // with NET_WORLD=8 and --configs tcp,tcp-cube,tcp-k4 to set them
    // against the full mesh.
    (
        "tcp-cube",
        "hypercube",
        &[("TRANSPORT", "tcp"), ("SHM", "0")],
    ),
    (
        "tcp-k4",
        "kregular:4",
        &[("TRANSPORT", "tcp"), ("SHM", "0")],
    ),
    (
        "quic-cube",
        "hypercube",
        &[("TRANSPORT", "quic"), ("SHM", "0")],
    ),
    (
        "quic-k4",
        "kregular:4",
        &[("TRANSPORT", "quic"), ("SHM", "0")],
    ),
];

fn meshwork_rows(
    topology: &str,
    env: &[(&str, &str)],
    sizes: &str,
    iters: &str,
    colls: &str,
) -> Option<Rows> {
    let mut cmd = common::meshrun(world(), topology)?;
    cmd.env("BENCH_SIZES", sizes)
        .env("BENCH_ITERS", iters)
        .env("BENCH_COLLS", colls)
        .envs(env.iter().copied());
    common::run_rows(cmd)
}

fn bus_factor(coll: &str) -> f64 {
    let n = f64::from(world());
    match coll {
        "all_reduce" => 2.0 * (n - 1.0) / n,
        "broadcast" => 1.0,
        _ => (n - 1.0) / n,
    }
}

fn main() {
    let sizes_env = std::env::var("BENCH_SIZES").unwrap_or_default();
    let iters_env = std::env::var("BENCH_ITERS").unwrap_or_default();
    let parse = parse_list;
    if common::as_rank(|| {
        let colls: Vec<String> = std::env::var("BENCH_COLLS")
            .map(|c| c.split(',').map(str::to_string).collect())
            .unwrap_or_else(|_| COLLS.iter().map(|c| c.to_string()).collect());
        rank_main(&parse(&sizes_env), &parse(&iters_env), &colls)
    }) {
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').map(str::to_string).collect());
    let listed: Option<Vec<usize>> = args
        .iter()
        .position(|a| a == "--sizes")
        .and_then(|i| args.get(i + 1))
        .map(|v| parse(v));
    let sizes: Vec<usize> = if let Some(listed) = listed {
        listed
    } else if quick {
        vec![4 << 10, 1 << 20, 16 << 20]
    } else {
        (0..=7).map(|k| (4usize << 10) << (2 * k)).collect()
    };
    // ~256 MiB of traffic per size, at least 3 and at most 300 calls.
    let iters: Vec<usize> = sizes
        .iter()
        .map(|&b| ((256usize << 20) / b).clamp(3, 300))
        .collect();
    let (s, i) = (join(&sizes), join(&iters));
    let colls: Vec<&str> = COLLS
        .iter()
        .copied()
        .filter(|c| only.as_ref().is_none_or(|o| o.iter().any(|x| x == c)))
        .collect();
    let wanted: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--configs")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').map(str::to_string).collect());
    let mut columns: Vec<(&str, Option<Rows>)> = CONFIGS
        .iter()
        .filter(|(name, topology, _)| match &wanted {
            Some(w) => w.iter().any(|x| x == name),
            // Sparse shapes (kregular:4 needs 5 ranks) and the cost of
            // authentication only when asked.
            None => !["hypercube", "kregular:4"].contains(topology) && !name.ends_with("-noauth"),
        })
        .map(|&(name, topology, env)| {
            (name, meshwork_rows(topology, env, &s, &i, &colls.join(",")))
        })
        .collect();
    let mpi = common::mpi("mpi_bench.c", world(), &[s.clone(), i.clone()]);
    if mpi.is_none() {
        println!("# Open MPI: mpicc/mpirun not available; install openmpi-bin libopenmpi-dev for its columns");
    }
    columns.push(("ompi", mpi));
    let wants = |name: &str| wanted.as_ref().is_none_or(|w| w.iter().any(|x| x == name));
    if wants("shm") {
        let sm = common::mpi_over(
            "mpi_bench.c",
            world(),
            &[s.clone(), i.clone()],
            common::Btl::SharedMemory,
        );
        columns.push(("ompi-sm", sm));
    }
    println!("# {} processes on loopback, float, sum; time in µs; busbw in GB/s (nccl-tests factors); #w = wrong elements", world());
    println!("# with SHM=0 (the network links): quic: QUIC + TCP sidecar (default between hosts); quic-only: no sidecar; tcp: the TCP transport; star: quic in a star; -noauth: FRAME_AUTH=0 (frames not authenticated); ompi: Open MPI TCP");
    println!(
        "# shm: shared memory (the default on one host); shm-ring: without single copy (SHM_SINGLE_COPY=0); ompi-sm: Open MPI shared memory (vader)"
    );
    println!("# ratios: the others' time ÷ the first column's (> 1: the first is faster); sm/shm: ompi-sm's ÷ shm's (> 1: shm faster)");
    for coll in colls {
        println!();
        println!("# {coll}");
        let mut head = format!("{:>10}", "size(B)");
        for (name, _) in &columns {
            head += &format!(" | {:>9} {:>6} {:>2}", format!("{name}(us)"), "busbw", "#w");
        }
        for (name, _) in columns.iter().skip(1) {
            head += &format!(" {:>10}", format!("q/{name}"));
        }
        head += &format!(" {:>10}", "sm/shm");
        println!("{head}");
        for &bytes in &sizes {
            let key = (coll.to_string(), if coll == "barrier" { 0 } else { bytes });
            let cells: Vec<Option<(f64, u64)>> = columns
                .iter()
                .map(|(_, rows)| rows.as_ref().and_then(|r| r.get(&key)).copied())
                .collect();
            if cells.iter().all(Option::is_none) {
                continue;
            }
            let bw = |t: f64| bytes as f64 / (t * 1e-6) / 1e9 * bus_factor(coll);
            let mut line = format!("{bytes:>10}");
            for c in &cells {
                line += &match c {
                    Some((t, w)) if coll == "barrier" => format!(" | {t:>9.1} {:>6} {w:>2}", "-"),
                    Some((t, w)) => format!(" | {t:>9.1} {:>6.2} {w:>2}", bw(*t)),
                    None => format!(" | {:>9} {:>6} {:>2}", "-", "-", "-"),
                };
            }
            for c in cells.iter().skip(1) {
                line += &match (cells[0], c) {
                    (Some((tq, _)), Some((to, _))) => format!(" {:>10.2}", to / tq),
                    _ => format!(" {:>10}", "-"),
                };
            }
            let cell = |name: &str| {
                let at = columns.iter().position(|(n, _)| *n == name)?;
                cells[at]
            };
            line += &match (cell("shm"), cell("ompi-sm")) {
                (Some((ts, _)), Some((to, _))) => format!(" {:>10.2}", to / ts),
                _ => format!(" {:>10}", "-"),
            };
            println!("{line}");
            if coll == "barrier" {
                break;
            }
        }
    }
}
