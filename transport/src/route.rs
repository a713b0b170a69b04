//! Shapes and routes: which ranks a shape links, and the way a frame goes
//! from any rank to any other. Every rank computes a route the same way
//! from (shape, world, from, to) alone, so the ranks a frame passes agree
//! on its path without talking: a relay checks that a frame came over the
//! link its path says, and every lane keeps its order (one path, FIFO
//! links).

/// How the ranks are linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shape {
    /// Every pair is linked; rank `r` dials every higher rank.
    Mesh,
    /// Every worker links to rank 0 only (it dials; it needs no inbound
    /// port), and rank 0 relays between workers.
    Star,
    /// A circulant graph: rank `r` links to `r ± 1 … r ± degree/2` (mod
    /// world); `degree` is even, `2 ≤ degree < world`. Others are reached
    /// through them, around the circle the short way.
    KRegular {
        /// Links per rank.
        degree: u32,
    },
    /// `world` is a power of two; rank `r` links to `r xor 2^i`. Others
    /// are reached by fixing the differing bits, lowest first.
    Hypercube,
    /// A relay tree, breadth first: rank 0 the root, rank `r > 0`'s parent
    /// `(r − 1) / fanout`, its children `r·fanout + 1 … r·fanout +
    /// fanout`. A child dials its parent (a leaf needs no inbound port);
    /// a frame goes up to the lowest common ancestor, then down.
    Tree {
        /// Children per interior rank (at least 1).
        fanout: u32,
    },
}

/// Why a number of ranks cannot take a shape ([`Shape::check`],
/// [`pipe_world`](crate::pipe_world)). Remedy: another shape, or another
/// world size.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// A world of no ranks.
    #[error("a world needs at least one rank")]
    NoRanks,
    /// A k-regular shape of odd degree (rank `r` links to `r ± 1 …
    /// r ± degree/2`, so the degree is even).
    #[error(
        "a k-regular topology needs an even degree (rank r links to r±1 … r±degree/2), not {degree}"
    )]
    OddDegree {
        /// The degree asked for.
        degree: u32,
    },
    /// A k-regular shape whose degree is not in `2..world`.
    #[error("a k-regular topology of {world} ranks needs 2 ≤ degree < {world}, not {degree}")]
    DegreeOutOfRange {
        /// The ranks.
        world: u32,
        /// The degree asked for.
        degree: u32,
    },
    /// A hypercube of a world that is not a power of two of at least 2.
    #[error("a hypercube needs a world that is a power of two (at least 2), not {world}")]
    HypercubeWorld {
        /// The ranks.
        world: u32,
    },
    /// A tree whose interior ranks have no children.
    #[error("a tree needs a fanout of at least 1 (children per interior rank), not 0")]
    NoFanout,
}

impl Shape {
    /// Whether ranks that are not linked reach each other through a
    /// relay, on a shape other than the star.
    pub fn is_sparse(self) -> bool {
        matches!(
            self,
            Shape::KRegular { .. } | Shape::Hypercube | Shape::Tree { .. }
        )
    }

    /// A tree's parent of `rank` (`None` for the root, or another shape).
    pub fn parent(self, rank: u32) -> Option<u32> {
        match self {
            Shape::Tree { fanout } if rank > 0 => Some((rank - 1) / fanout.max(1)),
            _ => None,
        }
    }

    /// A tree's children of `rank` among `world` ranks (none on another
    /// shape).
    pub fn children(self, world: u32, rank: u32) -> std::ops::Range<u32> {
        match self {
            Shape::Tree { fanout } => {
                let k = u64::from(fanout.max(1));
                let first = (u64::from(rank) * k + 1).min(u64::from(world)) as u32;
                let end = (u64::from(rank) * k + k + 1).min(u64::from(world)) as u32;
                first..end
            }
            _ => 0..0,
        }
    }

    /// Why `world` ranks cannot take this shape, if they cannot.
    pub fn check(self, world: u32) -> Result<(), ShapeError> {
        match self {
            Shape::Mesh | Shape::Star => Ok(()),
            Shape::KRegular { degree } if degree % 2 == 1 => Err(ShapeError::OddDegree { degree }),
            Shape::KRegular { degree } if degree < 2 || degree >= world => {
                Err(ShapeError::DegreeOutOfRange { world, degree })
            }
            Shape::KRegular { .. } => Ok(()),
            Shape::Hypercube if !world.is_power_of_two() || world < 2 => {
                Err(ShapeError::HypercubeWorld { world })
            }
            Shape::Hypercube => Ok(()),
            Shape::Tree { fanout: 0 } => Err(ShapeError::NoFanout),
            Shape::Tree { .. } => Ok(()),
        }
    }

