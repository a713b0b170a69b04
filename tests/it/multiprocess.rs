//! Groups of real processes on one host: every collective in mesh and
//! star, a rank killed or frozen mid-collective, every pair exchanging
//! large messages, and a soak — over shared memory (the default between
//! ranks of one host) and, with `SHM=0`, over QUIC and TCP. Each rank
//! checks that its links are of the kind the test is about.

use crate::procs::{all_ok, spawn, Launch};
use std::time::{Duration, Instant};

/// A loopback group whose ranks link by `link`: `shm` (the default), or
/// `quic` / `tcp` with shared memory off.
pub(crate) fn launch(world: u32, topology: &str, timeout_s: f64, link: &str) -> Launch {
    let mut l = Launch::loopback(world, topology, timeout_s);
    let kind = match link {
        "shm" => "SharedMemory",
        "quic" => "Quic",
        "tcp" => "Tcp",
        other => panic!("unknown link {other}"),
    };
    if link != "shm" {
        l = l.on(link);
        l.set("SHM", "0");
    }
    l.set("EXPECT_LINKS", kind);
    l
}

fn every_collective(topology: &str, link: &str) {
    let mut ranks = spawn(&launch(4, topology, 20.0, link), "all");
    all_ok(&ranks.results(Duration::from_secs(240)));
}

#[test]
fn every_collective_type_and_op_across_4_processes_mesh_shared_memory() {
    every_collective("mesh", "shm");
}

#[test]
fn every_collective_type_and_op_across_4_processes_star_shared_memory() {
    every_collective("star", "shm");
}

#[test]
fn every_collective_type_and_op_across_4_processes_mesh() {
    every_collective("mesh", "quic");
}

#[test]
fn every_collective_type_and_op_across_4_processes_star() {
    every_collective("star", "quic");
}

/// Every pair of 4 processes exchanges 8 MiB + 3 B each way over shared
/// memory, by single copy (`SHM_SINGLE_COPY`): each message read straight
/// out of its sender's memory.
#[test]
fn every_pair_exchanges_8_mib_and_3_bytes_over_shared_memory() {
    let mut launch = launch(4, "mesh", 20.0, "shm");
    launch.env.push(("SHM_SINGLE_COPY".into(), "262144".into()));
    launch.env.push(("EXPECT_SINGLE_COPY".into(), "1".into()));
    let mut ranks = spawn(&launch, "pairs");
    all_ok(&ranks.results(Duration::from_secs(120)));
}

/// By default the same messages go through the rings, in pieces as room
/// frees.
#[test]
fn every_pair_exchanges_8_mib_and_3_bytes_through_the_rings() {
    let mut launch = launch(4, "mesh", 20.0, "shm");
    launch.env.push(("EXPECT_SINGLE_COPY".into(), "0".into()));
    let mut ranks = spawn(&launch, "pairs");
    all_ok(&ranks.results(Duration::from_secs(120)));
}

/// `ENCRYPT_BULK=1`: the sidecar's payloads sealed, in a star (the
/// coordinator opens and re-seals what it relays).
#[test]
fn every_collective_type_and_op_across_4_processes_star_encrypted() {
    let mut launch = launch(4, "star", 20.0, "quic");
    launch.env.push(("ENCRYPT_BULK".into(), "1".into()));
    launch
        .env
        .push(("CLUSTER_TOKEN".into(), "sealed job token 0123".into()));
    let mut ranks = spawn(&launch, "all");
    all_ok(&ranks.results(Duration::from_secs(240)));
}

#[test]
fn every_collective_type_and_op_across_4_processes_mesh_tcp() {
    every_collective("mesh", "tcp");
}

#[test]
fn every_collective_type_and_op_across_4_processes_star_tcp() {
    every_collective("star", "tcp");
}

/// Kill (SIGKILL) or freeze (SIGSTOP) rank 2 while all four are inside
/// 4 MiB all-reduces; every survivor must report a typed error within the
/// deadline plus 2 s.
fn fault_mid_collective(topology: &str, signal: i32) {
    fault_mid_collective_on(topology, signal, "shm");
}

fn fault_mid_collective_on(topology: &str, signal: i32, link: &str) {
    fault_mid_collective_with(topology, signal, link, &[]);
}

fn fault_mid_collective_with(topology: &str, signal: i32, link: &str, env: &[(&str, &str)]) {
    const DEADLINE_S: f64 = 2.0;
    let mut launch = launch(4, topology, DEADLINE_S, link);
    launch.set("HOLD_ON_ERROR", "1");
    for (k, v) in env {
        launch.env.push((k.to_string(), v.to_string()));
    }
    let mut ranks = spawn(&launch, "loop");
    ranks.wait_for(&[0, 1, 2, 3], "READY", Duration::from_secs(60));
    let hit = Instant::now();
    ranks.signal(2, signal);
    let survivors = [0, 1, 3];
    let results = ranks.wait_for(
        &survivors,
        "RESULT ",
        Duration::from_secs_f64(DEADLINE_S + 2.0),
    );
    let took = hit.elapsed();
    for (r, line) in &results {
        // Typed, and naming the rank that failed, never a neighbour that
        // waited behind it.
        assert!(
            crate::recovery::names_only(line, 2),
            "rank {r}: {line}; log {:?}",
            ranks.log
        );
    }
    assert!(took < Duration::from_secs_f64(DEADLINE_S + 2.0), "{took:?}");
    if signal == libc::SIGSTOP {
        // The rank waiting directly on the frozen one cannot have seen a
        // disconnect: it must have timed out naming rank 2.
        assert!(
            results
                .iter()
                .any(|(_, l)| l.starts_with("RESULT err Timeout") && l.contains("[2]")),
            "{results:?}"
        );
    }
}

