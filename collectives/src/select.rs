//! Which algorithm runs: a deterministic function of (collective, world size,
//! bytes), so every rank picks the same one without talking. The switch
//! points are constants measured with `benches/collectives.rs` on `local(4)`
//! (see the README's table); `ALGO_<COLLECTIVE>=name` or
//! `ProcessGroup::set_algorithm` forces one by name, and the choice travels
//! in every message's descriptor so ranks that disagree get
//! `CollectiveMismatch` instead of garbage.

/// The eleven collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    AllReduce,
    Broadcast,
    AllGather,
    ReduceScatter,
    Reduce,
    AllToAll,
    Gather,
    Scatter,
    Scan,
    ExclusiveScan,
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
            Collective::AllReduce => &[Ring, RingPipelined, RecursiveDoubling, ReduceBroadcast],
            Collective::Broadcast => &[Binomial, Chain],
            Collective::AllGather => &[Ring],
            Collective::ReduceScatter => &[Ring],
            Collective::Reduce => &[Binomial, ReduceScatterGather],
            Collective::AllToAll => &[Pairwise],
            Collective::Gather => &[Linear, Binomial],
            Collective::Scatter => &[Linear, Binomial],
            Collective::Scan | Collective::ExclusiveScan => &[HillisSteele],
            Collective::Barrier => &[Dissemination],
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
}

impl Algorithm {
    /// Every algorithm, in wire-id order.
    pub const ALL: [Algorithm; 11] = [
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

/// all_reduce payloads below this many bytes use recursive doubling
/// (⌈log₂ P⌉ latencies, whole buffer each step); at or above it the
/// pipelined ring (2(P−1) latencies, 2(P−1)/P of the buffer).
pub const ALL_REDUCE_RING_MIN_BYTES: usize = 64 << 10;
/// The ring's segment size: below ~256 KiB the per-message cost dominates,
/// above ~1 MiB segments fall out of L2 while they are reduced.
pub const RING_SEGMENT_BYTES: usize = 512 << 10;
/// broadcast payloads below this use the binomial tree; above, the chain.
pub const BROADCAST_CHAIN_MIN_BYTES: usize = 256 << 10;
/// The chain's segment size.
pub const CHAIN_SEGMENT_BYTES: usize = 256 << 10;
/// reduce payloads below this use the binomial tree; above, reduce-scatter +
/// gather (the root receives 1× the buffer instead of ⌈log₂ P⌉×).
pub const REDUCE_SCATTER_GATHER_MIN_BYTES: usize = 256 << 10;
/// gather/scatter blocks (per rank) below this use the binomial tree.
pub const GATHER_LINEAR_MIN_BLOCK_BYTES: usize = 32 << 10;

/// The default algorithm for `coll` with `world` ranks moving `bytes` (the
/// buffer each rank passes; for gather/scatter/all_gather/all_to_all, one
/// rank's block).
pub fn select(coll: Collective, world: usize, bytes: usize) -> Algorithm {
    match coll {
        Collective::AllReduce => {
            if bytes < ALL_REDUCE_RING_MIN_BYTES || world <= 1 {
                Algorithm::RecursiveDoubling
            } else {
                Algorithm::RingPipelined
            }
        }
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
        Collective::AllGather | Collective::ReduceScatter => Algorithm::Ring,
        Collective::AllToAll => Algorithm::Pairwise,
        Collective::Scan | Collective::ExclusiveScan => Algorithm::HillisSteele,
        Collective::Barrier => Algorithm::Dissemination,
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
                    let a = select(coll, world, bytes);
                    assert!(coll.algorithms().contains(&a), "{coll:?} {a:?}");
                }
            }
        }
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
