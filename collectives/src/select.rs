//! Which algorithm runs: a deterministic function of (collective, world size,
//! bytes), so every rank picks the same one without talking. The switch
//! points are constants measured with `benches/collectives.rs` on `local(4)`
//! (see `docs/architecture.md` in the repository); `ALGO_<COLLECTIVE>=name` or
//! `ProcessGroup::set_algorithm` forces one by name, and the choice travels
//! in every message's descriptor so ranks that disagree get
//! `CollectiveMismatch` instead of garbage.

/// The eleven collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Every rank ends with the reduction of every rank's buffer.
    AllReduce,
    /// The root's buffer copied to every rank.
    Broadcast,
    /// Every rank ends with every rank's block, in rank order.
    AllGather,
    /// The reduction of every rank's buffer, block `r` left on rank `r`.
    ReduceScatter,
    /// The reduction of every rank's buffer, left on the root.
    Reduce,
    /// Block `j` of rank `i` sent to rank `j`, as block `i` there.
    AllToAll,
    /// Every rank's block collected at the root, in rank order.
    Gather,
    /// Block `r` of the root's buffer sent to rank `r`.
    Scatter,
    /// Inclusive prefix reduction: rank `r` gets ranks `0..=r` reduced.
    Scan,
    /// Exclusive prefix reduction: rank `r` gets ranks `0..r` reduced.
    ExclusiveScan,
    /// No rank leaves before every rank has entered.
    Barrier,
}

impl Collective {
    /// Every collective, in wire-id order.
    pub const ALL: [Collective; 11] = [
        Collective::AllReduce,
        Collective::Broadcast,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Reduce,
        Collective::AllToAll,
        Collective::Gather,
        Collective::Scatter,
        Collective::Scan,
        Collective::ExclusiveScan,
        Collective::Barrier,
    ];

    /// The method name on `ProcessGroup`, used in errors and overrides.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::Broadcast => "broadcast",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Reduce => "reduce",
            Collective::AllToAll => "all_to_all",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
            Collective::Scan => "scan",
            Collective::ExclusiveScan => "exclusive_scan",
            Collective::Barrier => "barrier",
        }
    }

    /// Stable identifier used on the wire.
    pub fn id(self) -> u8 {
        Collective::ALL
            .iter()
            .position(|c| *c == self)
            .map_or(u8::MAX, |i| i as u8)
    }

    /// The inverse of [`Collective::id`].
    pub fn from_id(id: u8) -> Option<Collective> {
        Collective::ALL.get(usize::from(id)).copied()
    }

    /// Parse a method name (`"all_reduce"`); case-insensitive.
    pub fn from_name(name: &str) -> Option<Collective> {
        Collective::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }

    /// The algorithms that implement this collective.
    pub fn algorithms(self) -> &'static [Algorithm] {
        use Algorithm::*;
        match self {
            Collective::AllReduce => &[
                Ring,
                RingPipelined,
                RecursiveDoubling,
                ReduceBroadcast,
                Star,
                RecursiveHalving,
                Tree,
            ],
            Collective::Broadcast => &[Binomial, Chain, Star, Tree],
            Collective::AllGather => &[Ring, Bruck, Star, Tree],
            Collective::ReduceScatter => &[Ring, Star],
            Collective::Reduce => &[Binomial, ReduceScatterGather, Star, Tree],
            Collective::AllToAll => &[Pairwise],
            Collective::Gather => &[Linear, Binomial, Tree],
            Collective::Scatter => &[Linear, Binomial, Tree],
            Collective::Scan | Collective::ExclusiveScan => &[HillisSteele, Star],
            Collective::Barrier => &[Dissemination, Star, Tree],
        }
    }
}

