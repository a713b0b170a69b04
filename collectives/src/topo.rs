//! Index arithmetic shared by the algorithms: chunking and tree shapes.

use std::ops::Range;

/// The `i`-th of `parts` nearly equal pieces of `0..count`: the first
/// `count % parts` pieces hold one element more. Never overflows.
pub fn chunk(count: usize, parts: usize, i: usize) -> Range<usize> {
    debug_assert!(parts > 0 && i < parts);
    let base = count / parts;
    let extra = count % parts;
    let start = i * base + i.min(extra);
    let len = base + usize::from(i < extra);
    start..start + len
}

/// How many segments of at most `seg_elems` elements cover `n` elements
/// (at least one, so an empty buffer still takes one step and every rank
/// agrees on the number of messages).
pub fn segment_count(n: usize, seg_elems: usize) -> usize {
    n.div_ceil(seg_elems.max(1)).max(1)
}

/// `(r + d) mod p` without overflow for any `d < p`.
pub fn add_mod(r: usize, d: usize, p: usize) -> usize {
    (r + d) % p
}

/// `(r − d) mod p` for any `d`.
pub fn sub_mod(r: usize, d: usize, p: usize) -> usize {
    (r + p - d % p) % p
}

/// Rank relative to `root` (the root becomes 0).
pub fn relative(rank: usize, root: usize, p: usize) -> usize {
    sub_mod(rank, root, p)
}

/// Real rank of relative rank `vr`.
pub fn absolute(vr: usize, root: usize, p: usize) -> usize {
    add_mod(vr, root, p)
}

/// In a relay tree of `fanout` children per interior rank (rank 0 the
/// root, breadth first), `rank`'s parent; `None` for the root.
pub fn tree_parent(rank: usize, fanout: usize) -> Option<usize> {
    (rank > 0).then(|| (rank - 1) / fanout.max(1))
}

/// In the same tree over `p` ranks, `rank`'s children, ascending.
pub fn tree_children(rank: usize, fanout: usize, p: usize) -> Range<usize> {
    let k = fanout.max(1);
    let first = rank.saturating_mul(k).saturating_add(1).min(p);
    first..first.saturating_add(k).min(p)
}

/// Largest power of two `≤ p` (p ≥ 1).
pub fn pow2_floor(p: usize) -> usize {
    1 << (usize::BITS - 1 - p.leading_zeros())
}

/// The ranks of `rank`'s subtree in the tree of `fanout` over `p` ranks,
/// in preorder: `rank`, then each child's subtree in turn. The order a
/// tree gather carries a subtree's blocks in.
pub fn tree_preorder(rank: usize, fanout: usize, p: usize) -> Vec<usize> {
    let mut order = Vec::new();
    let mut stack = vec![rank];
    while let Some(r) = stack.pop() {
        if r >= p {
            continue;
        }
        order.push(r);
        // Children pushed last first: popped in ascending order.
        stack.extend(tree_children(r, fanout, p).rev());
    }
    order
}

/// The number of ranks in `rank`'s subtree (itself included).
pub fn tree_subtree_len(rank: usize, fanout: usize, p: usize) -> usize {
    // Level by level: the subtree's ranks at each depth are contiguous.
    let k = fanout.max(1);
    let (mut first, mut last, mut n) = (rank, rank, 0usize);
    while first < p {
        n += last.min(p - 1) - first + 1;
        first = first.saturating_mul(k).saturating_add(1);
        last = last.saturating_mul(k).saturating_add(k);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A subtree's preorder lists each of its ranks once, the rank
    /// first, and its length is the subtree's size, on full and ragged
    /// trees alike.
    #[test]
    fn a_subtree_in_preorder_is_the_subtree() {
        for k in 1..=4 {
            for p in 1..=40 {
                for r in 0..p {
                    let order = tree_preorder(r, k, p);
                    assert_eq!(order.first(), Some(&r));
                    assert_eq!(order.len(), tree_subtree_len(r, k, p), "k {k} p {p} r {r}");
                    let mut sorted = order.clone();
                    sorted.sort_unstable();
                    sorted.dedup();
                    assert_eq!(sorted.len(), order.len());
                    // Every rank listed has `r` as an ancestor (or is it).
                    for &q in &order {
                        let mut a = q;
                        while a != r {
                            a = tree_parent(a, k).expect("an ancestor");
                        }
                    }
                }
            }
        }
        assert_eq!(tree_preorder(0, 2, 7), vec![0, 1, 3, 4, 2, 5, 6]);
    }

    #[test]
    fn chunks_tile_the_range() {
        for count in [0, 1, 5, 7, 100, 1001] {
            for parts in 1..=9 {
                let mut next = 0;
                for i in 0..parts {
                    let c = chunk(count, parts, i);
                    assert_eq!(c.start, next);
                    assert!(c.len() == count / parts || c.len() == count / parts + 1);
                    next = c.end;
                }
                assert_eq!(next, count);
            }
        }
    }

    #[test]
    fn modular_helpers() {
        assert_eq!(sub_mod(0, 1, 5), 4);
        assert_eq!(sub_mod(2, 12, 5), 0);
        assert_eq!(absolute(relative(3, 4, 7), 4, 7), 3);
        assert_eq!(pow2_floor(1), 1);
        assert_eq!(pow2_floor(7), 4);
        assert_eq!(pow2_floor(8), 8);
        assert_eq!(tree_parent(0, 3), None);
        assert_eq!(tree_parent(12, 3), Some(3));
        assert_eq!(tree_children(2, 3, 13), 7..10);
        assert_eq!(tree_children(4, 3, 13), 13..13);
        assert_eq!(tree_children(1, 3, 6), 4..6);
    }
}
