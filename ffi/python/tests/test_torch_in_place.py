"""``meshwork.set_torch_in_place(True)``: torch tensors used in place, no
copy, under torch's contract (a tensor is left alone while a call uses
it); still checked unchanged after a call that wrote one. Off (the
default) restores the stage (test_held_buffers.py checks what it guards).

How "no copy" is seen, deterministically:
- ``meshwork._meshwork._torch_copies()`` counts every copy the binding
  makes of memory a torch tensor owns (a stage, a non-blocking call's
  input or result): in place it does not move, off it counts each one;
- a result lands in the tensor while the call runs: rank 1's all_to_all
  receives rank 0's block straight into ``recv`` (pairwise exchange,
  blocks of 32 KiB and more) and then waits for rank 2, which looks into
  rank 1's tensor before it joins: in place the block is there, staged
  it cannot be (the stage is copied back only once the call is done). (A
  rooted call such as gather moves no data before every rank has joined:
  its pre-check comes first);
- a non-blocking all_reduce's result is in the tensor once the work is
  complete, before ``wait()``; with copies only ``wait()`` puts it there.
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import meshwork
from meshwork._meshwork import _torch_copies
from conftest import need, run_world

torch = need("torch")

N = 1 << 20  # elements: 4 MiB of float32
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.uint8]


@contextlib.contextmanager
def in_place(on: bool = True):
    old = meshwork.torch_in_place()
    meshwork.set_torch_in_place(on)
    try:
        yield
    finally:
        meshwork.set_torch_in_place(old)


@pytest.fixture(autouse=True)
def switch_restored():
    """Every test leaves the switch as it found it (off, unless the run
    set MESHWORK_TORCH_IN_PLACE=1)."""
    old = meshwork.torch_in_place()
    yield
    meshwork.set_torch_in_place(old)


def the_four_collectives(g, dtype):
    """all_reduce (blocking and non-blocking), broadcast, all_gather and
    reduce_scatter on torch tensors; each result, and whether every tensor
    kept its memory."""
    n, r = g.world_size, g.rank
    a = torch.full((5,), r + 1, dtype=dtype)
    b = torch.full((6,), r + 1, dtype=dtype)
    c = torch.full((3,), r, dtype=dtype)
    send = torch.arange(2 * n, dtype=dtype) + r
    gathered = torch.zeros(3 * n, dtype=dtype)
    block = torch.zeros(2, dtype=dtype)
    addresses = [t.data_ptr() for t in (a, b, c, gathered, block)]
    g.all_reduce(a)
    w = g.all_reduce_nb(b, op="max")
    assert w.wait() is b
    g.broadcast(c, root=n - 1)
    g.all_gather(torch.full((3,), r, dtype=dtype), gathered)
    g.reduce_scatter(send, block)
    kept = addresses == [t.data_ptr() for t in (a, b, c, gathered, block)]
    return [t.to(torch.float64).tolist() for t in (a, b, c, gathered, block)], kept


def expected(n):
    total = n * (n + 1) // 2
    return [
        [total] * 5,
        [n] * 6,
        [n - 1] * 3,
        [float(r) for r in range(n) for _ in range(3)],
        # Block r of sum over ranks q of (arange(2n) + q).
        None,
    ]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_results_are_exact_in_place_and_nothing_is_copied(dtype):
    n = 3
    meshwork.set_torch_in_place(True)
    before = _torch_copies()
    results = run_world(n, lambda g: the_four_collectives(g, dtype))
    assert _torch_copies() == before, "a torch tensor was copied"
    want = expected(n)
    for r, (got, kept) in enumerate(results):
        assert kept
        assert got[:4] == want[:4]
        assert got[4] == [float(n * (2 * r + i) + n * (n - 1) // 2) for i in range(2)]


def test_off_restores_the_copies():
    n = 3
    meshwork.set_torch_in_place(False)
    before = _torch_copies()
    results = run_world(n, lambda g: the_four_collectives(g, torch.float32))
    # Per rank: a stage each for all_reduce, broadcast, all_gather's send
    # and recv, reduce_scatter's send and recv; all_reduce_nb's input and
    # its result.
    assert _torch_copies() - before == n * 8
    want = expected(n)
    for got, kept in results:
        assert kept and got[:4] == want[:4]


@pytest.mark.parametrize("on", [True, False], ids=["in place", "copies"])
def test_a_result_lands_in_the_tensor_while_the_call_runs_only_in_place(on):
    block = 1 << 16  # float32: 256 KiB per block, read straight into recv
    meshwork.set_torch_in_place(on)
    recv = torch.zeros(3 * block)
    entered = threading.Event()

    def body(g):
        send = torch.full((3 * block,), float(g.rank + 1))
        if g.rank == 1:
            # Pairwise: rank 1 takes rank 0's block first, then waits for
            # rank 2's.
            entered.set()
            g.all_to_all(send, recv)
            return None
        if g.rank == 0:
            g.all_to_all(send, torch.zeros(3 * block))
            return None
        # Rank 2 looks into rank 1's tensor before it joins the call.
        assert entered.wait(10)
        seen = False
        until = time.monotonic() + (5.0 if on else 0.5)
        while time.monotonic() < until and not seen:
            seen = bool((recv[:block] == 1.0).all())
            time.sleep(0.005)
        g.all_to_all(send, torch.zeros(3 * block))
        return seen

    assert run_world(3, body)[2] is on
    assert recv.tolist() == [1.0] * block + [2.0] * block + [3.0] * block


@pytest.mark.parametrize("on", [True, False], ids=["in place", "copies"])
def test_a_non_blocking_result_is_in_the_tensor_before_wait_only_in_place(on):
    meshwork.set_torch_in_place(on)

    def body(g):
        t = torch.full((N,), float(g.rank + 1))
        w = g.all_reduce_nb(t)
        until = time.monotonic() + 10
        while not w.is_completed():
            assert time.monotonic() < until
            time.sleep(0.001)
        before_wait = bool((t == 3.0).all())
        assert w.wait() is t
        assert bool((t == 3.0).all())
        return before_wait

    assert run_world(2, body) == [on, on]


# Each changes the tensor's memory (the last three free it).
MUTATIONS = {
    "zero_ (version)": lambda t: t.zero_(),
    "resize_ (grow)": lambda t: t.resize_(4 * N),
    "set_": lambda t: t.set_(torch.zeros(N)),
    "untyped_storage().resize_(0)": lambda t: t.untyped_storage().resize_(0),
    "share_memory_": lambda t: t.share_memory_(),
}


@pytest.mark.parametrize("how", list(MUTATIONS))
def test_a_tensor_changed_between_a_non_blocking_call_and_its_wait_is_refused_at_wait(how):
    """Changed once the operation is complete (so nothing is written
    into freed memory here), before ``wait()``."""
    meshwork.set_torch_in_place(True)

    def body(g):
        t = torch.ones(N)
        w = g.all_reduce_nb(t)
        if g.rank == 0:
            until = time.monotonic() + 10
            while not w.is_completed():
                assert time.monotonic() < until
                time.sleep(0.001)
            MUTATIONS[how](t)
            with pytest.raises(meshwork.InvalidArgument, match="changed while a call used its memory in place") as info:
                w.wait()
            assert isinstance(info.value, ValueError)
            # The same error again, and the group goes on.
            with pytest.raises(meshwork.InvalidArgument):
                w.wait()
        else:
            assert w.wait() is t and bool((t == 2).all())
        u = torch.ones(4)
        assert g.all_reduce_nb(u).wait() is u
        return u.tolist()

    assert run_world(2, body) == [[2.0] * 4] * 2


def test_a_non_blocking_work_dropped_unwaited_keeps_its_tensor_until_done():
    """The operation holds the tensor: dropping the Work and the last
    reference to the tensor frees nothing the operation still writes."""
    meshwork.set_torch_in_place(True)

    def body(g):
        if g.rank == 0:
            g.all_reduce_nb(torch.ones(N))  # Work and tensor dropped at once
            gc.collect()
        else:
            time.sleep(0.2)
            t = torch.ones(N)
            g.all_reduce(t)
            assert bool((t == 2).all())
        u = torch.ones(4)
        g.all_reduce(u)
        return u.tolist()

    assert run_world(2, body) == [[2.0] * 4] * 2


@contextlib.contextmanager
def gil_kept_until_blocked():
    """A thread keeps the GIL until it blocks (test_held_buffers.py)."""
    old = sys.getswitchinterval()
    gc.collect()
    gc.disable()
    sys.setswitchinterval(60.0)
    try:
        yield
    finally:
        sys.setswitchinterval(old)
        gc.enable()


def test_a_tensor_changed_during_a_blocking_call_in_place_is_refused_after_the_write():
    """Unlike the default, the result is already in the tensor when the
    change is found. The change here only bumps the version (``zero_``
    before the data arrives), so the memory written is still the
    tensor's."""
    meshwork.set_torch_in_place(True)
    warm = meshwork.local(1)[0]
    warm.all_reduce(torch.zeros(4))  # torch looked up once (test_held_buffers.py)
    box = {}
    entering = threading.Event()

    def body(g):
        if g.rank == 0:
            t = box["t"] = torch.zeros(N)
            with pytest.raises(meshwork.InvalidArgument, match="may have written the result into memory"):
                entering.set()
                g.recv(t, src=1)
            assert bool((t == 1).all()), "written in place before the check"
        else:
            assert entering.wait(10)
            box["t"].zero_()
            g.send(torch.ones(N), dst=0)
        a = np.ones(3, dtype=np.float32)
        g.all_reduce(a)
        return float(a[0])

    with gil_kept_until_blocked():
        assert run_world(2, body) == [2.0, 2.0]


