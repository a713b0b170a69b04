//! Federated averaging in a star: rank 0 is the coordinator; workers (which
//! may sit behind NAT and need only the coordinator's address) each train on
//! a different number of samples and contribute in proportion.
//!
//! `meshrun -n 4 --topology star -- target/release/examples/star_worker`
//! (or, by hand: `TOPOLOGY=star PEERS=coordinator:29500 RANK=r WORLD=n
//! CLUSTER_TOKEN=… star_worker` on each machine).
#![allow(clippy::print_stdout, reason = "an example reports its result")]

use meshwork::Node;

fn main() -> meshwork::Result<()> {
    let group = Node::from_env()?.connect()?;
    let (rank, world) = (group.rank(), group.world_size());
    // "Training": rank r holds weights r + 1 after seeing 10·(r + 1) samples.
    let samples = 10.0 * (rank as f32 + 1.0);
    let mut weights = vec![rank as f32 + 1.0; 1000];
    group.federated_average(&mut weights, samples)?;
    // Σ 10(r+1)·(r+1) / Σ 10(r+1), the same bits on every rank.
    let (num, den): (f64, f64) = (0..world).fold((0.0, 0.0), |(n, d), r| {
        let w = 10.0 * (f64::from(r) + 1.0);
        (n + w * (f64::from(r) + 1.0), d + w)
    });
    let want = (num / den) as f32;
    assert!(
        weights.iter().all(|&w| w == want),
        "rank {rank}: {} != {want}",
        weights[0]
    );
    println!(
        "star_worker OK: rank {rank} of {world} ({:?}) holds the weighted mean {want}",
        group.topology()
    );
    group.shutdown()
}
