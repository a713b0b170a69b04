//! Broadcast from the last rank; every rank checks what it got.
//!
//! `meshrun -n 4 -- target/release/examples/broadcast`
#![allow(clippy::print_stdout, reason = "an example reports its result")]

use meshwork::Node;

fn main() -> meshwork::Result<()> {
    let group = Node::from_env()?.connect()?;
    let root = group.world_size() - 1;
    let mut data: Vec<u64> = if group.rank() == root {
        (0..1_000_000).collect()
    } else {
        vec![0; 1_000_000]
    };
    group.broadcast(&mut data, root)?;
    assert!(
        data.iter().enumerate().all(|(i, &x)| x == i as u64),
        "rank {}: wrong data",
        group.rank()
    );
    println!(
        "broadcast OK: rank {} got 1e6 u64 from rank {root}",
        group.rank()
    );
    group.shutdown()
}
