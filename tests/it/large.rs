//! Large counts (≥ 1 M elements, divisible by neither the world size nor the
//! segment size) for f32 and bf16 with Sum and Max, every collective and
//! algorithm, on worlds of 2, 3, 4 and 7.

use crate::support::{compare, reduces, run_case, run_world, TestElem};
use meshwork::half::bf16;
use meshwork::{ProcessGroup, ReduceOp};
use meshwork_collectives::Collective;

const LARGE: usize = 1_000_003;

fn large_type<T: TestElem>(g: &ProcessGroup, failures: &mut Vec<String>) {
    let p = g.world_size() as usize;
    for coll in Collective::ALL {
        // Block collectives move P blocks per rank: keep the whole buffer
        // near LARGE while the block stays odd-sized.
        let n = match coll {
            Collective::AllToAll | Collective::ReduceScatter | Collective::Scatter => LARGE / p + 1,
            _ => LARGE,
        };
        for &algo in coll.algorithms() {
            g.set_algorithm(coll.name(), Some(algo.name()))
                .expect("known algorithm");
            let ops = if reduces(coll) {
                vec![Some(ReduceOp::Sum), Some(ReduceOp::Max)]
            } else {
                vec![None]
            };
            for op in ops {
                let ctx = format!(
                    "{}/{} {:?} {op:?} P={p} n={n} rank {}",
                    coll.name(),
                    algo.name(),
                    T::DTYPE,
                    g.rank()
                );
                match run_case::<T>(g, coll, op, n) {
                    Ok((got, want)) => failures.extend(compare(&got, &want, op, &ctx).err()),
                    Err(e) => failures.push(format!("{ctx}: {e}")),
                }
            }
        }
        g.set_algorithm(coll.name(), None).expect("reset");
    }
}

#[test]
fn large_counts_f32_and_bf16() {
    for p in [2, 3, 4, 7] {
        let failures: Vec<String> = run_world(p, |g| {
            let mut f = Vec::new();
            large_type::<f32>(g, &mut f);
            large_type::<bf16>(g, &mut f);
            f
        })
        .into_iter()
        .flatten()
        .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}
