"""meshwork's exceptions: ``meshwork.Error`` and one subclass per kind of
failure (one per variant of the Rust ``meshwork::Error``), each with the
failure's details as attributes."""

from __future__ import annotations

__all__ = [
    "Error",
    "InvalidArgument",
    "Timeout",
    "PeerDisconnected",
    "RankConflict",
    "ClusterTokenMismatch",
    "TokenRequired",
    "TokenTooShort",
    "ProtocolMismatch",
    "WorldMismatch",
    "FormationTimeout",
    "ConnectionFailed",
    "CollectiveMismatch",
    "MessageTooLarge",
    "RpcUnknown",
    "RpcFailed",
    "ShutdownIncomplete",
    "ShutDown",
    "Io",
    "Revoked",
    "GroupShrunk",
    "NoQuorum",
    "Expelled",
]


class Error(Exception):
    """Any failure of a meshwork call. The message says what went wrong
    and what to do about it."""


class InvalidArgument(Error, ValueError):
    """The call's arguments are wrong: an array that is not C-contiguous,
    read-only where the call writes, of an unsupported dtype or the wrong
    size; a root or rank out of range; an unknown op; ``"avg"`` on
    integers. Nothing was sent; the group stays usable."""


class Timeout(Error, TimeoutError):
    """The ranks a call waited on made no progress for the group's
    deadline (``ProcessGroup.timeout``, ``TIMEOUT_S``). ``op`` names the
    call, ``waiting_on`` the ranks — for a collective, those that never
    entered it — and ``detail`` what each was doing (``": rank 2 has not
    entered all_reduce #3; its last call here, broadcast #2, ended 4.0 s
    ago; ..."``, empty if nothing is known). Find out why they stall, or
    raise the deadline."""

    op: str
    waiting_on: list[int]
    detail: str


class PeerDisconnected(Error):
    """Rank ``rank`` went away (exited, crashed, reset the link). The
    group cannot continue; form a new one."""

    rank: int


class RankConflict(Error):
    """Two processes asked for rank ``rank``; give each a distinct RANK."""

    rank: int


class ClusterTokenMismatch(Error):
    """A peer holds another cluster token; set the same CLUSTER_TOKEN on
    every process."""


class TokenRequired(Error):
    """An address of the job is not loopback and no cluster token was
    given; set CLUSTER_TOKEN on every process (``meshrun token``)."""


class TokenTooShort(Error):
    """The cluster token is ``length`` bytes; at least 16 are required
    (``meshrun token`` prints a random one)."""

    length: int


class ProtocolMismatch(Error):
    """A peer speaks wire protocol ``theirs``, this process ``ours``; run
    the same meshwork version everywhere."""

    ours: int
    theirs: int


class WorldMismatch(Error):
    """A peer expects a world of ``theirs`` ranks, this process ``ours``;
    give every process the same WORLD."""

    ours: int
    theirs: int


class FormationTimeout(Error, TimeoutError):
    """Ranks ``missing`` did not join before the formation deadline; start
    them, check their addresses, or raise TIMEOUT_S."""

    missing: list[int]


class ConnectionFailed(Error):
    """The link to rank ``rank`` could not be set up (``reason``); check
    the address, the firewall, and that the peer runs."""

    rank: int
    reason: str


class CollectiveMismatch(Error):
    """Ranks called different collectives (or the same one with different
    dtypes, sizes, roots or ops) at the same point: this rank called
    ``ours``, rank ``rank`` called ``theirs``. The group cannot
    continue."""

    op: str
    ours: str
    theirs: str
    rank: int


class MessageTooLarge(Error):
    """A message of ``length`` bytes exceeds the cap ``max``
    (MAX_MESSAGE_BYTES); refused before anything was allocated."""

    length: int
    max: int


class RpcUnknown(Error):
    """Rank ``rank`` has no RPC handler ``fn_id``."""

    fn_id: int
    rank: int


class RpcFailed(Error):
    """RPC handler ``fn_id`` failed on rank ``rank`` (``reason``)."""

    fn_id: int
    rank: int
    reason: str


class ShutdownIncomplete(Error):
    """``shutdown`` could not confirm with ranks ``ranks`` before its
    deadline; data they had not received may be lost."""

    ranks: list[int]


class ShutDown(Error):
    """The group was shut down; form a new one."""


class Io(Error, OSError):
    """An operating-system I/O error (``errno`` where there is one)."""


class GroupShrunk(Error):
    """``RECOVERY=shrink``: the call met a failure and the group now holds
    the survivors (``failed``: the ranks agreed failed, as numbered
    before); retry on the same group."""

    failed: list[int]


class NoQuorum(Error):
    """Recovery needs ``needed`` members on this rank's side (a strict
    majority of the group, or ``QUORUM``) and this rank reaches only
    ``reachable``: the network is cut, or too many failed. The group is
    stale and every call on it raises this; it never goes on as a smaller
    world beside the side that has quorum. After the network heals, call
    ``rejoin()`` (the others ``grow``), or re-form the group."""

    reachable: list[int]
    needed: int


class Expelled(Error):
    """This rank (``rank``) cannot go on in its group: the others went on
    without it, or a recovery it took part in was cut short before a
    quorum confirmed it; the group is stale for good. Call ``rejoin()``
    (the others ``grow``), or re-form the group."""

    rank: int


class Revoked(Error):
    """The group was revoked (by a member's ``revoke``, or after a failure
    under ``RECOVERY=abort``); the group's ``failed`` says who failed."""


# Shown as meshwork.Timeout etc. in tracebacks, where users catch them.
for _name in __all__:
    globals()[_name].__module__ = "meshwork"
del _name