/// Every algorithm by name; [`Collective::algorithms`] says which apply where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Ring reduce-scatter + all-gather, one message per step.
    Ring,
    /// The ring cut into segments that are forwarded as soon as reduced.
    RingPipelined,
    /// Pairwise exchanges at distance 1, 2, 4, …; non-powers of two fold in.
    RecursiveDoubling,
    /// Binomial reduce to rank 0, then binomial broadcast.
    ReduceBroadcast,
    /// Binomial tree rooted at the root.
    Binomial,
    /// Pipelined chain from the root through every rank.
    Chain,
    /// Ring reduce-scatter, then every rank sends its chunk to the root.
    ReduceScatterGather,
    /// Step `s` exchanges with ranks `r ± s`.
    Pairwise,
    /// The root talks to every rank directly.
    Linear,
    /// Hillis–Steele prefix at distances 1, 2, 4, ….
    HillisSteele,
    /// Dissemination: ⌈log₂ P⌉ rounds at distances 1, 2, 4, ….
    Dissemination,
    /// Through the coordinator (rank 0) of a star, segmented and pipelined.
    Star,
    /// Bruck's all_gather: ⌈log₂ P⌉ steps of growing block runs.
    Bruck,
    /// Recursive-halving reduce-scatter, then recursive-doubling
    /// all-gather (Rabenseifner): the ring's bytes in 2·log₂ P steps, all
    /// with `r xor 2^i`.
    RecursiveHalving,
    /// Up a relay tree to rank 0 (folding at every relay) and back down,
    /// segmented and pipelined (`Topology::Tree`'s fanout).
    Tree,
}

impl Algorithm {
    /// Every algorithm, in wire-id order.
    pub const ALL: [Algorithm; 15] = [
        Algorithm::Ring,
        Algorithm::RingPipelined,
        Algorithm::RecursiveDoubling,
        Algorithm::ReduceBroadcast,
        Algorithm::Binomial,
        Algorithm::Chain,
        Algorithm::ReduceScatterGather,
        Algorithm::Pairwise,
        Algorithm::Linear,
        Algorithm::HillisSteele,
        Algorithm::Dissemination,
        Algorithm::Star,
        Algorithm::Bruck,
        Algorithm::RecursiveHalving,
        Algorithm::Tree,
    ];

    /// The name used by overrides (`ALGO_ALL_REDUCE=ring_pipelined`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::RingPipelined => "ring_pipelined",
            Algorithm::RecursiveDoubling => "recursive_doubling",
            Algorithm::ReduceBroadcast => "reduce_broadcast",
            Algorithm::Binomial => "binomial",
            Algorithm::Chain => "chain",
            Algorithm::ReduceScatterGather => "reduce_scatter_gather",
            Algorithm::Pairwise => "pairwise",
            Algorithm::Linear => "linear",
            Algorithm::HillisSteele => "hillis_steele",
            Algorithm::Dissemination => "dissemination",
            Algorithm::Star => "star",
            Algorithm::Bruck => "bruck",
            Algorithm::RecursiveHalving => "recursive_halving",
            Algorithm::Tree => "tree",
        }
    }

    /// Stable identifier used on the wire.
    pub fn id(self) -> u8 {
        Algorithm::ALL
            .iter()
            .position(|a| *a == self)
            .map_or(u8::MAX, |i| i as u8)
    }

    /// The inverse of [`Algorithm::id`].
    pub fn from_id(id: u8) -> Option<Algorithm> {
        Algorithm::ALL.get(usize::from(id)).copied()
    }

    /// Parse a name; case-insensitive.
    pub fn from_name(name: &str) -> Option<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
    }
}

/// Per-message latency over per-byte time (α/β), in bytes: the message size
/// whose transfer costs as much as one message's overhead. Measured with
/// `cargo bench --bench collectives -- --algorithms` on `local(4)`:
/// recursive doubling is faster up to 512 KiB, the ring from 1 MiB, and the
/// cost model below puts that crossover at 8·α/β for P = 4, so α/β ≈ 96 KiB.
pub const ALPHA_OVER_BETA_BYTES: f64 = 96.0 * 1024.0;
/// At and above this size all_reduce always uses the pipelined ring, even
/// where the model favours recursive doubling (P = 2): only the ring overlaps
/// reduction with transfer.
pub const ALL_REDUCE_RING_ALWAYS_BYTES: usize = 4 << 20;

