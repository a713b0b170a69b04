//! Fault tolerance, timed: 4 processes on loopback run small
//! all_reduces in a loop; one (rank 2) kills itself (SIGKILL) or stops
//! itself (SIGSTOP) after 200 rounds. Measured, per link and signal, over
//! several runs: from the failure to the last survivor's error, and from
//! each survivor's error to its shrunk group being usable (`shrink`, then
//! a barrier of the three).
//!
//! ```text
//! cargo build --release --bin meshrun && cargo bench --bench recovery
//! ```
//!
//! The deadline is 2 s (`--timeout 2`), the liveness the default 1 s: a
//! stopped process is known failed within the liveness limit; a killed
//! one at once.
//!
//! Then growing back (a job formed through rank 0's seed): after the
//! SIGKILL the three survivors shrink and call `grow(1)`; once they have,
//! a new process is started (`Node::join_running`). Measured: from its
//! start to the last of the four passing a barrier on the grown group.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark prints its table"
)]

#[allow(
    dead_code,
    reason = "this benchmark uses only the links of the shared helpers"
)]
mod common;

use meshwork::{Node, ReduceOp};
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const VICTIM: u32 = 2;
const ROUNDS_BEFORE: u64 = 200;
const RUNS: usize = 5;

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

fn say(line: String) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

/// A rank of the job.
fn rank() -> meshwork::Result<()> {
    let g = Node::from_env()?.connect()?;
    let signal: i32 = std::env::var("BENCH_SIGNAL")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(libc::SIGKILL);
    let mut i = 0u64;
    loop {
        if g.rank() == VICTIM && i == ROUNDS_BEFORE {
            say(format!("FAIL {} {}", now_us(), std::process::id()));
            // SAFETY: signalling this very process.
            unsafe { libc::kill(libc::getpid(), signal) };
        }
        let mut x = [1u64];
        if let Err(e) = g.all_reduce(&mut x, ReduceOp::Sum) {
            say(format!("ERR {} {e}", now_us()));
            break;
        }
        i += 1;
    }
    let s = g.shrink()?;
    s.barrier()?;
    say(format!("USABLE {} {}", now_us(), s.world_size()));
    if std::env::var("BENCH_GROW").is_ok_and(|v| v == "1") {
        say(format!("GROWING {}", now_us()));
        let big = s.grow(1)?;
        big.barrier()?;
        say(format!("GROWN {} {}", now_us(), big.world_size()));
        return big.shutdown();
    }
    s.shutdown()
}

/// A new process for the running job.
fn newcomer() -> meshwork::Result<()> {
    let g = Node::join_running().connect()?;
    g.barrier()?;
    say(format!("GROWN {} {}", now_us(), g.world_size()));
    g.shutdown()
}

