"""The torch.distributed backend (``meshwork.torch``) in processes of its
own, formed through a TCPStore as torchrun's ranks are: what it leaves in
torch's store (no secret: the store has no authentication), the token
rule (several hosts need ``CLUSTER_TOKEN``; a job on loopback forms
without one), ``Work.is_completed()`` of an asynchronous op, and what a
timeout says."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from typing import Dict, List, Optional

import pytest

import meshwork
from conftest import free_ports, need

need("torch")

# Every rank forms through rank 0's TCPStore on STORE_PORT, as torchrun's
# ranks do through the agent's; ``body`` runs after init_process_group.
PROGRAM = """
import datetime, json, os, sys, time
import torch, torch.distributed as dist
import meshwork, meshwork.torch
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
store = dist.TCPStore("127.0.0.1", int(os.environ["STORE_PORT"]), world, is_master=rank == 0,
                      timeout=datetime.timedelta(seconds=30))
try:
    dist.init_process_group("meshwork", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=float(os.environ.get("DEADLINE_S", "20"))))
except meshwork.Error as e:
    print("RAISED", type(e).__name__, e, flush=True)
    sys.exit(0)
"""


def torch_world(n: int, body: str, env: Optional[Dict[str, str]] = None) -> List[subprocess.CompletedProcess]:
    """Run ``PROGRAM`` + ``body`` as ranks 0..n-1, with ``env`` over this
    environment less ``CLUSTER_TOKEN``; every process is reaped."""
    port = free_ports(1)[0].rsplit(":", 1)[1]
    code = PROGRAM + textwrap.dedent(body)
    procs = []
    for rank in range(n):
        e = {k: v for k, v in os.environ.items() if k != "CLUSTER_TOKEN"}
        e.update(
            RANK=str(rank),
            WORLD_SIZE=str(n),
            STORE_PORT=port,
            MASTER_ADDR="127.0.0.1",
            MESHWORK_TRANSPORT="tcp",
            GLOO_SOCKET_IFNAME="lo",
            OMP_NUM_THREADS="1",
            PYTHONDONTWRITEBYTECODE="1",
        )
        e.update(env or {})
        procs.append(
            subprocess.Popen(
                [sys.executable, "-W", "ignore", "-c", code],
                env=e,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    done = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=120)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return done


def outputs(procs) -> str:
    return "\n".join(f"[{r}] {p.stdout}{p.stderr}" for r, p in enumerate(procs))


# After the group formed and worked: rank 0 prints every key of the store
# and its value.
STORE_DUMP = """
t = torch.full((4,), float(rank + 1))
dist.all_reduce(t)
assert t.tolist() == [3.0] * 4, t
dist.barrier()
if rank == 0:
    dump = {k: store.get(k).decode("utf-8", "replace") for k in store.list_keys()}
    print("STORE", json.dumps(dump), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def store_after_init(env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    procs = torch_world(2, STORE_DUMP, env)
    assert all(p.returncode == 0 for p in procs), outputs(procs)
    line = next((l for l in procs[0].stdout.splitlines() if l.startswith("STORE ")), None)
    assert line is not None, outputs(procs)
    return json.loads(line[len("STORE ") :])


def test_without_a_token_on_loopback_the_store_holds_addresses_and_no_secret():
    store = store_after_init()
    ours = {k: v for k, v in store.items() if "meshwork" in k}
    assert ours, store
    for key, value in store.items():
        assert not any(word in key.lower() for word in ("token", "secret", "key")), (key, store)
    for key, value in ours.items():
        host, port = value.rsplit(":", 1)
        assert host == "127.0.0.1" and port.isdigit(), (key, value)


def test_with_a_token_nothing_of_it_is_in_the_store():
    token = meshwork.random_token()
    store = store_after_init({"CLUSTER_TOKEN": token})
    for key, value in store.items():
        assert token not in key and token not in value, (key, store)
        assert not any(word in key.lower() for word in ("token", "secret")), (key, store)


def an_address_off_loopback() -> Optional[str]:
    """An IPv4 address of this machine that is not loopback (the one its
    default route leaves from), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            # No packet is sent: this asks the kernel for the route.
            s.connect(("192.0.2.123", 9))
            ip = s.getsockname()[0]
        except OSError:
            return None
    return None if ip.startswith("127.") or ip == "0.0.0.0" else ip


def test_ranks_off_loopback_without_a_token_are_refused_with_the_advice():
    ip = an_address_off_loopback()
    if ip is None:
        pytest.skip("this machine has no address off loopback")
    procs = torch_world(2, "print('FORMED', flush=True)\n", {"MESHWORK_ADDR": ip})
    for p in procs:
        assert p.returncode == 0 and "RAISED TokenRequired" in p.stdout, outputs(procs)
        assert "CLUSTER_TOKEN=$(meshrun token)" in p.stdout, outputs(procs)
        assert "meshwork.random_token()" in p.stdout, outputs(procs)
        assert "FORMED" not in p.stdout, outputs(procs)
    # With a token the same ranks form.
    procs = torch_world(2, "print('FORMED', flush=True)\n", {"MESHWORK_ADDR": ip, "CLUSTER_TOKEN": meshwork.random_token()})
    for p in procs:
        assert p.returncode == 0 and "FORMED" in p.stdout, outputs(procs)


def test_the_token_rule(monkeypatch):
    import meshwork.torch as backend

    monkeypatch.delenv("CLUSTER_TOKEN", raising=False)
    assert backend._token("127.0.0.1:5", ["127.0.0.1:5", "127.0.0.1:6"]) is None
    assert backend._token("[::1]:5", ["[::1]:5", "127.0.0.2:6"]) is None
    # This rank off loopback, another rank's address in the store off
    # loopback, or an address that is no IP: a token is required.
    for mine, peers in [
        ("10.0.0.5:5", ["10.0.0.5:5", "10.0.0.6:6"]),
        ("10.0.0.5:5", ["127.0.0.1:5", "127.0.0.1:6"]),
        ("127.0.0.1:5", ["127.0.0.1:5", "10.0.0.6:6"]),
        ("127.0.0.1:5", ["127.0.0.1:5", "localhost:6"]),
    ]:
        with pytest.raises(meshwork.TokenRequired) as info:
            backend._token(mine, peers)
        message = str(info.value)
        assert "CLUSTER_TOKEN=$(meshrun token)" in message, message
        assert 'python -c "import meshwork; print(meshwork.random_token())"' in message, message
    monkeypatch.setenv("CLUSTER_TOKEN", "t" * 32)
    assert backend._token("10.0.0.5:5", ["10.0.0.5:5", "10.0.0.6:6"]) == "t" * 32


def test_an_async_op_becomes_completed_without_wait():
    body = """
    t = torch.full((1 << 10,), float(rank + 1))
    work = dist.all_reduce(t, async_op=True)
    start = time.monotonic()
    while not work.is_completed() and time.monotonic() - start < 10:
        time.sleep(0.001)
    polled = time.monotonic() - start
    print("COMPLETED", work.is_completed(), f"{polled:.3f}", flush=True)
    work.wait()
    assert t.tolist() == [3.0] * (1 << 10), t
    assert work.is_completed()
    # A synchronous op's work, and one waited for at once, are completed too.
    assert dist.all_reduce(t, async_op=True).wait() and t[0].item() == 6.0
    b = dist.barrier(async_op=True)
    b.wait()
    assert b.is_completed()
    # gloo's works in the same process answer as before.
    gloo = dist.new_group(backend="gloo")
    g = dist.all_reduce(t, group=gloo, async_op=True)
    g.wait()
    assert g.is_completed() and t[0].item() == 12.0
    print("RESULT ok", flush=True)
    dist.destroy_process_group()
    """
    procs = torch_world(2, body)
    for p in procs:
        assert p.returncode == 0 and "RESULT ok" in p.stdout, outputs(procs)
        assert "COMPLETED True" in p.stdout, outputs(procs)


def test_a_timeout_names_init_process_groups_timeout():
    """Rank 1 calls nothing: rank 0's ops time out, each saying to raise
    ``init_process_group(timeout=...)``, not a meshwork setting — the
    synchronous all_reduce (its own path), a synchronous broadcast, and
    an asynchronous all_reduce's wait."""
    body = """
    if rank == 1:
        store.wait(["done"], datetime.timedelta(seconds=60))
        os._exit(0)
    ops = {
        "all_reduce": lambda: dist.all_reduce(torch.ones(4)),
        "broadcast": lambda: dist.broadcast(torch.ones(4), src=1),
        "async": lambda: dist.all_reduce(torch.ones(4), async_op=True).wait(),
    }
    for name, op in ops.items():
        try:
            op()
            print("RETURNED", name, flush=True)
        except meshwork.Error as e:
            print("RAISED", name, type(e).__name__, e, flush=True)
    store.set("done", "1")
    os._exit(0)
    """
    procs = torch_world(2, body, {"DEADLINE_S": "1"})
    lines = [l for l in procs[0].stdout.splitlines() if l.startswith(("RAISED", "RETURNED"))]
    assert len(lines) == 3, outputs(procs)
    for line in lines:
        assert line.startswith("RAISED") and " Timeout " in line, outputs(procs)
        assert "init_process_group(timeout=...)" in line, line
        assert "::" not in line and "TIMEOUT_S" not in line and "set_timeout" not in line, line
