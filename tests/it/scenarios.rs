//! What a rank process runs (see `procs.rs`). Each scenario reads the
//! group from the environment (`Node::from_env`) and reports `RESULT ok …`
//! or `RESULT err <Variant> <detail>`.
#![allow(
    clippy::print_stdout,
    reason = "rank processes report to the test on stdout"
)]

use crate::support::{compare, ops_for, reduces, run_case, TestElem};
use meshwork::half::{bf16, f16};
use meshwork::{Error, Node, ProcessGroup, ReduceOp};
use meshwork_collectives::Collective;
use std::io::Write;

/// The entry point of a rank process; an ordinary test run ignores it.
#[test]
#[ignore = "entry point of rank processes spawned by the multi-process tests"]
fn rank_process_entry() {
    let Ok(scenario) = std::env::var("MESHWORK_TEST_SCENARIO") else {
        panic!("run only by the multi-process tests, with MESHWORK_TEST_SCENARIO set");
    };
    // libtest has printed "test … " without a newline: start our lines fresh.
    println!();
    // The library's log on stderr, filtered by RUST_LOG (off by default).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    if scenario == "hold_udp_port" {
        // Hold a UDP port without sharing it, until killed.
        let port = std::env::var("HOLD_PORT")
            .ok()
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or(29600);
        let sock = std::net::UdpSocket::bind(("0.0.0.0", port)).expect("bind the port to hold");
        println!("READY");
        let _ = std::io::stdout().flush();
        let mut buf = [0u8; 1];
        loop {
            let _ = sock.recv_from(&mut buf);
        }
    }
    if scenario == "siege" {
        crate::siege::run();
        return;
    }
    if scenario == "nemesis_join" {
        exit_reporting(crate::nemesis::join_then_run());
    }
    if scenario == "exit_rank1" && std::env::var("RANK").is_ok_and(|r| r == "1") {
        println!("RESULT err Exit rank 1 leaves at once");
        let _ = std::io::stdout().flush();
        std::process::exit(3);
    }
    let started = std::time::Instant::now();
    let outcome = Node::from_env().and_then(|n| n.connect()).and_then(|g| {
        let formed_ms = started.elapsed().as_millis();
        check_links(&g)?;
        if scenario == "reform" {
            // Takes the group: it is replaced (and dropped) as it goes.
            return crate::lifetime::reform(g);
        }
        if scenario == "nemesis" {
            return crate::nemesis::job(g);
        }
        if scenario == "churn" {
            // Takes the group: a worker drops it when it leaves.
            return crate::rounds::churn(g);
        }
        let r = match scenario.as_str() {
            "all" => all_collectives(&g),
            "loop" => loop_until_error(&g),
            "mixed" => mixed_until_error(&g),
            "survive" => survive(&g),
            "agreements" => agreements(&g),
            "retry" => retry_after_shrink(&g),
            "soak" => soak(&g),
            "compute" => compute(&g),
            "leave_early" => leave_early(&g),
            "pairs" => every_pair_large(&g),
            "slow" => slow(&g),
            "heap" => crate::one_sided::scenario(&g),
            "compressed" => crate::compress::scenario(&g),
            "sparse" => crate::sparse::scenario(&g),
            "fleet" => crate::fleet::scenario(&g),
            "rounds" => crate::rounds::scenario(&g),
            "secure" => crate::rounds::secure(&g),
            "relay" => crate::sparse::relay_scenario(&g),
            "stuck" => crate::forensics::scenario(&g, false),
            "stuck_in_barrier" => crate::forensics::scenario(&g, true),
            "flight_dump" => crate::forensics::dump_scenario(&g),
            #[cfg(feature = "cuda")]
            "outside_killed" => crate::cuda::outside_scenario(&g),
            "connect" | "exit_rank1" => Ok(String::from("connected")),
            "connect_timed" => all_collectives(&g).map(|r| format!("{r} formed_ms={formed_ms}")),
            "all_reduce_small" => {
                let mut x = [g.rank() + 1; 4];
                g.all_reduce(&mut x, ReduceOp::Sum)?;
                let p = g.world_size();
                if x == [p * (p + 1) / 2; 4] {
                    Ok(format!("rank {} of {p}", g.rank()))
                } else {
                    Err(Error::InvalidArgument(format!("sum {x:?}")))
                }
            }
            other => panic!("unknown scenario {other}"),
        };
        if std::env::var("HOLD_ON_ERROR").is_ok_and(|v| v == "1") {
            // A survivor stays up, its group and links open, until the
            // test has every survivor's report (then it kills them all):
            // one that left at once would be one more failure for those
            // still reporting.
            match &r {
                Ok(msg) => println!("RESULT ok {msg}"),
                Err(e) => println!("RESULT err {} {e}", variant(e)),
            }
            let _ = std::io::stdout().flush();
            loop {
                std::thread::park();
            }
        }
        r.and_then(|msg| g.shutdown().map(|()| msg))
    });
    exit_reporting(outcome);
}

