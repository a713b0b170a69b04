"""What the Rust ProcessGroup has beyond the collectives: ``split``, RPC
(``register_rpc`` / ``rpc``), ``federated_average``, compressed
all_reduce (``meshwork.Compressor``), ``stats`` and ``links``; each
against closed forms, in ``meshwork.local`` worlds."""

from __future__ import annotations

import time

import numpy as np
import pytest

import meshwork
from conftest import run_world

STATS_FIELDS = {
    "sent_messages",
    "sent_bytes",
    "received_messages",
    "received_bytes",
    "queued_bytes",
    "max_queued_bytes",
    "single_copy_messages",
}


# ---- split ----------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_split_groups_by_color_and_numbers_by_key(n):
    def body(g):
        r = g.rank
        # Colour by parity; key reversed, so the highest rank comes first.
        sub = g.split(r % 2, n - r)
        mates = [q for q in range(n) if q % 2 == r % 2]
        assert sub.world_size == len(mates)
        assert sub.rank == sum(1 for q in mates if q > r)
        a = np.array([r], dtype=np.int64)
        sub.all_reduce(a)
        assert a[0] == sum(mates), a
        # Equal keys: numbered by rank in the parent.
        tied = g.split(r % 2, 0)
        assert tied.rank == mates.index(r)
        # The parent goes on beside its sub-groups.
        b = np.ones(1, dtype=np.int32)
        g.all_reduce(b)
        assert b[0] == n
        return sub.rank

    run_world(n, body)


def test_split_refuses_a_colour_out_of_range():
    def body(g):
        with pytest.raises(meshwork.InvalidArgument, match="color -1"):
            g.split(-1, 0)
        with pytest.raises(meshwork.InvalidArgument, match="key 4294967296"):
            g.split(0, 1 << 32)
        return True

    assert run_world(2, body) == [True, True]


# ---- RPC ------------------------------------------------------------------


def test_rpc_echo_names_the_caller():
    def body(g):
        n, r = g.world_size, g.rank
        g.register_rpc(1, lambda src, args: bytes([src]) + args)
        # A bytearray or memoryview result is taken too.
        g.register_rpc(2, lambda src, args: bytearray(args[::-1]))
        g.register_rpc(3, lambda src, args: memoryview(b"mv" + args))
        g.barrier()
        dst = (r + 1) % n
        assert g.rpc(dst, 1, b"hi") == bytes([r]) + b"hi"
        assert g.rpc(dst, 2, b"abc") == b"cba"
        assert g.rpc(dst, 3, bytearray(b"x"), timeout=2.0) == b"mvx"
        # Any C-contiguous buffer is sent as its bytes; no args: empty.
        got = g.rpc(dst, 1, np.array([1, 2], dtype=np.uint16))
        assert got == bytes([r]) + np.array([1, 2], dtype=np.uint16).tobytes()
        assert g.rpc(r, 1) == bytes([r])  # to itself
        g.barrier()
        return True

    assert run_world(3, body) == [True] * 3


def test_rpc_to_an_unknown_fn_id_raises_rpc_unknown():
    def body(g):
        g.barrier()
        if g.rank == 0:
            with pytest.raises(meshwork.RpcUnknown) as e:
                g.rpc(1, 42, b"")
            assert (e.value.fn_id, e.value.rank) == (42, 1)
        g.barrier()
        return True

    assert run_world(2, body) == [True, True]


def test_a_raising_handler_raises_rpc_failed_with_its_text_and_prints_nothing(capfd):
    def handler(src, args):
        raise ValueError(f"boom from {src}: {args.decode()}")

    def body(g):
        g.register_rpc(7, handler)
        g.register_rpc(8, lambda src, args: 12)  # not bytes
        g.register_rpc(9, lambda src, args: b"ok")
        g.barrier()
        if g.rank == 0:
            with pytest.raises(meshwork.RpcFailed) as e:
                g.rpc(1, 7, b"payload")
            assert (e.value.fn_id, e.value.rank) == (7, 1)
            assert "ValueError: boom from 0: payload" in e.value.reason
            assert "ValueError: boom from 0: payload" in str(e.value)
            with pytest.raises(meshwork.RpcFailed, match="returned int; return bytes"):
                g.rpc(1, 8, b"")
            # Both ranks stay usable.
            assert g.rpc(1, 9, b"") == b"ok"
        g.barrier()
        return True

    assert run_world(2, body) == [True, True]
    # The failure travelled to the caller; the serving rank printed no
    # panic message or backtrace.
    assert "panicked" not in capfd.readouterr().err


