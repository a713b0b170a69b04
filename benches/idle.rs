//! What a formed group costs when it does nothing: threads per process and
//! CPU time while idle, for 8 processes on loopback, on QUIC (the default)
//! and TCP.
//!
//! ```text
//! cargo bench --bench idle                  # 8 processes, 5 s idle
//! IDLE_WORLD=16 IDLE_SECS=10 cargo bench --bench idle
//! ```
//!
//! Each rank forms the group, passes a barrier, reads its own CPU time
//! (`/proc/self/stat`, user + system) and thread count, stays idle for the
//! window, reads its CPU time again, and the ranks add their CPU time up.
//! The table gives the total as a percentage of one core.
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
use std::time::{Duration, Instant};

/// Clock ticks of CPU time (user + system) this process has used.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 here.
    f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

fn threads() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn rank_main(secs: u64) -> meshwork::Result<()> {
    let g = Node::from_env()?.connect()?;
    g.barrier()?;
    let (t0, c0) = (Instant::now(), cpu_ticks());
    let n = threads();
    #[allow(
        clippy::disallowed_methods,
        reason = "the benchmark measures what an idle group costs while it sleeps"
    )]
    std::thread::sleep(Duration::from_secs(secs));
    let used = (cpu_ticks() - c0) as f64;
    let wall = t0.elapsed().as_secs_f64();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut cpu = [used / hz / wall * 100.0];
    g.all_reduce(&mut cpu, ReduceOp::Sum)?;
    let mut most = [n];
    g.all_reduce(&mut most, ReduceOp::Max)?;
    if g.rank() == 0 {
        // ROW <name> <bytes> <value> <wrong>: threads as "bytes", CPU % as value.
        println!("ROW idle {} {:.3} 0", most[0], cpu[0]);
    }
    g.shutdown()
}

fn main() {
    let secs: u64 = std::env::var("IDLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    if common::as_rank(|| rank_main(secs)) {
        return;
    }
    let world: u32 = std::env::var("IDLE_WORLD")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    println!("# {world} processes on loopback, idle for {secs} s after a barrier");
    println!(
        "# threads: per process (the most of any rank); cpu: all ranks together, % of one core"
    );
    println!(
        "{:>10} | {:>8} {:>12} {:>9}",
        "transport", "threads", "P + 4 bound", "cpu(%)"
    );
    for transport in ["quic", "tcp"] {
        let Some(mut cmd) = common::meshrun(world, "mesh") else {
            return;
        };
        cmd.env("TRANSPORT", transport)
            .env("IDLE_SECS", secs.to_string());
        match common::run_rows(cmd).and_then(|r| r.into_iter().next()) {
            Some(((_, threads), (cpu, _))) => println!(
                "{transport:>10} | {threads:>8} {:>12} {cpu:>9.2}",
                world + 4
            ),
            None => println!("{transport:>10} | failed"),
        }
    }
}
