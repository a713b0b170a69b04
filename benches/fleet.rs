//! A fleet of workers on this machine: 1 + N processes under `meshrun`
//! (with a fresh token, `SHM=0`: network links, as between hosts), as a
//! flat star and as a relay tree. Measured: formation (the slowest rank's
//! `connect`, from its process's start), a barrier, a 4 KiB all_reduce, a
//! 1 MiB and a 16 MiB federated average (each call checked exact once,
//! then timed: the slowest rank's mean over `FLEET_ITERS`, default 20, and
//! `FLEET_ITERS_LARGE`, default 3, for the averages; one for 16 MiB); and
//! the root's and the busiest relay's resident memory and threads.
//!
//! ```text
//! cargo build --release --bin meshrun && cargo bench --bench fleet
//! FLEET=star:256,tree32:1024 cargo bench --bench fleet     # by hand: the issue's sizes
//! ```
//!
//! `FLEET` lists `<shape>:<workers>`, the shape `star` or `tree<fanout>`
//! (default `star:64,tree8:64`). `FLEET_TRANSPORT` picks the link (tcp,
//! the default here: a thousand QUIC connections need a thousand UDP
//! sockets on one host). The liveness limit is 10 s unless `LIVENESS_S`
//! says otherwise: hundreds of processes on this machine's two cores leave
//! a process's link threads unscheduled for seconds at a time, which the
//! default second would take for a dead host (`docs/fault-tolerance.md`,
//! "Liveness", its price).
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark prints its table"
)]

#[allow(
    dead_code,
    reason = "this benchmark uses only the launcher of the shared helpers"
)]
mod common;

use meshwork::{Node, ReduceOp};
use std::time::Instant;

