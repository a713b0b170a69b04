"""torch.distributed through the "meshwork" backend, under torchrun.

    torchrun --standalone --nproc-per-node 4 check_backend.py [ops] [staged] [cuda] [ddp] [fsdp]

``ops``: every op torch offers on a process group, every dtype meshwork
and torch share, checked exact against values computed here. ``staged``:
the same with every tensor staged through a host copy, as CUDA tensors
are (forced on CPU tensors, so a machine without a GPU runs each op's
copy out and copy back). ``cuda``: the same on CUDA tensors (a machine
with a GPU). ``ddp`` and
``fsdp``: the same training run twice in this process, once over the
meshwork default group and once over a gloo group of the same ranks;
the parameters must end equal (max |diff| <= 1e-5). Each rank prints
``RESULT ok rank R of N`` when every check passed (the test looks for
it), else raises.
"""

from __future__ import annotations

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

RANK_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64, torch.uint8]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}


def report(line: str) -> None:
    """Print ``line``; with ``RESULT_DIR`` set, also into a file of this
    rank's there (torchrun interleaves the ranks' output)."""
    print(line, flush=True)
    where = os.environ.get("RESULT_DIR")
    if where:
        # Whole or not at all (renamed into place): a reader that sees the
        # file sees every line written so far.
        path = os.path.join(where, f"rank{dist.get_rank()}")
        before = open(path).read() if os.path.exists(path) else ""
        with open(path + ".new", "w") as f:
            f.write(before + line + "\n")
        os.replace(path + ".new", path)


