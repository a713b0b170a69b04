//! Who is missing: a rank that is alive but never enters a collective is
//! named by every other member's timeout — not a neighbour that waits
//! itself — with what it is doing, over every link.
#![allow(
    clippy::print_stdout,
    reason = "rank processes report to the test on stdout"
)]

use crate::multiprocess::launch;
use crate::procs::spawn;
use meshwork::{Error, ProcessGroup, ReduceOp};
use std::time::{Duration, Instant};

/// The deadline of the scenario's calls.
const DEADLINE_S: f64 = 4.0;

/// What every rank runs: a broadcast, then rank 2 goes off into its own
/// computation (here: waits for ever; the test kills it) while the others
/// call an all-reduce. With `in_barrier`, rank 2 is instead stuck in a
/// barrier of a sub-group of ranks 2 and 3, which rank 3, in the
/// all-reduce, never joins. Each other rank reports how its all-reduce
/// ended and how long it took.
pub(crate) fn scenario(g: &ProcessGroup, in_barrier: bool) -> meshwork::Result<String> {
    let halves = g.split(u32::from(g.rank() >= 2), g.rank())?;
    let mut x = [g.rank() as u64; 4];
    g.broadcast(&mut x, 0)?;
    if g.rank() == 2 {
        if in_barrier {
            // Stuck there for longer than the others wait for it.
            halves.set_timeout(Duration::from_secs(60));
            let _ = halves.barrier();
        }
        println!("STUCK");
        let _ = std::io::Write::flush(&mut std::io::stdout());
        loop {
            std::thread::park();
        }
    }
    let started = Instant::now();
    let got = g.all_reduce(&mut x, ReduceOp::Sum);
    let took = started.elapsed().as_millis();
    match got {
        Err(e @ Error::Timeout { .. }) => Ok(format!("after {took} ms: {e}")),
        Err(e) => Err(e),
        Ok(()) => Err(Error::InvalidArgument(
            "the all-reduce completed without rank 2".into(),
        )),
    }
}

fn every_survivor_names_rank_2(link: &str, in_barrier: bool) {
    let scenario = if in_barrier {
        "stuck_in_barrier"
    } else {
        "stuck"
    };
    let mut l = launch(4, "mesh", DEADLINE_S, link);
    // Report, then stay (a shutdown would wait for rank 2 in vain).
    l.set("HOLD_ON_ERROR", "1");
    let mut ranks = spawn(&l, scenario);
    let results = ranks.wait_for(&[0, 1, 3], "RESULT ", Duration::from_secs(60));
    for (r, line) in &results {
        assert!(line.starts_with("RESULT ok after "), "rank {r}: {line}");
        let ms: f64 = line["RESULT ok after ".len()..]
            .split(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::MAX);
        assert!(
            ms < (DEADLINE_S + 2.0) * 1000.0,
            "rank {r} failed after {ms} ms: {line}"
        );
        assert!(
            line.contains(
                "all_reduce timed out waiting on ranks [2]: rank 2 has not entered all_reduce #"
            ),
            "rank {r}: {line}"
        );
        let doing = if in_barrier {
            // Of another group's call, only which operation and for how
            // long (not which group, nor its sequence number).
            "it is in barrier of another group for"
        } else {
            "its last call here, broadcast #"
        };
        assert!(line.contains(doing), "rank {r}: {line}");
    }
}

#[test]
fn timeout_names_the_rank_that_never_entered_over_shared_memory() {
    every_survivor_names_rank_2("shm", false);
}

#[test]
fn timeout_names_the_rank_that_never_entered_over_tcp() {
    every_survivor_names_rank_2("tcp", false);
}

#[test]
fn timeout_names_the_rank_that_never_entered_over_quic() {
    every_survivor_names_rank_2("quic", false);
}

#[test]
fn timeout_names_a_rank_stuck_in_another_groups_barrier_over_shared_memory() {
    every_survivor_names_rank_2("shm", true);
}

