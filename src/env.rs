//! The one table of environment variables `Node::from_env` reads.

/// One variable: its name, aliases, meaning and default.
#[derive(Debug, Clone, Copy)]
pub struct Var {
    /// The name meshwork reads first.
    pub name: &'static str,
    /// Other names (those Open MPI, Slurm or PyTorch launchers set), read
    /// in order when `name` is not set.
    pub aliases: &'static [&'static str],
    /// What it sets, in words.
    pub meaning: &'static str,
    /// The value used when it is not set, in words.
    pub default: &'static str,
}

/// Every variable meshwork reads, in one place.
pub const VARS: &[Var] = &[
    Var { name: "RANK", aliases: &["OMPI_COMM_WORLD_RANK", "SLURM_PROCID"], meaning: "this process's rank", default: "0" },
    Var { name: "WORLD", aliases: &["WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"], meaning: "number of ranks", default: "1" },
    Var { name: "PEERS", aliases: &[], meaning: "host:port,… in rank order, self included (mesh); star workers may give only the coordinator", default: "127.0.0.1:DATA_PORT+r for every rank r" },
    Var { name: "TOPOLOGY", aliases: &[], meaning: "mesh or star", default: "mesh" },
    Var { name: "DIAL_OUT", aliases: &[], meaning: "1 means star (workers dial out, need no inbound port)", default: "0" },
    Var { name: "DATA_PORT", aliases: &[], meaning: "data port base; rank r listens on base + r when PEERS is absent", default: "29500" },
    Var { name: "CLUSTER_TOKEN", aliases: &[], meaning: "shared secret; required when any address is not loopback", default: "" },
    Var { name: "TRANSPORT", aliases: &[], meaning: "quic (QUIC links, mutual TLS, TCP sidecar for large payloads) or tcp", default: "quic" },
    Var { name: "SIDECAR_THRESHOLD", aliases: &[], meaning: "QUIC: payloads of at least this many bytes go over the TCP sidecar (at least 2048; equal on all ranks, checked)", default: "4096" },
    Var { name: "FRAME_AUTH", aliases: &[], meaning: "0: do not authenticate frames over TCP (with a token they are, by default); only for a fabric nobody else can touch; equal on all ranks, checked", default: "1" },
    Var { name: "ENCRYPT_BULK", aliases: &[], meaning: "1: encrypt payloads carried over TCP (QUIC's sidecar, or the TCP transport) with AES-256-GCM; needs CLUSTER_TOKEN; equal on all ranks, checked", default: "0" },
    Var { name: "SHM", aliases: &[], meaning: "0: ranks on one host talk over the network link instead of shared memory (same kernel boot, network namespace and user); either side off keeps the network for that pair", default: "1" },
    Var { name: "SHM_SINGLE_COPY", aliases: &[], meaning: "shared memory: messages of at least this many bytes are copied once, straight from the sender's memory (process_vm_readv), where the kernel allows it (off by default: slower than the rings where measured, see docs/benchmarks.md); 0: never", default: "0" },
    Var { name: "HEAP_MB", aliases: &[], meaning: "every rank's symmetric heap for one-sided operations (put, get, fetch_add, compare_swap), in MiB; the same on every rank (checked)", default: "0" },
    Var { name: "RECOVERY", aliases: &[], meaning: "when a call meets a failed member: manual (that call fails, naming the rank that failed) abort (the first rank to meet it revokes the group: every member fails at once with Revoked) or shrink (the members agree on what failed and the group becomes the survivors, in place: the call fails with GroupShrunk, retry)", default: "manual" },
    Var { name: "TIMEOUT_S", aliases: &[], meaning: "deadline of every blocking call, seconds without progress", default: "60" },
    Var { name: "MAX_MESSAGE_BYTES", aliases: &[], meaning: "largest message sent or accepted; longer ones are refused before any allocation", default: "17179869184" },
    Var { name: "PEER_BUDGET_BYTES", aliases: &[], meaning: "point-to-point and RPC bytes one sender may have queued at one receiver before send waits", default: "67108864" },
    Var { name: "LANE_DEPTH", aliases: &[], meaning: "messages one sender may have queued on one tag of one receiver before send waits", default: "256" },
    Var { name: "ALGO_<COLLECTIVE>", aliases: &[], meaning: "force an algorithm by name, e.g. ALGO_ALL_REDUCE=ring (must be equal on all ranks; checked)", default: "automatic" },
    Var { name: "DISCOVER", aliases: &[], meaning: "1: discover instead of PEERS — mesh by UDP broadcast, star by asking DISCOVER_HOST", default: "0" },
    Var { name: "DISC_PORT", aliases: &[], meaning: "discovery port (UDP)", default: "29600" },
    Var { name: "DISCOVER_HOST", aliases: &[], meaning: "the coordinator's host for star discovery (NAT, containers)", default: "" },
    Var { name: "SEED", aliases: &["MASTER_ADDR"], meaning: "seed bootstrap at host:port (MASTER_ADDR: the host, with MASTER_PORT); rank 0 hosts it unless meshrun seed does; without RANK the seed assigns one", default: "" },
    Var { name: "MASTER_PORT", aliases: &[], meaning: "the seed's port, with MASTER_ADDR", default: "" },
    Var { name: "IFNAME", aliases: &[], meaning: "multi-homed hosts: the interface to announce (discovery) and advertise (seed), by name, name prefix or CIDR; the choice is logged", default: "the default route's" },
    Var { name: "MESHRUN_SOCKETS", aliases: &[], meaning: "set by meshrun: this rank's listening TCP and UDP sockets (descriptors), bound before it started so no other program can take its port", default: "" },
    Var { name: "ADVERTISE", aliases: &[], meaning: "with a seed: the data address to announce (IP[:port]); an unspecified IP (0.0.0.0) means the one the seed sees (NAT, containers)", default: "the IP the seed sees, a free port" },
];

/// The value of `name` or its first set alias, with the name that was set.
pub(crate) fn lookup(name: &str) -> Option<(&'static str, String)> {
    let var = VARS.iter().find(|v| v.name == name)?;
    std::iter::once(var.name)
        .chain(var.aliases.iter().copied())
        .find_map(|n| {
            std::env::var(n)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .map(|v| (n, v.trim().to_string()))
        })
}