def eq(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    want = want.to(got.dtype)
    if got.shape != want.shape or not torch.equal(got, want):
        raise AssertionError(f"rank {dist.get_rank()}: {what}: got {got.tolist()}, want {want.tolist()}")


def ops() -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    ranks = torch.arange(n)
    for dt in RANK_DTYPES:
        name = str(dt)
        # all_reduce: every op meshwork takes; values small enough for int8.
        for op, want in [
            (dist.ReduceOp.SUM, float(n * (n + 1) // 2)),
            (dist.ReduceOp.PRODUCT, float(torch.arange(1, n + 1).prod())),
            (dist.ReduceOp.MIN, 1.0),
            (dist.ReduceOp.MAX, float(n)),
        ]:
            t = torch.full((7,), r + 1, dtype=dt)
            dist.all_reduce(t, op=op)
            eq(t, torch.full((7,), want), f"all_reduce {op} {name}")
        if dt in FLOATS:
            t = torch.full((3,), float(2 * r), dtype=dt)
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            eq(t, torch.full((3,), float(n - 1)), f"all_reduce AVG {name}")
            t = torch.full((3,), float(r + 1), dtype=dt)
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
            eq(t, torch.full((3,), float(n * (n + 1))), f"all_reduce PREMUL_SUM {name}")
        # Non-contiguous, and asynchronous with a future.
        m = torch.full((4, 6), r + 1, dtype=dt)[:, ::2]
        w = dist.all_reduce(m, async_op=True)
        fut_value = w.get_future().wait()
        w.wait()
        eq(m, torch.full((4, 3), float(n * (n + 1) // 2)), f"all_reduce strided {name}")
        eq(fut_value[0], m, f"future value {name}")
        # Coalesced.
        ts = [torch.full((2,), r + 1, dtype=dt), torch.full((5,), 2 * (r + 1), dtype=dt)]
        dist.all_reduce_coalesced(ts)
        eq(ts[0], torch.full((2,), float(n * (n + 1) // 2)), f"coalesced[0] {name}")
        eq(ts[1], torch.full((5,), float(n * (n + 1))), f"coalesced[1] {name}")
        # broadcast from every root.
        for root in range(n):
            b = (torch.arange(5) + 10 * r).to(dt) if r == root else torch.zeros(5, dtype=dt)
            dist.broadcast(b, src=root)
            eq(b, torch.arange(5) + 10 * root, f"broadcast root {root} {name}")
        # all_gather (list) and all_gather_into_tensor.
        outs = [torch.zeros(3, dtype=dt) for _ in range(n)]
        dist.all_gather(outs, torch.full((3,), r, dtype=dt))
        for i, o in enumerate(outs):
            eq(o, torch.full((3,), i), f"all_gather[{i}] {name}")
        flat = torch.zeros(n * 2, dtype=dt)
        dist.all_gather_into_tensor(flat, torch.full((2,), r, dtype=dt))
        eq(flat, ranks.repeat_interleave(2), f"all_gather_into_tensor {name}")
        stacked = torch.zeros(n, 2, dtype=dt)
        dist.all_gather_into_tensor(stacked, torch.full((2,), r, dtype=dt))
        eq(stacked, ranks.repeat_interleave(2).view(n, 2), f"all_gather_into_tensor stacked {name}")
        # reduce_scatter (list) and reduce_scatter_tensor.
        out = torch.zeros(4, dtype=dt)
        dist.reduce_scatter(out, [torch.full((4,), i + 1, dtype=dt) for i in range(n)])
        eq(out, torch.full((4,), n * (r + 1)), f"reduce_scatter {name}")
        out = torch.zeros(2, dtype=dt)
        dist.reduce_scatter_tensor(out, (torch.arange(2 * n) % 5).to(dt))
        eq(out, (torch.arange(2 * r, 2 * r + 2) % 5) * n, f"reduce_scatter_tensor {name}")
        # reduce, gather, scatter at every root.
        for root in range(n):
            t = torch.full((3,), r + 1, dtype=dt)
            dist.reduce(t, dst=root, op=dist.ReduceOp.MAX)
            if r == root:
                eq(t, torch.full((3,), n), f"reduce root {root} {name}")
            g = [torch.zeros(2, dtype=dt) for _ in range(n)] if r == root else None
            dist.gather(torch.full((2,), r, dtype=dt), g, dst=root)
            if r == root:
                for i, o in enumerate(g):
                    eq(o, torch.full((2,), i), f"gather root {root} [{i}] {name}")
            s = torch.zeros(3, dtype=dt)
            src = [torch.full((3,), i * 2, dtype=dt) for i in range(n)] if r == root else None
            dist.scatter(s, src, src=root)
            eq(s, torch.full((3,), 2 * r), f"scatter root {root} {name}")
        # all_to_all (list, even and uneven) and all_to_all_single (even, uneven).
        ins = [torch.full((2,), 10 * r + j, dtype=dt) for j in range(n)]
        outs = [torch.zeros(2, dtype=dt) for _ in range(n)]
        dist.all_to_all(outs, ins)
        for i, o in enumerate(outs):
            eq(o, torch.full((2,), 10 * i + r), f"all_to_all[{i}] {name}")
        # Rank i sends j + 1 elements of value 10*i + j to rank j.
        ins = [torch.full((j + 1,), 10 * r + j, dtype=dt) for j in range(n)]
        outs = [torch.zeros(r + 1, dtype=dt) for _ in range(n)]
        dist.all_to_all(outs, ins)
        for i, o in enumerate(outs):
            eq(o, torch.full((r + 1,), 10 * i + r), f"all_to_all uneven[{i}] {name}")
        out = torch.zeros(n, dtype=dt)
        dist.all_to_all_single(out, (torch.arange(n) + 10 * r).to(dt))
        eq(out, ranks * 10 + r, f"all_to_all_single {name}")
        in_splits = [j + 1 for j in range(n)]
        out_splits = [r + 1] * n
        inp = torch.cat([torch.full((j + 1,), 10 * r + j) for j in range(n)]).to(dt)
        out = torch.zeros(sum(out_splits), dtype=dt)
        dist.all_to_all_single(out, inp, out_splits, in_splits)
        eq(out, torch.cat([torch.full((r + 1,), 10 * i + r) for i in range(n)]), f"all_to_all_single uneven {name}")
        # send/recv and isend/irecv in a ring, with tags.
        nxt, prv = (r + 1) % n, (r - 1) % n
        if n > 1:
            got = torch.zeros(4, dtype=dt)
            reqs = [dist.isend(torch.full((4,), r, dtype=dt), nxt, tag=7), dist.irecv(got, prv, tag=7)]
            for q in reqs:
                q.wait()
            eq(got, torch.full((4,), prv), f"isend/irecv {name}")
            other = torch.zeros(2, dtype=dt)
            if r % 2 == 0:
                dist.send(torch.full((2,), r + 100, dtype=dt), nxt, tag=3)
                dist.recv(other, prv, tag=3)
            else:
                dist.recv(other, prv, tag=3)
                dist.send(torch.full((2,), r + 100, dtype=dt), nxt, tag=3)
            eq(other, torch.full((2,), prv + 100), f"send/recv {name}")
    # Any dtype moves: bool and int16 broadcast and all-gather.
    for dt in (torch.bool, torch.int16):
        b = (torch.arange(6) % 2).to(dt) if r == 0 else torch.zeros(6, dtype=dt)
        dist.broadcast(b, src=0)
        eq(b, torch.arange(6) % 2, f"broadcast {dt}")
    t = torch.tensor([r % 2 == 0, True])
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    eq(t, torch.tensor([n == 1, True]), "all_reduce MIN bool")
    # Refused by name.
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND)
    except Exception as e:  # noqa: BLE001 — the type torch hands back varies
        if "BAND" not in str(e):
            raise
    else:
        raise AssertionError("BAND was not refused")
    # Objects (pickles over uint8 broadcasts and gathers).
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": r})
    assert objs == [{"rank": i} for i in range(n)], objs
    # Sub-groups: the even ranks, the odd ones, and all in reverse.
    evens = dist.new_group([i for i in range(n) if i % 2 == 0])
    odds = dist.new_group([i for i in range(n) if i % 2 == 1])
    mine = evens if r % 2 == 0 else odds
    members = [i for i in range(n) if i % 2 == r % 2]
    t = torch.full((3,), float(r))
    dist.all_reduce(t, group=mine)
    eq(t, torch.full((3,), float(sum(members))), "all_reduce in a sub-group")
    flat = torch.zeros(len(members), dtype=torch.int64)
    dist.all_gather_into_tensor(flat, torch.tensor([r]), group=mine)
    eq(flat, torch.tensor(members), "all_gather_into_tensor in a sub-group")
    dist.barrier(group=mine)
    dist.barrier()


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 8),
    )


def data(step: int, rank: int):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)


def train_ddp(group) -> torch.Tensor:
    net = torch.nn.parallel.DistributedDataParallel(model(), process_group=group, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for step in range(8):
        x, y = data(step, dist.get_rank())
        opt.zero_grad()
        ((net(x) - y) ** 2).mean().backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def ddp() -> None:
    gloo = dist.new_group(backend="gloo")
    ours = train_ddp(None)
    theirs = train_ddp(gloo)
    diff = float((ours - theirs).abs().max())
    if dist.get_rank() == 0:
        report(f"DDP: max |meshwork - gloo| = {diff:.3g} over {ours.numel()} parameters")
    assert diff <= 1e-5, diff


def train_fsdp(mesh) -> torch.Tensor:
    from torch.distributed.fsdp import fully_shard

    net = model()
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for step in range(8):
        x, y = data(step, dist.get_rank())
        opt.zero_grad()
        ((net(x) - y) ** 2).mean().backward()
        opt.step()
    return torch.cat([p.full_tensor().detach().reshape(-1) for p in net.parameters()])


def fsdp() -> None:
    from torch.distributed.device_mesh import DeviceMesh

    gloo = dist.new_group(backend="gloo")
    ours = train_fsdp(DeviceMesh.from_group(dist.group.WORLD, "cpu"))
    theirs = train_fsdp(DeviceMesh.from_group(gloo, "cpu"))
    diff = float((ours - theirs).abs().max())
    if dist.get_rank() == 0:
        report(f"FSDP2: max |meshwork - gloo| = {diff:.3g} over {ours.numel()} parameters")
    assert diff <= 1e-5, diff


def killed() -> None:
    """The last rank kills itself between all-reduces; every survivor's
    next call raises, naming it, well within the deadline. Survivors
    report and leave at once (a shutdown would wait for the dead rank's
    confirmation); rank 0 then stops torchrun's agent, which would
    otherwise notice the dead rank only at its next look (the test runs
    it with a long ``--monitor-interval``, so that it cannot stop the
    survivors before they report)."""
    r, n = dist.get_rank(), dist.get_world_size()
    victim = n - 1
    t = torch.ones(1 << 16)
    for _ in range(5):
        dist.all_reduce(t)
    dist.barrier()
    if r == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        while True:
            dist.all_reduce(t)
    except Exception as e:  # noqa: BLE001 — reported
        took = time.monotonic() - start
        report(f"RESULT ok rank {r} of {n}: {type(e).__name__} after {took:.2f} s: {e}")
        if r == 0 and os.environ.get("STOP_AGENT") == "1":
            # Once the others have reported (their files are there).
            where = os.environ.get("RESULT_DIR", ".")
            until = time.monotonic() + 10
            while time.monotonic() < until and not all(
                os.path.exists(os.path.join(where, f"rank{i}")) for i in range(n - 1)
            ):
                time.sleep(0.01)
            os.kill(os.getppid(), signal.SIGTERM)
        os._exit(0)


def staged() -> None:
    """``ops`` with every tensor staged through a host copy."""
    import meshwork.torch as backend

    was = backend._staged
    backend._staged = lambda t: True
    try:
        ops()
    finally:
        backend._staged = was


def cuda() -> None:
    """``ops`` on CUDA tensors: each rank on GPU ``rank % count``."""
    if not torch.cuda.is_available():
        raise RuntimeError("cuda: torch sees no CUDA device")
    torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
    torch.set_default_device("cuda")
    try:
        ops()
    finally:
        torch.set_default_device("cpu")


def main() -> None:
    deadline = float(os.environ.get("DEADLINE_S", "60"))
    dist.init_process_group("meshwork", timeout=datetime.timedelta(seconds=deadline))
    assert dist.get_backend() == "meshwork", dist.get_backend()
    if sys.argv[1:] == ["killed"]:
        killed()
    for part in sys.argv[1:] or ["ops", "ddp", "fsdp"]:
        {"ops": ops, "staged": staged, "cuda": cuda, "ddp": ddp, "fsdp": fsdp}[part]()
        dist.barrier()
    report(f"RESULT ok rank {dist.get_rank()} of {dist.get_world_size()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