def test_a_handler_may_call_rpc_on_a_third_rank():
    def body(g):
        r = g.rank
        if r == 2:
            g.register_rpc(2, lambda src, args: b"leaf(" + bytes([src]) + args + b")")
        if r == 1:
            # Runs on rank 1's RPC thread, calls rank 2 and waits (the GIL
            # released, so rank 2's handler can run in this process).
            g.register_rpc(1, lambda src, args: b"mid:" + g.rpc(2, 2, args))
        g.barrier()
        if r == 0:
            assert g.rpc(1, 1, b"x") == b"mid:leaf(\x01x)"
        g.barrier()
        # Rank 1's handler holds its group: shut down, or its links and
        # RPC threads would outlive the test.
        g.shutdown()
        return True

    assert run_world(3, body) == [True] * 3


def test_rpc_with_a_timeout_gives_up_on_a_slow_handler():
    def body(g):
        g.register_rpc(5, lambda src, args: (time.sleep(1.5), b"late")[1])
        g.register_rpc(6, lambda src, args: b"fast")
        g.barrier()
        if g.rank == 0:
            start = time.monotonic()
            with pytest.raises(meshwork.Timeout):
                g.rpc(1, 5, b"", timeout=0.2)
            assert time.monotonic() - start < 1.2  # before the handler answered
            # The late answer is dropped; the next call gets its own.
            assert g.rpc(1, 6, b"") == b"fast"
            time.sleep(1.5)
            assert g.rpc(1, 6, b"") == b"fast"
        g.barrier()
        return True

    assert run_world(2, body) == [True, True]


def test_rpc_arguments_are_checked():
    def body(g):
        with pytest.raises(meshwork.InvalidArgument, match="reserved"):
            g.register_rpc(0xFFFFFFF0, lambda s, a: b"")
        with pytest.raises(meshwork.InvalidArgument, match="reserved"):
            g.rpc(0, 0xFFFFFF00, b"")
        with pytest.raises(meshwork.InvalidArgument, match="not callable"):
            g.register_rpc(1, b"not a function")
        with pytest.raises(meshwork.InvalidArgument, match="dst 2"):
            g.rpc(2, 1, b"")
        with pytest.raises(meshwork.InvalidArgument, match="timeout 0"):
            g.rpc(0, 1, b"", timeout=0.0)
        with pytest.raises(meshwork.InvalidArgument, match="fn_id -1"):
            g.rpc(0, -1, b"")
        return True

    assert run_world(2, body) == [True, True]


# ---- federated_average ----------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_federated_average_is_the_weighted_mean_with_the_same_bits(n):
    def x_of(r):
        return (np.arange(7, dtype=np.float32) * (r + 1) + np.float32(0.1) * r).astype(np.float32)

    # x ← Σ wᵣ·xᵣ / Σ wᵣ in float64, rounded once (every product and sum
    # here is exact in float64, so the order of the sum does not matter).
    weights = [float(r + 1) for r in range(n)]
    acc = sum(w * x_of(r).astype(np.float64) for r, w in enumerate(weights))
    want = (acc / sum(weights)).astype(np.float32)

    def body(g):
        x = x_of(g.rank)
        g.federated_average(x, weights[g.rank])
        return x

    got = run_world(n, body)
    for x in got:
        assert x.view(np.uint32).tolist() == want.view(np.uint32).tolist(), (x, want)


def test_federated_average_refuses_a_non_positive_total_and_other_dtypes():
    def body(g):
        x = np.ones(3, dtype=np.float32) * (g.rank + 2)
        with pytest.raises(meshwork.InvalidArgument, match="sum to"):
            g.federated_average(x, 0.0)
        assert (x == g.rank + 2).all()  # unchanged
        with pytest.raises(meshwork.InvalidArgument, match="float32"):
            g.federated_average(np.ones(3), 1.0)
        with pytest.raises(meshwork.InvalidArgument, match="weight"):
            g.federated_average(x, float("nan"))
        return True

    assert run_world(2, body) == [True, True]


# ---- compressed all_reduce ------------------------------------------------


@pytest.mark.parametrize("op", ["sum", "avg"])
@pytest.mark.parametrize("make", [lambda: meshwork.Compressor.top_k(1.0), lambda: meshwork.Compressor.random_k(1.0, 7)])
def test_compressed_all_reduce_at_fraction_one_is_all_reduce(op, make):
    def body(g):
        rng = np.random.default_rng(g.rank)
        a = rng.standard_normal(33).astype(np.float32)
        b = a.copy()
        g.all_reduce(b, op=op)
        c = make()
        g.all_reduce_compressed(a, c, op=op)
        assert a.view(np.uint32).tolist() == b.view(np.uint32).tolist()
        assert c.residual.dtype == np.float32 and c.residual.size == 0
        return True

    assert run_world(3, body) == [True] * 3


