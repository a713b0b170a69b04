"""meshwork.Error and one subclass per kind of failure: the classes, the
mapping from every Rust variant, and the failures a program can cause,
raised for real."""

from __future__ import annotations

import textwrap
import time

import numpy as np
import pytest

import meshwork
from conftest import free_ports, run_world, spawn_world

VARIANTS = [
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


def test_every_variant_raises_its_own_subclass_with_its_fields():
    samples = meshwork._meshwork._error_samples()
    assert [name for name, _ in samples] == VARIANTS
    classes = set()
    for name, exc in samples:
        cls = getattr(meshwork, name)
        assert type(exc) is cls, name
        assert isinstance(exc, meshwork.Error) and cls is not meshwork.Error
        assert cls.__module__ == "meshwork" and cls.__doc__
        assert str(exc)
        classes.add(cls)
    assert len(classes) == len(VARIANTS)
    by_name = dict(samples)
    assert by_name["Timeout"].op == "recv" and by_name["Timeout"].waiting_on == [1]
    assert by_name["PeerDisconnected"].rank == 1
    assert by_name["TokenTooShort"].length == 3
    assert (by_name["WorldMismatch"].ours, by_name["WorldMismatch"].theirs) == (4, 2)
    assert by_name["FormationTimeout"].missing == [2, 3]
    assert by_name["CollectiveMismatch"].theirs == "broadcast"
    assert by_name["MessageTooLarge"].max == 1
    assert by_name["ShutdownIncomplete"].ranks == [1]
    assert by_name["GroupShrunk"].failed == [2]
    assert by_name["Io"].errno == 111


def test_no_message_names_rusts_api():
    """meshwork's messages name Rust's API where they give a remedy
    (``Node::timeout``, ``ProcessGroup::failed``); a Python program's
    exception names what it writes instead."""
    for name, exc in meshwork._meshwork._error_samples():
        assert "::" not in str(exc), (name, str(exc))
    by_name = dict(meshwork._meshwork._error_samples())
    assert "ProcessGroup.set_timeout" in str(by_name["Timeout"]), by_name["Timeout"]
    assert "ProcessGroup.failed()" in str(by_name["Revoked"]), by_name["Revoked"]


def test_a_timeout_says_how_to_raise_the_deadline_from_python():
    def body(g):
        if g.rank == 1:
            return None  # sends nothing
        g.set_timeout(0.2)
        with pytest.raises(meshwork.Timeout) as info:
            g.recv(np.zeros(1), src=1, tag=5)
        message = str(info.value)
        assert "ProcessGroup.set_timeout(seconds)" in message and "TIMEOUT_S" in message, message
        assert "Node::timeout" not in message and "::" not in message, message
        return None

    run_world(2, body)


def test_avg_on_integers_names_the_op_and_the_dtype_as_python_does():
    def body(g):
        calls = {
            "all_reduce": lambda a: g.all_reduce(a, op="avg"),
            "all_reduce_nb": lambda a: g.all_reduce_nb(a, op="avg").wait(),
            "reduce": lambda a: g.reduce(a, op="avg"),
            "reduce_scatter": lambda a: g.reduce_scatter(a, np.zeros(1, dtype=a.dtype), op="avg"),
        }
        for what, call in calls.items():
            for dtype in ("int32", "uint8", "int64"):
                with pytest.raises(meshwork.InvalidArgument) as info:
                    call(np.ones(g.world_size, dtype=dtype))
                message = str(info.value)
                assert f'op="avg" needs a float dtype, not {dtype}' in message, (what, message)
                assert "ReduceOp" not in message and "::" not in message, (what, message)
        return True

    assert run_world(1, body) == [True]


def test_the_standard_bases():
    assert issubclass(meshwork.Error, Exception)
    assert issubclass(meshwork.InvalidArgument, ValueError)
    assert issubclass(meshwork.Timeout, TimeoutError)
    assert issubclass(meshwork.FormationTimeout, TimeoutError)
    assert issubclass(meshwork.Io, OSError)
    assert not issubclass(meshwork.PeerDisconnected, (ValueError, TimeoutError))
    classes = {"ProcessGroup", "Work", "Listener", "Compressor"}
    assert sorted(n for n in meshwork.__all__ if n[0].isupper() and n not in classes) == sorted(
        ["Error", *VARIANTS]
    )


def test_timeout_names_the_call_and_the_rank_and_is_a_timeout_error():
    def body(g):
        if g.rank == 1:
            return None  # sends nothing
        g.set_timeout(0.2)
        start = time.monotonic()
        with pytest.raises(TimeoutError) as info:
            g.recv(np.zeros(1), src=1, tag=4)
        elapsed = time.monotonic() - start
        assert isinstance(info.value, meshwork.Timeout)
        assert info.value.op == "recv" and info.value.waiting_on == [1]
        assert 0.2 <= elapsed < 2.2, elapsed
        return None

    run_world(2, body)


def test_calls_after_shutdown_raise_shut_down():
    def body(g):
        g.shutdown()
        g.shutdown()  # idempotent
        with pytest.raises(meshwork.ShutDown):
            g.all_reduce(np.zeros(2))
        with pytest.raises(meshwork.ShutDown):
            g.send(b"x", dst=0)

    run_world(2, body)


def test_with_block_shuts_down():
    def body(g):
        with g as same:
            assert same is g
            g.barrier()
        with pytest.raises(meshwork.ShutDown):
            g.barrier()

    run_world(2, body)


def test_ranks_calling_different_collectives_get_collective_mismatch():
    def body(g):
        a = np.zeros(4, dtype=np.float32)
        with pytest.raises(meshwork.CollectiveMismatch) as info:
            if g.rank == 0:
                g.all_reduce(a)
            else:
                g.broadcast(a, root=0)
        assert info.value.rank == 1 - g.rank
        return info.value

    run_world(2, body)


def test_local_needs_a_rank():
    with pytest.raises(meshwork.InvalidArgument, match="at least one rank"):
        meshwork.local(0)
    with pytest.raises(meshwork.InvalidArgument):
        meshwork.local(-1)


# --- failures of real processes (meshwork.connect) -------------------------

PROGRAM = textwrap.dedent(
    """
    import os, sys, numpy as np, meshwork
    def report(kind):
        print("RAISED", kind, flush=True)
    try:
        g = meshwork.connect()
    except meshwork.Error as e:
        report(type(e).__name__ + " " + str(e))
        sys.exit(0)
    {body}
    """
)


def outputs(procs):
    return [p.stdout + p.stderr for p in procs]


def test_connect_forms_a_group_from_the_environment():
    body = """
    a = np.full(4, g.rank + 1, dtype=np.float32)
    g.all_reduce(a)
    assert (g.rank, g.world_size) == (int(os.environ["RANK"]), 3)
    assert list(a) == [6.0] * 4, a
    g.shutdown()
    print("OK", g.rank, flush=True)
    """
    procs = spawn_world(3, PROGRAM.format(body=textwrap.dedent(body)))
    for rank, p in enumerate(procs):
        assert p.returncode == 0 and f"OK {rank}" in p.stdout, outputs(procs)


def test_a_peer_that_exits_is_peer_disconnected():
    body = """
    g.barrier()
    if g.rank == 1:
        os._exit(0)  # gone, without shutdown
    try:
        g.recv(np.zeros(1), src=1)
    except meshwork.PeerDisconnected as e:
        report("PeerDisconnected rank=%d" % e.rank)
    """
    procs = spawn_world(2, PROGRAM.format(body=textwrap.dedent(body)), timeout_s=10)
    assert "RAISED PeerDisconnected rank=1" in procs[0].stdout, outputs(procs)


def test_a_short_token_is_token_too_short():
    procs = spawn_world(1, PROGRAM.format(body=""), env={0: {"CLUSTER_TOKEN": "short"}})
    assert "RAISED TokenTooShort" in procs[0].stdout, outputs(procs)


def test_a_missing_rank_is_formation_timeout():
    start = time.monotonic()
    # Rank 1 of 2 never starts.
    procs = spawn_world(1, PROGRAM.format(body=""), world=2, timeout_s=1)
    assert "RAISED FormationTimeout" in procs[0].stdout, outputs(procs)
    assert time.monotonic() - start < 15


def test_ranks_started_with_different_world_sizes_get_world_mismatch():
    # Rank 1 is told of a third rank, at a free address, and WORLD=3.
    extra = free_ports(1)[0]
    procs = spawn_world(
        2,
        PROGRAM.format(body=""),
        env={1: {"WORLD": "3", "PEERS": "{peers}," + extra}},
        timeout_s=3,
    )
    for p in procs:
        assert "RAISED WorldMismatch" in p.stdout, outputs(procs)


def test_revoke_raises_revoked_and_the_group_still_agrees_and_shrinks():
    def body(g):
        g.set_timeout(5)
        if g.rank == 0:
            g.revoke()
        else:
            with pytest.raises(meshwork.Revoked):
                g.all_reduce(np.ones(2))  # rank 0 never calls: revoked
        with pytest.raises(meshwork.Revoked):
            g.barrier()
        flags, failed = g.agree(~(1 << g.rank) & (2**64 - 1))
        s = g.shrink()
        x = np.array([s.rank + 1], dtype=np.int64)
        s.all_reduce(x)
        return (flags ^ (2**64 - 1), failed, g.failed(), s.world_size, int(x[0]))

    assert run_world(3, body) == [(0b111, [], [], 3, 6)] * 3


def test_a_running_job_grows_by_a_process_started_for_it():
    # Two members formed through rank 0's seed; a third process joins the
    # running job and takes rank 2 once the members call grow(1).
    seed = free_ports(1)[0]
    code = (
        "import os, meshwork, numpy as np\n"
        "if os.environ.get('NEWCOMER'):\n"
        "    g = meshwork.join_running()\n"
        "else:\n"
        "    old = meshwork.connect()\n"
        "    g = old.grow(1)\n"
        "    assert g.rank == old.rank, (g.rank, old.rank)\n"
        "x = np.array([g.rank + 1], dtype=np.int64)\n"
        "g.all_reduce(x)\n"
        "print('GREW', g.rank, g.world_size, int(x[0]))\n"
        "g.shutdown()\n"
    )
    env = {r: {"SEED": seed, "PEERS": ""} for r in range(3)}
    env[2].update(NEWCOMER="1", RANK="", WORLD="")
    procs = spawn_world(3, code, env=env, timeout_s=20, world=2)
    lines = sorted(p.stdout.strip() for p in procs)
    assert lines == ["GREW 0 3 6", "GREW 1 3 6", "GREW 2 3 6"], outputs(procs)


def test_one_sided_operations_between_two_processes():
    code = (
        "import meshwork, numpy as np\n"
        "g = meshwork.connect()\n"
        "assert g.heap_bytes == 1 << 20, g.heap_bytes\n"
        "other = 1 - g.rank\n"
        "g.put(other, 64 * g.rank, np.arange(8, dtype=np.int64) + 10 * g.rank)\n"
        "prev = [g.fetch_add(0, 1024, 1) for _ in range(100)]\n"
        "g.barrier()\n"
        "mine = np.zeros(8, dtype=np.int64)\n"
        "g.heap_read(64 * other, mine)\n"
        "back = np.zeros(8, dtype=np.int64)\n"
        "g.get(other, 64 * g.rank, back)\n"
        "total = g.atomic_load(1024) if g.rank == 0 else g.compare_swap(0, 1024, 200, 200)\n"
        "print('HEAP', (mine - 10 * other).tolist(), (back - 10 * g.rank).tolist(), total, len(set(prev)))\n"
        "g.barrier()\n"
        "g.shutdown()\n"
    )
    procs = spawn_world(2, code, env={r: {"HEAP_MB": "1"} for r in range(2)}, timeout_s=20)
    want = "HEAP [0, 1, 2, 3, 4, 5, 6, 7] [0, 1, 2, 3, 4, 5, 6, 7] 200 100"
    for p in procs:
        assert p.stdout.strip() == want, outputs(procs)


def test_a_group_that_is_not_stale_is_not_rejoined():
    """`rejoin` is for a rank the others went on without (`NoQuorum`,
    `Expelled`); on a healthy group it says so, and `is_stale` is False."""
    g = meshwork.local(1)[0]
    assert g.is_stale is False
    with pytest.raises(meshwork.InvalidArgument, match="not stale"):
        g.rejoin()
