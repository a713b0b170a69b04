//! Tagged point-to-point messages around a ring: each rank sends to the
//! next and receives from the previous, on two tags in opposite order.
//!
//! `meshrun -n 4 -- target/release/examples/send_recv`
#![allow(clippy::print_stdout, reason = "an example reports its result")]

use meshwork::Node;

fn main() -> meshwork::Result<()> {
    let group = Node::from_env()?.connect()?;
    let (rank, world) = (group.rank(), group.world_size());
    let (next, prev) = ((rank + 1) % world, (rank + world - 1) % world);
    group.send(&[rank as f64; 4], next, 1)?;
    group.send_bytes(format!("hello from {rank}").as_bytes(), next, 2)?;
    // Tags are independent lanes: receive tag 2 first.
    let text = group.recv_bytes(prev, 2)?;
    let mut nums = [0f64; 4];
    group.recv(&mut nums, prev, 1)?;
    assert_eq!(text, format!("hello from {prev}").as_bytes());
    assert_eq!(nums, [prev as f64; 4]);
    println!(
        "send_recv OK: rank {rank} got {:?} and {nums:?} from rank {prev}",
        String::from_utf8_lossy(&text)
    );
    group.shutdown()
}