def test_top_k_keeps_each_ranks_largest_and_the_residual_carries_the_rest():
    n, size = 3, 6

    def kept(r):
        return {r % size, (r + 2) % size, (r + 4) % size}

    def a_of(r):
        # Large (±10·(i+1)) at this rank's kept indices, small elsewhere.
        return np.array(
            [(-1) ** i * 10.0 * (i + 1) if i in kept(r) else 0.5 * (r + 1) for i in range(size)],
            dtype=np.float32,
        )

    want1 = np.array([sum(a_of(r)[i] for r in range(n) if i in kept(r)) for i in range(size)], np.float32)
    want2 = np.array([sum(a_of(r)[i] for r in range(n) if i not in kept(r)) for i in range(size)], np.float32)

    def body(g):
        r = g.rank
        c = meshwork.Compressor.top_k(0.5)
        assert c.residual.size == 0
        a = a_of(r)
        g.all_reduce_compressed(a, c)
        assert a.tolist() == want1.tolist(), a
        res = c.residual
        assert res.tolist() == [0.0 if i in kept(r) else 0.5 * (r + 1) for i in range(size)]
        # The residual is a copy: changing it changes nothing.
        res[:] = 99
        # The next call sends what was kept back: together, the sum.
        b = np.zeros(size, dtype=np.float32)
        g.all_reduce_compressed(b, c)
        assert b.tolist() == want2.tolist(), b
        assert c.residual.tolist() == [0.0] * size
        assert (a + b).tolist() == sum(a_of(q) for q in range(n)).tolist()
        return True

    assert run_world(n, body) == [True] * n


def test_random_k_keeps_the_same_indices_on_every_rank():
    def body(g):
        r, n = g.rank, g.world_size
        c = meshwork.Compressor.random_k(0.25, 11)
        a = np.full(8, r + 1, dtype=np.float32)
        g.all_reduce_compressed(a, c, op="avg")
        kept = np.flatnonzero(a)
        assert len(kept) == 2
        assert (a[kept] == (n + 1) / 2).all(), a
        res = c.residual
        assert (res[kept] == 0).all() and (np.delete(res, kept) == r + 1).all()
        return kept.tolist()

    got = run_world(3, body)
    assert got[0] == got[1] == got[2]


def test_compressed_all_reduce_arguments_are_checked():
    for bad in (0.0, -1.0, 1.5, float("nan")):
        with pytest.raises(meshwork.InvalidArgument, match="fraction"):
            meshwork.Compressor.top_k(bad)
        with pytest.raises(meshwork.InvalidArgument, match="fraction"):
            meshwork.Compressor.random_k(bad, 1)
    with pytest.raises(meshwork.InvalidArgument, match="seed"):
        meshwork.Compressor.random_k(0.5, -1)
    with pytest.raises(TypeError):
        meshwork.Compressor()
    assert repr(meshwork.Compressor.random_k(0.5, 3)) == "<meshwork.Compressor random_k(0.5, 3)>"

    def body(g):
        c = meshwork.Compressor.top_k(0.5)
        with pytest.raises(meshwork.InvalidArgument, match="only"):
            g.all_reduce_compressed(np.ones(4, np.float32), c, op="max")
        with pytest.raises(meshwork.InvalidArgument, match="float32"):
            g.all_reduce_compressed(np.ones(4, np.float64), c)
        with pytest.raises(TypeError):
            g.all_reduce_compressed(np.ones(4, np.float32), "top_k")
        return True

    assert run_world(2, body) == [True, True]


# ---- stats and links ------------------------------------------------------


def test_stats_count_a_send_on_both_sides():
    def body(g):
        before = g.stats()
        assert len(before) == 2 and all(set(s) == STATS_FIELDS for s in before)
        g.barrier()
        data = np.arange(100, dtype=np.uint8)
        if g.rank == 0:
            g.send(data, 1, tag=3)
        else:
            g.recv(np.zeros(100, np.uint8), 0, tag=3)
        g.barrier()
        after = g.stats()
        peer = 1 - g.rank
        if g.rank == 0:
            assert after[peer]["sent_messages"] >= before[peer]["sent_messages"] + 1
            assert after[peer]["sent_bytes"] >= before[peer]["sent_bytes"] + 100
        else:
            assert after[peer]["received_messages"] >= before[peer]["received_messages"] + 1
            assert after[peer]["received_bytes"] >= before[peer]["received_bytes"] + 100
        assert all(v >= 0 for s in after for v in s.values())
        return True

    assert run_world(2, body) == [True, True]


def test_links_of_a_local_world():
    def body(g):
        return g.links()

    got = run_world(3, body)
    for r, links in enumerate(got):
        assert links == ["Local" if q == r else "Memory" for q in range(3)]
