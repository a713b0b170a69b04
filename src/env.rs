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
    Var { name: "TOPOLOGY", aliases: &[], meaning: "mesh, star, kregular:<even degree>, hypercube or tree:<fanout> (rank 0 the root; children dial their parents)", default: "mesh" },
    Var { name: "DIAL_OUT", aliases: &[], meaning: "1 means star (workers dial out, need no inbound port)", default: "0" },
    Var { name: "DATA_PORT", aliases: &[], meaning: "data port base; rank r listens on base + r when PEERS is absent", default: "29500" },
    Var { name: "CLUSTER_TOKEN", aliases: &[], meaning: "shared secret; required when any address is not loopback", default: "" },
    Var { name: "CLUSTER_TOKEN_KEY", aliases: &[], meaning: "set by meshrun: the token's derived key, so that a host's ranks pay the slow derivation (Argon2id) once; ignored unless it belongs to CLUSTER_TOKEN", default: "" },
    Var { name: "TRANSPORT", aliases: &[], meaning: "quic (QUIC links, mutual TLS, TCP sidecar for large payloads) or tcp", default: "quic" },
    Var { name: "SIDECAR_THRESHOLD", aliases: &[], meaning: "QUIC: payloads of at least this many bytes go over the TCP sidecar (at least 2048; equal on all ranks, checked)", default: "4096" },
    Var { name: "FRAME_AUTH", aliases: &[], meaning: "0: do not authenticate frames over TCP (with a token they are, by default); only for a fabric nobody else can touch; equal on all ranks, checked", default: "1" },
    Var { name: "ENCRYPT_BULK", aliases: &[], meaning: "1: encrypt payloads carried over TCP (QUIC's sidecar, or the TCP transport) with AES-256-GCM; needs CLUSTER_TOKEN; equal on all ranks, checked", default: "0" },
    Var { name: "SHM", aliases: &[], meaning: "0: ranks on one host talk over the network link instead of shared memory (same kernel boot, network namespace and user); either side off keeps the network for that pair", default: "1" },
    Var { name: "SHM_SINGLE_COPY", aliases: &[], meaning: "shared memory: messages of at least this many bytes are copied once, straight from the sender's memory (process_vm_readv), where the kernel allows it (off by default: slower than the rings where measured, see docs/benchmarks.md); 0: never", default: "0" },
    Var { name: "HEAP_MB", aliases: &[], meaning: "every rank's symmetric heap for one-sided operations (put, get, fetch_add, compare_swap), in MiB; the same on every rank (checked)", default: "0" },
    Var { name: "RECOVERY", aliases: &[], meaning: "when a call meets a failed member: manual (that call fails, naming the rank that failed) abort (the first rank to meet it revokes the group: every member fails at once with Revoked) or shrink (the members agree on what failed and the group becomes the survivors, in place: the call fails with GroupShrunk, retry)", default: "manual" },
    Var { name: "QUORUM", aliases: &[], meaning: "members recovery (a shrink, agree, grow) needs on this rank's side: majority (of the group's last agreed membership), a number n (and always a majority; below one is refused), or unsafe:n (even below a majority: two sides of a partition may both go on)", default: "majority" },
    Var { name: "TIMEOUT_S", aliases: &[], meaning: "deadline of every blocking call, seconds without progress", default: "60" },
    Var { name: "LIVENESS_S", aliases: &[], meaning: "a member that sends nothing, not even a heartbeat (its I/O threads send four per period; a same-host member's process state is read instead), for this many seconds counts as failed; a member busy in its own code keeps beating. At most TIMEOUT_S; give every rank the same", default: "1" },
    Var { name: "FLEET_AWAY_S", aliases: &[], meaning: "make the star (over TCP) a fleet whose workers come and go: a worker whose link ends is away, not failed, and may come back (also from a new address) proving its rank; a worker whose coordinator is away dials it again for this many seconds", default: "unset (not a fleet)" },
    Var { name: "MAX_MESSAGE_BYTES", aliases: &[], meaning: "largest message sent or accepted; longer ones are refused before any allocation", default: "17179869184" },
    Var { name: "PEER_BUDGET_BYTES", aliases: &[], meaning: "point-to-point and RPC bytes one sender may have queued at one receiver before send waits", default: "67108864" },
    Var { name: "LANE_DEPTH", aliases: &[], meaning: "messages one sender may have queued on one tag of one receiver before send waits", default: "256" },
    Var { name: "ALGO_<COLLECTIVE>", aliases: &[], meaning: "force an algorithm by name, e.g. ALGO_ALL_REDUCE=ring (must be equal on all ranks; checked)", default: "automatic" },
    Var { name: "DISCOVER", aliases: &[], meaning: "1: discover instead of PEERS — mesh by UDP broadcast, star by asking DISCOVER_HOST", default: "0" },
    Var { name: "DISC_PORT", aliases: &[], meaning: "discovery port (UDP)", default: "29600" },
    Var { name: "DISCOVER_HOST", aliases: &[], meaning: "the coordinator's host for star discovery (NAT, containers)", default: "" },
    Var { name: "SEED", aliases: &["MASTER_ADDR"], meaning: "seed bootstrap at host:port (MASTER_ADDR: the host, with MASTER_PORT); rank 0 hosts it unless meshrun seed does; without RANK the seed assigns one", default: "" },
    Var { name: "MASTER_PORT", aliases: &[], meaning: "the seed's port, with MASTER_ADDR", default: "" },
    Var { name: "FLIGHT_RECORD_DUMP", aliases: &[], meaning: "a file: SIGUSR1 appends every group's flight record (its last 1024 collective calls) to it", default: "no dump on a signal" },
    Var { name: "IFNAME", aliases: &[], meaning: "multi-homed hosts: the interface to announce (discovery) and advertise (seed), by name, name prefix or CIDR; the choice is logged", default: "the default route's" },
    Var { name: "MESHRUN_SOCKETS", aliases: &[], meaning: "set by meshrun: this rank's listening TCP and UDP sockets (descriptors), bound before it started so no other program can take its port", default: "" },
    Var { name: "SLURM_JOB_ID", aliases: &[], meaning: "set by Slurm; under srun (with SLURM_STEP_ID, SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST) and none of RANK, WORLD, PEERS, SEED, MASTER_ADDR, DISCOVER set otherwise, the group forms through a seed that rank 0 hosts on the step's first host (docs/launchers.md); with SLURM_STEP_ID it picks the seed's port", default: "" },
    Var { name: "SLURM_STEP_ID", aliases: &[], meaning: "set by srun: the step's id, with SLURM_JOB_ID the seed's port (two steps of one job get two)", default: "" },
    Var { name: "SLURM_STEP_NODELIST", aliases: &[], meaning: "set by srun: the step's hosts in hostlist syntax (node[01-04,07]); the first hosts rank 0 and the seed", default: "" },
    Var { name: "SLURM_STEP_NUM_NODES", aliases: &[], meaning: "set by srun: the step's number of hosts, checked against SLURM_STEP_NODELIST; one host: the seed on loopback, no CLUSTER_TOKEN needed", default: "the hosts in SLURM_STEP_NODELIST" },
    Var { name: "SLURM_STEP_TASKS_PER_NODE", aliases: &[], meaning: "set by srun: tasks on each host of the step (2(x3),1), checked against SLURM_STEP_NODELIST and SLURM_NTASKS", default: "" },
    Var { name: "SLURM_DISTRIBUTION", aliases: &[], meaning: "set by srun: how tasks are placed; every placement puts rank 0 on the step's first host but arbitrary, which is refused (set SEED)", default: "block" },
    Var { name: "SLURMD_NODENAME", aliases: &[], meaning: "set by Slurm: the node a task runs on; rank 0 checks it is the step's first host", default: "" },
    Var { name: "MESHWORK_SLURM_PORT", aliases: &[], meaning: "under Slurm: the seed's port, instead of 20000 + (16 job + step) mod 8192", default: "20000 + (16 SLURM_JOB_ID + SLURM_STEP_ID) mod 8192" },
    Var { name: "JOB_COMPLETION_INDEX", aliases: &[], meaning: "set by Kubernetes in an Indexed Job's pods (and a JobSet's): with none of SEED, PEERS, DISCOVER set, the rank (in a JobSet, within its Job); the seed is at index 0's pod, <job>-0.<headless Service> (docs/launchers.md)", default: "" },
    Var { name: "MESHWORK_K8S_SERVICE", aliases: &[], meaning: "Kubernetes: the headless Service (the pods' subdomain) where the seed's pod is found; an Indexed Job's pod otherwise finds it in its name in /etc/hosts, a JobSet's is the JobSet's name", default: "the pod's subdomain" },
    Var { name: "MESHWORK_SEED_PORT", aliases: &[], meaning: "Kubernetes and torchrun: the seed's port, on rank 0's pod", default: "29400; MASTER_PORT in a PyTorchJob, MASTER_PORT + 1 under torchrun" },
    Var { name: "HOSTNAME", aliases: &[], meaning: "set by the container runtime: the pod's hostname (<job>-<index> in an Indexed Job)", default: "the kernel's" },
    Var { name: "JOBSET_NAME", aliases: &[], meaning: "JobSet (from the annotation jobset.sigs.k8s.io/jobset-name through the downward API): the JobSet's name, and its pods' subdomain", default: "" },
    Var { name: "REPLICATED_JOB_NAME", aliases: &[], meaning: "JobSet (annotation jobset.sigs.k8s.io/replicatedjob-name): the replicated Job whose first Job's first pod hosts the seed, without JOBSET_COORDINATOR", default: "" },
    Var { name: "JOB_GLOBAL_INDEX", aliases: &["JOB_INDEX"], meaning: "JobSet (annotation jobset.sigs.k8s.io/job-global-index; job-index with one replicated Job): the pod's Job; the rank is it × pods a Job + JOB_COMPLETION_INDEX", default: "" },
    Var { name: "GLOBAL_REPLICAS", aliases: &["REPLICATED_JOB_REPLICAS"], meaning: "JobSet (annotation jobset.sigs.k8s.io/global-replicas): the number of Jobs; WORLD divided by it is the pods a Job", default: "1" },
    Var { name: "JOBSET_COORDINATOR", aliases: &[], meaning: "JobSet (annotation jobset.sigs.k8s.io/coordinator, with spec.coordinator naming the first Job's first pod): the seed's host", default: "<JOBSET_NAME>-<REPLICATED_JOB_NAME>-0-0.<subdomain>" },
    Var { name: "PET_NNODES", aliases: &["PET_NODE_RANK"], meaning: "set by Kubeflow's training operator in a PyTorchJob's pods (with MASTER_ADDR, MASTER_PORT, RANK = the pod's index, WORLD_SIZE): the seed is at MASTER_ADDR:MASTER_PORT", default: "" },
    Var { name: "PET_NPROC_PER_NODE", aliases: &[], meaning: "PyTorchJob (nprocPerNode): processes a pod, each with LOCAL_RANK; the rank is RANK × it + LOCAL_RANK (auto, cpu, gpu: one)", default: "1" },
    Var { name: "LOCAL_RANK", aliases: &[], meaning: "PyTorchJob without torchrun, PET_NPROC_PER_NODE above 1: this process's index in its pod", default: "0" },
    Var { name: "TORCHELASTIC_RUN_ID", aliases: &[], meaning: "set by torchrun in the processes it starts: with MASTER_ADDR, RANK and WORLD_SIZE are the process's, and the seed is at MASTER_ADDR:MASTER_PORT + 1 (torch's store holds MASTER_PORT); rank 0 must run on MASTER_ADDR's host (a static rendezvous)", default: "" },
    Var { name: "LWS_LEADER_ADDRESS", aliases: &[], meaning: "set by a LeaderWorkerSet in its pods: the group's leader, which hosts the seed on MESHWORK_SEED_PORT; each group is a job", default: "" },
    Var { name: "LWS_GROUP_SIZE", aliases: &[], meaning: "set by a LeaderWorkerSet: the pods of the group, leader included (the world)", default: "" },
    Var { name: "LWS_WORKER_INDEX", aliases: &[], meaning: "set by a LeaderWorkerSet: the pod's index in its group, 0 for the leader (the rank)", default: "" },
    Var { name: "ADVERTISE", aliases: &[], meaning: "with a seed: the data address to announce (IP[:port]); an unspecified IP (0.0.0.0) means the one the seed sees (NAT, containers)", default: "the IP the seed sees, a free port" },
];