/// The smallest all_reduce payload for which the ring beats recursive
/// doubling with `world` ranks, from the cost model
///
/// ```text
/// recursive doubling: s_rd·(α + nβ),   s_rd = log₂P' + 2·[P ≠ P']   (P' = 2^⌊log₂P⌋)
/// ring:               2(P−1)·α + 2(P−1)/P·nβ
/// ```
///
/// so `n* = α/β · (2(P−1) − s_rd) / (s_rd − 2(P−1)/P)`, capped at
/// [`ALL_REDUCE_RING_ALWAYS_BYTES`].
pub fn all_reduce_ring_min_bytes(world: usize) -> usize {
    if world <= 1 {
        return usize::MAX;
    }
    let p = world as f64;
    let p2 = crate::topo::pow2_floor(world);
    let s_rd = f64::from(p2.trailing_zeros()) + if p2 == world { 0.0 } else { 2.0 };
    let ring_steps = 2.0 * (p - 1.0);
    let ring_bytes = 2.0 * (p - 1.0) / p;
    let model = if s_rd <= ring_bytes {
        f64::INFINITY
    } else {
        (ALPHA_OVER_BETA_BYTES * (ring_steps - s_rd) / (s_rd - ring_bytes)).max(0.0)
    };
    (model as usize).min(ALL_REDUCE_RING_ALWAYS_BYTES)
}
/// Below this, a mesh of a power-of-two world of 4 or more ranks uses
/// recursive halving (Rabenseifner) where the model puts it ahead of
/// recursive doubling; from here the pipelined ring, whose overlap of
/// reduction with transfer wins once a step's chunk outgrows the cache.
/// Measured on loopback, 4 processes on 2 cores (`cargo bench --bench net
/// -- --sizes …`, docs/benchmarks.md): at 1 MiB halving took 0.55–0.85 of
/// the ring's time over TCP and QUIC and the same over shared memory; at
/// 2 MiB the ring was ahead over shared memory (0.64 of halving's time).
pub const ALL_REDUCE_HALVING_BELOW_BYTES: usize = 2 << 20;

/// The smallest all_reduce payload for which recursive halving beats
/// recursive doubling on a power-of-two `world` (`usize::MAX` for other
/// worlds):
///
/// ```text
/// recursive doubling: log₂P·(α + nβ + nγ)
/// recursive halving:  2·log₂P·α + 2(P−1)/P·nβ + (P−1)/P·nγ
/// ```
///
/// (γ: reducing a byte). From 4 ranks the bytes decide, γ aside:
/// `n* = α/β · log₂P / (log₂P − 2(P−1)/P)`, 4·α/β for 4 ranks, 2.4·α/β
/// for 8. On 2 ranks both move n bytes each way and halving reduces half
/// as much for one more step: `n* = 2α/γ`, 2·α/β with γ ≈ β, as on one
/// host. There it also sends halves, which fit a shared-memory ring that
/// a whole buffer overflows: 2 ranks, 1 MiB, medians of 3 runs, doubling
/// against halving: TCP 378 against 182 µs, shared memory 176 against 46
/// (docs/benchmarks.md).
pub fn all_reduce_halving_min_bytes(world: usize) -> usize {
    if world < 2 || !world.is_power_of_two() {
        return usize::MAX;
    }
    if world == 2 {
        return (2.0 * ALPHA_OVER_BETA_BYTES) as usize;
    }
    let p = world as f64;
    let steps = f64::from(world.trailing_zeros());
    let bytes = 2.0 * (p - 1.0) / p;
    (ALPHA_OVER_BETA_BYTES * steps / (steps - bytes)) as usize
}