/// Every stdout line of `child`, on a channel (meshrun's `[rank] `
/// prefix taken off).
fn lines_of(child: &mut std::process::Child, tx: &crossbeam_channel::Sender<String>) {
    let Some(out) = child.stdout.take() else {
        return;
    };
    let tx = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let line = line
                .split_once("] ")
                .map_or(line.clone(), |(_, l)| l.to_owned());
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

/// How long a run may take before it is given up (and its processes
/// killed): well past every deadline involved.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// One growth run (see the module): from the newcomer's start to the last
/// `GROWN`, in ms.
fn run_grow(env: &[(&str, &str)]) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let seed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .ok()?
        .to_string();
    let (tx, rx) = crossbeam_channel::unbounded();
    let start = |role: &str, rank: Option<u32>| {
        let mut cmd = std::process::Command::new(&exe);
        cmd.env("BENCH_ROLE", role)
            .env("BENCH_GROW", "1")
            .env("BENCH_SIGNAL", libc::SIGKILL.to_string())
            .env("SEED", &seed)
            .env("CLUSTER_TOKEN", "recovery bench token, long enough")
            .env("TIMEOUT_S", "2")
            .env("WORLD", "4")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(r) = rank {
            cmd.env("RANK", r.to_string());
        }
        let mut child = cmd.spawn().ok()?;
        lines_of(&mut child, &tx);
        Some(child)
    };
    let mut children: Vec<std::process::Child> =
        (0..4).filter_map(|r| start("rank", Some(r))).collect();
    let deadline = std::time::Instant::now() + RUN_LIMIT;
    let (mut growing, mut grown, mut started) = (0, Vec::new(), None);
    while grown.len() < 4 {
        let Ok(line) = rx.recv_deadline(deadline) else {
            eprintln!(
                "grow: gave up after {RUN_LIMIT:?} with {} grown",
                grown.len()
            );
            break;
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.first() {
            Some(&"GROWING") => {
                growing += 1;
                if growing == 3 {
                    started = Some(now_us());
                    children.extend(start("newcomer", None));
                }
            }
            Some(&"GROWN") => grown.extend(f.get(1).and_then(|v| v.parse::<u128>().ok())),
            _ => {}
        }
    }
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let (last, started) = (*grown.iter().max()?, started?);
    (grown.len() == 4).then(|| last.saturating_sub(started) as f64 / 1000.0)
}

/// One run: (failure → last survivor's error, slowest survivor's error →
/// usable), in ms.
fn run(link: &str, env: &[(&str, &str)], signal: i32) -> Option<(f64, f64)> {
    let exe = std::env::current_exe().ok()?;
    let meshrun = exe.parent()?.parent()?.join("meshrun");
    if !meshrun.exists() {
        eprintln!("meshrun is not built (cargo build --release --bin meshrun)");
        return None;
    }
    let mut cmd = std::process::Command::new(meshrun);
    cmd.args(["-n", "4", "--timeout", "2", "--keep-going", "--"])
        .arg(&exe)
        .env("BENCH_ROLE", "rank")
        .env("BENCH_SIGNAL", signal.to_string())
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().ok()?;
    let (tx, rx) = crossbeam_channel::unbounded();
    lines_of(&mut child, &tx);
    drop(tx);
    let (mut failed_at, mut frozen) = (None, None);
    let mut errs = Vec::new();
    let mut usable = Vec::new();
    let deadline = std::time::Instant::now() + RUN_LIMIT;
    let mut given_up = false;
    loop {
        let line = match rx.recv_deadline(deadline) {
            Ok(line) => line,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                eprintln!("{link}: gave up after {RUN_LIMIT:?}");
                given_up = true;
                break;
            }
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        let at = |i: usize| f.get(i).and_then(|v| v.parse::<u128>().ok());
        match f.first() {
            Some(&"FAIL") => {
                failed_at = at(1);
                frozen = f.get(2).and_then(|p| p.parse::<i32>().ok());
            }
            Some(&"ERR") => errs.extend(at(1)),
            Some(&"USABLE") => usable.extend(at(1)),
            _ => {}
        }
        if usable.len() == 3 {
            break;
        }
    }
    // The stopped rank will never end by itself.
    if let (libc::SIGSTOP, Some(pid)) = (signal, frozen) {
        // SAFETY: the stopped rank of this run, still unreaped by meshrun
        // (it has not exited).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    if given_up {
        // meshrun stops its ranks when it is stopped.
        let _ = child.kill();
    }
    let _ = child.wait();
    let failed_at = failed_at?;
    if errs.len() != 3 || usable.len() != 3 {
        eprintln!("{link}: {} errors, {} usable", errs.len(), usable.len());
        return None;
    }
    let last_err = *errs.iter().max()?;
    let ms = |us: u128| us as f64 / 1000.0;
    let to_err = ms(last_err.saturating_sub(failed_at));
    let to_usable = ms(usable.iter().max()?.saturating_sub(last_err));
    Some((to_err, to_usable))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let role = std::env::var("BENCH_ROLE").unwrap_or_default();
    if role == "rank" || role == "newcomer" {
        let ran = if role == "rank" { rank() } else { newcomer() };
        if let Err(e) = ran {
            eprintln!("{role}: {e}");
            std::process::exit(1);
        }
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let links = common::LINKS;
    println!("# 4 processes on loopback, deadline 2 s; rank 2 fails after {ROUNDS_BEFORE} all_reduces; {RUNS} runs each");
    println!("# error: failure → the last survivor's failing call returns; usable: the last error → the last survivor's shrunk group passes a barrier");
    println!(
        "{:>6} {:>8} | {:>12} {:>12} | {:>13} {:>13}",
        "link", "signal", "error med ms", "error max ms", "usable med ms", "usable max ms"
    );
    for (link, env) in links {
        for (name, signal) in [("SIGKILL", libc::SIGKILL), ("SIGSTOP", libc::SIGSTOP)] {
            let runs: Vec<(f64, f64)> = (0..RUNS).filter_map(|_| run(link, env, signal)).collect();
            if runs.is_empty() {
                println!("{link:>6} {name:>8} | (no run completed)");
                continue;
            }
            let errs: Vec<f64> = runs.iter().map(|r| r.0).collect();
            let usable: Vec<f64> = runs.iter().map(|r| r.1).collect();
            let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
            println!(
                "{link:>6} {name:>8} | {:>12.1} {:>12.1} | {:>13.1} {:>13.1}",
                median(errs.clone()),
                max(&errs),
                median(usable.clone()),
                max(&usable)
            );
        }
    }
    println!();
    println!("# growing back: the 3 survivors of a SIGKILL call grow(1); then a new process starts (Node::join_running)");
    println!("# replaced: the new process's start → the last of the 4 passes a barrier on the grown group");
    println!(
        "{:>6} | {:>15} {:>15}",
        "link", "replaced med ms", "replaced max ms"
    );
    for (link, env) in links {
        let runs: Vec<f64> = (0..RUNS).filter_map(|_| run_grow(env)).collect();
        if runs.is_empty() {
            println!("{link:>6} | (no run completed)");
            continue;
        }
        let max = runs.iter().copied().fold(0.0, f64::max);
        println!("{link:>6} | {:>15.1} {:>15.1}", median(runs), max);
    }
}