/// Report `outcome` as the `RESULT` line and exit with its code.
fn exit_reporting(outcome: meshwork::Result<String>) -> ! {
    let code = match outcome {
        Ok(msg) => {
            println!("RESULT ok {msg}");
            0
        }
        Err(e) => {
            println!("RESULT err {} {e}", variant(&e));
            3
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

/// `EXPECT_LINKS=<kind>`: every peer this rank links to directly (not
/// through a star's coordinator) must be linked by `<kind>` (`LinkKind`'s
/// `Debug` name, e.g. `SharedMemory`, `Quic`, `Tcp`). A comma-separated
/// list instead names every rank's link in rank order.
fn check_links(g: &ProcessGroup) -> meshwork::Result<()> {
    let Ok(want) = std::env::var("EXPECT_LINKS") else {
        return Ok(());
    };
    let links = g.links();
    let names: Vec<String> = links.iter().map(|k| format!("{k:?}")).collect();
    let ok = if want.contains(',') {
        names.join(",") == want
    } else {
        names
            .iter()
            .enumerate()
            .all(|(r, n)| r == g.rank() as usize || n == "Relayed" || *n == want)
    };
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "links {links:?}, expected {want} to every direct peer"
        )))
    }
}

/// Every pair of ranks exchanges a message of 8 MiB + 3 B each way (odd
/// length: the rings' wrap-around and the last partial chunk), checked
/// byte for byte.
fn every_pair_large(g: &ProcessGroup) -> meshwork::Result<String> {
    let (me, p) = (g.rank(), g.world_size());
    const LEN: usize = (8 << 20) + 3;
    let fill = |from: u32, to: u32| -> Vec<u8> {
        (0..LEN)
            .map(|i| (i as u32 ^ from.wrapping_mul(131) ^ to.wrapping_mul(7)) as u8)
            .collect()
    };
    for d in 1..p {
        let (to, from) = ((me + d) % p, (me + p - d) % p);
        g.send(&fill(me, to), to, 7)?;
        let mut got = vec![0u8; LEN];
        g.recv(&mut got, from, 7)?;
        if got != fill(from, me) {
            let at = got.iter().zip(fill(from, me)).position(|(a, b)| *a != b);
            return Err(Error::InvalidArgument(format!(
                "8 MiB + 3 B from rank {from}: first wrong byte at {at:?}"
            )));
        }
    }
    // `EXPECT_SINGLE_COPY=1|0`: the large messages to every peer went
    // (or did not go) straight from this process's memory.
    if let Ok(want) = std::env::var("EXPECT_SINGLE_COPY") {
        let stats = g.stats();
        let copied: Vec<u64> = (0..p)
            .filter(|&r| r != me)
            .map(|r| stats[r as usize].single_copy_messages)
            .collect();
        let ok = if want == "1" {
            copied.iter().all(|&n| n == 1)
        } else {
            copied.iter().all(|&n| n == 0)
        };
        if !ok {
            return Err(Error::InvalidArgument(format!(
                "single copies to each peer: {copied:?}, expected {want}"
            )));
        }
    }
    Ok(format!("{} pairs exact", p - 1))
}