#[test]
fn timeout_names_a_rank_stuck_in_another_groups_barrier_over_tcp() {
    every_survivor_names_rank_2("tcp", true);
}

#[test]
fn timeout_names_a_rank_stuck_in_another_groups_barrier_over_quic() {
    every_survivor_names_rank_2("quic", true);
}

/// In process: the flight record holds each call, and a timeout there
/// names the rank that never entered.
#[test]
fn the_flight_record_and_the_timeout_in_process() {
    let world = meshwork::local(3).unwrap();
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = world
            .iter()
            .map(|g| {
                s.spawn(move || {
                    g.set_timeout(Duration::from_millis(500));
                    let mut x = [1u32; 8];
                    g.all_reduce(&mut x, ReduceOp::Sum).unwrap();
                    g.barrier().unwrap();
                    if g.rank() == 1 {
                        return None;
                    }
                    Some(g.all_reduce(&mut x, ReduceOp::Max))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    for (r, got) in results.iter().enumerate() {
        let Some(got) = got else { continue };
        match got {
            Err(Error::Timeout {
                op,
                waiting_on,
                detail,
            }) => {
                assert_eq!(
                    (op.as_str(), waiting_on.as_slice()),
                    ("all_reduce", &[1][..]),
                    "rank {r}"
                );
                assert!(
                    detail.starts_with(": rank 1 has not entered all_reduce #2; its last call here, barrier #1, ended"),
                    "rank {r}: {detail}"
                );
            }
            other => panic!("rank {r}: {other:?}"),
        }
    }
    let record = world[0].flight_record();
    let ops: Vec<(&str, u64)> = record.iter().map(|e| (e.op, e.seq)).collect();
    assert_eq!(ops, [("all_reduce", 0), ("barrier", 1), ("all_reduce", 2)]);
    assert_eq!(record[0].state, meshwork::CallState::Done);
    assert!(
        matches!(record[2].state, meshwork::CallState::Failed(ref why) if why.contains("timed out"))
    );
    assert_eq!(
        (record[0].bytes, record[0].dtype, record[0].members),
        (32, "u32", 3)
    );
}

/// The scenario behind the dump test: three collectives, `READY`, then
/// wait to be killed.
pub(crate) fn dump_scenario(g: &ProcessGroup) -> meshwork::Result<String> {
    let mut x = [1.5f64; 16];
    g.all_reduce(&mut x, ReduceOp::Sum)?;
    g.broadcast(&mut x, 0)?;
    g.barrier()?;
    println!("READY");
    let _ = std::io::Write::flush(&mut std::io::stdout());
    loop {
        std::thread::park();
    }
}

/// `FLIGHT_RECORD_DUMP=<file>`: SIGUSR1 appends the record to the file.
#[test]
fn sigusr1_dumps_the_flight_record() {
    let dir = std::env::temp_dir().join(format!("meshwork-flight-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<std::path::PathBuf> = (0..2).map(|r| dir.join(format!("rank{r}.txt"))).collect();
    let per_rank: Vec<Vec<(String, String)>> = files
        .iter()
        .map(|f| vec![("FLIGHT_RECORD_DUMP".to_string(), f.display().to_string())])
        .collect();
    let mut ranks =
        crate::procs::spawn_with(&launch(2, "mesh", 10.0, "tcp"), "flight_dump", &per_rank);
    ranks.wait_for(&[0, 1], "READY", Duration::from_secs(30));
    ranks.signal(1, libc::SIGUSR1);
    let until = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = std::fs::read_to_string(&files[1]).unwrap_or_default();
        if text.contains("barrier #2") || Instant::now() > until {
            break text;
        }
        std::thread::yield_now();
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        text.starts_with("meshwork flight record, process "),
        "{text}"
    );
    for call in [
        "all_reduce #0 (f64, 128 bytes, 2 ranks): done",
        "broadcast #1",
        "barrier #2",
    ] {
        assert!(text.contains(call), "{call}: {text}");
    }
    assert!(!files[0].exists(), "rank 0 was not signalled");
}
