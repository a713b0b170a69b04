//! meshwork's integration tests, one binary to save link time on 2 cores.

mod bad_input;
mod bitwise;
mod faults;
mod large;
mod network;
mod nonblocking;
mod support;
mod sweep;