fn variant(e: &Error) -> String {
    let d = format!("{e:?}");
    d.split([' ', '(', '{']).next().unwrap_or("?").to_string()
}

fn sweep<T: TestElem>(g: &ProcessGroup, failures: &mut Vec<String>) -> meshwork::Result<()> {
    for n in [0usize, 1, 5, 1000, 100_003] {
        for coll in Collective::ALL {
            let ops: Vec<_> = if reduces(coll) {
                ops_for::<T>().into_iter().map(Some).collect()
            } else {
                vec![None]
            };
            for op in ops {
                let (got, want) = run_case::<T>(g, coll, op, n)?;
                let ctx = format!(
                    "{} {:?} {op:?} n={n} rank {}",
                    coll.name(),
                    T::DTYPE,
                    g.rank()
                );
                failures.extend(compare(&got, &want, op, &ctx).err());
            }
        }
    }
    Ok(())
}

/// Every collective × element type × operator, default algorithms.
pub(crate) fn all_collectives(g: &ProcessGroup) -> meshwork::Result<String> {
    let mut f = Vec::new();
    sweep::<f32>(g, &mut f)?;
    sweep::<f64>(g, &mut f)?;
    sweep::<f16>(g, &mut f)?;
    sweep::<bf16>(g, &mut f)?;
    sweep::<i8>(g, &mut f)?;
    sweep::<i32>(g, &mut f)?;
    sweep::<i64>(g, &mut f)?;
    sweep::<u8>(g, &mut f)?;
    sweep::<u32>(g, &mut f)?;
    sweep::<u64>(g, &mut f)?;
    if f.is_empty() {
        Ok("all collectives exact".into())
    } else {
        Err(Error::InvalidArgument(format!(
            "{} wrong results, first: {}",
            f.len(),
            f[0]
        )))
    }
}

/// All-reduce 4 MiB over and over; says READY after the first one. Ends
/// only with an error (a peer killed or frozen).
fn loop_until_error(g: &ProcessGroup) -> meshwork::Result<String> {
    let mut x = vec![1.0f32; 1 << 20];
    let mut first = true;
    loop {
        if let Err(e) = g.all_reduce(&mut x, ReduceOp::Max) {
            println!("FAILED {:?}", g.failed());
            return Err(e);
        }
        if first {
            println!("READY");
            let _ = std::io::stdout().flush();
            first = false;
        }
    }
}

