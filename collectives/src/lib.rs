//! meshwork's collective algorithms and reduction kernels.
//!
//! The algorithms here know no sockets and no clock: each is a function over
//! a [`Comm`], a small point-to-point trait (rank, size, buffered `send`,
//! FIFO `recv` of an exact length) whose implementation owns deadlines and
//! failure detection. The `meshwork` facade implements it over its
//! transports; [`sim`] implements it as a deterministic simulated world, so
//! every algorithm is tested — interleavings, crashes, freezes — without a
//! network. This crate does not depend on `meshwork-transport`.
//!
//! Arguments are trusted: the facade checks lengths and roots once, before
//! any message moves.
//!
//! # Algorithms
//!
//! `α` is per-message latency, `β` time per byte, `γ` reduction time per
//! byte, `n` the buffer bytes, `P` the world size.
//!
//! | collective | algorithm | steps | bytes sent per rank | file |
//! |---|---|---|---|---|
//! | all_reduce | `ring`, `ring_pipelined` | 2(P−1) (× segments) | 2(P−1)/P·n | [`ring`](mod@ring) |
//! | all_reduce | `recursive_doubling` | ⌈log₂P⌉ (+2 if P not 2ᵏ) | n·log₂P | `all_reduce/recursive_doubling.rs` |
//! | all_reduce | `reduce_broadcast` | 2⌈log₂P⌉ | ≤ 2n·log₂P | `all_reduce/reduce_broadcast.rs` |
//! | broadcast | `binomial` | ⌈log₂P⌉ | root: n·⌈log₂P⌉ | `broadcast/binomial.rs` |
//! | broadcast | `chain` (pipelined) | S+P−2 | n | `broadcast/chain.rs` |
//! | all_gather | `ring` (pipelined) | P−1 | (P−1)·block | `all_gather/mod.rs` |
//! | all_gather | `bruck` | ⌈log₂P⌉ | (P−1)·block | `all_gather/bruck.rs` |
//! | reduce_scatter | `ring` (pipelined, reads `send` in place) | P−1 | (P−1)·block | `reduce_scatter/mod.rs` |
//! | reduce | `binomial` | ⌈log₂P⌉ | n | `reduce/binomial.rs` |
//! | reduce | `reduce_scatter_gather` | P | (P−1)/P·n (+ root gathers) | `reduce/reduce_scatter_gather.rs` |
//! | all_to_all | `pairwise` | P−1 | (P−1)·block | `all_to_all/mod.rs` |
//! | gather / scatter | `linear` | P−1 at root | block | `gather/mod.rs`, `scatter/mod.rs` |
//! | gather / scatter | `binomial` | ⌈log₂P⌉ | ≤ block·P/2 | `gather/mod.rs`, `scatter/mod.rs` |
//! | scan, exclusive_scan | `hillis_steele` | ⌈log₂P⌉ | n·log₂P | `scan/mod.rs` |
//! | barrier | `dissemination` | ⌈log₂P⌉ | 0 | `barrier/mod.rs` |
//! | barrier | `star` (the mesh default up to 16 ranks) | 2 | worker: 8 down | `barrier/star.rs` |
//! | star topology: all_reduce, broadcast, reduce, all_gather, reduce_scatter, scan, barrier | `star` (through rank 0, segmented) | S (+1) | worker: n up, n down | `*/star.rs` |
//! | tree topology: all_reduce, broadcast, reduce, barrier | `tree` (up a relay tree, folding at each relay, and down; segmented, a window per child) | 2·depth + S | each link: n up, n down | `*/tree.rs` |
//! | tree topology: gather, scatter, all_gather | `tree` (a subtree's blocks in one message a link, preorder; all_gather: gather to rank 0, then the tree broadcast) | depth (all_gather: 2·depth + S) | a link: its subtree's blocks | `gather/tree.rs`, `scatter/tree.rs` |
//!
//! [`select`](mod@select) picks one from (collective, P, bytes) with switch
//! points measured by `benches/collectives.rs`.
//!
//! Floats: every all_reduce algorithm reduces each element in one fixed
//! order (ring: chunk order; recursive doubling: lower ⊕ higher), so all
//! ranks get bitwise-identical results.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod all_gather;
pub mod all_reduce;
pub mod all_to_all;
pub mod barrier;
pub mod broadcast;
mod comm;
mod element;
pub mod gather;
mod op;
pub mod reduce;
pub mod reduce_scatter;
pub mod ring;
pub mod scan;
pub mod scatter;
pub mod select;
pub mod sim;
pub mod topo;

pub use comm::Comm;
pub use element::Element;
pub use op::{DType, ReduceOp};
pub use select::{select, Algorithm, Collective, Topology};

pub use half;