#[test]
fn faults_sigkill_mid_collective_mesh_shared_memory() {
    fault_mid_collective("mesh", libc::SIGKILL);
}

#[test]
fn faults_sigkill_mid_collective_star_shared_memory() {
    fault_mid_collective("star", libc::SIGKILL);
}

#[test]
fn faults_sigstop_mid_collective_mesh_shared_memory() {
    fault_mid_collective("mesh", libc::SIGSTOP);
}

/// With single copy on, the 512 KiB ring segments go straight from the
/// sender's memory: a sender waits on the killed rank's copy, or a
/// survivor copies from it as it dies.
#[test]
fn faults_sigkill_mid_collective_mesh_shared_memory_single_copy() {
    fault_mid_collective_with(
        "mesh",
        libc::SIGKILL,
        "shm",
        &[("SHM_SINGLE_COPY", "65536")],
    );
}

/// A frozen rank never takes the message offered to it: its sender
/// withdraws it at the deadline and names it.
#[test]
fn faults_sigstop_mid_collective_mesh_shared_memory_single_copy() {
    fault_mid_collective_with(
        "mesh",
        libc::SIGSTOP,
        "shm",
        &[("SHM_SINGLE_COPY", "65536")],
    );
}

#[test]
fn faults_sigstop_mid_collective_star() {
    fault_mid_collective_on("star", libc::SIGSTOP, "quic");
}

#[test]
fn faults_sigkill_mid_collective_mesh_tcp() {
    fault_mid_collective_on("mesh", libc::SIGKILL, "tcp");
}

#[test]
fn faults_sigstop_mid_collective_star_tcp() {
    fault_mid_collective_on("star", libc::SIGSTOP, "tcp");
}

#[test]
fn faults_soak_70000_small_then_large_mesh() {
    let mut ranks = spawn(&launch(4, "mesh", 20.0, "shm"), "soak");
    let results = ranks.results(Duration::from_secs(280));
    all_ok(&results);
}

/// Two processes whose settings disagree: both fail at once with the typed
/// error, neither waits for the formation deadline.
fn disagreeing_pair(env0: &[(&str, String)], env1: &[(&str, String)], expect: &str) {
    let l = Launch::loopback(2, "mesh", 30.0);
    let per_rank: Vec<Vec<(String, String)>> = [env0, env1]
        .iter()
        .map(|e| e.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
        .collect();
    let started = Instant::now();
    let mut ranks = crate::procs::spawn_with(&l, "connect", &per_rank);
    let results = ranks.results(Duration::from_secs(10));
    assert!(started.elapsed() < Duration::from_secs(10));
    for (r, line) in &results {
        assert!(
            line.starts_with(&format!("RESULT err {expect}")),
            "rank {r}: {line}"
        );
    }
}

/// Two processes holding different tokens: neither can prove anything to
/// the other, so neither gives up at once (a stranger could claim the
/// same); both name the mismatch at the formation deadline. The deadline
/// leaves room for a loaded machine: each process must start, derive its
/// key (Argon2id) and reach the other's proof before it, or there is
/// nothing to name but a rank that never answered.
#[test]
fn processes_with_different_tokens_both_name_it_at_the_deadline() {
    const DEADLINE_S: u64 = 10;
    let l = Launch::loopback(2, "mesh", DEADLINE_S as f64);
    let per_rank = vec![
        vec![(
            "CLUSTER_TOKEN".to_string(),
            "red cluster token 0123".to_string(),
        )],
        vec![(
            "CLUSTER_TOKEN".to_string(),
            "blue cluster token 0123".to_string(),
        )],
    ];
    let started = Instant::now();
    let mut ranks = crate::procs::spawn_with(&l, "connect", &per_rank);
    let results = ranks.results(Duration::from_secs(60));
    assert!(started.elapsed() >= Duration::from_secs(DEADLINE_S));
    for (r, line) in &results {
        assert!(
            line.starts_with("RESULT err ClusterTokenMismatch"),
            "rank {r}: {line}"
        );
    }
}

#[test]
fn processes_with_different_world_sizes_both_fail_at_once() {
    let a: Vec<String> = crate::support::free_ports(3)
        .iter()
        .map(|a| a.to_string())
        .collect();
    disagreeing_pair(
        &[("WORLD", "3".into()), ("PEERS", a.join(","))],
        &[("WORLD", "2".into()), ("PEERS", a[..2].join(","))],
        "WorldMismatch",
    );
}