/// The default all_reduce on a mesh: recursive doubling for small
/// buffers, recursive halving in the middle on power-of-two worlds, the
/// pipelined ring for large ones.
fn all_reduce_mesh(world: usize, bytes: usize) -> Algorithm {
    let halving_from = all_reduce_halving_min_bytes(world);
    if bytes >= halving_from && bytes < ALL_REDUCE_HALVING_BELOW_BYTES {
        Algorithm::RecursiveHalving
    } else if bytes < all_reduce_ring_min_bytes(world).min(halving_from) {
        Algorithm::RecursiveDoubling
    } else {
        Algorithm::RingPipelined
    }
}

/// The ring's segment size: below ~256 KiB the per-message cost dominates,
/// above ~1 MiB segments fall out of L2 while they are reduced.
pub const RING_SEGMENT_BYTES: usize = 512 << 10;
/// broadcast payloads below this use the binomial tree; above, the chain.
/// On `local(4)` the two are within noise of each other from 128 KiB up
/// (the chain also wins small sizes there, where a hop costs a thread
/// wake-up, not a network latency); the model `⌈log₂P⌉(α+nβ)` against
/// `(S+P−2)(α+nβ/S)` puts the crossover near 2–3·α/β.
pub const BROADCAST_CHAIN_MIN_BYTES: usize = 256 << 10;
/// The chain's segment size.
pub const CHAIN_SEGMENT_BYTES: usize = 256 << 10;
/// reduce payloads below this use the binomial tree; above, reduce-scatter +
/// gather (the root receives 1× the buffer instead of ⌈log₂ P⌉×).
pub const REDUCE_SCATTER_GATHER_MIN_BYTES: usize = 256 << 10;
/// all_gather blocks (per rank) below this use Bruck's algorithm
/// (⌈log₂ P⌉ steps); at or above, the pipelined ring (P − 1 steps, no
/// final rotation copy). Both send the same bytes, so the choice is about
/// steps against one local copy of the result; the threshold is the cost
/// model's, not a measurement: at P = 4 on this 2-core machine the two are
/// within run-to-run noise of each other.
pub const ALL_GATHER_RING_MIN_BLOCK_BYTES: usize = 64 << 10;
/// gather/scatter blocks (per rank) below this use the binomial tree.
pub const GATHER_LINEAR_MIN_BLOCK_BYTES: usize = 32 << 10;
/// Barriers of up to this many ranks (in a mesh) go through rank 0 (star:
/// everyone tells rank 0, rank 0 tells everyone); larger ones take
/// dissemination's ⌈log₂P⌉ rounds. Star costs 2α + 2(P−1)·o (o: one
/// message's CPU at rank 0), dissemination ⌈log₂P⌉·(α + 2o); with α ≈
/// 10·o (a LAN's latency against a message's CPU here) they meet at 16.
/// Where ranks outnumber cores every step is a thread's wake-up, and star's
/// one step per rank wins at every size measured: 16 ranks on 2 cores,
/// QUIC 287 against 688 µs, shared memory 45 against 66; 32 ranks, TCP
/// 484 against 1 379 (docs/benchmarks.md).
pub const BARRIER_STAR_MAX_RANKS: usize = 16;

/// How the ranks are linked; selection picks algorithms that suit it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Topology {
    /// Every pair of ranks is linked.
    #[default]
    Mesh,
    /// Workers link only to the coordinator, rank 0, which relays.
    Star,
    /// A circulant: rank `r` links to `r ± 1 … r ± degree/2` (mod world;
    /// `degree` even, `2 ≤ degree < world`); every rank relays for the
    /// others. Rings in rank order are neighbour steps.
    KRegular {
        /// Links per rank.
        degree: u32,
    },
    /// Rank `r` links to `r xor 2^i` (world a power of two); every rank
    /// relays. Recursive doubling's exchanges are neighbour steps.
    Hypercube,
    /// A relay tree, breadth first: rank 0 the root, rank `r > 0`'s
    /// parent `(r − 1) / fanout`; leaves dial out (they need no inbound
    /// port), interior ranks accept their children and relay.
    Tree {
        /// Children per interior rank.
        fanout: u32,
    },
}