/// `READY_AFTER` (default 1): rounds before a scenario says `READY`.
fn ready_after() -> u64 {
    std::env::var("READY_AFTER")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Round `i` of the failure scenarios: one of the soak's small verified
/// ops, and every eighth round a 1 MiB all_reduce.
fn mixed_round(g: &ProcessGroup, i: u64, big: &mut [f32]) -> meshwork::Result<()> {
    small_op(g, i)?;
    if i % 8 == 7 {
        g.all_reduce(big, ReduceOp::Max)?;
    }
    Ok(())
}

/// Mixed collectives (the soak's small ones, and every eighth round a
/// 1 MiB all_reduce) until one fails; `READY` after `READY_AFTER` rounds
/// (default 1). On failure, `FAILED <unix ms> <g.failed()>` first.
fn mixed_until_error(g: &ProcessGroup) -> meshwork::Result<String> {
    let ready_after = ready_after();
    let mut big = vec![1.0f32; 1 << 18];
    let mut i = 0u64;
    loop {
        let round = mixed_round(g, i, &mut big);
        if let Err(e) = round {
            let at = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            println!("FAILED {at} {:?}", g.failed());
            return Err(e);
        }
        i += 1;
        if i == ready_after {
            println!("READY");
            let _ = std::io::stdout().flush();
        }
    }
}

/// Mixed collectives, surviving failures: a call that meets a failed
/// member (or a revoked group) makes every survivor agree and shrink, and
/// the loop starts again on the shrunk group, until 16 rounds pass on it
/// after the last shrink (`AGREEING` before each agreement; `READY` after
/// `READY_AFTER` rounds; with `DIE_AFTER_SHRINK`, this rank kills itself
/// after its first shrink). Reports each agreement's (flags, failed) — the
/// flags are the AND of `!(1 << rank)` over who took part — and the world
/// it ended with.
fn survive(g0: &ProcessGroup) -> meshwork::Result<String> {
    let ready_after = ready_after();
    let mut shrunk: Option<std::sync::Arc<ProcessGroup>> = None;
    let mut history = Vec::new();
    let mut big = vec![1.0f32; 1 << 18];
    let (mut i, mut total) = (0u64, 0u64);
    loop {
        let g = shrunk.as_deref().unwrap_or(g0);
        let round = mixed_round(g, i, &mut big);
        match round {
            Ok(()) => {
                i += 1;
                total += 1;
                if total == ready_after {
                    println!("READY");
                    let _ = std::io::stdout().flush();
                }
                if shrunk.is_some() && i == 16 {
                    break;
                }
            }
            Err(Error::PeerDisconnected { .. } | Error::Timeout { .. } | Error::Revoked) => {
                println!("AGREEING");
                let _ = std::io::stdout().flush();
                let (flags, failed) = g.agree(!(1u64 << g.rank()))?;
                history.push(format!("{:x}/{failed:?}", !flags));
                shrunk = Some(g.shrink()?);
                if std::env::var_os("DIE_AFTER_SHRINK").is_some() {
                    // A member that fails once the group has shrunk.
                    // SAFETY: kill with this process's own pid.
                    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                }
                i = 0;
            }
            Err(e) => return Err(e),
        }
    }
    let g = shrunk.as_deref().unwrap_or(g0);
    Ok(format!(
        "agreed {} world {}",
        history.join(" "),
        g.world_size()
    ))
}

/// `AGREEMENTS` agreements in a row, nobody failed, each checked: the
/// flags are the AND of every rank's (rank r clears bit r of agreement
/// i's when i % world == r).
fn agreements(g: &ProcessGroup) -> meshwork::Result<String> {
    let n: u64 = std::env::var("AGREEMENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let (rank, world) = (u64::from(g.rank()), u64::from(g.world_size()));
    for i in 0..n {
        let mine = if i % world == rank {
            !(1 << rank)
        } else {
            u64::MAX
        };
        let (flags, failed) = g.agree(mine)?;
        if flags != !(1 << (i % world)) || !failed.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "agreement {i}: flags {flags:x}, failed {failed:?}"
            )));
        }
    }
    Ok(format!("{n} agreements"))
}

