//! Groups of real processes on loopback: every collective in mesh and star,
//! a rank killed or frozen mid-collective, and a soak.

use crate::procs::{spawn, Launch};
use std::time::{Duration, Instant};

fn all_ok(results: &[(u32, String)]) {
    assert!(
        results.iter().all(|(_, l)| l.starts_with("RESULT ok")),
        "{results:#?}"
    );
}

#[test]
fn every_collective_type_and_op_across_4_processes_mesh() {
    let mut ranks = spawn(&Launch::loopback(4, "mesh", 20.0), "all");
    all_ok(&ranks.results(Duration::from_secs(240)));
}

#[test]
fn every_collective_type_and_op_across_4_processes_star() {
    let mut ranks = spawn(&Launch::loopback(4, "star", 20.0), "all");
    all_ok(&ranks.results(Duration::from_secs(240)));
}

/// Kill (SIGKILL) or freeze (SIGSTOP) rank 2 while all four are inside
/// 4 MiB all-reduces; every survivor must report a typed error within the
/// deadline plus 2 s.
fn fault_mid_collective(topology: &str, signal: i32) {
    const DEADLINE_S: f64 = 2.0;
    let mut ranks = spawn(&Launch::loopback(4, topology, DEADLINE_S), "loop");
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
        let typed = ["RESULT err PeerDisconnected", "RESULT err Timeout"];
        assert!(
            typed.iter().any(|t| line.starts_with(t)),
            "rank {r}: {line}"
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
fn faults_sigkill_mid_collective_mesh() {
    fault_mid_collective("mesh", libc::SIGKILL);
}

#[test]
fn faults_sigkill_mid_collective_star() {
    fault_mid_collective("star", libc::SIGKILL);
}

#[test]
fn faults_sigstop_mid_collective_mesh() {
    fault_mid_collective("mesh", libc::SIGSTOP);
}

#[test]
fn faults_sigstop_mid_collective_star() {
    fault_mid_collective("star", libc::SIGSTOP);
}

#[test]
fn faults_soak_70000_small_then_large_mesh() {
    let mut ranks = spawn(&Launch::loopback(4, "mesh", 20.0), "soak");
    let results = ranks.results(Duration::from_secs(280));
    all_ok(&results);
}
