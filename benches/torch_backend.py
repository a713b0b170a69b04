"""torch.distributed through meshwork against gloo, in the same run.

    torchrun --standalone --nproc-per-node 4 benches/torch_backend.py [--quick]

Forms the default group on the "meshwork" backend and a gloo group of the
same ranks, then measures, each call after one barrier (meshwork's own
for every variant), the time of the slowest rank (median over the
runs):

- ``dist.all_reduce`` of float32 at 4 KiB and at 25 MiB (DDP's default
  bucket) through meshwork and through gloo, and the same all-reduce as
  meshwork's own Python call on the same tensor (``g.all_reduce(t)``) —
  the backend's cost over the binding — and on a numpy array;
- one DDP training step (forward, backward with the gradient all-reduce
  overlapped, optimizer) of a 25 MiB model over each.

Each row twice, back to back: with meshwork's default, a copy of every
torch tensor (the stage), then with ``meshwork.set_torch_in_place(True)``
(tensors used in place, under torch's contract), gloo measured again
beside each. Rank 0 prints the table; each ratio is the gloo time beside
it over the row's: above 1, meshwork is faster.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time

import torch
import torch.distributed as dist

import meshwork
import meshwork.torch as mwt


def slowest(times, group=None):
    """Per run, the slowest rank's time; their median."""
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return statistics.median(t.tolist())


def timed(call, runs: int, barrier) -> float:
    for _ in range(max(2, runs // 10)):
        call()
    times = []
    for _ in range(runs):
        barrier()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return slowest(times)


def model(width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, 16),
    )


def ddp_step_time(group, width: int, runs: int, barrier) -> float:
    net = torch.nn.parallel.DistributedDataParallel(model(width), process_group=group)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    x = torch.randn(32, width, generator=torch.Generator().manual_seed(dist.get_rank()))

    def step():
        opt.zero_grad()
        net(x).square().mean().backward()
        opt.step()

    return timed(step, runs, barrier)


def fmt_size(b: int) -> str:
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def measure(ours, gloo, sizes, quick: bool):
    """(what, (meshwork, gloo) with copies, (meshwork, gloo) in place) per
    row; the two ways measured back to back for each row, so that a
    change of load shifts both alike."""

    def both(measure_row):
        times = []
        for in_place in (False, True):
            meshwork.set_torch_in_place(in_place)  # every rank, at the same point
            times.append(measure_row())
        meshwork.set_torch_in_place(False)
        return times

    rows = []
    for size in sizes:
        runs = (200 if size < 1 << 20 else 20) if not quick else 5
        t = torch.ones(size // 4)
        a = t.numpy().copy()

        # One barrier for every variant (meshwork's own, whose ranks leave
        # it closest together): a slower barrier's skew would be counted
        # as the op's time.
        def row():
            theirs = timed(lambda: dist.all_reduce(t, group=gloo), runs, ours.barrier)
            backend = timed(lambda: dist.all_reduce(t), runs, ours.barrier)
            direct = timed(lambda: ours.all_reduce(t), runs, ours.barrier)
            own_numpy = timed(lambda: ours.all_reduce(a), runs, ours.barrier)
            return theirs, backend, direct, own_numpy

        copies, in_place = both(row)
        for i, what in enumerate([f"all_reduce {fmt_size(size)}", "  own call, tensor", "  own call, numpy"]):
            rows.append((what, (copies[i + 1], copies[0]), (in_place[i + 1], in_place[0])))
    width = 1448 if not quick else 128  # 3 layers: about 25 MiB of float32 at 1448
    params = sum(p.numel() for p in model(width).parameters()) * 4
    runs = 10 if not quick else 3

    def ddp():
        return ddp_step_time(None, width, runs, ours.barrier), ddp_step_time(gloo, width, runs, ours.barrier)

    copies, in_place = both(ddp)
    rows.append((f"DDP step, {fmt_size(params)} model", copies, in_place))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a few runs, small sizes (a smoke test)")
    args = ap.parse_args()
    dist.init_process_group("meshwork", timeout=datetime.timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    ours = mwt._world
    rank, n = dist.get_rank(), dist.get_world_size()
    sizes = [4 << 10, 25 << 20] if not args.quick else [4 << 10, 256 << 10]
    rows = measure(ours, gloo, sizes, args.quick)
    if rank == 0:
        print(f"# torch.distributed, {n} processes on one host, float32; slowest rank, median", flush=True)
        print(
            f"{'what':<26} {'copies':>11} {'gloo':>11} {'gloo/x':>7}"
            f" {'in place':>11} {'gloo':>11} {'gloo/x':>7}"
        )
        for what, (c, g1), (p, g2) in rows:
            print(
                f"{what:<26} {c * 1e6:9.1f}us {g1 * 1e6:9.1f}us {g1 / c:7.2f}"
                f" {p * 1e6:9.1f}us {g2 * 1e6:9.1f}us {g2 / p:7.2f}"
            )
        print(f"RESULT ok rank 0 of {n}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