/// A line of `/proc/self/status`, as a number (`VmRSS` in KiB, `Threads`).
fn status(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `f` run `iters` times after a barrier: the slowest rank's mean time
/// per call (ms).
fn timed(
    g: &meshwork::ProcessGroup,
    iters: u32,
    mut f: impl FnMut() -> meshwork::Result<()>,
) -> meshwork::Result<f64> {
    g.barrier()?;
    let t = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    let mut ms = [t.elapsed().as_secs_f64() * 1e3 / f64::from(iters.max(1))];
    g.all_reduce(&mut ms, ReduceOp::Max)?;
    Ok(ms[0])
}

/// Each rank's update for a federated average: `rank + i mod 7` at
/// element `i`, weight `rank + 1`.
fn update(g: &meshwork::ProcessGroup, len: usize) -> (Vec<f32>, f32) {
    let r = g.rank() as f32;
    ((0..len).map(|i| r + (i % 7) as f32).collect(), r + 1.0)
}

/// The elements of a federated average of [`update`]s that differ from
/// the closed form: Σ(r+1)·(r+c)/Σ(r+1) per element.
fn wrong_average(g: &meshwork::ProcessGroup, x: &[f32]) -> u64 {
    let p = f64::from(g.world_size());
    // Σ(r+1) = p(p+1)/2, Σ(r+1)r = (p−1)p(p+1)/3.
    let w = p * (p + 1.0) / 2.0;
    let wr = (p - 1.0) * p * (p + 1.0) / 3.0;
    x.iter()
        .enumerate()
        .filter(|(i, &v)| {
            let want = (wr + w * (i % 7) as f64) / w;
            (f64::from(v) - want).abs() > 1e-3 * want.abs().max(1.0)
        })
        .count() as u64
}

/// A federated average of `len` f32: one call checked, then `iters` timed.
fn fed_avg(g: &meshwork::ProcessGroup, len: usize, iters: u32) -> meshwork::Result<(f64, u64)> {
    let (mut x, w) = update(g, len);
    g.federated_average(&mut x, w)?;
    let wrong = wrong_average(g, &x);
    // Timed on the last result as the next update: the call, not the
    // making of its input.
    let ms = timed(g, iters, || g.federated_average(&mut x, w))?;
    Ok((ms, wrong))
}

/// A number from the environment, or `default`.
fn knob(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rank_main() -> meshwork::Result<()> {
    let started = Instant::now();
    let g = Node::from_env()?.connect()?;
    let mut formed = [started.elapsed().as_secs_f64() * 1e3];
    g.all_reduce(&mut formed, ReduceOp::Max)?;
    let small = knob("FLEET_ITERS", 20);
    let large = knob("FLEET_ITERS_LARGE", 3);
    let barrier = timed(&g, small, || g.barrier())?;
    let mut wrong = 0u64;
    let mut x = vec![1.0f32; 1024];
    g.all_reduce(&mut x, ReduceOp::Sum)?;
    wrong += x.iter().filter(|&&v| v != g.world_size() as f32).count() as u64;
    let all_reduce = timed(&g, small, || {
        let mut x = vec![1.0f32; 1024];
        g.all_reduce(&mut x, ReduceOp::Sum)
    })?;
    let (avg1, w1) = fed_avg(&g, 1 << 18, large)?;
    // 16 MiB a worker (and the f64 sum beside it) over a thousand
    // processes is more memory than this machine has: up to 256 workers.
    let (avg16, w16) = if g.world_size() <= 257 {
        fed_avg(&g, 1 << 22, large.min(1))?
    } else {
        (f64::NAN, 0)
    };
    wrong += w1 + w16;
    // The root's cost, and the busiest relay's (a rank with links to
    // others beside rank 0: an interior rank of a tree).
    let relay = g
        .links()
        .iter()
        .enumerate()
        .filter(|(r, k)| {
            *r != 0 && !matches!(k, meshwork::LinkKind::Relayed | meshwork::LinkKind::Local)
        })
        .count()
        > 0
        && g.rank() != 0;
    let mut relay_cost = if relay {
        [status("VmRSS:"), status("Threads:")]
    } else {
        [0, 0]
    };
    g.all_reduce(&mut relay_cost, ReduceOp::Max)?;
    let mut bad = [wrong];
    g.all_reduce(&mut bad, ReduceOp::Sum)?;
    if g.rank() == 0 {
        println!(
            "FLEET {} {:.0} {:.2} {:.2} {:.1} {:.1} {} {} {} {} {}",
            g.world_size() - 1,
            formed[0],
            barrier,
            all_reduce,
            avg1,
            avg16,
            status("VmRSS:") / 1024,
            status("Threads:"),
            relay_cost[0] / 1024,
            relay_cost[1],
            bad[0]
        );
    }
    g.shutdown()
}

fn main() {
    if common::as_rank(rank_main) {
        return;
    }
    let fleet = std::env::var("FLEET").unwrap_or_else(|_| "star:64,tree8:64".into());
    let transport = std::env::var("FLEET_TRANSPORT").unwrap_or_else(|_| "tcp".into());
    println!("# 1 + N processes on loopback, SHM=0 ({transport}), a fresh token; times: the slowest rank");
    println!(
        "{:>8} {:>6} | {:>9} {:>9} {:>9} {:>10} {:>11} | {:>9} {:>7} | {:>9} {:>7} | {:>5}",
        "shape",
        "N",
        "formed ms",
        "barrier",
        "ar 4 KiB",
        "avg 1 MiB",
        "avg 16 MiB",
        "root MiB",
        "threads",
        "relay MiB",
        "threads",
        "wrong"
    );
    for spec in fleet.split(',') {
        let Some((shape, n)) = spec.split_once(':') else {
            eprintln!("FLEET: {spec:?} is not <shape>:<workers>");
            continue;
        };
        let Ok(n) = n.parse::<u32>() else {
            eprintln!("FLEET: {spec:?}: the workers are a number");
            continue;
        };
        let topology = match shape.strip_prefix("tree") {
            Some(k) => format!("tree:{k}"),
            None => shape.to_string(),
        };
        let Some(mut cmd) = common::meshrun(n + 1, &topology) else {
            return;
        };
        let liveness = std::env::var("LIVENESS_S").unwrap_or_else(|_| "10".into());
        cmd.env("TRANSPORT", &transport)
            .env("SHM", "0")
            .env("TIMEOUT_S", "120")
            .env("LIVENESS_S", liveness)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        let t = Instant::now();
        let out = cmd.output();
        let line = out.ok().and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.split_once("FLEET ").map(|(_, r)| r.to_string()))
        });
        match line {
            Some(l) => {
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.len() == 11 {
                    println!(
                        "{shape:>8} {:>6} | {:>9} {:>9} {:>9} {:>10} {:>11} | {:>9} {:>7} | {:>9} {:>7} | {:>5}",
                        f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10]
                    );
                } else {
                    println!("{shape:>8} {n:>6} | {l}");
                }
            }
            None => println!(
                "{shape:>8} {n:>6} | failed after {:.1} s",
                t.elapsed().as_secs_f64()
            ),
        }
    }
}
