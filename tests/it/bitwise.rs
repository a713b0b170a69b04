//! Float all_reduce gives bitwise-identical results on every rank, for every
//! algorithm, with inputs whose sums round (not small integers).

use crate::support::run_world;
use meshwork::half::{bf16, f16};
use meshwork::{Element, ProcessGroup, ReduceOp};
use meshwork_collectives::Collective;

/// splitmix64: a fixed-seed source of awkward floats.
fn noise(seed: u64, i: usize) -> f64 {
    let mut z = seed.wrapping_add((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0 // [-1, 1)
}

fn results<T: Element>(g: &ProcessGroup, make: fn(f64) -> T, n: usize) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for &algo in Collective::AllReduce.algorithms() {
        g.set_algorithm("all_reduce", Some(algo.name()))
            .expect("algorithm");
        for op in ReduceOp::ALL {
            let mut b: Vec<T> = (0..n)
                .map(|i| make(noise(g.rank() as u64 * 1000 + 17, i) * 3.0))
                .collect();
            g.all_reduce(&mut b, op).expect("all_reduce");
            out.push((
                format!("{} {:?} {op:?} n={n}", algo.name(), T::DTYPE),
                bytemuck::cast_slice(&b).to_vec(),
            ));
        }
    }
    out
}

#[test]
fn every_rank_gets_the_same_bits() {
    for p in 2..=9 {
        let per_rank = run_world(p, |g| {
            let mut r = Vec::new();
            for n in [1000, 300_001] {
                r.extend(results::<f32>(g, |x| x as f32, n));
                r.extend(results::<f64>(g, |x| x, n));
                r.extend(results::<bf16>(g, bf16::from_f64, n));
                r.extend(results::<f16>(g, f16::from_f64, n));
            }
            r
        });
        for (rank, cases) in per_rank.iter().enumerate().skip(1) {
            for ((name, bits), (_, bits0)) in cases.iter().zip(&per_rank[0]) {
                assert!(
                    bits == bits0,
                    "P={p} {name}: rank {rank} differs from rank 0"
                );
            }
        }
    }
}
