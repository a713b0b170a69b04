"""Ctrl-C (SIGINT) while a call blocks on Python's main thread raises
``KeyboardInterrupt`` within a fraction of a second, not at the deadline
(60 s here): a call on a group revokes the group, so its other ranks'
pending calls fail at once instead of hanging; forming a group, and a
non-blocking call's ``wait()``, are left to run on.

Each test runs a program in a process of its own (``meshwork.local(2)``
or a world of processes), sends it SIGINT once it is blocked, and
measures how long it takes to report the ``KeyboardInterrupt``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Dict, Optional

import pytest

from conftest import free_ports, need

# Generous for a loaded CI machine: measured here, tens of milliseconds.
WITHIN_S = 1.0

# Rank 1 of a local(2) world waits on a thread of its own, in a receive
# from rank 0 (reported when it returns); rank 0 is driven by the main
# thread, which runs ``body`` after printing BLOCKING.
LOCAL = """
import os, sys, threading, time
import numpy as np
import meshwork
world = meshwork.local(2)
for g in world:
    g.set_timeout(60)
other = []
def rank1():
    try:
        world[1].recv(np.zeros(1), src=0, tag=99)
        other.append("returned")
    except meshwork.Error as e:
        other.append(type(e).__name__)
t = threading.Thread(target=rank1, daemon=True)
t.start()
g = world[0]
print("BLOCKING", flush=True)
try:
{body}
    print("RETURNED", flush=True)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
{after}
"""


def interrupted(code: str, env: Optional[Dict[str, str]] = None, limit_s: float = 30.0, clear=()):
    """Run ``code`` (with ``env``, less the variables ``clear`` names);
    once it prints BLOCKING (and a moment more), send it SIGINT. The
    seconds until it printed INTERRUPTED, and everything it printed."""
    e = {k: v for k, v in os.environ.items() if k not in clear}
    e.update(PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    e.update(env or {})
    p = subprocess.Popen(
        [sys.executable, "-W", "ignore", "-c", code],
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    try:
        for line in p.stdout:
            lines.append(line)
            if line.startswith("BLOCKING"):
                break
        assert lines and lines[-1].startswith("BLOCKING"), "".join(lines)
        # Let it reach the wait.
        time.sleep(0.5)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        took = None
        for line in p.stdout:
            lines.append(line)
            if line.startswith("INTERRUPTED") and took is None:
                took = time.monotonic() - sent
        p.wait(timeout=limit_s)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    out = "".join(lines)
    assert took is not None, out
    print(f"KeyboardInterrupt {took * 1000:.1f} ms after SIGINT")
    return took, out


def local(body: str, after: str = "") -> str:
    return LOCAL.format(body=textwrap.indent(textwrap.dedent(body), "    "), after=textwrap.dedent(after))


# What every group test checks after the interrupt: the group is revoked
# here, and the other rank's receive ended with Revoked at once.
REVOKED = """
t.join(5)
print("OTHER", other, flush=True)
try:
    g.barrier()
except meshwork.Revoked:
    print("THEN Revoked", flush=True)