    /// Whether `a` and `b` (distinct, in `0..world`) are linked.
    pub fn linked(self, world: u32, a: u32, b: u32) -> bool {
        a != b && a < world && b < world && self.next_hop(world, a, b) == b
    }

    /// The ranks `rank` links to, ascending.
    pub fn neighbours(self, world: u32, rank: u32) -> Vec<u32> {
        (0..world)
            .filter(|&p| self.linked(world, rank, p))
            .collect()
    }

    /// The rank after `from` on the way to `to` (`to` itself when they
    /// are linked, or equal). Defined for a valid shape (see
    /// [`check`](Self::check)).
    pub fn next_hop(self, world: u32, from: u32, to: u32) -> u32 {
        self.next_hop_around(world, from, to, &|_| false)
    }

    /// [`next_hop`](Self::next_hop) on a tree whose ranks `dead` says
    /// have failed are taken out, each failed rank's children re-attached
    /// to its nearest live ancestor (on other shapes, `next_hop`). Every
    /// route between live ranks stays along the tree: up to their lowest
    /// live common ancestor and down.
    pub fn next_hop_around(
        self,
        world: u32,
        from: u32,
        to: u32,
        dead: &dyn Fn(u32) -> bool,
    ) -> u32 {
        if from == to {
            return to;
        }
        match self {
            Shape::Mesh => to,
            Shape::Star if from != 0 && to != 0 => 0,
            Shape::Star => to,
            Shape::KRegular { degree } => {
                let reach = u64::from((degree / 2).max(1));
                let n = u64::from(world);
                let ahead = (u64::from(to) + n - u64::from(from)) % n;
                let back = n - ahead;
                // The short way round (clockwise on a tie), as far as one
                // link goes.
                let next = if ahead <= back {
                    u64::from(from) + ahead.min(reach)
                } else {
                    u64::from(from) + n - back.min(reach)
                };
                (next % n) as u32
            }
            Shape::Hypercube => {
                let diff = from ^ to;
                from ^ (diff & diff.wrapping_neg())
            }
            Shape::Tree { .. } => {
                // Down, if `to` is below `from`: the highest live rank
                // between them (ancestors have lower numbers, breadth
                // first); otherwise up to the nearest live ancestor.
                let mut at = to;
                let mut live = (!dead(to)).then_some(to);
                while let Some(p) = self.parent(at) {
                    if p == from {
                        return live.unwrap_or(to);
                    }
                    if p < from {
                        break;
                    }
                    if !dead(p) {
                        live = Some(p);
                    }
                    at = p;
                }
                self.live_parent(from, dead).unwrap_or(to)
            }
        }
    }

    /// A tree's nearest live ancestor of `rank` (`None` for the root, or
    /// when every ancestor failed, or on another shape).
    pub fn live_parent(self, rank: u32, dead: &dyn Fn(u32) -> bool) -> Option<u32> {
        let mut p = self.parent(rank)?;
        while dead(p) {
            p = self.parent(p)?;
        }
        Some(p)
    }

    /// The ranks a frame from `from` to `to` passes on its way, in order,
    /// neither end included.
    pub fn relays(self, world: u32, from: u32, to: u32) -> Vec<u32> {
        self.relays_around(world, from, to, &|_| false)
    }

    /// [`relays`](Self::relays) around the failed ranks `dead` says
    /// ([`next_hop_around`](Self::next_hop_around)).
    pub fn relays_around(
        self,
        world: u32,
        from: u32,
        to: u32,
        dead: &dyn Fn(u32) -> bool,
    ) -> Vec<u32> {
        let mut path = Vec::new();
        let mut at = self.next_hop_around(world, from, to, dead);
        // A route is at most `world − 1` hops; the bound also stops a
        // shape that was never checked from looping.
        while at != to && path.len() < world as usize {
            path.push(at);
            at = self.next_hop_around(world, at, to, dead);
        }
        path
    }

    /// The rank a frame from `from` to `to` arrives from at `to`.
    pub fn last_hop(self, world: u32, from: u32, to: u32) -> u32 {
        self.last_hop_around(world, from, to, &|_| false)
    }

    /// [`last_hop`](Self::last_hop) around the failed ranks `dead` says.
    pub fn last_hop_around(
        self,
        world: u32,
        from: u32,
        to: u32,
        dead: &dyn Fn(u32) -> bool,
    ) -> u32 {
        self.relays_around(world, from, to, dead)
            .last()
            .copied()
            .unwrap_or(from)
    }

    /// Whether the route from `src` to `dst` passes the link `from → at`.
    pub fn passes(self, world: u32, src: u32, dst: u32, from: u32, at: u32) -> bool {
        self.passes_around(world, src, dst, from, at, &|_| false)
    }

