"""Every collective on every dtype, in worlds of 1 to 4 ranks
(meshwork.local, a thread per rank), with closed-form expectations.
Values stay small so that every dtype holds them exactly."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import DTYPES, np_dtype, run_world

WORLDS = [1, 2, 3, 4]
COUNTS = [0, 1, 5]


def f(rank: int, index: np.ndarray) -> np.ndarray:
    """Rank ``rank``'s value at ``index``: 1..5."""
    return (rank * 3 + index) % 5 + 1


def vals(rank: int, count: int, dtype, start: int = 0) -> np.ndarray:
    return f(rank, np.arange(start, start + count)).astype(dtype)


def expect(got: np.ndarray, want, dtype, what: str) -> None:
    want = np.asarray(want).astype(dtype)
    assert got.dtype == want.dtype, what
    assert np.array_equal(got.astype(np.float64), want.astype(np.float64)), f"{what}: got {got}, want {want}"


# Each case_<collective>(g, n, count, dtype) makes the call on rank
# g.rank of a world of n and returns a check of its result; the
# multi-process tests (test_world.py) run the same cases.


def sweep(dtype_name: str, body) -> None:
    dtype = np_dtype(dtype_name)
    for n in WORLDS:
        for count in COUNTS:
            results = run_world(n, lambda g: body(g, n, count, dtype))
            for rank, check in enumerate(results):
                check(f"world {n} count {count} rank {rank}")


def case_all_reduce(g, n, count, dt):
    a = vals(g.rank, count, dt)
    g.all_reduce(a, op="sum")
    want = sum(f(r, np.arange(count)) for r in range(n))
    return lambda what: expect(a, want, dt, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_reduce(dtype):
    sweep(dtype, case_all_reduce)


def case_broadcast(g, n, count, dt):
    root = n - 1
    a = vals(g.rank, count, dt)
    g.broadcast(a, root=root)
    return lambda what: expect(a, f(root, np.arange(count)), dt, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast(dtype):
    sweep(dtype, case_broadcast)


def case_all_gather(g, n, count, dt):
    send = vals(g.rank, count, dt)
    recv = np.zeros(n * count, dtype=dt)
    g.all_gather(send, recv)
    want = np.concatenate([f(r, np.arange(count)) for r in range(n)])
    return lambda what: expect(recv, want, dt, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_gather(dtype):
    sweep(dtype, case_all_gather)


def case_reduce_scatter(g, n, count, dt):
    send = vals(g.rank, n * count, dt)
    recv = np.zeros(count, dtype=dt)
    g.reduce_scatter(send, recv, op="sum")
    block = np.arange(g.rank * count, (g.rank + 1) * count)
    want = sum(f(r, block) for r in range(n))
    return lambda what: expect(recv, want, dt, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_scatter(dtype):
    sweep(dtype, case_reduce_scatter)


def case_reduce(g, n, count, dt):
    root = n // 2
    a = vals(g.rank, count, dt)
    g.reduce(a, op="max", root=root)
    want = np.max([f(r, np.arange(count)) for r in range(n)], axis=0) if count else []
    if g.rank != root:
        return lambda what: None  # partial results; not specified
    return lambda what: expect(a, want, dt, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce(dtype):
    sweep(dtype, case_reduce)


def case_all_to_all(g, n, count, dt):
    # Block j of rank i holds 1 + (i + 2j + k) % 7.
    def block(i, j):
        return 1 + (i + 2 * j + np.arange(count)) % 7

    send = np.concatenate([block(g.rank, j) for j in range(n)]).astype(dt)
    recv = np.zeros(n * count, dtype=dt)
    g.all_to_all(send, recv)
    want = np.concatenate([block(i, g.rank) for i in range(n)])
    return lambda what: expect(recv, want, dt, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_to_all(dtype):
    sweep(dtype, case_all_to_all)


def case_gather(g, n, count, dt):
    root = n - 1
    send = vals(g.rank, count, dt)
    if g.rank == root:
        recv = np.zeros(n * count, dtype=dt)
        g.gather(send, recv, root=root)
        want = np.concatenate([f(r, np.arange(count)) for r in range(n)])
        return lambda what: expect(recv, want, dt, what)
    g.gather(send, None, root=root)
    return lambda what: None


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather(dtype):
    sweep(dtype, case_gather)


def case_scatter(g, n, count, dt):
    root = 0
    recv = np.zeros(count, dtype=dt)
    send = vals(root, n * count, dt) if g.rank == root else None
    g.scatter(send, recv, root=root)
    want = f(root, np.arange(g.rank * count, (g.rank + 1) * count))
    return lambda what: expect(recv, want, dt, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter(dtype):
    sweep(dtype, case_scatter)


def case_scan(g, n, count, dt):
    a = vals(g.rank, count, dt)
    g.scan(a, op="sum")
    want = sum(f(r, np.arange(count)) for r in range(g.rank + 1))
    return lambda what: expect(a, want, dt, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scan(dtype):
    sweep(dtype, case_scan)


def case_exclusive_scan(g, n, count, dt):
    a = vals(g.rank, count, dt)
    g.exclusive_scan(a, op="sum")
    # Rank 0 gets the identity of sum.
    want = sum((f(r, np.arange(count)) for r in range(g.rank)), np.zeros(count, dtype=np.int64))
    return lambda what: expect(a, want, dt, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_exclusive_scan(dtype):
    sweep(dtype, case_exclusive_scan)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["prod", "min", "max", "avg"])
def test_all_reduce_operators(dtype, op):
    dt = np_dtype(dtype)
    n, count = 3, 6
    is_float = dtype.startswith("float") or dtype == "bfloat16"
    if op == "avg" and not is_float:
        import meshwork

        with pytest.raises(meshwork.InvalidArgument, match="float"):
            run_world(1, lambda g: g.all_reduce(np.ones(4, dtype=dt), op="avg"))
        return

    def body(g):
        a = vals(g.rank, count, dt)
        g.all_reduce(a, op=op)
        return a

    per_rank = np.array([f(r, np.arange(count)) for r in range(n)], dtype=np.float64)
    want = {
        "prod": per_rank.prod(axis=0),
        "min": per_rank.min(axis=0),
        "max": per_rank.max(axis=0),
        "avg": per_rank.sum(axis=0) / n,
    }[op]
    for rank, got in enumerate(run_world(n, body)):
        if op == "avg":
            # The sum is exact; the division rounds once, in the dtype.
            tol = {"float16": 1e-3, "bfloat16": 1e-2}.get(dtype, 1e-6)
            assert np.allclose(got.astype(np.float64), want, rtol=tol), f"rank {rank}: {got} vs {want}"
        else:
            expect(got, want, dt, f"rank {rank}")


def test_barrier_in_every_world_size():
    for n in WORLDS:
        assert run_world(n, lambda g: g.barrier()) == [None] * n


def test_multidimensional_arrays_reduce_as_flat():
    def body(g):
        a = np.full((2, 3, 4), g.rank + 1, dtype=np.float32)
        g.all_reduce(a)
        return a

    for a in run_world(3, body):
        assert a.shape == (2, 3, 4) and np.all(a == 6)
