//! RPC around a ring: every rank serves "square" and "whoami", calls its
//! neighbour, and checks the answers, including a call to an id nobody
//! registered.
//!
//! `meshrun -n 4 -- target/release/examples/rpc`
#![allow(clippy::print_stdout, reason = "an example reports its result")]

use meshwork::{Error, Node};

const SQUARE: u32 = 1;
const WHOAMI: u32 = 2;

fn main() -> meshwork::Result<()> {
    let group = Node::from_env()?.connect()?;
    let (rank, world) = (group.rank(), group.world_size());
    group.register_rpc(SQUARE, |_, args| {
        let x = u64::from_le_bytes(args.try_into().unwrap_or([0; 8]));
        (x * x).to_le_bytes().to_vec()
    });
    group.register_rpc(WHOAMI, move |caller, _| {
        format!("rank {rank} answering rank {caller}").into_bytes()
    });
    group.barrier()?; // everyone has registered
    let next = (rank + 1) % world;
    let sq = group.rpc(next, SQUARE, &u64::from(rank + 3).to_le_bytes())?;
    assert_eq!(
        u64::from_le_bytes(sq.as_slice().try_into().unwrap_or([0; 8])),
        u64::from(rank + 3).pow(2)
    );
    let who = String::from_utf8_lossy(&group.rpc(next, WHOAMI, &[])?).into_owned();
    assert_eq!(who, format!("rank {next} answering rank {rank}"));
    assert!(matches!(
        group.rpc(next, 99, &[]),
        Err(Error::RpcUnknown { fn_id: 99, .. })
    ));
    println!("rpc OK: rank {rank} → rank {next}: {who}");
    group.barrier()?; // nobody leaves while others may still call it
    group.shutdown()
}
