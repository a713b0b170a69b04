//! Every collective × algorithm × element type × operator × world size 1..=9
//! at small counts (0, 1, P−1, P+1, non-divisible, 1000), against references
//! computed independently.

use crate::support::{compare, ops_for, reduces, run_case, run_world, TestElem};
use meshwork::half::{bf16, f16};
use meshwork::ProcessGroup;
use meshwork_collectives::Collective;

fn counts(p: usize) -> Vec<usize> {
    let mut c = vec![0, 1, p.saturating_sub(1), p + 1, 7 * p + 3, 1000];
    c.sort_unstable();
    c.dedup();
    c
}

/// All cases for one element type on this rank; failures are collected, not
/// panicked on, so every rank keeps issuing the same sequence.
fn sweep_type<T: TestElem>(g: &ProcessGroup, failures: &mut Vec<String>) {
    let p = g.world_size() as usize;
    for n in counts(p) {
        for coll in Collective::ALL {
            for &algo in coll.algorithms() {
                g.set_algorithm(coll.name(), Some(algo.name()))
                    .expect("known algorithm");
                let ops: Vec<_> = if reduces(coll) {
                    ops_for::<T>().into_iter().map(Some).collect()
                } else {
                    vec![None]
                };
                for op in ops {
                    let ctx = format!(
                        "{}/{} {:?} {:?} P={p} n={n} rank {}",
                        coll.name(),
                        algo.name(),
                        T::DTYPE,
                        op,
                        g.rank()
                    );
                    match run_case::<T>(g, coll, op, n) {
                        Ok((got, want)) => {
                            if let Err(e) = compare(&got, &want, op, &ctx) {
                                failures.push(e);
                            }
                        }
                        Err(e) => failures.push(format!("{ctx}: {e}")),
                    }
                }
            }
            g.set_algorithm(coll.name(), None).expect("reset");
        }
    }
}

fn sweep_world(p: u32) {
    let failures: Vec<String> = run_world(p, |g| {
        let mut f = Vec::new();
        sweep_type::<f32>(g, &mut f);
        sweep_type::<f64>(g, &mut f);
        sweep_type::<f16>(g, &mut f);
        sweep_type::<bf16>(g, &mut f);
        sweep_type::<i8>(g, &mut f);
        sweep_type::<i32>(g, &mut f);
        sweep_type::<i64>(g, &mut f);
        sweep_type::<u8>(g, &mut f);
        sweep_type::<u32>(g, &mut f);
        sweep_type::<u64>(g, &mut f);
        f
    })
    .into_iter()
    .flatten()
    .collect();
    assert!(
        failures.is_empty(),
        "{} failures, first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}

#[test]
fn sweep_world_1_to_3() {
    for p in 1..=3 {
        sweep_world(p);
    }
}

#[test]
fn sweep_world_4_to_6() {
    for p in 4..=6 {
        sweep_world(p);
    }
}

#[test]
fn sweep_world_7_to_9() {
    for p in 7..=9 {
        sweep_world(p);
    }
}

/// The automatic selection (no forced algorithm) across its switch points.
#[test]
fn default_selection_across_switch_points() {
    for p in [2, 3, 5] {
        let failures: Vec<String> = run_world(p, |g| {
            let mut f = Vec::new();
            for n in [1usize, 4 << 10, 16 << 10, 70 << 10, 200 << 10] {
                for coll in Collective::ALL {
                    let op = reduces(coll).then_some(meshwork::ReduceOp::Sum);
                    let ctx = format!("{} default P={p} n={n} rank {}", coll.name(), g.rank());
                    match run_case::<f32>(g, coll, op, n) {
                        Ok((got, want)) => f.extend(compare(&got, &want, op, &ctx).err()),
                        Err(e) => f.push(format!("{ctx}: {e}")),
                    }
                }
            }
            f
        })
        .into_iter()
        .flatten()
        .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}