/// `RECOVERY=shrink`: mixed collectives on one group; a call that fails
/// with `GroupShrunk` is retried (the loop starts again) on the same
/// group, now the survivors, until 16 rounds pass after the last shrink.
fn retry_after_shrink(g: &ProcessGroup) -> meshwork::Result<String> {
    let ready_after = ready_after();
    let mut big = vec![1.0f32; 1 << 18];
    let (mut i, mut total) = (0u64, 0u64);
    let mut shrinks = Vec::new();
    loop {
        let round = mixed_round(g, i, &mut big);
        match round {
            Ok(()) => {
                i += 1;
                total += 1;
                if total == ready_after {
                    println!("READY");
                    let _ = std::io::stdout().flush();
                }
                if !shrinks.is_empty() && i == 16 {
                    break;
                }
            }
            Err(Error::GroupShrunk { failed }) => {
                // When it recovered (a test times it from the kill).
                println!("SHRUNK {failed:?}");
                let _ = std::io::stdout().flush();
                shrinks.push(format!("{failed:?}"));
                i = 0;
            }
            Err(e) => return Err(e),
        }
    }
    // Federated averaging over whoever is left (a star's use): the mean
    // of the survivors' ranks, renumbered 0..w.
    let mut x = [g.rank() as f32; 3];
    g.federated_average(&mut x, 1.0)?;
    let w = g.world_size() as f32;
    if x != [(w - 1.0) / 2.0; 3] {
        return Err(Error::InvalidArgument(format!(
            "federated_average gave {x:?}"
        )));
    }
    Ok(format!(
        "shrunk {} world {}",
        shrinks.join(" "),
        g.world_size()
    ))
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn small_op(g: &ProcessGroup, i: u64) -> meshwork::Result<()> {
    let (r, p) = (g.rank() as u64, u64::from(g.world_size()));
    let bad = |what: String| Err(Error::InvalidArgument(format!("op {i}: {what}")));
    match i % 4 {
        0 => {
            let mut x = [r + i, 1];
            g.all_reduce(&mut x, ReduceOp::Sum)?;
            if x != [p * (p - 1) / 2 + p * i, p] {
                return bad(format!("all_reduce gave {x:?}"));
            }
        }
        1 => {
            let mut x = [if r == i % p { i } else { 0 }; 3];
            g.broadcast(&mut x, (i % p) as u32)?;
            if x != [i; 3] {
                return bad(format!("broadcast gave {x:?}"));
            }
        }
        2 => g.barrier()?,
        _ => {
            let mut x = [(r as i32) - 1];
            g.all_reduce(&mut x, ReduceOp::Min)?;
            if x != [-1] {
                return bad(format!("min gave {x:?}"));
            }
        }
    }
    Ok(())
}

/// The test's own large buffers, allocated once so that resident memory
/// measures the library, not the allocator's handling of the test's churn.
struct LargeBufs {
    x: Vec<f32>,
    mine: Vec<bf16>,
    all: Vec<bf16>,
}

const LARGE_ROUNDS: u64 = 6;

impl LargeBufs {
    fn new(p: u64) -> LargeBufs {
        let max = (1_000_003 + LARGE_ROUNDS * 7) as usize;
        LargeBufs {
            x: Vec::with_capacity(max),
            mine: Vec::with_capacity(max),
            all: Vec::with_capacity(max * p as usize),
        }
    }
}

fn large_round(g: &ProcessGroup, round: u64, b: &mut LargeBufs) -> meshwork::Result<()> {
    let (r, p) = (g.rank() as u64, u64::from(g.world_size()));
    let n = 1_000_003 + round * 7;
    b.x.clear();
    b.x.extend((0..n).map(|j| ((j + r) % 5) as f32));
    g.all_reduce(&mut b.x, ReduceOp::Sum)?;
    for (j, v) in b.x.iter().enumerate() {
        let want: u64 = (0..p).map(|q| (j as u64 + q) % 5).sum();
        if *v != want as f32 {
            return Err(Error::InvalidArgument(format!(
                "large round {round}: index {j} is {v}, want {want}"
            )));
        }
    }
    b.mine.clear();
    b.mine
        .extend((0..n).map(|j| bf16::from_f32(((j + r) % 7) as f32)));
    b.all.clear();
    b.all.resize((n * p) as usize, bf16::ZERO);
    g.all_gather(&b.mine, &mut b.all)?;
    for (j, v) in b.all.iter().enumerate() {
        let (q, k) = (j as u64 / n, j as u64 % n);
        if v.to_f32() != ((k + q) % 7) as f32 {
            return Err(Error::InvalidArgument(format!(
                "large round {round}: all_gather index {j}"
            )));
        }
    }
    Ok(())
}

/// 70 000 consecutive small collectives, then large ones of odd length, all
/// exact. Warm-up is the first 5 000 small ones and one large round (which
/// fills the buffer pool); after it resident memory may grow at most 10 MiB.
fn soak(g: &ProcessGroup) -> meshwork::Result<String> {
    let mut trace = Vec::new();
    let mut bufs = LargeBufs::new(u64::from(g.world_size()));
    for i in 0..5_000 {
        small_op(g, i)?;
    }
    trace.push(rss_kib());
    for round in 0..2 {
        large_round(g, round, &mut bufs)?;
        trace.push(rss_kib());
    }
    let warm = rss_kib();
    for i in 5_000..70_000 {
        small_op(g, i)?;
        if i % 13_000 == 0 {
            trace.push(rss_kib());
        }
    }
    for round in 2..LARGE_ROUNDS {
        large_round(g, round, &mut bufs)?;
        trace.push(rss_kib());
    }
    let end = rss_kib();
    println!("RSS trace {trace:?}");
    let grown = end.saturating_sub(warm);
    if grown > 10 * 1024 {
        return Err(Error::InvalidArgument(format!(
            "resident memory grew {grown} KiB after warm-up ({warm} → {end}); trace {trace:?}"
        )));
    }
    Ok(format!(
        "soak exact; rss warm {warm} KiB end {end} KiB grown {grown} KiB; trace {trace:?}"
    ))
}

/// One 16 MiB all-reduce, for a rate-limited link: slow, but moving.
fn slow(g: &ProcessGroup) -> meshwork::Result<String> {
    let mut x = vec![1.0f32; 4 << 20];
    let started = std::time::Instant::now();
    g.all_reduce(&mut x, ReduceOp::Sum)?;
    let p = g.world_size() as f32;
    if x.iter().any(|&v| v != p) {
        return Err(Error::InvalidArgument("slow all_reduce: wrong sum".into()));
    }
    Ok(format!("16 MiB all_reduce in {:?}", started.elapsed()))
}

/// 40 checked all_reduces; before the 21st, rank `COMPUTE_RANK` computes
/// for `COMPUTE_S` seconds (a busy loop: no call, no sleep) while the
/// others wait for it in the call.
fn compute(g: &ProcessGroup) -> meshwork::Result<String> {
    let who: u32 = std::env::var("COMPUTE_RANK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u32::MAX);
    let secs: f64 = std::env::var("COMPUTE_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    for round in 0..40u32 {
        if round == 20 && g.rank() == who {
            let until = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
            let mut x = 0u64;
            while std::time::Instant::now() < until {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        let mut v = [g.rank() + 1; 16];
        g.all_reduce(&mut v, ReduceOp::Sum)?;
        let p = g.world_size();
        if v != [p * (p + 1) / 2; 16] {
            return Err(Error::InvalidArgument(format!("round {round}: {v:?}")));
        }
    }
    let failed = g.failed();
    if !failed.is_empty() {
        return Err(Error::InvalidArgument(format!("suspected {failed:?}")));
    }
    Ok("40 rounds, none failed".to_string())
}

/// Rank 2 leaves after a barrier — `LEAVE=exit`: its process exits (no
/// goodbye); `LEAVE=shutdown`: it shuts the group down — while the others
/// call an all_reduce that needs it. Under `exit`, rank 1 exits too on its
/// error (as a script that stops at the first exception), after rank 2.
/// The others report the error and how long it took.
fn leave_early(g: &ProcessGroup) -> meshwork::Result<String> {
    let how = std::env::var("LEAVE").unwrap_or_default();
    g.barrier()?;
    if g.rank() == 2 {
        if how == "exit" {
            std::process::exit(3);
        }
        let said = g.shutdown();
        return Ok(format!("shut down: {said:?}"));
    }
    let started = std::time::Instant::now();
    let mut x = [1u32; 8];
    let got = g.all_reduce(&mut x, ReduceOp::Sum);
    let took = started.elapsed().as_millis();
    match got {
        Ok(()) => Err(Error::InvalidArgument(
            "the all_reduce completed without rank 2".into(),
        )),
        Err(e) => {
            if how == "exit" && g.rank() == 1 {
                println!("RESULT err {} after {took} ms", variant(&e));
                let _ = std::io::stdout().flush();
                std::process::exit(3);
            }
            Ok(format!("{} after {took} ms: {e}", variant(&e)))
        }
    }
}