impl Topology {
    /// Whether `a` and `b` are linked (not reached through a relay).
    pub fn linked(self, world: usize, a: usize, b: usize) -> bool {
        if a == b || a >= world || b >= world {
            return false;
        }
        match self {
            Topology::Mesh => true,
            Topology::Star => a == 0 || b == 0,
            Topology::KRegular { degree } => {
                let ahead = (b + world - a) % world;
                ahead.min(world - ahead) <= (degree / 2) as usize
            }
            Topology::Hypercube => (a ^ b).is_power_of_two(),
            Topology::Tree { fanout } => {
                let (lo, hi) = (a.min(b), a.max(b));
                (hi - 1) / (fanout.max(1) as usize) == lo
            }
        }
    }
}

/// The default algorithm for `coll` with `world` ranks moving `bytes` (the
/// buffer each rank passes; for gather/scatter/all_gather/all_to_all, one
/// rank's block) over `topology`. In a star, every collective that has a
/// star algorithm uses it: any other would send worker-to-worker traffic
/// through the coordinator twice. On a sparse topology, algorithms whose
/// steps are neighbour steps win over those that would relay: on a
/// hypercube, recursive doubling (every exchange is `r xor 2^i`) and
/// binomial trees from rank 0; on a circulant, rings in rank order and the
/// chain.
pub fn select(coll: Collective, world: usize, bytes: usize, topology: Topology) -> Algorithm {
    if topology == Topology::Star && world > 1 && coll.algorithms().contains(&Algorithm::Star) {
        return Algorithm::Star;
    }
    match (topology, coll) {
        (Topology::Hypercube, Collective::AllReduce) => {
            return if bytes < all_reduce_ring_min_bytes(world) {
                Algorithm::RecursiveDoubling
            } else {
                Algorithm::RecursiveHalving
            };
        }
        (Topology::Hypercube, Collective::Broadcast | Collective::Reduce) => {
            return Algorithm::Binomial
        }
        (Topology::KRegular { .. }, Collective::AllGather) => return Algorithm::Ring,
        (
            Topology::Tree { .. },
            Collective::AllReduce
            | Collective::Broadcast
            | Collective::Reduce
            | Collective::Barrier
            | Collective::Gather
            | Collective::Scatter
            | Collective::AllGather,
        ) if world > 1 => return Algorithm::Tree,
        _ => {}
    }
    match coll {
        Collective::AllReduce => all_reduce_mesh(world, bytes),
        Collective::Broadcast => {
            if bytes < BROADCAST_CHAIN_MIN_BYTES || world <= 2 {
                Algorithm::Binomial
            } else {
                Algorithm::Chain
            }
        }
        Collective::Reduce => {
            if bytes < REDUCE_SCATTER_GATHER_MIN_BYTES || world <= 2 {
                Algorithm::Binomial
            } else {
                Algorithm::ReduceScatterGather
            }
        }
        Collective::Gather | Collective::Scatter => {
            if bytes < GATHER_LINEAR_MIN_BLOCK_BYTES {
                Algorithm::Binomial
            } else {
                Algorithm::Linear
            }
        }
        Collective::AllGather => {
            if bytes < ALL_GATHER_RING_MIN_BLOCK_BYTES {
                Algorithm::Bruck
            } else {
                Algorithm::Ring
            }
        }
        Collective::ReduceScatter => Algorithm::Ring,
        Collective::AllToAll => Algorithm::Pairwise,
        Collective::Scan | Collective::ExclusiveScan => Algorithm::HillisSteele,
        Collective::Barrier => {
            if topology == Topology::Mesh && world <= BARRIER_STAR_MAX_RANKS {
                Algorithm::Star
            } else {
                Algorithm::Dissemination
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_belong_to_their_collective() {
        for coll in Collective::ALL {
            for world in 1..=16 {
                for bytes in [0, 1 << 10, 64 << 10, 1 << 20, 64 << 20] {
                    for topo in [
                        Topology::Mesh,
                        Topology::Star,
                        Topology::KRegular { degree: 2 },
                        Topology::Hypercube,
                    ] {
                        let a = select(coll, world, bytes, topo);
                        assert!(coll.algorithms().contains(&a), "{coll:?} {a:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn ring_threshold_follows_the_model() {
        // Measured crossover on local(4): between 512 KiB and 1 MiB.
        let p4 = all_reduce_ring_min_bytes(4);
        assert!((512 << 10..=1 << 20).contains(&p4), "{p4}");
        // Two ranks: recursive doubling until the overlap cap.
        assert_eq!(all_reduce_ring_min_bytes(2), ALL_REDUCE_RING_ALWAYS_BYTES);
        assert_eq!(all_reduce_ring_min_bytes(1), usize::MAX);
        for p in 3..64 {
            assert!(all_reduce_ring_min_bytes(p) <= ALL_REDUCE_RING_ALWAYS_BYTES);
        }
        assert_eq!(
            select(Collective::AllReduce, 4, 4 << 10, Topology::Mesh),
            Algorithm::RecursiveDoubling
        );
        assert_eq!(
            select(Collective::AllReduce, 4, 8 << 20, Topology::Mesh),
            Algorithm::RingPipelined
        );
        assert_eq!(
            select(Collective::AllReduce, 4, 8 << 20, Topology::Star),
            Algorithm::Star
        );
    }

    #[test]
    fn halving_takes_the_middle_of_power_of_two_worlds() {
        let p4 = all_reduce_halving_min_bytes(4);
        assert_eq!(p4, (4.0 * ALPHA_OVER_BETA_BYTES) as usize);
        assert!(all_reduce_halving_min_bytes(8) < p4);
        for p in [1, 3, 5, 6, 7, 12] {
            assert_eq!(all_reduce_halving_min_bytes(p), usize::MAX, "{p}");
        }
        let p2 = all_reduce_halving_min_bytes(2);
        assert_eq!(p2, (2.0 * ALPHA_OVER_BETA_BYTES) as usize);
        let mesh = |p, n| select(Collective::AllReduce, p, n, Topology::Mesh);
        assert_eq!(mesh(4, p4 - 1), Algorithm::RecursiveDoubling);
        assert_eq!(mesh(4, p4), Algorithm::RecursiveHalving);
        assert_eq!(mesh(4, 1 << 20), Algorithm::RecursiveHalving);
        assert_eq!(mesh(16, 1 << 20), Algorithm::RecursiveHalving);
        assert_eq!(
            mesh(4, ALL_REDUCE_HALVING_BELOW_BYTES),
            Algorithm::RingPipelined
        );
        assert_eq!(mesh(2, p2 - 1), Algorithm::RecursiveDoubling);
        assert_eq!(mesh(2, p2), Algorithm::RecursiveHalving);
        assert_eq!(mesh(2, 1 << 20), Algorithm::RecursiveHalving);
        assert_eq!(
            mesh(2, ALL_REDUCE_HALVING_BELOW_BYTES),
            Algorithm::RingPipelined
        );
        // Other worlds keep doubling, then the ring.
        assert_eq!(mesh(6, 1 << 20), Algorithm::RingPipelined);
        assert_eq!(mesh(6, 4 << 10), Algorithm::RecursiveDoubling);
    }

    #[test]
    fn names_and_ids_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::from_name(a.name()), Some(a));
            assert_eq!(Algorithm::from_id(a.id()), Some(a));
        }
        for c in Collective::ALL {
            assert_eq!(Collective::from_name(c.name()), Some(c));
            assert_eq!(Collective::from_id(c.id()), Some(c));
        }
    }
}
