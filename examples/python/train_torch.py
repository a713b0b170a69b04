"""Data-parallel training of a small torch model with gradients averaged
through meshwork, and, with --compare-gloo, the same training through
torch.distributed with gloo in the same processes, for comparison.

    meshrun -n 4 -- python examples/python/train_torch.py --compare-gloo

Every rank starts from rank 0's parameters (a meshwork broadcast), trains
on its own shard of a synthetic regression set, and after each backward
pass averages the gradients over the ranks: ``g.all_reduce(p.grad,
op="avg")`` where DistributedDataParallel would do ``dist.all_reduce(grad);
grad /= world``. The parameters must stay identical on every rank. With
--compare-gloo, training starts again from the same parameters with gloo
doing the averaging; the two runs' parameters must agree to float rounding
(the two libraries add the ranks' gradients in different orders). Rank 0
prints the mean loss of every few steps for both. Each rank prints
``RESULT ok rank R of N``.
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta

import numpy as np
import torch

import meshwork

# Parameters agree to this much after the whole run (float32; the
# reduction orders differ, so they are not bitwise equal).
TOLERANCE = 1e-5

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch", type=int, default=32, help="samples per rank per step")
parser.add_argument("--compare-gloo", action="store_true")
args = parser.parse_args()

torch.set_num_threads(1)  # ranks share the machine's cores
g = meshwork.connect()
rank, world = g.rank, g.world_size


def make_model() -> torch.nn.Module:
    torch.manual_seed(1234 + rank)  # different on every rank on purpose:
    return torch.nn.Sequential(  # the broadcast below makes them equal
        torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
    )


# A synthetic regression set, the same on every rank; rank r reads the
# r-th slice of every global batch.
data_rng = np.random.default_rng(7)
X = torch.from_numpy(data_rng.standard_normal((4096, 8)).astype(np.float32))
w_true = torch.from_numpy(data_rng.standard_normal((8, 1)).astype(np.float32))
Y = 2 * torch.tanh(X @ w_true / 3) + 0.05 * torch.from_numpy(data_rng.standard_normal((4096, 1)).astype(np.float32))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    start = ((step * world + rank) * args.batch) % (len(X) - args.batch)
    return X[start : start + args.batch], Y[start : start + args.batch]


def train(model: torch.nn.Module, average_grads, average_loss) -> list[float]:
    """SGD with momentum; `average_grads(p.grad)` averages one gradient
    over the ranks in place, `average_loss(t)` a one-element tensor."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(args.steps):
        x, y = batch(step)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            average_grads(p.grad)
        opt.step()
        mean = loss.detach().clone().reshape(1)
        average_loss(mean)
        losses.append(mean.item())
    return losses


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


# --- meshwork -----------------------------------------------------------
model = make_model()
with torch.no_grad():
    for p in model.parameters():
        g.broadcast(p, root=0)  # start from rank 0's parameters
start = [p.detach().clone() for p in model.parameters()]
losses_mw = train(model, lambda t: g.all_reduce(t, op="avg"), lambda t: g.all_reduce(t, op="avg"))
params_mw = flat(model)

# Identical on every rank: the element-wise max and min over the ranks
# are the parameters themselves.
hi, lo = params_mw.clone(), params_mw.clone()
g.all_reduce(hi, op="max")
g.all_reduce(lo, op="min")
assert torch.equal(hi, params_mw) and torch.equal(lo, params_mw), "ranks disagree"
assert losses_mw[-1] < 0.5 * losses_mw[0], losses_mw

# --- the same with torch.distributed (gloo) ------------------------------
if args.compare_gloo:
    import torch.distributed as dist

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only
    # Rank 0 hosts gloo's store on a free port and tells the others
    # through meshwork.
    # gloo's waits get the same deadline as meshwork's.
    deadline = timedelta(seconds=g.timeout)
    store = (
        dist.TCPStore("127.0.0.1", 0, world, is_master=True, timeout=deadline, wait_for_workers=False)
        if rank == 0
        else None
    )
    port = np.array([store.port if store else 0], dtype=np.int64)
    g.broadcast(port, root=0)
    if store is None:
        store = dist.TCPStore("127.0.0.1", int(port[0]), world, is_master=False, timeout=deadline)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=deadline)

    def gloo_average(t: torch.Tensor) -> None:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t /= world

    model = make_model()
    with torch.no_grad():
        for p, s in zip(model.parameters(), start):
            p.copy_(s)
    losses_gloo = train(model, gloo_average, gloo_average)
    params_gloo = flat(model)
    dist.destroy_process_group()

    diff = (params_mw - params_gloo).abs().max().item()
    loss_diff = max(abs(a - b) for a, b in zip(losses_mw, losses_gloo))
    if rank == 0:
        print(f"{'step':>5} {'loss (meshwork)':>16} {'loss (gloo)':>16}")
        for step in [*range(0, args.steps, 10), args.steps - 1]:
            print(f"{step:>5} {losses_mw[step]:>16.8f} {losses_gloo[step]:>16.8f}")
        print(f"{len(params_mw)} parameters; max |meshwork - gloo| = {diff:.3g}; "
              f"largest loss difference {loss_diff:.3g}")
    assert diff <= TOLERANCE, f"parameters differ by {diff}"

g.barrier()
print(f"RESULT ok rank {rank} of {world}: final loss {losses_mw[-1]:.6f}", flush=True)
g.shutdown()
