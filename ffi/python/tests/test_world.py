"""The collectives and point-to-point across real processes: run under
``meshrun -n 4 -- python -m pytest tests/test_world.py`` (the Rust test
ffi/tests/python.rs does), each rank runs these tests in the same order on
the group ``meshwork.connect()`` forms. Not collected outside meshrun
(conftest.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import meshwork
import test_collectives as cases
from conftest import DTYPES, np_dtype

COLLECTIVES = [
    "all_reduce",
    "broadcast",
    "all_gather",
    "reduce_scatter",
    "reduce",
    "all_to_all",
    "gather",
    "scatter",
    "scan",
    "exclusive_scan",
]


@pytest.fixture(scope="module")
def group():
    g = meshwork.connect()
    g.set_timeout(20)
    assert g.rank == int(os.environ["RANK"]) and g.world_size == int(os.environ["WORLD"])
    yield g
    g.shutdown()


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_collective_on_every_dtype(group, collective, dtype):
    case = getattr(cases, f"case_{collective}")
    for count in (0, 1, 7):
        case(group, group.world_size, count, np_dtype(dtype))(f"count {count} rank {group.rank}")


def test_large_all_reduce_over_the_sidecar(group):
    # 16 MiB: above SIDECAR_THRESHOLD, so QUIC ranks use the TCP sidecar.
    a = np.full(4 << 20, group.rank + 1, dtype=np.float32)
    group.all_reduce(a)
    n = group.world_size
    assert np.all(a == n * (n + 1) / 2)


def test_send_recv_around_a_ring_with_tags(group):
    n, r = group.world_size, group.rank
    right, left = (r + 1) % n, (r - 1) % n
    for tag in (0, 7, 2**64 - 1):
        group.send(np.array([r, tag % 1000], dtype=np.int64), dst=right, tag=tag)
    for tag in (2**64 - 1, 7, 0):  # different tags never block each other
        got = np.zeros(2, dtype=np.int64)
        group.recv(got, src=left, tag=tag)
        assert list(got) == [left, tag % 1000]


def test_barrier(group):
    group.barrier()