    /// [`passes`](Self::passes) around the failed ranks `dead` says.
    pub fn passes_around(
        self,
        world: u32,
        src: u32,
        dst: u32,
        from: u32,
        at: u32,
        dead: &dyn Fn(u32) -> bool,
    ) -> bool {
        let mut here = src;
        for _ in 0..world {
            if here == dst {
                return false;
            }
            let next = self.next_hop_around(world, here, dst, dead);
            if (here, next) == (from, at) {
                return true;
            }
            here = next;
        }
        false
    }

    /// The shape as one word, for the handshake: bit 0 star; bits 8–15 the
    /// kind; bits 16–31 the degree.
    pub(crate) fn word(self) -> u32 {
        match self {
            Shape::Mesh => 0,
            Shape::Star => 1,
            Shape::KRegular { degree } => (1 << 8) | (degree.min(0xffff) << 16),
            Shape::Hypercube => 2 << 8,
            Shape::Tree { fanout } => (3 << 8) | (fanout.min(0xffff) << 16),
        }
    }

    /// A shape's name, as `TOPOLOGY=` spells it.
    pub fn name(self) -> String {
        match self {
            Shape::Mesh => "mesh".into(),
            Shape::Star => "star".into(),
            Shape::KRegular { degree } => format!("kregular:{degree}"),
            Shape::Hypercube => "hypercube".into(),
            Shape::Tree { fanout } => format!("tree:{fanout}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hop counts by breadth-first search over the shape's links.
    fn distances(shape: Shape, world: u32, from: u32) -> Vec<u32> {
        let mut d = vec![u32::MAX; world as usize];
        d[from as usize] = 0;
        let mut queue = std::collections::VecDeque::from([from]);
        while let Some(r) = queue.pop_front() {
            for p in shape.neighbours(world, r) {
                if d[p as usize] == u32::MAX {
                    d[p as usize] = d[r as usize] + 1;
                    queue.push_back(p);
                }
            }
        }
        d
    }

    #[test]
    fn shapes_are_checked() {
        assert!(Shape::KRegular { degree: 3 }.check(8).is_err());
        assert!(Shape::KRegular { degree: 8 }.check(8).is_err());
        assert!(Shape::KRegular { degree: 0 }.check(8).is_err());
        assert!(Shape::KRegular { degree: 2 }.check(3).is_ok());
        assert!(Shape::Hypercube.check(12).is_err());
        assert!(Shape::Hypercube.check(1).is_err());
        assert!(Shape::Hypercube.check(16).is_ok());
        assert_eq!(
            Shape::Tree { fanout: 0 }.check(4),
            Err(ShapeError::NoFanout)
        );
        assert!(Shape::Tree { fanout: 1 }.check(4).is_ok());
    }

    /// A tree of fanout 3 over 13 ranks: 0; 1 2 3; 4…6 under 1, 7…9 under
    /// 2, 10…12 under 3. A rank links to its parent and its children; a
    /// route climbs to the lowest common ancestor and comes down.
    #[test]
    fn a_tree_is_breadth_first_and_routes_through_the_common_ancestor() {
        let tree = Shape::Tree { fanout: 3 };
        assert_eq!(tree.neighbours(13, 0), [1, 2, 3]);
        assert_eq!(tree.neighbours(13, 2), [0, 7, 8, 9]);
        assert_eq!(tree.neighbours(13, 11), [3]);
        assert_eq!(tree.parent(0), None);
        assert_eq!(tree.parent(12), Some(3));
        assert_eq!(tree.relays(13, 5, 11), [1, 0, 3]);
        assert_eq!(tree.relays(13, 0, 12), [3]);
        assert_eq!(tree.relays(13, 12, 3), Vec::<u32>::new());
        assert_eq!(tree.relays(13, 4, 6), [1]);
        // A world that is not a whole number of levels.
        assert_eq!(tree.neighbours(6, 1), [0, 4, 5]);
        assert_eq!(tree.neighbours(6, 2), [0]);
    }

    /// Rank 1 of a tree of fanout 3 over 13 failed: its children 4, 5, 6
    /// hang off the root, every route between live ranks goes around it,
    /// and one whose lowest common ancestor failed meets at the next.
    #[test]
    fn a_tree_routes_around_a_failed_interior_rank() {
        let tree = Shape::Tree { fanout: 3 };
        let dead = |r: u32| r == 1;
        assert_eq!(tree.live_parent(4, &dead), Some(0));
        assert_eq!(tree.live_parent(7, &dead), Some(2));
        assert_eq!(tree.next_hop_around(13, 0, 5, &dead), 5);
        assert_eq!(tree.next_hop_around(13, 5, 0, &dead), 0);
        assert_eq!(tree.relays_around(13, 4, 6, &dead), vec![0]);
        assert_eq!(tree.relays_around(13, 4, 12, &dead), vec![0, 3]);
        assert_eq!(tree.relays_around(13, 12, 4, &dead), vec![3, 0]);
        assert!(tree.passes_around(13, 4, 12, 0, 3, &dead));
        assert!(!tree.passes_around(13, 4, 12, 1, 0, &dead));
        assert_eq!(tree.last_hop_around(13, 9, 5, &dead), 0);
        // Nothing failed: the plain routes.
        assert_eq!(tree.relays_around(13, 4, 6, &|_| false), vec![1]);
        // Two levels gone (1 and its child 3, of a fanout-2 tree of 15):
        // 7 and 8 (3's children) hang off the root.
        let tree = Shape::Tree { fanout: 2 };
        let dead = |r: u32| r == 1 || r == 3;
        assert_eq!(tree.live_parent(7, &dead), Some(0));
        assert_eq!(tree.next_hop_around(15, 0, 8, &dead), 8);
        assert_eq!(tree.relays_around(15, 8, 14, &dead), vec![0, 2, 6]);
    }

    #[test]
    fn links_are_symmetric_with_the_degree_each() {
        let shapes = [
            (Shape::KRegular { degree: 2 }, 5, 2),
            (Shape::KRegular { degree: 4 }, 8, 4),
            (Shape::KRegular { degree: 4 }, 5, 4),
            (Shape::KRegular { degree: 6 }, 16, 6),
            (Shape::Hypercube, 8, 3),
            (Shape::Hypercube, 16, 4),
        ];
        for (shape, world, degree) in shapes {
            for r in 0..world {
                let n = shape.neighbours(world, r);
                assert_eq!(n.len(), degree, "{shape:?} {world} rank {r}: {n:?}");
                for p in n {
                    assert!(shape.linked(world, p, r), "{shape:?} {r}–{p}");
                }
            }
        }
    }

    #[test]
    fn routes_are_shortest_and_end_where_they_should() {
        for (shape, world) in [
            (Shape::KRegular { degree: 2 }, 5),
            (Shape::KRegular { degree: 2 }, 6),
            (Shape::KRegular { degree: 4 }, 8),
            (Shape::KRegular { degree: 4 }, 11),
            (Shape::KRegular { degree: 6 }, 16),
            (Shape::Hypercube, 8),
            (Shape::Hypercube, 16),
            (Shape::Star, 5),
            (Shape::Mesh, 5),
            (Shape::Tree { fanout: 2 }, 11),
            (Shape::Tree { fanout: 3 }, 13),
            (Shape::Tree { fanout: 1 }, 5),
        ] {
            for from in 0..world {
                let d = distances(shape, world, from);
                for to in 0..world {
                    if to == from {
                        continue;
                    }
                    let relays = shape.relays(world, from, to);
                    assert_eq!(
                        relays.len() as u32 + 1,
                        d[to as usize],
                        "{shape:?} {from}→{to}"
                    );
                    let mut at = from;
                    for &r in relays.iter().chain([&to]) {
                        assert!(shape.linked(world, at, r), "{shape:?} {from}→{to} via {at}");
                        assert!(shape.passes(world, from, to, at, r));
                        at = r;
                    }
                    assert_eq!(
                        shape.last_hop(world, from, to),
                        relays.last().copied().unwrap_or(from)
                    );
                }
            }
        }
    }

    #[test]
    fn a_link_off_the_route_is_not_on_it() {
        let cube = Shape::Hypercube;
        // 0 → 7 fixes bit 0, then 1, then 2: 0 → 1 → 3 → 7.
        assert_eq!(cube.relays(8, 0, 7), [1, 3]);
        assert!(cube.passes(8, 0, 7, 1, 3));
        assert!(!cube.passes(8, 0, 7, 2, 3));
        assert!(!cube.passes(8, 0, 7, 3, 1));
        let ring = Shape::KRegular { degree: 2 };
        // 0 → 3 of 5 goes back: 0 → 4 → 3.
        assert_eq!(ring.relays(5, 0, 3), [4]);
        assert!(!ring.passes(5, 0, 3, 1, 2));
    }

    #[test]
    fn words_differ() {
        let words: std::collections::HashSet<u32> = [
            Shape::Mesh,
            Shape::Star,
            Shape::KRegular { degree: 2 },
            Shape::KRegular { degree: 4 },
            Shape::Hypercube,
            Shape::Tree { fanout: 2 },
            Shape::Tree { fanout: 4 },
        ]
        .into_iter()
        .map(Shape::word)
        .collect();
        assert_eq!(words.len(), 7);
    }
}
