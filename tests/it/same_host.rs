//! Same-host peers that cannot open each other's shared memory keep the
//! network link, and the job runs.

use crate::procs::{all_ok, spawn, Launch};
use std::time::Duration;

/// Each rank in a process-id namespace of its own (with its own `/proc`):
/// the process id a peer announces names another process here (itself,
/// pid 1), so the regions it names are not bound to the link
/// (`transport/src/shm/region.rs`) and are refused; the pair keeps the
/// network link. (Shared memory is a memfd: a full `/dev/shm` no longer
/// stops it.)
#[test]
fn ranks_that_cannot_open_each_others_regions_keep_the_network_link() {
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        crate::netlab::skip("a process-id namespace needs root (unshare -p)");
        return;
    }
    let mut l = Launch::loopback(2, "mesh", 20.0);
    l.set("EXPECT_LINKS", "Quic");
    let own_pids = [
        "unshare",
        "-p",
        "-f",
        "--mount-proc",
        "sh",
        "-c",
        "exec \"$0\" \"$@\"",
    ];
    l.wrap = vec![own_pids.iter().map(|s| s.to_string()).collect(); 2];
    let mut ranks = spawn(&l, "all_reduce_small");
    all_ok(&ranks.results(Duration::from_secs(60)));
}
