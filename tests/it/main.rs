//! meshwork's integration tests, one binary to save link time on 2 cores.

mod bad_input;
mod bitwise;
mod compress;
mod discovery;
mod elastic;
mod faults;
mod groups;
mod large;
mod launcher;
mod lifetime;
mod multiprocess;
mod netlab;
mod netlab_faults;
mod netlab_tests;
mod network;
mod nonblocking;
mod one_sided;
mod procs;
mod recovery;
mod scenarios;
mod seed;
mod siege;
mod sparse;
mod support;
mod sweep;
