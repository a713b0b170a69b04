"""Helpers for meshwork's Python tests.

``run_world(n, fn)`` runs ``fn(g)`` for every rank of ``meshwork.local(n)``
on its own thread, with short deadlines, and returns the results in rank
order (re-raising the first failure). ``spawn_world(n, code)`` starts ``n``
Python processes that each run ``code`` with RANK, WORLD, PEERS and a
CLUSTER_TOKEN set, as ``meshrun`` would. ``need(module)`` imports an
optional module or skips the test; under CI=true a missing module fails.
"""

from __future__ import annotations

import importlib
import os
import secrets
import socket
import subprocess
import sys
import threading
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import pytest

import meshwork

# test_world.py runs under meshrun (RANK and WORLD set); elsewhere it is
# not collected at all.
collect_ignore = [] if "RANK" in os.environ and "WORLD" in os.environ else ["test_world.py"]

# Every blocking call in these tests fails within this many seconds.
DEADLINE_S = 5.0
UNDER_CI = os.environ.get("CI") == "true"

DTYPES = [
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]


def need(module: str) -> Any:
    """Import ``module``, or skip the test (fail it under CI=true)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if UNDER_CI:
            pytest.fail(f"{module} is required under CI=true: {e}")
        pytest.skip(f"{module} is not installed")


def np_dtype(name: str) -> Any:
    """numpy's dtype for ``name``; bfloat16 comes from ml_dtypes."""
    if name == "bfloat16":
        return need("ml_dtypes").bfloat16
    return np.dtype(name)


def run_world(n: int, fn: Callable[[meshwork.ProcessGroup], Any], timeout: float = DEADLINE_S) -> List[Any]:
    """Run ``fn(g)`` on a thread per rank of a fresh ``local(n)`` world."""
    world = meshwork.local(n)
    for g in world:
        g.set_timeout(timeout)
    return run_on(world, fn, timeout)


def run_on(world: List[meshwork.ProcessGroup], fn: Callable[[meshwork.ProcessGroup], Any], timeout: float = DEADLINE_S) -> List[Any]:
    """Run ``fn(g)`` on a thread per group of ``world``; results in rank order."""
    results: List[Any] = [None] * len(world)
    errors: List[Optional[BaseException]] = [None] * len(world)

    def rank_main(i: int, g: meshwork.ProcessGroup) -> None:
        try:
            results[i] = fn(g)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors[i] = e

    threads = [threading.Thread(target=rank_main, args=(i, g), daemon=True) for i, g in enumerate(world)]
    for t in threads:
        t.start()
    for t in threads:
        # Every call inside has the deadline `timeout`; a rank still
        # running long after it is a hang.
        t.join(timeout * 4 + 10)
        assert not t.is_alive(), "a rank did not finish within its deadline"
    for e in errors:
        if e is not None:
            raise e
    return results


def free_ports(n: int) -> List[str]:
    """``n`` loopback addresses whose port is free for TCP and UDP alike
    (QUIC and its TCP sidecar share the number), as meshrun picks them."""
    held = []
    while len(held) < n:
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        t.bind(("127.0.0.1", 0))
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.bind(t.getsockname())
        except OSError:
            t.close()
            continue
        held.append((t, u))
    addrs = [f"127.0.0.1:{t.getsockname()[1]}" for t, _ in held]
    for t, u in held:
        t.close()
        u.close()
    return addrs


def spawn_world(
    n: int,
    code: str,
    env: Optional[Dict[int, Dict[str, str]]] = None,
    timeout_s: float = 3.0,
    limit_s: float = 60.0,
    world: Optional[int] = None,
) -> List[subprocess.CompletedProcess]:
    """Run ``python -c code`` as ranks 0..n-1 of a world of ``world``
    (default ``n``) ranks: RANK, WORLD, PEERS, a fresh CLUSTER_TOKEN,
    TIMEOUT_S, ``env[rank]`` overriding. Every process is reaped, killed
    past ``limit_s``."""
    world = n if world is None else world
    peers = ",".join(free_ports(world))
    token = secrets.token_hex(16)
    procs = []
    for rank in range(n):
        e = dict(os.environ)
        e.update(
            RANK=str(rank),
            WORLD=str(world),
            PEERS=peers,
            CLUSTER_TOKEN=token,
            TIMEOUT_S=str(timeout_s),
            PYTHONDONTWRITEBYTECODE="1",
        )
        # "{peers}" in an override stands for the world's addresses.
        e.update((k, v.replace("{peers}", peers)) for k, v in (env or {}).get(rank, {}).items())
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code],
                env=e,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    done = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=limit_s)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return done
