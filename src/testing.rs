//! Hooks for the multi-process tests (`tests/it`), which see only the
//! public API. Not a stable API: hidden from the docs, for tests only.

use crate::group::Progress;
use crate::{Call, ProcessGroup, ReduceOp, Result};

/// An all_reduce that another engine carries, as NCCL's calls are
/// (`ProcessGroup::outside`), whose engine never finishes: `entered` runs
/// at its first poll (the rank is then inside the call). Returns what
/// the group's watch made of it, and how many times it aborted the
/// engine.
pub fn stalled_outside_call(g: &ProcessGroup, entered: impl FnOnce()) -> (Result<()>, u32) {
    let mut aborts = 0;
    let mut entered = Some(entered);
    let r = g
        .outside::<f32>(Call::AllReduce { op: ReduceOp::Sum }, 16)
        .and_then(|call| {
            call.watch(
                || {
                    if let Some(f) = entered.take() {
                        f();
                    }
                    Progress::Pending
                },
                || aborts += 1,
            )
        });
    (r, aborts)
}