def test_a_numpy_view_of_a_tensor_is_used_in_place_too():
    meshwork.set_torch_in_place(True)
    before = _torch_copies()

    def body(g):
        t = torch.full((4,), float(g.rank + 1))
        g.all_reduce(t.numpy())
        u = torch.full((4,), float(g.rank + 1))
        assert g.all_reduce_nb(u.numpy()).wait() is not None
        return t.tolist(), u.tolist()

    assert run_world(2, body) == [([3.0] * 4, [3.0] * 4)] * 2
    assert _torch_copies() == before


def test_numpy_arrays_are_unaffected_by_the_switch():
    meshwork.set_torch_in_place(True)

    def body(g):
        a = np.full(4, g.rank + 1, dtype=np.float32)
        g.all_reduce(a)
        b = np.full(4, g.rank + 1, dtype=np.float32)
        w = g.all_reduce_nb(b)
        b[:] = 0  # read at the call: reusable before wait
        assert w.wait() is b
        return a.tolist(), b.tolist()

    assert run_world(2, body) == [([3.0] * 4, [3.0] * 4)] * 2


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("MESHWORK_TORCH_IN_PLACE", None)
    e.update(env, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)


def test_the_switch_is_read_from_the_environment_at_import():
    code = "import meshwork; print(meshwork.torch_in_place())"
    assert python(code).stdout.strip() == "False"
    assert python(code, MESHWORK_TORCH_IN_PLACE="0").stdout.strip() == "False"
    assert python(code, MESHWORK_TORCH_IN_PLACE="1").stdout.strip() == "True"
    bad = python(code, MESHWORK_TORCH_IN_PLACE="yes")
    assert bad.returncode != 0 and "MESHWORK_TORCH_IN_PLACE" in bad.stderr