"""


@pytest.mark.parametrize(
    "call",
    [
        "g.recv(np.zeros(1), src=1, tag=7)",
        "g.all_reduce(np.ones(4))",
        "g.barrier()",
        "g.broadcast(np.ones(4), root=1)",
    ],
    ids=["recv", "all_reduce", "barrier", "broadcast"],
)
def test_a_blocked_call_raises_keyboard_interrupt_and_revokes_the_group(call):
    took, out = interrupted(local(call, REVOKED))
    assert "INTERRUPTED" in out and "RETURNED" not in out, out
    assert took < WITHIN_S, (took, out)
    assert "OTHER ['Revoked']" in out, out
    assert "THEN Revoked" in out, out


def test_a_nonblocking_calls_wait_raises_keyboard_interrupt_and_the_call_goes_on():
    body = """
    w = g.all_reduce_nb(np.ones(4))
    w.wait()
    """
    after = """
    print("PENDING", not w.is_completed(), flush=True)
    try:
        w.wait(0.05)
    except TimeoutError as e:
        print("STILL", type(e).__name__, flush=True)
    """
    took, out = interrupted(local(body, after))
    assert "INTERRUPTED" in out and took < WITHIN_S, (took, out)
    assert "PENDING True" in out and "STILL TimeoutError" in out, out


def test_forming_a_group_raises_keyboard_interrupt():
    # Rank 0 of 2 waits for rank 1, which never starts (deadline 60 s).
    code = textwrap.dedent(
        """
        import meshwork
        print("BLOCKING", flush=True)
        try:
            meshwork.connect()
            print("RETURNED", flush=True)
        except KeyboardInterrupt:
            print("INTERRUPTED", flush=True)
        """
    )
    peers = ",".join(free_ports(2))
    env = {"RANK": "0", "WORLD": "2", "PEERS": peers, "CLUSTER_TOKEN": "t" * 32, "TIMEOUT_S": "60"}
    took, out = interrupted(code, env)
    assert "INTERRUPTED" in out and "RETURNED" not in out, out
    assert took < WITHIN_S, (took, out)


def test_a_handler_of_the_programs_own_is_left_to_run_when_the_call_returns():
    # SIGINT's handler only counts: the call is not revoked, and returns
    # when rank 1 answers (after the signal), then the handler has run.
    code = textwrap.dedent(
        """
        import signal, threading, time
        import numpy as np
        import meshwork
        seen = []
        signal.signal(signal.SIGINT, lambda *a: seen.append("SIGINT"))
        world = meshwork.local(2)
        g = world[0]
        def rank1():
            time.sleep(1.5)
            world[1].send(np.ones(1), dst=0)
        threading.Thread(target=rank1, daemon=True).start()
        print("BLOCKING", flush=True)
        got = np.zeros(1)
        g.recv(got, src=1)
        print("RECEIVED", got[0], seen, flush=True)
        print("INTERRUPTED", flush=True)
        """
    )
    took, out = interrupted(code)
    assert "RECEIVED 1.0 ['SIGINT']" in out, out


def test_a_torch_op_raises_keyboard_interrupt():
    """Through the torch backend (torch's dispatcher between Python and
    meshwork): rank 0's all_reduce while rank 1 calls nothing."""
    need("torch")
    port = free_ports(1)[0].rsplit(":", 1)[1]
    code = textwrap.dedent(
        """
        import datetime, os, time
        import torch, torch.distributed as dist
        import meshwork, meshwork.torch
        rank = int(os.environ["RANK"])
        store = dist.TCPStore("127.0.0.1", int(os.environ["STORE_PORT"]), 2, is_master=rank == 0,
                              timeout=datetime.timedelta(seconds=60))
        dist.init_process_group("meshwork", store=store, rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=60))
        if rank == 1:
            store.wait(["done"])
            os._exit(0)
        print("BLOCKING", flush=True)
        try:
            dist.all_reduce(torch.ones(4))
            print("RETURNED", flush=True)
        except KeyboardInterrupt:
            print("INTERRUPTED", flush=True)
        store.set("done", "1")
        os._exit(0)
        """
    )
    env = {"STORE_PORT": port, "MASTER_ADDR": "127.0.0.1", "MESHWORK_TRANSPORT": "tcp"}
    e = {k: v for k, v in os.environ.items() if k != "CLUSTER_TOKEN"}
    rank1 = subprocess.Popen(
        [sys.executable, "-W", "ignore", "-c", code],
        env=dict(e, RANK="1", PYTHONDONTWRITEBYTECODE="1", **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        took, out = interrupted(code, dict(env, RANK="0"), clear=("CLUSTER_TOKEN",))
    finally:
        try:
            rank1.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rank1.kill()
            rank1.wait()
    assert "INTERRUPTED" in out and "RETURNED" not in out, out
    assert took < WITHIN_S, (took, out)
