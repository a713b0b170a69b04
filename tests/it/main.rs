//! meshwork's integration tests, one binary to save link time on 2 cores.

mod bad_input;
mod bitwise;
mod call_entry;
mod compress;
#[cfg(feature = "cuda")]
mod cuda;
mod discovery;
mod elastic;
mod faults;
mod fleet;
mod forensics;
mod groups;
mod k8s;
mod large;
mod launcher;
mod layers;
mod lifetime;
mod liveness;
mod multiprocess;
mod nemesis;
mod netlab;
mod netlab_faults;
mod netlab_tests;
mod network;
mod nonblocking;
mod one_sided;
mod procs;
mod recovery;
mod same_host;
mod scenarios;
mod seed;
mod siege;
mod slurm;
mod sparse;
mod support;
mod sweep;
