//! Ranks arrive at a barrier at different times; nobody leaves before the
//! last one arrives.
//!
//! `meshrun -n 4 -- target/release/examples/barrier`
#![allow(clippy::print_stdout, reason = "an example reports its result")]

use meshwork::{Node, ReduceOp};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn main() -> meshwork::Result<()> {
    let group = Node::from_env()?.connect()?;
    let rank = group.rank();
    // Stagger arrivals with real work, not sleeps: rank r spins r × 20 ms.
    let work = Instant::now();
    while work.elapsed().as_millis() < u128::from(rank) * 20 {
        std::hint::spin_loop();
    }
    let mut arrived = [now_us()];
    group.barrier()?;
    let left = now_us();
    // Everyone leaves after the last arrival.
    group.all_reduce(&mut arrived, ReduceOp::Max)?;
    assert!(
        left >= arrived[0],
        "rank {rank} left before the last rank arrived"
    );
    println!(
        "barrier OK: rank {rank} left {} µs after the last arrival",
        left - arrived[0]
    );
    group.shutdown()
}
