"""Non-blocking calls (``*_nb`` returning ``meshwork.Work``), forming a
group from exchanged addresses (``meshwork.Listener`` + ``meshwork.form``)
and sub-groups made by their members only (``subgroup``)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import meshwork
from conftest import DEADLINE_S, DTYPES, need, np_dtype, run_world


@pytest.mark.parametrize("dtype_name", DTYPES)
def test_every_nonblocking_collective_gives_the_blocking_result(dtype_name):
    dtype = np_dtype(dtype_name)

    def body(g):
        n, r = g.world_size, g.rank
        a = np.full(5, r + 1, dtype=dtype)
        works = [g.all_reduce_nb(a, op="sum")]
        # Read at the call: reusing `a` before wait changes nothing.
        a[:] = 0
        b = np.full(3, r * 2 + 1, dtype=dtype)
        works.append(g.broadcast_nb(b, root=n - 1))
        c = np.full(2, r + 1, dtype=dtype)
        works.append(g.reduce_nb(c, op="max", root=0))
        s = np.full(4, r + 1, dtype=dtype)
        works.append(g.scan_nb(s, op="sum"))
        e = np.full(4, r + 1, dtype=dtype)
        works.append(g.exclusive_scan_nb(e, op="sum"))
        ag = np.zeros(2 * n, dtype=dtype)
        works.append(g.all_gather_nb(np.full(2, r, dtype=dtype), ag))
        rs = np.zeros(2, dtype=dtype)
        works.append(g.reduce_scatter_nb(np.ones(2 * n, dtype=dtype), rs))
        aa = np.zeros(n, dtype=dtype)
        works.append(g.all_to_all_nb(np.full(n, r, dtype=dtype), aa))
        ga = np.zeros(n, dtype=dtype) if r == 0 else None
        works.append(g.gather_nb(np.full(1, r, dtype=dtype), ga, root=0))
        sc = np.zeros(1, dtype=dtype)
        send = np.arange(n, dtype=dtype) if r == 0 else None
        works.append(g.scatter_nb(send, sc, root=0))
        works.append(g.barrier_nb())
        # Waited in reverse order: each completes on its own.
        got = [w.wait() for w in reversed(works)][::-1]
        assert got[0] is a and got[-1] is None
        tri = n * (n + 1) // 2
        assert (a == tri).all(), a
        assert (b == (n - 1) * 2 + 1).all(), b
        if r == 0:
            assert (c == n).all(), c
            assert (ga == np.arange(n)).all(), ga
        assert (s == (r + 1) * (r + 2) // 2).all(), s
        assert (e == r * (r + 1) // 2).all(), e
        assert (ag == np.repeat(np.arange(n), 2)).all(), ag
        assert (rs == n).all(), rs
        assert (aa == np.arange(n)).all(), aa
        assert sc[0] == r, sc
        assert all(w.is_completed() for w in works)
        # Waiting again gives the same array.
        assert works[0].wait() is a
        return True

    for n in (1, 2, 3):
        assert run_world(n, body) == [True] * n


def test_nonblocking_calls_on_torch_tensors():
    torch = need("torch")

    def body(g):
        t = torch.full((6,), float(g.rank + 1))
        w = g.all_reduce_nb(t)
        out = torch.zeros(6 * g.world_size, dtype=torch.bfloat16)
        w2 = g.all_gather_nb(torch.full((6,), float(g.rank), dtype=torch.bfloat16), out)
        assert w.wait() is t
        assert w2.wait() is out
        n = g.world_size
        assert torch.equal(t, torch.full((6,), float(n * (n + 1) // 2)))
        assert torch.equal(out, torch.arange(n, dtype=torch.bfloat16).repeat_interleave(6))
        return True

    assert run_world(3, body) == [True] * 3


def test_a_wait_with_a_timeout_raises_and_the_work_goes_on():
    def body(g):
        a = np.full(3, g.rank + 1, dtype=np.int64)
        if g.rank == 1:
            # Rank 0's call cannot end before rank 1 makes its own.
            rank0_timed_out.wait(DEADLINE_S)
        w = g.all_reduce_nb(a)
        if g.rank == 0:
            with pytest.raises(TimeoutError):
                w.wait(timeout=0.05)
            assert not w.is_completed()
            rank0_timed_out.set()
        assert w.wait() is a
        return a.tolist()

    rank0_timed_out = threading.Event()
    assert run_world(2, body) == [[3, 3, 3]] * 2


def test_a_failed_nonblocking_call_raises_at_wait():
    def body(g):
        a = np.zeros(2, dtype=np.float32)
        if g.rank == 0:
            w = g.all_reduce_nb(a, op="avg")
            return w.wait()
        # A mismatched call: integers cannot be averaged; refused at once.
        w = g.all_reduce_nb(np.zeros(2, dtype=np.int32), op="avg")
        with pytest.raises(meshwork.InvalidArgument):
            w.wait()
        # The same error on every wait.
        with pytest.raises(meshwork.InvalidArgument):
            w.wait()
        # And a real all_reduce, so rank 0's call completes.
        return g.all_reduce_nb(a, op="avg").wait()

    got = run_world(2, body)
    assert all((x == 0).all() for x in got)


def test_a_result_that_no_longer_fits_is_refused_at_wait():
    def body(g):
        a = np.full(4, 1.0, dtype=np.float32)
        w = g.all_reduce_nb(a)
        if g.rank == 0:
            a.resize(2, refcheck=False)
            with pytest.raises(meshwork.InvalidArgument, match="changed since the call"):
                w.wait()
            return True
        w.wait()
        return True

    assert run_world(2, body) == [True, True]


def test_form_from_exchanged_addresses_and_subgroups_by_members_only():
    n = 4
    listeners = [meshwork.Listener("127.0.0.1") for _ in range(n)]
    peers = [l.address for l in listeners]
    token = meshwork.random_token()
    assert len(token) == 64
    groups = [None] * n

    def join(r):
        groups[r] = meshwork.form(r, n, peers, listener=listeners[r], token=token, timeout=DEADLINE_S)

    threads = [threading.Thread(target=join, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [g.rank for g in groups] == list(range(n))
    with pytest.raises(meshwork.InvalidArgument, match="used already"):
        meshwork.form(0, n, peers, listener=listeners[0])

    results = [None] * n

    def pair(r):
        g = groups[r]
        members = [3, 1] if r % 2 else [0, 2]
        sub = g.subgroup(members, 100 + r % 2)
        a = np.array([r], dtype=np.int64)
        sub.all_reduce(a)
        results[r] = (sub.rank, sub.world_size, int(a[0]))
        sub.shutdown()
        g.shutdown()

    threads = [threading.Thread(target=pair, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [(0, 2, 2), (1, 2, 4), (1, 2, 2), (0, 2, 4)]
    with pytest.raises(meshwork.InvalidArgument, match="not an IP address"):
        meshwork.Listener("localhost")
    with pytest.raises(meshwork.InvalidArgument, match="not among"):
        meshwork.local(2)[0].subgroup([1], 5)
