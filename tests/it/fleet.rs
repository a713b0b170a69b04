//! A fleet on this machine: 1 + N processes under `meshrun` with a token,
//! over TCP without shared memory (links as between hosts), as a relay
//! tree and as a flat star. Each rank passes a barrier, a 4 KiB
//! all_reduce and a 1 MiB federated average, checked exact, and reports
//! its threads; the tree's root and relays keep a thread per child and a
//! few more, however large the fleet. `FLEET_WORKERS` (default 64 here; the tests run one at a time, `.config/nextest.toml`)
//! runs it at the size by hand: `FLEET_WORKERS=1024`.
#![allow(
    clippy::print_stdout,
    reason = "rank processes report to the test on stdout"
)]

use meshwork::{Error, ProcessGroup, ReduceOp, Topology};

/// This process's threads (`/proc/self/status`).
fn threads() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// What a rank of the fleet runs (`MESHWORK_TEST_SCENARIO=fleet`).
pub(crate) fn scenario(g: &ProcessGroup) -> meshwork::Result<String> {
    let (r, p) = (g.rank(), g.world_size());
    g.barrier()?;
    let mut x = vec![1.0f32; 1024];
    g.all_reduce(&mut x, ReduceOp::Sum)?;
    if x.iter().any(|&v| v != p as f32) {
        return Err(Error::InvalidArgument(format!(
            "rank {r}: all_reduce {}",
            x[0]
        )));
    }
    // Rank r's update: r + i mod 5 at element i, weight r + 1. The
    // average: Σ(r+1)(r+c)/Σ(r+1) = 2(p − 1)/3 + c.
    let mut avg: Vec<f32> = (0..1 << 18).map(|i| (r + i % 5) as f32).collect();
    g.federated_average(&mut avg, (r + 1) as f32)?;
    let base = 2.0 * (f64::from(p) - 1.0) / 3.0;
    let wrong = avg
        .iter()
        .enumerate()
        .filter(|(i, &v)| (f64::from(v) - (base + (i % 5) as f64)).abs() > 1e-4 * f64::from(p))
        .count();
    if wrong > 0 {
        return Err(Error::InvalidArgument(format!(
            "rank {r}: {wrong} elements of the federated average wrong ({} for {base})",
            avg[0]
        )));
    }
    let children = match g.topology() {
        Topology::Tree { fanout } => (1..=fanout)
            .map(|c| r * fanout + c)
            .filter(|&c| c < p)
            .count(),
        _ if r == 0 => p as usize - 1,
        _ => 0,
    };
    let threads = threads();
    g.barrier()?;
    Ok(format!("children={children} threads={threads}"))
}

fn run(workers: u32, topology: &str) {
    let meshrun: Vec<String> = [
        env!("CARGO_BIN_EXE_meshrun"),
        "-n",
        &(workers + 1).to_string(),
        "--topology",
        topology,
        "--transport",
        "tcp",
        "--timeout",
        "120",
        "--",
    ]
    .map(String::from)
    .to_vec();
    let out = crate::procs::rank_command(&std::env::current_exe().unwrap(), &meshrun, "fleet")
        .env(
            "CLUSTER_TOKEN",
            "a fleet's token, long enough to be accepted",
        )
        .env("SHM", "0")
        // Two cores shared by hundreds of processes leave a link's thread
        // unscheduled for longer than the default second.
        .env("LIVENESS_S", "10")
        .output()
        .expect("run meshrun");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{topology} of {workers}: {}\n{}\n{}",
        out.status,
        stdout
            .lines()
            .filter(|l| l.contains("RESULT err"))
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: Vec<&str> = stdout.lines().filter(|l| l.contains("RESULT ok")).collect();
    assert_eq!(reports.len(), workers as usize + 1, "{stdout}");
    for line in reports {
        let field = |name: &str| -> u64 {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} in {line}"))
        };
        let (children, threads) = (field("children="), field("threads="));
        // A thread per child link and a few of the process's own; in a
        // tree that is bounded by the fanout, not the fleet.
        assert!(threads <= children + 12, "{topology}: {line}");
    }
}

/// The fleet's size: `FLEET_WORKERS`, default 64.
fn workers() -> u32 {
    std::env::var("FLEET_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// A relay tree of 1 + N processes (`FLEET_FANOUT`, default 8; by hand
/// `FLEET_WORKERS=1024 FLEET_FANOUT=32`) under `RECOVERY=shrink`, with a
/// token; interior rank 1 is killed mid-collective. Its children
/// re-attach to the root, and every other rank gets `GroupShrunk`
/// naming rank 1 alone and goes on with exact results (mixed
/// collectives, a federated average).
#[test]
fn fleet_faults_an_interior_rank_killed_leaves_every_other_rank_exact() {
    let workers = workers();
    let fanout: u32 = std::env::var("FLEET_FANOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let world = workers + 1;
    // The deadline (`FLEET_TIMEOUT_S`, default 30 s).
    let timeout: f64 = std::env::var("FLEET_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30.0);
    let mut l = crate::multiprocess::launch(world, &format!("tree:{fanout}"), timeout, "tcp");
    let token = "a fleet's token, long enough to be accepted";
    l.set("CLUSTER_TOKEN", token);
    l.set("CLUSTER_TOKEN_KEY", &meshwork::token_key(token));
    l.set("LIVENESS_S", "10");
    l.set("RECOVERY", "shrink");
    l.set("HOLD_ON_ERROR", "1");
    l.set("READY_AFTER", "3");
    let mut ranks = crate::procs::spawn(&l, "retry");
    let all: Vec<u32> = (0..world).collect();
    ranks.wait_for(&all, "READY", std::time::Duration::from_secs(120));
    let killed = std::time::Instant::now();
    ranks.signal(1, libc::SIGKILL);
    let survivors: Vec<u32> = all.iter().copied().filter(|&r| r != 1).collect();
    let wait = std::time::Duration::from_secs_f64(120.0f64.max(4.0 * timeout));
    ranks.wait_for(&survivors, "SHRUNK ", wait);
    let shrunk = killed.elapsed().as_secs_f64();
    let results = ranks.wait_for(&survivors, "RESULT ", wait);
    println!(
        "{workers} workers: every survivor had shrunk {shrunk:.2} s after the kill, and reported (16 rounds and an average later) {:.1} s after it",
        killed.elapsed().as_secs_f64()
    );
    let want = format!("RESULT ok shrunk [1] world {workers}");
    let wrong: Vec<_> = results.iter().filter(|(_, l)| *l != want).collect();
    assert!(wrong.is_empty(), "{} of {workers}: {wrong:#?}", wrong.len());
}

#[test]
fn fleet_a_relay_tree_forms_and_averages_exactly() {
    run(workers(), "tree:4");
}

#[test]
fn fleet_a_star_forms_and_averages_exactly() {
    run(workers(), "star");
}
