//! A distributed work queue on one counter: every rank takes the next
//! item with `fetch_add` on rank 0's heap — rank 0 does nothing to serve
//! it — until the items run out, so fast ranks take more. The results are
//! summed at the end and checked.
//!
//! `meshrun -n 4 -- target/release/examples/counter [ITEMS]`
#![allow(clippy::print_stdout, reason = "an example reports its result")]

use meshwork::{Node, ReduceOp};

/// The counter's place in rank 0's heap.
const NEXT: usize = 0;

fn main() -> meshwork::Result<()> {
    let items: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    // A heap of one word on every rank (only rank 0's is used).
    let group = Node::from_env()?.heap_bytes(8).connect()?;
    let (mut done, mut sum) = (0u64, 0u64);
    loop {
        let item = group.fetch_add(0, NEXT, 1)?;
        if item >= items {
            break;
        }
        // The "work": the item's square.
        sum = sum.wrapping_add(item * item);
        done += 1;
    }
    let mut totals = [done, sum];
    group.all_reduce(&mut totals, ReduceOp::Sum)?;
    let want: u64 = (0..items).map(|i| i * i).sum();
    assert_eq!(totals, [items, want], "every item exactly once");
    println!(
        "counter OK: rank {} of {} took {done} of {items} items; the sum of squares is {want}",
        group.rank(),
        group.world_size()
    );
    group.shutdown()
}