/// The value of `name` or its first set alias, with the name that was set.
pub(crate) fn lookup(name: &str) -> Option<(&'static str, String)> {
    lookup_in(name, |n| translated(n).or_else(|| std::env::var(n).ok()))
}

thread_local! {
    /// Values read in place of the environment's on this thread: a
    /// launcher's variables translated into meshwork's (Kubernetes and
    /// torchrun, `src/node/kubernetes.rs`), while `Node::from_env` runs.
    static TRANSLATED: std::cell::RefCell<Vec<(&'static str, String)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The value `name` was translated to, if any.
fn translated(name: &str) -> Option<String> {
    TRANSLATED.with(|t| {
        t.borrow()
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    })
}

/// [`lookup`] on this thread reads `values` in place of the environment's
/// (each under a name of [`VARS`], before its aliases) until the guard
/// drops.
pub(crate) fn translate(values: Vec<(&'static str, String)>) -> Translated {
    let before = TRANSLATED.with(|t| {
        let mut t = t.borrow_mut();
        let before = t.len();
        t.extend(values);
        before
    });
    Translated { before }
}

/// Translated values in force; dropping it ends them.
#[derive(Debug)]
pub(crate) struct Translated {
    before: usize,
}

impl Drop for Translated {
    fn drop(&mut self) {
        TRANSLATED.with(|t| t.borrow_mut().truncate(self.before));
    }
}

/// [`lookup`] in the environment `get` gives (a test's map, or the
/// process's): an empty or blank value counts as unset; `None` for a name
/// not in [`VARS`].
pub(crate) fn lookup_in(
    name: &str,
    get: impl Fn(&str) -> Option<String>,
) -> Option<(&'static str, String)> {
    let var = VARS.iter().find(|v| v.name == name)?;
    std::iter::once(var.name)
        .chain(var.aliases.iter().copied())
        .find_map(|n| {
            get(n)
                .filter(|v| !v.trim().is_empty())
                .map(|v| (n, v.trim().to_string()))
        })
}

#[cfg(test)]
mod tests {
    use super::VARS;
    use std::collections::BTreeSet;

    /// Every name in the first column of README.md's environment table
    /// (a row may name several, aliases in parentheses).
    fn readme_names() -> BTreeSet<String> {
        let readme = include_str!("../README.md");
        let table = &readme[readme
            .find("## Environment")
            .expect("README has an Environment section")..];
        table
            .lines()
            .skip_while(|l| !l.starts_with("| variable"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .flat_map(|row| {
                let first = row.split('|').nth(1).unwrap_or_default();
                first
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(|code| {
                        code.chars()
                            .take_while(|c| {
                                c.is_ascii_uppercase() || c.is_ascii_digit() || "_<>".contains(*c)
                            })
                            .collect::<String>()
                    })
                    .filter(|name| !name.is_empty())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// README.md's environment table and `VARS` name the same variables:
    /// the README cannot drift from what `Node::from_env` reads.
    #[test]
    fn the_readme_table_names_every_variable_and_no_other() {
        let ours: BTreeSet<String> = VARS
            .iter()
            .flat_map(|v| std::iter::once(v.name).chain(v.aliases.iter().copied()))
            .map(str::to_string)
            .collect();
        let readme = readme_names();
        let missing: Vec<_> = ours.difference(&readme).collect();
        let extra: Vec<_> = readme.difference(&ours).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "README.md's environment table lacks {missing:?} and has {extra:?} that src/env.rs does not"
        );
    }
}
