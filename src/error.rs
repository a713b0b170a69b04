//! The one error type of meshwork.

/// `Result` with meshwork's [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong. Each variant says its cause and the remedy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two processes asked for the same rank. Remedy: give each process a
    /// distinct `RANK`, or let the seed assign ranks (`Node::join`).
    #[error("rank {rank} is already taken by another process; give every process a distinct RANK or use Node::join")]
    RankConflict {
        /// The rank asked for twice.
        rank: u32,
    },

    /// A peer proved a different cluster token. Remedy: set the same
    /// `CLUSTER_TOKEN` on every process of the job.
    #[error("a peer holds a different cluster token; set the same CLUSTER_TOKEN on every process")]
    ClusterTokenMismatch,

    /// An address of the job is not loopback, or `ENCRYPT_BULK` was asked
    /// for, and no token was given. Remedy: set `CLUSTER_TOKEN` (or
    /// `Node::cluster_token`) on every process.
    #[error("a cluster token is required off loopback; set CLUSTER_TOKEN on every process")]
    TokenRequired,

    /// The cluster token is shorter than
    /// [`meshwork_transport::kdf::MIN_TOKEN_BYTES`] (16) bytes. Remedy: set
    /// `CLUSTER_TOKEN` to a random secret (`meshrun token` prints one).
    #[error("CLUSTER_TOKEN is {len} bytes; at least 16 are required (`meshrun token` prints a random one)")]
    TokenTooShort {
        /// The length of the token given, in bytes.
        len: usize,
    },

    /// A peer speaks another wire protocol version. Remedy: run the same
    /// meshwork version everywhere.
    #[error("peer speaks protocol version {theirs}, we speak {ours}; run the same meshwork version on every process")]
    ProtocolMismatch {
        /// This process's version ([`crate::WIRE_PROTOCOL_VERSION`]).
        ours: u32,
        /// The peer's version.
        theirs: u32,
    },

    /// A peer was started with another world size. Remedy: give every
    /// process the same `WORLD`.
    #[error(
        "peer expects a world of {theirs}, we expect {ours}; give every process the same WORLD"
    )]
    WorldMismatch {
        /// The world size this process was given.
        ours: u32,
        /// The world size the peer was given.
        theirs: u32,
    },

    /// Not every rank turned up before the formation deadline. Remedy: start
    /// the missing ranks, check their addresses, or raise `Node::timeout`.
    #[error("group formation timed out; missing ranks {missing:?}")]
    FormationTimeout {
        /// The ranks that did not turn up.
        missing: Vec<u32>,
    },

    /// A link to `rank` could not be set up. Remedy: check the address,
    /// firewall and that the peer runs.
    #[error("cannot connect to rank {rank}: {reason}")]
    ConnectionFailed {
        /// The rank the link was for.
        rank: u32,
        /// What went wrong, in words.
        reason: String,
    },

    /// `rank` went away (exited, crashed, reset the link). The group cannot
    /// continue; re-form it.
    #[error("rank {rank} disconnected; the group cannot continue, re-form it")]
    PeerDisconnected {
        /// The rank that went away.
        rank: u32,
    },

    /// `op` waited on `waiting_on` and they made no progress for the
    /// deadline. Remedy: find out why those ranks stall (a frozen process, a
    /// cut link, a rank that skipped the call), or raise the deadline
    /// (`Node::timeout`, `TIMEOUT_S`, `ProcessGroup::set_timeout`).
    ///
    /// For a collective, `waiting_on` names the members that never entered
    /// the call — asked, when it timed out, through their RPC servers —
    /// rather than a neighbour that was waiting itself, and `detail` says
    /// what each was doing (`: rank 2 has not entered all_reduce #3; its
    /// last call here, broadcast #2, ended 4.0 s ago; …`; see
    /// `ProcessGroup::flight_record`). The words are this rank's own,
    /// written from the facts each member answered: no text a member
    /// sends is copied into them.
    #[error(
        "{op} timed out waiting on ranks {waiting_on:?}{detail}; see Node::timeout / TIMEOUT_S"
    )]
    Timeout {
        /// The operation that timed out (`"barrier"`, `"recv"`, …).
        op: String,
        /// The ranks it waited on.
        waiting_on: Vec<u32>,
        /// What the ranks waited on were doing, as far as the others
        /// could tell (`": rank 2 has not entered …"`); empty if nothing
        /// is known beyond `waiting_on`.
        detail: String,
    },

    /// Ranks issued different collectives (or the same one with different
    /// types, counts, roots, operators or forced algorithms) at the same
    /// point of the group's sequence. Every rank must issue a group's
    /// collectives in the same order with matching arguments; the group
    /// cannot continue.
    #[error("{op}: collective mismatch with rank {rank}: we called {ours}, it called {theirs}")]
    CollectiveMismatch {
        /// The operation this rank called.
        op: String,
        /// This rank's call, described.
        ours: String,
        /// The other rank's call, described.
        theirs: String,
        /// The rank whose call differs.
        rank: u32,
    },

    /// A message longer than the size cap; refused before any allocation.
    /// Remedy: split the message or raise `MAX_MESSAGE_BYTES` everywhere.
    #[error("message of {len} bytes exceeds the cap of {max} bytes")]
    MessageTooLarge {
        /// The message's length in bytes.
        len: u64,
        /// The cap in bytes.
        max: u64,
    },

    /// The call's arguments are wrong (buffer lengths, root out of range, an
    /// operator the element type lacks); the message says what was expected.
    /// Nothing was sent; the group remains usable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// `rank` has no RPC handler registered under `fn_id`. Remedy: register
    /// it there before calling.
    #[error("rank {rank} has no RPC handler {fn_id}")]
    RpcUnknown {
        /// The handler asked for.
        fn_id: u32,
        /// The rank asked.
        rank: u32,
    },

    /// The RPC handler `fn_id` on `rank` failed (panicked); `reason` is its
    /// message. Both ranks remain usable.
    #[error("RPC {fn_id} on rank {rank} failed: {reason}")]
    RpcFailed {
        /// The handler called.
        fn_id: u32,
        /// The rank it ran on.
        rank: u32,
        /// The handler's panic message.
        reason: String,
    },

    /// `shutdown` could not confirm with these ranks before its deadline;
    /// data they had not yet received may be lost.
    #[error("shutdown could not be confirmed with ranks {ranks:?}")]
    ShutdownIncomplete {
        /// The ranks that did not confirm.
        ranks: Vec<u32>,
    },

    /// The group was revoked (by a member's `revoke()`, or by
    /// `Recovery::Abort` after a member failed): its calls fail from now
    /// on. Remedy: see `ProcessGroup::failed` for who failed, and re-form
    /// the group.
    #[error("the group was revoked; see ProcessGroup::failed, and re-form the group")]
    Revoked,

    /// `Recovery::Shrink`: this call met a failure (or the revocation
    /// that follows one), and the group it was called on now holds the
    /// survivors, renumbered in order; `failed` (ranks of the group as it
    /// was) is the same on every survivor. Remedy: retry on the same
    /// group.
    #[error("the group shrank: ranks {failed:?} failed; it now holds the survivors, retry")]
    GroupShrunk {
        /// The ranks agreed failed, as numbered before the shrink.
        failed: Vec<u32>,
    },

    /// Recovery (a shrink after a failure, `agree`, `shrink`, `grow`)
    /// needs `needed` members on this rank's side (a strict majority of
    /// the group's last agreed membership, or `QUORUM`), and this rank
    /// could count only on `reachable` (ranks of the group, itself
    /// included): the network is cut, or the others failed. The group is
    /// now stale and every call on it fails with this error: it never
    /// goes on as a smaller world beside the side that has quorum.
    /// Remedy: once the network heals, a side that lost quorum without
    /// anyone going on (a 2 | 2 cut) recovers by itself on its next call
    /// (`Recovery::Shrink`) or the next `agree`; a rank the quorum side
    /// went on without rejoins through the job's seed
    /// (`ProcessGroup::rejoin`, while the others `grow`), or the job is
    /// re-formed.
    #[error("no quorum: this rank reaches ranks {reachable:?} and recovery needs {needed}; the group is stale (it never goes on as a smaller world): after the network heals, rejoin through the job's seed (ProcessGroup::rejoin) or re-form the group")]
    NoQuorum {
        /// The members this rank could count on (itself included), in the
        /// group's numbering.
        reachable: Vec<u32>,
        /// How many recovery needs.
        needed: u32,
    },

    /// This rank cannot go on in this group: the other members agreed it
    /// failed (it was cut off, frozen, or slower than the liveness limit)
    /// and went on without it; or it confirmed a recovery's decision and
    /// did not see a quorum confirm it (a member failed, or the network was
    /// cut, in between), so it may not take part in another; or, after a
    /// cut, its links to so many members ended that the group can never
    /// regain a quorum here. The group is stale for good: every call fails
    /// with this error. Remedy: rejoin the job through its seed
    /// (`ProcessGroup::rejoin`, while the others `grow`), or re-form it.
    #[error("rank {rank} (this one) cannot go on in this group: the others went on without it, or the recovery it took part in was cut short before a quorum confirmed it; the group is stale for good: rejoin through the job's seed (ProcessGroup::rejoin) or re-form the group")]
    Expelled {
        /// This rank, as the group numbered it.
        rank: u32,
    },

    /// The group was shut down; create a new one.
    #[error("the group was shut down")]
    ShutDown,

    /// A GPU this call needs is not there (`--features cuda`): no CUDA
    /// driver, no such device, no NCCL, or an NCCL older than meshwork
    /// accepts. `what` names what is missing and where it was looked for.
    #[error("device unavailable: {what}")]
    DeviceUnavailable {
        /// What is missing, e.g. `the CUDA driver (libcuda.so): not found`.
        what: String,
    },

    /// A CUDA call failed during `op` (a copy to or from the device, a
    /// stream synchronisation): the device or its context is in error.
    #[error("{op}: the device failed: {what}")]
    DeviceFailed {
        /// The operation, e.g. `all_reduce`.
        op: String,
        /// The driver's error.
        what: String,
    },

    /// An operating-system I/O error.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Error {
    /// The facade's form of a transport failure during `op`.
    pub(crate) fn from_transport(e: meshwork_transport::TransportError, op: &str) -> Error {
        use meshwork_transport::TransportError as T;
        match e {
            T::Timeout { waiting_on } => Error::Timeout {
                op: op.to_string(),
                waiting_on: vec![waiting_on],
                detail: String::new(),
            },
            T::PeerDisconnected { rank } => Error::PeerDisconnected { rank },
            T::Closed => Error::ShutDown,
            T::NoSuchRank { rank, world } => {
                Error::InvalidArgument(format!("{op}: rank {rank} is not in this group of {world}"))
            }
            T::LengthMismatch { from, got, want } => Error::InvalidArgument(format!(
                "{op}: the next message from rank {from} has {got} bytes, the buffer {want}; it stays queued"
            )),
            T::MessageTooLarge { len, max } => Error::MessageTooLarge { len, max },
            T::Revoked => Error::Revoked,
            // A failure the transport added after this match was written.
            other => Error::InvalidArgument(format!("{op}: {other}")),
        }
    }
}