BACKEND = """
import datetime, torch, torch.distributed as dist
import meshwork, meshwork.torch
from meshwork._meshwork import _torch_copies
dist.init_process_group("meshwork", store=dist.HashStore(), rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=30))
t = torch.ones(8)
before = _torch_copies()
dist.all_reduce(t)                                # the synchronous fast path
dist.all_reduce(t, op=dist.ReduceOp.MAX)          # _reduced, blocking
dist.all_reduce(t, async_op=True).wait()          # _reduced, all_reduce_nb
fut = dist.all_reduce(t, async_op=True).get_future()
fut.wait()
out = torch.zeros(8)
dist.all_gather_into_tensor(out, t)               # _all_gather_flat
dist.reduce_scatter_tensor(torch.zeros(8), out)   # _reduce_scatter_flat
dist.broadcast(t, src=0)
print("copies", _torch_copies() - before, flush=True)
dist.destroy_process_group()
"""


def test_the_torch_backend_paths_copy_nothing_in_place():
    on = python(BACKEND, MESHWORK_TORCH_IN_PLACE="1", MESHWORK_TRANSPORT="tcp")
    assert "copies 0" in on.stdout, on.stdout + on.stderr
    off = python(BACKEND, MESHWORK_TRANSPORT="tcp")
    assert "copies " in off.stdout and "copies 0" not in off.stdout, off.stdout + off.stderr
